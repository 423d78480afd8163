"""Requeue one user's own job on that user's own evidence (REQUEUE_JOB).

The trust rule (``decide/trust.py``) lets evidence a job's user can write
act on that job alone, and only when the job opted in.  This module is the
whole of that action: one ``requeue_once`` through the door, guarded by the
restart count the evidence carried (a job already requeued, or a later run
of it, is not requeued again), and an audit line.  No drain, no reason, no
other job: the decision names one job and the check below makes sure Slurm
agrees the job still belongs to the user the decision names.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from slurm_hooks.core.errors import JobGone, NotRequeueable, SlurmError, SlurmUnavailable

if TYPE_CHECKING:
    from slurm_hooks.act.context import Context
    from slurm_hooks.decide.decision import Decision

log = logging.getLogger(__name__)


def requeue_opted_in(ctx: Context, d: Decision) -> str:
    """Requeue the decision's job (once); returns the outcome audited."""
    job_id = d.facts.get("job")
    user = d.facts.get("user")
    restarts = d.facts.get("restart_count")
    if not isinstance(job_id, str) or not job_id.isdigit() or not isinstance(restarts, int):
        outcome, why = "refused", "the decision names no job id and restart count"
    else:
        outcome, why = _requeue(ctx, job_id, user, restarts)
    ctx.audit.record(
        "job_requeue", node=d.node, job=job_id, user=user, code=d.code, outcome=outcome, why=why
    )
    return outcome


def _requeue(ctx: Context, job_id: str, user: object, restarts: int) -> tuple[str, str]:
    try:
        job = ctx.slurm.get_job(job_id)
        if job.user != user:
            return "refused", f"job {job_id} belongs to {job.user!r}, not {user!r}"
        done = ctx.door.requeue_once(job_id, restarts, job=job)
    except JobGone:
        return "gone", f"job {job_id} ended"
    except NotRequeueable as exc:
        return "not_requeueable", str(exc)
    except SlurmUnavailable:
        raise  # nothing happened: the caller tries again on its next pass
    except SlurmError as exc:
        log.warning("requeue of job %s failed: %s", job_id, exc)
        return "failed", str(exc)
    return str(done), f"job {job_id} opted in to a requeue on its own hang evidence"
