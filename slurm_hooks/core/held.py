"""A fault the circuit breaker held, as marked in Slurm (the node's ``Comment``).

A held fault must be visible fleet-wide without a shared file system, so the
node that holds one writes it where every host can read it: the node's
``Comment`` (22.05 and later; admin-only, so no user can forge one)::

    slurm-hooks/1 HELD XID79 gpu0 inc=n3-XID79-... since=2026-12-01T20:23:10Z

The mark is ours by its prefix; a comment that does not start with
``slurm-hooks/`` is an admin's and is never overwritten (the held fault is
then only in the node's local state).  Pure: format, parse, ownership.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

OWNER_PREFIX = "slurm-hooks/"
PREFIX = "slurm-hooks/1 HELD "
_TOKEN = r"[A-Za-z0-9_.:/+\-\[\],]{1,64}"
_MARK_RE = re.compile(
    rf"^slurm-hooks/1 HELD (?P<code>[A-Z][A-Z0-9_]{{0,31}}) (?P<comp>{_TOKEN}) "
    rf"inc=(?P<inc>{_TOKEN}) since=(?P<since>\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ)$"
)


@dataclass(frozen=True)
class HeldMark:
    code: str
    component: str | None
    incident: str
    since: datetime


def format_mark(mark: HeldMark) -> str:
    since = mark.since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = f"{PREFIX}{mark.code} {mark.component or '-'} inc={mark.incident} since={since}"
    if parse_mark(text) is None:
        raise ValueError(f"not a valid held mark: {text!r}")
    return text


def parse_mark(comment: str | None) -> HeldMark | None:
    """Our held mark, or None (no comment, someone else's, malformed)."""
    m = _MARK_RE.match(comment or "")
    if not m:
        return None
    comp = m.group("comp")
    since = datetime.strptime(m.group("since"), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return HeldMark(m.group("code"), None if comp == "-" else comp, m.group("inc"), since)


def comment_is_ours(comment: str | None) -> bool:
    """An empty comment, or one we wrote: ours to write over or clear."""
    return not (comment or "").strip() or (comment or "").startswith(OWNER_PREFIX)
