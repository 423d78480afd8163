"""Repeats of a fault on a node we already drained for it cost O(1).

A GPU that fell off the bus can log XID 79 hundreds of times a second.  The
first one drains the node; each repeat would otherwise cost two Slurm reads
(the node, the partition for the breaker) and an audit line, from every
node that floods, at once.  So the engine remembers, in the node's state
file, "drained by us for these codes under incident X, verified with Slurm
at T" (``drained_for``).  A repeat of one of those codes while the node's
open incident is still X and T is recent is *absorbed*: counted, no Slurm
call, no audit line.  Every ``VERIFY_S`` the next repeat goes the full way
(Slurm is asked again: an admin may have resumed the node) and one audit
line summarises what was absorbed since.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from slurm_hooks.store.state import StateStore, iso, parse_time

#: Seconds an "already drained by us" verdict is trusted before Slurm is asked again.
VERIFY_S = 300.0
KEY = "drained_for"


def remember(state: StateStore, node: str, incident: str, code: str, now: datetime) -> None:
    """Slurm just confirmed (or took) our drain for ``code`` under ``incident``."""

    def change(d: dict[str, Any]) -> None:
        memo = d.get(KEY) if isinstance(d.get(KEY), dict) else None
        if memo is None or memo.get("incident") != incident:
            memo = {"incident": incident, "codes": [], "repeats": {}}
        if code not in memo["codes"]:
            memo["codes"].append(code)
        memo["verified_at"] = iso(now)
        d[KEY] = memo

    state.update_node(node, change)


def absorbable(data: dict[str, Any], codes: set[str], now: datetime) -> bool:
    """Whether repeats of ``codes`` on this node (its state file ``data``)
    need no Slurm call: the open incident is the one we drained for them,
    verified less than VERIFY_S ago."""
    memo = data.get(KEY)
    if not isinstance(memo, dict) or not codes:
        return False
    if memo.get("incident") is None or memo.get("incident") != data.get("open_incident"):
        return False
    if not codes <= set(memo.get("codes") or ()):
        return False
    try:
        verified = parse_time(memo["verified_at"])
    except (KeyError, TypeError, ValueError):
        return False
    return 0 <= (now - verified).total_seconds() < VERIFY_S


def absorb(state: StateStore, node: str, counts: dict[str, int]) -> None:
    """Count absorbed repeats (local write only)."""

    def change(d: dict[str, Any]) -> None:
        memo = d.get(KEY)
        if isinstance(memo, dict):
            reps = memo.setdefault("repeats", {})
            for code, n in counts.items():
                reps[code] = int(reps.get(code, 0)) + n

    state.update_node(node, change)


def take_summary(state: StateStore, node: str) -> dict[str, int]:
    """The repeats absorbed since the last summary, reset to zero."""
    out: dict[str, int] = {}

    def change(d: dict[str, Any]) -> None:
        memo = d.get(KEY)
        if isinstance(memo, dict) and memo.get("repeats"):
            out.update({k: int(v) for k, v in memo["repeats"].items()})
            memo["repeats"] = {}

    state.update_node(node, change)
    return out


#: Seconds between two audit lines for the same log-only code on a node:
#: the repeats in between are counted and the next line carries the count.
LOG_PERIOD_S = 60.0
LOG_KEY = "logged"


#: Seconds the log-only bookkeeping waits for the node's state lock.  It
#: runs before the engine acts, once per run: a lock held by a stuck process
#: must cost the drain that follows at most this, however many log-only
#: findings (a lost GPU's "could not run" from every other check) there are.
LOG_LOCK_WAIT_S = 1.0


def absorb_log(state: StateStore, node: str, code: str, now: datetime) -> tuple[bool, int]:
    """A log-only decision (XID 43: the application's fault, no action) for
    ``code`` on ``node``.  (True, 0): audited less than LOG_PERIOD_S ago,
    counted instead (one local write, no audit line).  (False, n): write
    the audit line now, summarising the ``n`` repeats absorbed since the
    last one.  A state dir that cannot be written audits every time."""
    return absorb_logs(state, node, [code], now, timeout=None)[0]


def absorb_logs(
    state: StateStore,
    node: str,
    codes: Sequence[str],
    now: datetime,
    *,
    timeout: float | None,
) -> list[tuple[bool, int]]:
    """:func:`absorb_log` for every log-only decision of one run, in order
    (a code seen twice in the run: the second is absorbed), in ONE locked
    write that waits at most ``timeout`` for the lock (None: the store's
    lock timeout; the engine passes LOG_LOCK_WAIT_S).  Raises StateError
    (LockTimeout included): the caller then audits every decision."""
    out: list[tuple[bool, int]] = []

    def change(d: dict[str, Any]) -> None:
        out.clear()
        raw = d.get(LOG_KEY)
        memo: dict[str, Any] = raw if isinstance(raw, dict) else {}
        out.extend(_absorb_one(memo, code, now) for code in codes)
        d[LOG_KEY] = memo

    if codes:
        state.update_node(node, change, timeout=timeout)
    return list(out)


def _absorb_one(memo: dict[str, Any], code: str, now: datetime) -> tuple[bool, int]:
    rec_raw = memo.get(code)
    rec: dict[str, Any] | None = rec_raw if isinstance(rec_raw, dict) else None
    last = None
    if rec is not None:
        try:
            last = parse_time(rec["at"])
        except (KeyError, TypeError, ValueError):
            last = None
    if rec is not None and last is not None and 0 <= (now - last).total_seconds() < LOG_PERIOD_S:
        rec["repeats"] = int(rec.get("repeats") or 0) + 1
        return True, 0
    repeats = int(rec.get("repeats") or 0) if rec is not None else 0
    memo[code] = {"at": iso(now), "repeats": 0}
    return False, repeats
