"""A fault the circuit breaker held, as marked in Slurm (the node's ``Comment``).

A held fault must be visible fleet-wide without a shared file system, so the
node that holds one writes it where every host can read it: the node's
``Comment`` (22.05 and later; admin-only, so no user can forge one)::

    slurm-hooks/1 HELD XID79 gpu0 inc=n3-XID79-... key=1764620590 since=2026-12-01T20:23:10Z

``key`` is the Slurm reason time (epoch seconds, slurmctld's clock) of the
claim that backed off: with the node's name it places the latch in the
claims' total order (``decide.breaker.rank_claim``), so a claim ahead of the
one that tripped is still ranked, and every later one is refused.  A mark
without a key latches every claim (written by an older release, or when the
claim's time was unknown: safe).  ``since`` is this host's clock, for people.

The mark is ours by its prefix; a comment that does not start with
``slurm-hooks/`` is an admin's and is never overwritten (the held fault is
then only in the node's local state).  Pure: format, parse, ownership.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from slurm_hooks.core.clock import format_utc, parse_utc

OWNER_PREFIX = "slurm-hooks/"
PREFIX = "slurm-hooks/1 HELD "
_TOKEN = r"[A-Za-z0-9_.:/+\-\[\],]{1,64}"
_MARK_RE = re.compile(
    rf"^slurm-hooks/1 HELD (?P<code>[A-Z][A-Z0-9_]{{0,31}}) (?P<comp>{_TOKEN}) "
    rf"inc=(?P<inc>{_TOKEN})(?: key=(?P<key>\d{{1,12}}))? since=(?P<since>\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ)$"
)


@dataclass(frozen=True)
class HeldMark:
    code: str
    component: str | None
    incident: str
    since: datetime
    #: The backed-off claim's Slurm reason time (None: latches every claim).
    key_at: datetime | None = None


def format_mark(mark: HeldMark) -> str:
    since = format_utc(mark.since)
    key = f" key={int(mark.key_at.timestamp())}" if mark.key_at is not None else ""
    text = f"{PREFIX}{mark.code} {mark.component or '-'} inc={mark.incident}{key} since={since}"
    if parse_mark(text) is None:
        raise ValueError(f"not a valid held mark: {text!r}")
    return text


def parse_mark(comment: str | None) -> HeldMark | None:
    """Our held mark, or None (no comment, someone else's, malformed)."""
    m = _MARK_RE.match(comment or "")
    if not m:
        return None
    comp = m.group("comp")
    since = parse_utc(m.group("since"))
    key = datetime.fromtimestamp(int(m.group("key")), UTC) if m.group("key") else None
    return HeldMark(m.group("code"), None if comp == "-" else comp, m.group("inc"), since, key)


def comment_is_ours(comment: str | None) -> bool:
    """An empty comment, or one we wrote: ours to write over or clear."""
    return not (comment or "").strip() or (comment or "").startswith(OWNER_PREFIX)
