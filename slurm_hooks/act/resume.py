"""Resume a node we drained, once it passed acceptance since the fault.

Asked by a human (``slurm-hooks resume``), by the acceptance run with
``auto_resume``, and by the repair ladder after a passed re-check
(act/repair.py).  The decision is the policy's (``decide_resume``, pure);
the write goes through the door and only if the reason is still the one
judged: an admin's reason set meanwhile is never lifted.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from slurm_hooks.act.notify.base import Alert
from slurm_hooks.core.errors import ForeignReasonError, ReasonChanged, StateError
from slurm_hooks.core.incident import IncidentStatus
from slurm_hooks.core.ownership import reason_counts
from slurm_hooks.decide.decide import decide_resume
from slurm_hooks.decide.decision import Decision, DecisionKind
from slurm_hooks.store.state import CLEARED_ASKED, iso

if TYPE_CHECKING:
    from slurm_hooks.act.context import Context

log = logging.getLogger(__name__)


def try_resume(
    ctx: Context,
    node: str,
    *,
    human: bool = False,
    skip_acceptance: bool = False,
    cleared: bool = False,
) -> Decision:
    """Resume ``node`` if it carries our reason and passed acceptance since
    the fault (``cleared``: the health check's passing run, for a drain of
    what the node's users cause).  Returns the decision (RESUME when it was
    resumed)."""
    current = ctx.slurm.get_node(node)
    d = decide_resume(
        current, ctx.state.history(node), ctx.clock(),
        skip_acceptance=skip_acceptance, human=human, cleared=cleared,
    )  # fmt: skip
    if ctx.observe_only and d.kind is DecisionKind.RESUME:
        d = d.observed()
    ctx.audit.record(
        "decision", node=node, decision=str(d.kind), code=d.code, incident=d.incident,
        why=d.explanation,
    )  # fmt: skip
    if d.kind is not DecisionKind.RESUME or d.observe_only:
        if cleared and not d.observe_only and not reason_counts(current.state, current.flags):
            close_resumed_elsewhere(ctx, node)
        elif cleared:
            settle_cleared(ctx, node)
        return d
    try:  # the reason must still be the one we judged
        ctx.door.resume(node, expect_reason=current.reason)
    except (ReasonChanged, ForeignReasonError):
        ctx.audit.record("resume", node=node, outcome="refused", why="reason changed meanwhile")
        return Decision(DecisionKind.LOG, node, d.code, "reason changed meanwhile; not resumed")
    ctx.state.record_resume(node, ctx.clock(), d.incident)
    if d.incident and ctx.journal.read_doc(d.incident):
        ctx.journal.step(d.incident, "resumed", status=IncidentStatus.CLOSED)
    ctx.audit.record("resume", node=node, incident=d.incident, code=d.code, why=d.explanation)
    ctx.alert(
        Alert("node_resumed", f"{node} resumed: {d.explanation}", node=node,
              incident=d.incident, code=d.code)
    )  # fmt: skip
    return d


def record_acceptance(
    ctx: Context,
    node: str,
    passed: bool,
    *,
    at: datetime | None = None,
    detail: str = "",
    resume: bool = True,
) -> Decision | None:
    """Take the acceptance run's verdict; on a pass with an incident open
    here and auto_resume on, try to resume the node."""
    at = at or ctx.clock()
    ctx.state.record_acceptance(node, at, passed, detail)
    ctx.audit.record(
        "acceptance", node=node, outcome="passed" if passed else "failed", why=detail or None,
        acceptance_at=iso(at),
    )  # fmt: skip
    if resume and passed and ctx.policy.auto_resume and ctx.state.open_incident(node):
        return try_resume(ctx, node)
    return None


def close_resumed_elsewhere(ctx: Context, node: str) -> None:
    """A passing health check asked to lift our drain for what the node's
    users cause and found the node in service: someone resumed it (an admin,
    ``scontrol``).  Its incident is over: closed, and no longer the node's
    open one, so ``status`` and the history stop showing it open and the
    next drain of this node starts clean."""
    incident = ctx.state.open_incident(node)
    if incident is None:
        return
    why = "in service when a passing health check asked: resumed outside slurm-hooks"
    try:
        ctx.journal.step(incident, "resumed_elsewhere", status=IncidentStatus.CLOSED)
    except StateError as exc:  # no journal left to close: the node's record still goes
        log.warning("incident %s of %s: journal not closed: %s", incident, node, exc)
    ctx.state.clear_open_incident(node, incident)
    ctx.audit.record("resume", node=node, incident=incident, outcome="resumed_elsewhere", why=why)


def settle_cleared(ctx: Context, node: str) -> None:
    """A passing health check asked to lift our drain for what the node's
    users cause, and the policy said no (another reason now, or held for
    something else since): not asked again for
    this incident, so the checks that pass every interval after it cost no
    Slurm call and leave no audit line each."""

    def change(data: dict[str, Any]) -> None:
        data[CLEARED_ASKED] = data.get("open_incident")

    ctx.state.update_node(node, change)
