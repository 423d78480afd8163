"""Held faults: what the circuit breaker refused is kept, shown and retried.

A fault the breaker refuses (at decide time, or a claim that ranked past the
cap and was taken back, ``act/claim.py``) must not disappear:

* the node's local state keeps it (``StateStore.record_held``): code,
  component, incident, since, partition, message; it survives restarts;
* Slurm carries it too, fleet-wide without a shared file system: our held
  mark in the node's ``Comment`` (``core/held.py``), never over an admin's
  comment.  The marks also latch the breaker for every node of the partition
  (``decide.breaker.held_in``);
* while the latch holds, each hook run on the node absorbs the fault at zero
  Slurm cost (``absorbable``), re-alerting at most every ``ALERT_EVERY_S``;
  every ``VERIFY_S`` it goes the full way: a missing mark then means an
  admin ran ``slurm-hooks breaker reset`` elsewhere, and the node re-arms its
  own latch and retries (``reset_seen``);
* ``breaker reset`` re-examines every held node at once (``Engine.retry_held``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from slurm_hooks.core.held import HeldMark, format_mark, parse_mark
from slurm_hooks.core.model import NodeState
from slurm_hooks.store.state import StateStore, iso, parse_time

#: Seconds a held verdict is trusted before the full way (Slurm) is taken again.
VERIFY_S = 300.0
#: At most one "still held" alert per node and fault in this many seconds.
ALERT_EVERY_S = 3600.0


def record(
    state: StateStore,
    node: str,
    *,
    code: str,
    component: str | None,
    incident: str | None,
    partition: str,
    message: str,
    now: datetime,
    marked: bool,
) -> dict[str, Any]:
    """Keep the held fault in the node's state; returns the stored record."""
    rec = {
        "code": code,
        "component": component,
        "incident": incident,
        "partition": partition,
        "message": message,
        "since": iso(now),
        "checked_at": iso(now),
        "marked": marked,
    }
    state.record_held(node, code, rec)
    return state.held(node).get(code, rec)


def mark_text(
    code: str,
    component: str | None,
    incident: str | None,
    since: datetime,
    key_at: datetime | None = None,
) -> str:
    """The held mark; ``key_at``: the backed-off claim's Slurm reason time,
    which places the latch in the claims' order (``core/held.py``)."""
    return format_mark(HeldMark(code, component, incident or "-", since, key_at))


def absorbable(held: dict[str, dict[str, Any]], codes: set[str], now: datetime) -> bool:
    """Every drain code is held here and was checked with Slurm lately."""
    if not codes or not codes <= set(held):
        return False
    for code in codes:
        try:
            checked = parse_time(held[code]["checked_at"])
        except (KeyError, TypeError, ValueError):
            return False
        if not 0 <= (now - checked).total_seconds() < VERIFY_S:
            return False
    return True


def alert_due(rec: dict[str, Any], now: datetime) -> bool:
    last = rec.get("alerted_at")
    if not last:
        return True
    try:
        return (now - parse_time(last)).total_seconds() >= ALERT_EVERY_S
    except (TypeError, ValueError):
        return True


def reset_seen(held: dict[str, dict[str, Any]], node: NodeState | None) -> bool:
    """A fault we marked held in Slurm whose mark is gone: someone ran
    ``breaker reset`` (or cleared it by hand): retry."""
    if node is None or not held:
        return False
    marked = any(rec.get("marked") for rec in held.values())
    return marked and parse_mark(node.comment) is None


def since_of(rec: dict[str, Any]) -> datetime | None:
    try:
        return parse_time(rec["since"])
    except (KeyError, TypeError, ValueError):
        return None
