"""Drain a node: claim, confirm (settle and rank), back off, trip.

The room of an incident's life from a decision to drain to a drain that
stands (or was taken back):

* ``claim``: read (or take the read the decision was made on), refuse a
  foreign reason, journal the intent, open the incident, write our reason
  (the breaker claim, ``act/claim.py``), guarded by the reason decided on;
* ``confirm``: settle, read the node table once and rank the claim
  (``decide.breaker.rank_claim``): confirmed, lost, or past the cap;
* ``take_back``: a claim past the cap is taken back (only if still exactly
  ours) and returned as the refusal to hold (``act/held.py``) and trip;
* ``trip``: latch the partition and tell people once.

Each step returns what happened; the Engine sequences them (the evacuation
after a confirmed claim, the held path after a refusal).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slurm_hooks.act import alerts
from slurm_hooks.act.context import Context
from slurm_hooks.act.held import key_at
from slurm_hooks.act.notify.base import Alert
from slurm_hooks.act.repeats import BOOKKEEPING_WAIT_S
from slurm_hooks.core.errors import ForeignReasonError, ReasonChanged, SlurmError, StateError
from slurm_hooks.core.history import Trip
from slurm_hooks.core.incident import IncidentStatus
from slurm_hooks.core.model import NodeState
from slurm_hooks.core.ownership import Ownership
from slurm_hooks.core.reason import format_reason
from slurm_hooks.core.user_caused import USERS_CAUSE
from slurm_hooks.decide.decision import Decision, DecisionKind
from slurm_hooks.slurm.door import UNSET, NodeView, Unset
from slurm_hooks.store import journal
from slurm_hooks.store.journal import Incident

log = logging.getLogger(__name__)


class Claimed(enum.Enum):
    """What ``claim`` did."""

    REFUSED = "refused"  # a foreign reason by now: nothing written
    ESCALATED = "escalated"  # our own drain, marked for replacement
    SKIPPED = "skipped"  # drained by us already
    UNJOURNALLED = "unjournalled"  # drained, but the state dir failed
    CHANGED = "changed"  # the node changed since it was read: judge again
    CLAIMED = "claimed"  # our claim is written: rank it


class Rank(enum.Enum):
    """What ``confirm`` found."""

    NO_JOURNAL = "no_journal"
    PAST_CLAIM = "past_claim"  # confirmed before: go on
    UNSETTLED = "unsettled"  # not ranked now; the next run ranks it
    LOST = "lost"
    CONFIRMED = "confirmed"
    PAST_CAP = "past_cap"  # take it back


@dataclass(frozen=True)
class Ranked:
    rank: Rank
    inc: Incident | None = None
    verdict: Any = None

    @property
    def go(self) -> bool:
        """Signal, grace, requeue may follow."""
        return self.rank in (Rank.PAST_CLAIM, Rank.CONFIRMED)


def never_drained(doc: dict[str, Any]) -> None:
    """A claim taken back or never written: its drain alert is not owed."""
    (doc.get("alerts") or {}).pop("node_drained", None)


def opened(ctx: Context, d: Decision, text: str, now: datetime, **more: Any) -> Incident:
    """The journal of a drain about to be claimed (status draining)."""
    return journal.opened(
        incident=str(d.incident), node=d.node, kind=str(d.kind), code=d.code,
        component=d.component, reason=text, why=d.explanation, at=now,
        grace_s=ctx.policy.grace_seconds, signal_batch=ctx.policy.signal_batch,
        signal_steps=ctx.policy.signal_steps, evacuate=d.evacuate,
        status=IncidentStatus.DRAINING, step="drain_intent", worker_env=ctx.worker_env,
        audit_log=str(ctx.audit.path), **more,
    )  # fmt: skip


def claim(ctx: Context, d: Decision, seen: NodeState | None = None) -> Claimed:
    """Claim the drain: journal, open, write.  ``seen``: the node as read when
    ``d`` was decided; it is judged on that read, and the door's write is
    guarded by its reason (``expect``): when the node carries another one by
    then, nothing is written (CHANGED: judge again from a fresh read; an
    admin's reason is still never written over)."""
    assert d.reason is not None
    now = ctx.clock()
    if seen is not None and seen.name != d.node:
        seen = None
    # read before writing (or the read the decision was made on)
    view = NodeView.of(seen) if seen is not None else ctx.door.look(d.node)
    expect: str | None | Unset = view.node.reason if seen is not None else UNSET
    ours = view.ours
    if view.ownership is Ownership.FOREIGN:
        ctx.audit.record(
            "drain", node=d.node, incident=d.incident, outcome="refused",
            why=f"reason changed to a foreign one: {view.node.reason!r}",
        )  # fmt: skip
        return Claimed.REFUSED
    text = format_reason(d.reason)
    if d.facts.get("already_drained") and ours is not None:
        # Escalation of our own drain: keep the incident, mark it for replacement.
        ctx.door.drain(d.node, text)
        ctx.audit.record(
            "replace", node=d.node, incident=ours.incident, code=d.code, why=d.explanation,
            reason=text,
        )  # fmt: skip
        ctx.incident_alert(
            str(ours.incident), "replacement_requested",
            Alert("replacement_requested", f"{d.node}: {d.explanation}", node=d.node,
                  incident=ours.incident, code=d.code),
        )  # fmt: skip
        return Claimed.ESCALATED
    if ours is not None and ours.is_fault:
        ctx.audit.record(
            "drain", node=d.node, incident=ours.incident, outcome="skipped",
            why="already drained by slurm-hooks",
        )  # fmt: skip
        return Claimed.SKIPPED
    return _write_claim(ctx, d, text, expect, now)


def _write_claim(
    ctx: Context, d: Decision, text: str, expect: str | None | Unset, now: datetime
) -> Claimed:
    """Journal the intent, open the incident, write our reason (the claim)."""
    # The catalogue's advice, for the repair ladder (act/repair.py).
    action = str(d.findings[0].action) if d.findings else None
    doc = opened(ctx, d, text, now, action=action).to_doc()
    kind = "node_held" if d.kind is DecisionKind.HOLD_FOR_HUMAN else "node_drained"
    alert = Alert(
        kind, f"{d.node} drained: {d.explanation}", node=d.node, incident=d.incident,
        code=d.code, fields={"component": d.component, "reason": text},
    )  # fmt: skip
    # Queued with the intent, sent after the jobs were signalled: a slow
    # webhook never delays a checkpoint, a crash never loses it.
    alerts.queue(doc, "node_drained", alert, now)
    incident = str(d.incident)
    try:
        ctx.journal.write(doc)
        # Open before the drain: a drain that lands although its call failed
        # (timeout) or the process died must still be rolled forward by the
        # next run, which looks for an open incident (hooks' fast path).
        ctx.state.set_open_incident(d.node, incident, timeout=BOOKKEEPING_WAIT_S)
        lock = ctx.journal.lock(incident)
        lock.__enter__()
    except StateError as exc:
        # Remediation never waits on local storage: drain anyway.  Our
        # reason names the incident, so a later run with a working state
        # dir rebuilds the journal from Slurm and evacuates the jobs.
        ctx.state_failed("journal", f"incident {incident} not journalled: {exc}")
        ctx.door.drain(d.node, text)  # a LEND/SPARE hold takes the fault's reason
        ctx.audit.record(
            "drain", node=d.node, incident=d.incident, code=d.code, component=d.component,
            why=d.explanation, reason=text, outcome="unjournalled",
        )  # fmt: skip
        return Claimed.UNJOURNALLED
    changed: ReasonChanged | None = None
    try:
        # The breaker claim (act/claim.py): our drain is written before any
        # job is signalled; a LEND/SPARE hold takes the fault's reason.
        before = ctx.door.drain(d.node, text, expect=expect)
        prior = before.ours if before.ours is not None and not before.ours.is_fault else None
        ctx.journal.step(
            incident, "claimed", status=IncidentStatus.CLAIMED,
            prior_reason=before.node.reason if prior is not None else None,
        )  # fmt: skip
    except ReasonChanged as exc:
        changed = exc
        ctx.journal.step(
            incident, "abandoned", edit=never_drained, status=IncidentStatus.ABANDONED,
            jobs_done=True,
        )  # fmt: skip
    finally:
        lock.__exit__(None, None, None)
    if changed is not None:
        # Nothing was written: the node changed since it was read.
        ctx.state.clear_open_incident(d.node, incident)
        log.info("drain node=%s: %s; judged again", d.node, changed)
        return Claimed.CHANGED
    return Claimed.CLAIMED


def claim_only(ctx: Context, d: Decision) -> bool:
    """Journal and write a claim for ``d`` (no settle): retry_held's batch."""
    assert d.reason is not None
    text = format_reason(d.reason)
    now = ctx.clock()
    doc = opened(ctx, d, text, now).to_doc()
    alerts.queue(
        doc, "node_drained",
        Alert("node_drained", f"{d.node} drained: {d.explanation}", node=d.node,
              incident=d.incident, code=d.code, fields={"component": d.component,
                                                        "reason": text}),
        now,
    )  # fmt: skip
    incident = str(d.incident)
    ctx.journal.write(doc)
    ctx.state.set_open_incident(d.node, incident)
    try:
        with ctx.journal.lock(incident):
            before = ctx.door.drain(d.node, text)
            prior = before.ours is not None and not before.ours.is_fault
            ctx.journal.step(
                incident, "claimed", status=IncidentStatus.CLAIMED,
                prior_reason=before.node.reason if prior else None,
            )  # fmt: skip
    except (ForeignReasonError, SlurmError) as exc:
        log.warning("held fault of %s not claimed: %s", d.node, exc)
        ctx.journal.step(incident, "abandoned", status=IncidentStatus.ABANDONED, jobs_done=True)
        ctx.state.clear_open_incident(d.node, incident)
        return False
    return True


def confirm(ctx: Context, incident: str, fleet: list[NodeState] | None = None) -> Ranked:
    """Settle and rank the incident's claim (act/claim.py) and journal the
    verdict: confirmed (go on), lost (abandoned), past the cap (the caller
    takes it back), or not ranked now (it stays claimed; the next run ranks
    it).  ``fleet``: a node table read after settling (retry_held's batch)."""
    from slurm_hooks.act import claim as claims
    from slurm_hooks.decide.breaker import rank_claim

    inc = ctx.journal.read(incident)
    if inc is None:
        return Ranked(Rank.NO_JOURNAL)
    if inc.status is not IncidentStatus.CLAIMED:
        return Ranked(Rank.PAST_CLAIM, inc)
    try:
        if fleet is None:
            claims.settle(ctx.slurm)
            fleet = ctx.slurm.list_nodes()
    except SlurmError as exc:
        log.warning("claim of %s (%s) not ranked yet: %s", inc.node, incident, exc)
        ctx.audit.record(
            "claim", node=inc.node, incident=incident, outcome="unsettled", why=str(exc)
        )
        return Ranked(Rank.UNSETTLED, inc)
    verdict = rank_claim(inc.node, inc.reason, fleet, ctx.policy, ctx.clock(), ctx.latch.read())
    why = verdict.explain()
    facts = {"rank": verdict.rank, "limit": verdict.limit, "partition": verdict.partition}
    if verdict.lost:
        ctx.journal.step(incident, "abandoned", status=IncidentStatus.ABANDONED, jobs_done=True)
        ctx.state.clear_open_incident(inc.node, incident)
        ctx.audit.record("claim", node=inc.node, incident=incident, outcome="lost", why=why)
        return Ranked(Rank.LOST, inc, verdict)
    if verdict.confirmed:
        ctx.journal.step(incident, "drained", status=IncidentStatus.DRAINED, claim=facts)
        ctx.audit.record(
            "claim", node=inc.node, incident=incident, outcome="confirmed", why=why, **facts
        )
        return Ranked(Rank.CONFIRMED, inc, verdict)
    return Ranked(Rank.PAST_CAP, inc, verdict)


def take_back(ctx: Context, inc: Incident, verdict: Any) -> Decision | None:
    """The claim ranked past the cap: take it back (only if it is still
    exactly ours); returns the refusal to trip and hold (None: not taken
    back, the claim stays and the next run ranks it again; or nothing to
    hold).  No job was signalled.  A claim for what users cause
    (``core/user_caused.py``) ends there (abandoned): a user must not get
    the breaker latched, nor a fault held, by filling scratch."""
    incident, node = inc.id, inc.node
    hold = inc.code not in USERS_CAUSE
    try:
        taken = ctx.door.take_back(node, inc.reason, restore=inc.prior_reason)
    except SlurmError as exc:
        log.error("claim of %s (%s) past the cap but not taken back: %s", node, incident, exc)
        return None
    ctx.journal.step(
        incident, "taken_back", edit=never_drained,
        status=IncidentStatus.HELD if hold else IncidentStatus.ABANDONED,
        jobs_done=True, jobs={}, held=hold,
        claim={"rank": verdict.rank, "limit": verdict.limit, "partition": verdict.partition,
               "taken_back": taken, "latched": verdict.latched, "why": verdict.explain()},
    )  # fmt: skip
    ctx.state.clear_open_incident(node, incident)
    ctx.audit.record(
        "claim", node=node, incident=incident, outcome="taken_back", why=verdict.explain(),
        rank=verdict.rank, limit=verdict.limit, partition=verdict.partition,
    )  # fmt: skip
    if not hold:
        return None
    return Decision(
        DecisionKind.BREAKER_TRIPPED, node, str(inc.code),
        f"{inc.why}; NOT drained: {verdict.explain()}", inc.component,
        facts={"breaker_partition": verdict.partition, "breaker_counted": verdict.rank - 1,
               "breaker_limit": verdict.limit, "incident": incident,
               "breaker_key_at": verdict.key_at, "breaker_latched": verdict.latched},
    )  # fmt: skip


def drained(ctx: Context, d: Decision, text: str) -> None:
    """A confirmed drain, audited (the Engine then evacuates and alerts)."""
    ctx.audit.record(
        "replace" if d.kind is DecisionKind.REPLACE else "drain",
        node=d.node, incident=d.incident, code=d.code, component=d.component,
        why=d.explanation, reason=text,
    )  # fmt: skip


def as_acted(ctx: Context, d: Decision) -> Decision:
    """A drain whose claim ranked past the breaker's cap and was taken back
    is reported as what it became: held."""
    if not d.kind.drains or d.observe_only or d.incident is None:
        return d
    try:
        inc = ctx.journal.read(d.incident)
    except StateError:
        return d
    if inc is None or inc.status is not IncidentStatus.HELD:
        return d
    c = inc.claim or {}
    why = c.get("why") or (
        f"claim ranked {c.get('rank')} past the breaker's limit {c.get('limit')} "
        f"in partition {c.get('partition')}"
    )
    return Decision(
        DecisionKind.BREAKER_TRIPPED, d.node, d.code,
        f"{d.explanation}; NOT drained: {why}: held",
        d.component, d.reason, d.findings,
        facts={**d.facts, "held": True, "would_be": str(d.kind)},
    )  # fmt: skip


def trip(ctx: Context, d: Decision) -> None:
    """Latch the partition here.  A claim that backed off because the
    breaker was already latched elsewhere (a held mark ahead of it) latches
    here too, with its own key, so that this held node absorbs its repeats
    at no Slurm cost; the trip's alert went out where it tripped, so none
    is sent again."""
    part = str(d.facts.get("breaker_partition", "*"))
    at = key_at(d)
    latched = bool(d.facts.get("breaker_latched"))
    if latched and at is None:
        return
    counted, limit = int(d.facts.get("breaker_counted", 0)), int(d.facts.get("breaker_limit", 0))
    t = Trip(part, ctx.clock(), d.node, counted, limit, at)
    if not ctx.latch.trip(t):
        return
    ctx.audit.record(
        "breaker_trip", node=d.node, partition=part, code=d.code, why=d.explanation,
        counted=t.counted, limit=t.limit, outcome="latched_elsewhere" if latched else None,
    )  # fmt: skip
    if latched:
        return
    ctx.alert(
        Alert(
            "breaker_tripped",
            f"circuit breaker tripped for partition {part}: {t.counted} node(s) already "
            f"drained by slurm-hooks (limit {t.limit}); {d.node} NOT drained for "
            f"{d.code}. Drains are off until 'slurm-hooks breaker reset'.",
            node=d.node, code=d.code,
            fields={"partition": part, "counted": t.counted, "limit": t.limit},
        )
    )  # fmt: skip
