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

The functions that take a ``Context`` are the held room of an incident's
life (hold, alert, tick, absorb, re-arm, clear, retry); they return what
happened, and the Engine sequences them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from slurm_hooks.act import metrics
from slurm_hooks.act.context import Context
from slurm_hooks.act.notify.base import Alert
from slurm_hooks.core.errors import SlurmError, StateError
from slurm_hooks.core.held import HeldMark, format_mark, parse_mark
from slurm_hooks.core.model import NodeState
from slurm_hooks.core.ownership import our_reason
from slurm_hooks.decide.decision import Decision, DecisionKind
from slurm_hooks.store.state import StateStore, iso, parse_time

log = logging.getLogger(__name__)

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


def key_at(d: Decision) -> datetime | None:
    """The backed-off claim's Slurm reason time a refusal carries (its key in
    the claims' order: decide.breaker.rank_claim); None when it has none."""
    at = d.facts.get("breaker_key_at")
    return at if isinstance(at, datetime) else None


def hold(ctx: Context, d: Decision, *, incident: str | None = None) -> None:
    """Keep a refused fault: local state, Slurm's Comment, audit, alert."""
    now = ctx.clock()
    inc = incident or d.incident or str(d.facts.get("incident") or "") or None
    part = str(d.facts.get("breaker_partition", "*"))
    old = ctx.state.held(d.node).get(d.code)
    marked = bool(old and old.get("marked"))
    if not marked:
        since = since_of(old) if old else None
        try:
            text = mark_text(d.code, d.component, inc, since or now, key_at(d))
            marked = ctx.door.mark_held(d.node, text)
        except (SlurmError, ValueError) as exc:
            log.warning("held mark for %s not written in Slurm: %s", d.node, exc)
    try:
        rec = record(
            ctx.state, d.node, code=d.code, component=d.component, incident=inc,
            partition=part, message=d.explanation, now=now, marked=marked,
        )  # fmt: skip
    except StateError as exc:
        ctx.state_failed("node", f"held fault of {d.node} not recorded: {exc}")
        rec = {}
    metrics.set_held({d.code} | set(codes(ctx, d.node)))
    if old is None:
        ctx.audit.record(
            "held", node=d.node, incident=inc, code=d.code, component=d.component,
            partition=part, why=d.explanation, marked=marked,
        )  # fmt: skip
    alert(ctx, d.node, rec or {"code": d.code, "since": iso(now)}, d.explanation)


def alert(ctx: Context, node: str, rec: dict[str, Any], why: str) -> None:
    """Tell people a fault is held, at most every ``ALERT_EVERY_S``."""
    now = ctx.clock()
    if not alert_due(rec, now):
        return
    ctx.alert(
        Alert(
            "fault_held",
            f"{node}: {rec.get('code')} held by the circuit breaker since {rec.get('since')} "
            f"(not drained): {why}",
            node=node, incident=rec.get("incident"), code=rec.get("code"),
            fields={"since": rec.get("since"), "partition": rec.get("partition")},
        )
    )  # fmt: skip
    code = rec.get("code")

    def change(r: dict[str, Any]) -> None:
        if r.get("code") == code:
            r["alerted_at"] = iso(now)

    try:
        ctx.state.update_held(node, change)
    except StateError:
        pass


def tick(ctx: Context, node: str) -> None:
    """A held fault is not forgotten when its event is not seen again
    (an XID is logged once): keep alerting, rate-limited, no Slurm call."""
    try:
        recs = ctx.state.held(node)
    except StateError:
        return
    if recs and not absorbable(recs, set(recs), ctx.clock()):
        # Every VERIFY_S, one look at Slurm: drained by us since (a reset
        # elsewhere re-examined it), or the mark gone (reset): retry.
        try:
            current = ctx.slurm.get_node(node)
        except SlurmError as exc:
            log.info("held faults of %s not verified: %s", node, exc)
        else:
            cur = our_reason(current)
            # A mark gone means a reset elsewhere: re-arm here (also when
            # that reset drained this node: else this node's own latch
            # would refuse its next fault for good).
            rearm(ctx, node, current)
            if cur is not None and cur.is_fault:
                ctx.state.clear_held(node)
            recs = ctx.state.held(node)
    metrics.set_held(recs)
    for rec in recs.values():
        alert(ctx, node, rec, str(rec.get("message") or "held by the circuit breaker"))


def absorb(ctx: Context, node: str, first: Sequence[Decision]) -> list[Decision] | None:
    """A held fault seen again while this node's latch holds: no Slurm
    call.  ``first``: the Slurm-free decisions (the Engine's, made once);
    None when the findings need the full way."""
    try:
        recs = ctx.state.held(node)
    except StateError:
        return None
    if not recs:
        return None
    now = ctx.clock()
    drains = [d for d in first if d.kind.drains]
    if not drains or not absorbable(recs, {d.code for d in drains}, now):
        return None
    if not ctx.latch.read():
        return None  # re-armed (a shared latch was reset): the full way
    metrics.set_held(recs)
    out = []
    for d in drains:
        rec = recs[d.code]
        alert(ctx, node, rec, d.explanation)
        out.append(
            Decision(
                DecisionKind.BREAKER_TRIPPED, node, d.code,
                f"{d.explanation}; held by the circuit breaker since {rec.get('since')}",
                d.component, None, d.findings, facts={"held": True, "absorbed": True},
            )
        )  # fmt: skip
    return out


def rearm(ctx: Context, node: str, current: NodeState) -> None:
    """Our held mark is gone from Slurm: a reset elsewhere; re-arm here and retry."""
    try:
        recs = ctx.state.held(node)
    except StateError:
        return
    if not recs:
        return
    if reset_seen(recs, current):
        parts = {str(r.get("partition") or "*") for r in recs.values()}
        for part in parts:
            ctx.latch.reset(None if part == "*" else part)
        ctx.state.clear_held(node)
        ctx.audit.record(
            "held", node=node, outcome="retry", why="held mark cleared in Slurm (breaker "
            "reset): re-armed and retried",
        )  # fmt: skip
        return

    def change(r: dict[str, Any]) -> None:
        r["checked_at"] = iso(ctx.clock())

    ctx.state.update_held(node, change)


def codes(ctx: Context, node: str) -> list[str]:
    """The codes held on ``node`` here (none when the state dir fails)."""
    try:
        return list(ctx.state.held(node))
    except StateError:
        return []


def clear(ctx: Context, node: str) -> None:
    """A confirmed drain of ``node``: its held faults and Slurm mark go."""
    try:
        gone = ctx.state.clear_held(node)
    except StateError:
        return
    metrics.set_held(())
    if gone:
        try:
            ctx.door.clear_held(node)
        except SlurmError as exc:
            log.warning("held mark of %s not cleared: %s", node, exc)


def to_retry(ctx: Context, table: Sequence[NodeState]) -> tuple[list[Decision], dict[str, str]]:
    """``breaker reset``: each held node (our mark in Slurm or a held record
    here) cleared, and a drain decision to claim for each one not drained
    by us already.  Returns (decisions, node -> outcome of those settled)."""
    from slurm_hooks.core.reason import DrainReason
    from slurm_hooks.decide.decide import incident_id

    local = set(ctx.state.held_nodes())
    now = ctx.clock()
    todo: list[Decision] = []
    out: dict[str, str] = {}
    for n in sorted(table, key=lambda x: x.name):
        mark = parse_mark(n.comment)
        rec = next(iter(ctx.state.held(n.name).values()), None) if n.name in local else None
        if mark is None and rec is None:
            continue
        code = mark.code if mark else str(rec.get("code") if rec else "")
        comp = mark.component if mark else (rec.get("component") if rec else None)
        since = mark.since if mark else None
        if mark is not None:
            ctx.door.clear_held(n.name, node=n)
        ctx.state.clear_held(n.name)
        inc = incident_id(n.name, code, comp, now)
        text = (
            f"held by the circuit breaker since {iso(since) if since else '?'}; retried after reset"
        )
        d = Decision(
            DecisionKind.DRAIN, n.name, code, text, comp, DrainReason(code, inc, text, comp),
            evacuate=True,
        )  # fmt: skip
        cur = our_reason(n)
        if cur is not None and cur.is_fault:
            out[n.name] = "already_drained"
            continue
        todo.append(d)
    return todo, out
