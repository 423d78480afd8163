"""A fault on a node someone else already drained: evacuate now, drain later.

Most sites run LBNL NHC (or an admin drains by hand) beside slurm-hooks.
Their reason is never written over (core/ownership.py), but a GPU that fell
off the bus under a job is no less broken because NHC got there first:

* the jobs are evacuated as for our own drain (signal, grace, requeue,
  the owner told), in an incident journalled like any other;
* the reason we *would* have written is kept in that journal with
  ``drain_deferred``; the incident stays open (``incident_pending``), so
  every run (the watcher's poll, each health check, each epilog) rolls it
  forward, which costs one ``scontrol show node``: while the reason is still
  foreign nothing happens; the moment it is lifted (NHC's own check passed,
  an admin resumed the node) our drain goes on at once, through the breaker
  claim like every drain, so a node with a lost GPU never returns to
  service for a refeed interval.

Measured before this (issue 17): the job on an NHC-drained node with XID 79
was never signalled nor requeued, and when NHC resumed the node it ran jobs
with the lost GPU for 243.6 s until the watcher's ``refeed_s``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from slurm_hooks.act import alerts
from slurm_hooks.act.notify.base import Alert
from slurm_hooks.core.errors import ForeignReasonError
from slurm_hooks.core.incident import IncidentStatus
from slurm_hooks.core.ownership import Ownership
from slurm_hooks.core.reason import format_reason
from slurm_hooks.store import journal

if TYPE_CHECKING:
    from slurm_hooks.act.context import Context
    from slurm_hooks.decide.decision import Decision
    from slurm_hooks.store.journal import Incident

log = logging.getLogger(__name__)

#: Journal key: our drain waits for a foreign reason to be lifted.
KEY = "drain_deferred"


def _str(v: object) -> str | None:
    return None if v is None else str(v)


def wanted(d: Decision) -> bool:
    """Whether ``d`` is a fault held by someone else's reason that we must
    still act on (decide.py's FOREIGN_REASON with ``deferred_drain``)."""
    return bool(d.facts.get("deferred_drain")) and d.reason is not None


def evacuate(ctx: Context, d: Decision) -> str | None:
    """Open an incident for ``d`` without writing a drain, keeping our
    reason for later; returns it (the Engine evacuates its jobs, when
    ``d.evacuate``, and sends its alert).  None: nothing new, the node
    already has an incident with work left (this fault's repeat, or one of
    ours in progress)."""
    assert d.reason is not None
    node = d.node
    open_inc = ctx.state.open_incident(node)
    if open_inc:
        prior = ctx.journal.read(open_inc)
        if prior is not None and (prior.deferred or prior.pending):
            return None
    now = ctx.clock()
    text = format_reason(d.reason)
    incident = str(d.incident)
    foreign = d.facts.get("foreign_reason")
    inc = replace(
        journal.opened(
            incident=incident, node=node, kind=str(d.facts.get("would_be") or "drain"),
            code=d.code, component=d.component, reason=text, why=d.explanation, at=now,
            grace_s=ctx.policy.grace_seconds, signal_batch=ctx.policy.signal_batch,
            signal_steps=ctx.policy.signal_steps, evacuate=d.evacuate,
            status=IncidentStatus.EVACUATING, step="drain_deferred",
            worker_env=ctx.worker_env, audit_log=str(ctx.audit.path),
            deferred=True, foreign_reason=_str(foreign),
        ),
        jobs=None if d.evacuate else {}, jobs_done=not d.evacuate,
    )  # fmt: skip
    doc = inc.to_doc()
    alert = Alert(
        "node_fault",
        f"{node}: {d.code} needs the node out of service; it is already drained by someone "
        f"else ({foreign!r}): its jobs are evacuated, our drain follows once that reason "
        "is lifted",
        node=node, incident=incident, code=d.code,
        fields={"component": d.component, "foreign_reason": foreign, "reason": text},
    )  # fmt: skip
    alerts.queue(doc, "node_fault", alert, now)
    ctx.journal.write(doc)
    ctx.state.set_open_incident(node, incident)
    ctx.audit.record(
        "evacuate", node=node, incident=incident, code=d.code, component=d.component,
        foreign_reason=foreign, reason=text, why="node held by a foreign reason (left as it "
        "is): jobs evacuated, our drain deferred until it is lifted",
    )  # fmt: skip
    return incident


def roll_forward(ctx: Context, inc: Incident) -> bool:
    """One look at the node of a deferred drain: still foreign, nothing;
    lifted, our drain at once (True: claimed now; the Engine ranks the
    claim and, confirmed, calls ``drained``); ours already (another path
    drained it), the deferral is over."""
    node, incident = inc.node, inc.id
    view = ctx.door.look(node)
    if view.ownership is Ownership.FOREIGN:
        return False
    if view.ownership is Ownership.OURS:
        _done(ctx, incident, "drain_by_us", drained_by=view.node.reason)
        return False
    try:
        with ctx.journal.lock(incident):
            ctx.door.drain(node, inc.reason)
            _done(ctx, incident, "claimed", status=IncidentStatus.CLAIMED)
    except ForeignReasonError:
        return False  # re-drained by its owner between our look and our write: still theirs
    ctx.state.set_open_incident(node, incident)
    log.warning("node %s: foreign reason %r lifted; drained with ours at once (incident %s)",
                node, inc.foreign_reason, incident)  # fmt: skip
    return True


def drained(ctx: Context, inc: Incident) -> Alert:
    """Our deferred drain was confirmed: audit it; returns the alert owed."""
    ctx.audit.record(
        "drain", node=inc.node, incident=inc.id, code=inc.code, component=inc.component,
        reason=inc.reason,
        why=f"the foreign reason {inc.foreign_reason!r} was lifted; the fault of "
        f"{inc.opened_at} still needs the node out of service",
    )  # fmt: skip
    return Alert(
        "node_drained", f"{inc.node} drained: {inc.why}", node=inc.node, incident=inc.id,
        code=inc.code, fields={"component": inc.component, "reason": inc.reason},
    )  # fmt: skip


def _done(ctx: Context, incident: str, step: str, **changes: Any) -> None:
    """End the deferral in the journal (one step; the lock is re-entrant)."""
    changes[KEY] = False
    ctx.journal.step(incident, step, **changes)
