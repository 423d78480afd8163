"""Roll an incident forward after a crash, a reboot or a lost journal.

Every run that finds an open incident (the hook's fast path, the watcher,
``resume_pending``) rolls it forward from what its journal says, and the
journal was written *before* each call it announces, so any crash point is
covered:

* ``rebuild``: the journal is gone (lost, truncated, moved aside as
  corrupt): rebuilt from Slurm's reason, which names the incident, so its
  jobs are still evacuated and requeued;
* ``reclaim``: a drain announced or claimed but not confirmed: ours in Slurm
  already, written again when the reason is gone (or stale), abandoned when
  someone else's reason is there; the claim is then ranked again before any
  job is touched;
* ``next_step``: what is left of the evacuation (signal, requeue after the
  deadline, a dead worker restarted).

Each returns what happened; the Engine sequences the rooms.
"""

from __future__ import annotations

import enum
import logging
from typing import Any

from slurm_hooks.act.context import Context
from slurm_hooks.core.incident import IncidentStatus
from slurm_hooks.core.ownership import our_reason
from slurm_hooks.detect.probes.process import pid_alive
from slurm_hooks.store import journal
from slurm_hooks.store.journal import Incident
from slurm_hooks.store.state import parse_time

log = logging.getLogger(__name__)


class Next(enum.Enum):
    """What is left of an incident's evacuation."""

    NOTHING = "nothing"  # in its grace with a worker on it (or done)
    EVACUATE = "evacuate"  # jobs not listed or not signalled, or no deadline yet
    FINISH = "finish"  # past the deadline: requeue
    SPAWN = "spawn"  # in its grace and the worker is dead


def rebuild(ctx: Context, node: str, incident: str) -> dict[str, Any] | None:
    """The node's open incident has no readable journal: rebuild it from
    Slurm's state.  When Slurm no longer carries it, the incident is closed
    (None)."""
    current = ctx.slurm.get_node(node)
    ours = our_reason(current)
    if ours is None or ours.incident != incident:
        log.warning("incident %s of %s has no journal and Slurm no longer carries it; closed",
                    incident, node)  # fmt: skip
        ctx.state.clear_open_incident(node, incident)
        return None
    doc = ctx.journal.open(
        journal.opened(
            incident=incident, node=node, kind="drain", code=ours.code,
            component=ours.component, reason=current.reason or "",
            why="journal rebuilt from Slurm's reason", at=ctx.clock(),
            grace_s=ctx.policy.grace_seconds, signal_batch=ctx.policy.signal_batch,
            signal_steps=ctx.policy.signal_steps, evacuate=True,
            # Ranked again before any job is touched: a claim whose run died
            # with the state dir is handled like one with a journal.
            status=IncidentStatus.CLAIMED, step="rebuilt_from_slurm",
            worker_env=ctx.worker_env, audit_log=str(ctx.audit.path),
        )
    )  # fmt: skip
    log.error("incident %s of %s: journal lost, rebuilt from Slurm's reason %r",
              incident, node, current.reason)  # fmt: skip
    ctx.audit.record(
        "rebuild", node=node, incident=incident, reason=current.reason,
        why="incident journal missing or corrupt; rebuilt from Slurm",
    )  # fmt: skip
    return doc


def reclaim(ctx: Context, inc: Incident) -> bool:
    """A drain announced (draining) or claimed but not confirmed: True when
    the claim stands (the Engine ranks it again), False when the node
    carries someone else's reason by now (abandoned)."""
    incident, status = inc.id, inc.status
    view = ctx.door.look(inc.node)
    if view.ours is not None and view.ours.incident == incident:
        if status is IncidentStatus.DRAINING:
            ctx.journal.step(incident, "claimed", status=IncidentStatus.CLAIMED)
        return True
    if not view.ownership.claimed:  # no reason, or a stale one (24.11)
        with ctx.journal.lock(incident):
            ctx.door.drain(inc.node, inc.reason)
            ctx.journal.step(incident, "claimed", status=IncidentStatus.CLAIMED)
        ctx.state.set_open_incident(inc.node, incident)
        return True
    ctx.journal.step(incident, "abandoned", status=IncidentStatus.ABANDONED, jobs_done=True)
    ctx.state.clear_open_incident(inc.node, incident)
    ctx.audit.record(
        "drain", node=inc.node, incident=incident, outcome="skipped",
        why=f"on recovery the node carries another reason: {view.node.reason!r}",
    )  # fmt: skip
    return False


def next_step(ctx: Context, inc: Incident) -> Next:
    """What is left of a confirmed drain's evacuation (a drain that does not
    evacuate is done here: jobs_done)."""
    if not inc.evacuate:
        ctx.journal.step(inc.id, "jobs_done", jobs_done=True, status=IncidentStatus.JOBS_DONE)
        return Next.NOTHING
    if inc.unsignalled or inc.deadline is None:
        return Next.EVACUATE
    if ctx.clock() >= parse_time(inc.deadline):
        return Next.FINISH
    if ctx.spawn is not None and not pid_alive(inc.worker_pid):
        return Next.SPAWN
    return Next.NOTHING
