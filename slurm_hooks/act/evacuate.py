"""Evacuate a drained node: list its jobs, signal them, requeue each exactly once.

The room of an incident's life between a confirmed drain and an empty node:

* ``evacuate``: the node's jobs are journalled as they were (owner, restart
  count), each is sent the checkpoint signal at most once (the intents
  before the call; one call per signal and target for all of them), and
  the grace deadline is set; it returns what comes next;
* ``finish``: after the grace (or early, for jobs that already stopped),
  each job is requeued exactly once (the door's rule: a restart count that
  moved means it was requeued already), cancelled or left running, with
  its owner told through the journal's alert queue;
* ``after_jobs``: a spare for each requeued job, then the repair worker;
* ``requeue_before_start``: the prolog's requeue of a job that must not
  start on a node we drained.

Each function takes the ports (``act/context.py``) and returns what
happened; the Engine sequences them.
"""

from __future__ import annotations

import enum
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from slurm_hooks.act import alerts, gpu_scope
from slurm_hooks.act.context import Context
from slurm_hooks.act.notify.base import Alert
from slurm_hooks.core.errors import (
    JobGone,
    NotRequeueable,
    SignalMaybeSent,
    SlurmError,
    SlurmHooksError,
    SlurmUnavailable,
    StateError,
)
from slurm_hooks.core.incident import IncidentStatus, Outcome
from slurm_hooks.core.model import JobInfo
from slurm_hooks.core.reason import sanitize_text
from slurm_hooks.decide.decision import Decision
from slurm_hooks.detect.probes.process import pid_alive
from slurm_hooks.slurm.base import SignalTarget
from slurm_hooks.slurm.door import Requeue, SlurmDoor
from slurm_hooks.store.journal import Incident
from slurm_hooks.store.state import iso, parse_time

log = logging.getLogger(__name__)

#: Job states after which there is nothing left to requeue.
TERMINAL_JOB_STATES = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
#: Terminal states a job reaches when the fault (or our checkpoint signal)
#: ended it: Slurm requeues a finished batch job too, so such a job is put
#: back in the queue to resume from its checkpoint instead of being lost.
#: COMPLETED, CANCELLED (by its owner) and the rest stay finished.
RESTARTABLE_END_STATES = frozenset({"FAILED", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY"})


class Next(enum.Enum):
    """What follows an evacuation's signals (the Engine does it)."""

    AFTER_JOBS = "after_jobs"  # no job: the repair at once
    FINISH = "finish"  # no grace: requeue now
    SPAWN = "spawn"  # the grace worker waits it out
    WAIT = "wait"  # no spawner (tests, the worker itself): the caller finishes


@dataclass(frozen=True)
class JobOutcome:
    job_id: str
    outcome: Outcome
    detail: str = ""
    #: The owner is to be told (after the incident lock is released).
    notify: bool = field(default=False, compare=False, repr=False)


def evacuate(ctx: Context, incident: str) -> Next:
    """Record the node's jobs and signal them; returns what comes next (the
    Engine does it): the repair at once on an empty node, the requeue at
    once with no grace, else the grace worker (or nothing: no spawner)."""
    with ctx.journal.lock(incident):
        doc = ctx.state.read_incident(incident)
        if doc is None:
            raise StateError(f"incident {incident} vanished")
        if doc.get("jobs") is None:
            jobs: dict[str, Any] = {}
            for job in ctx.slurm.jobs_on_node(doc["node"]):
                rec = job_record(ctx, job, doc["node"])
                if rec is not None:
                    jobs[job.job_id] = rec
            gpu_scope.spare(ctx, doc, jobs)
            doc["jobs"] = jobs
            doc["status"] = IncidentStatus.EVACUATING
            doc.setdefault("steps", []).append({"step": "jobs_listed", "at": iso(ctx.clock())})
            ctx.state.write_incident(doc)
        pending = []
        for job_id, rec in doc["jobs"].items():
            if rec.get("signalled_at"):
                continue
            if rec.get("signal_intent_at"):
                # A run died between the intent and the record: the
                # signal may have gone out.  A checkpoint signal is sent
                # at most once; the requeue after the grace still comes.
                rec["signalled_at"] = rec["signal_intent_at"]
                rec["signals"] = ["unknown: a run died while signalling"]
                ctx.state.write_incident(doc)
                continue
            pending.append(job_id)
        if pending:
            signal_jobs(ctx, doc, pending)
        if doc.get("deadline") is None:
            doc["deadline"] = iso(ctx.clock() + timedelta(seconds=doc["grace_s"]))
            ctx.state.write_incident(doc)
        empty = not doc["jobs"]
        if empty:
            doc["jobs_done"] = True
            doc["status"] = IncidentStatus.JOBS_DONE
            ctx.state.write_incident(doc)
    if empty:  # an idle node: straight to the repair (outside the lock)
        return Next.AFTER_JOBS
    if doc["grace_s"] <= 0:
        return Next.FINISH
    return Next.WAIT if ctx.spawn is None else Next.SPAWN


def take_back(ctx: Context, incident: str, decisions: Sequence[Decision]) -> bool:
    """Jobs the incident spared (act/gpu_scope.py) that a fault decided on
    now concerns join its evacuation: journalled as if listed now, with a
    new grace deadline for them (the jobs settled before keep their
    outcomes).  True when any did; the Engine then evacuates as at the drain."""
    job_ids = gpu_scope.struck_jobs(ctx, incident, decisions)
    if not job_ids:
        return False
    moved: list[tuple[str, dict[str, Any]]] = []
    with ctx.journal.lock(incident):
        doc = ctx.state.read_incident(incident)
        if doc is None or doc.get("jobs") is None:
            return False
        spared = doc.get("spared") or {}
        for job_id in job_ids:
            was = spared.get(job_id)
            if not was or was.get("ended_at") or job_id in doc["jobs"]:
                continue
            rec = job_record(ctx, JobInfo(job_id, was.get("user"), "RUNNING", doc["node"]),
                             doc["node"])  # fmt: skip
            if rec is not None:
                doc["jobs"][job_id] = rec
                del spared[job_id]
                moved.append((job_id, was))
        if not moved:
            return False
        doc.update(jobs_done=False, status=IncidentStatus.EVACUATING, deadline=None)
        doc.setdefault("steps", []).append({"step": "spared_struck", "at": iso(ctx.clock())})
        ctx.state.write_incident(doc)
    for job_id, was in moved:
        ctx.audit.record(
            "job_moved", node=doc["node"], job=job_id, incident=incident, user=was.get("user"),
            why=f"spared on GPUs {was.get('gpus')}; a later fault concerns it", actor=ctx.actor,
        )  # fmt: skip
    return True


def job_record(ctx: Context, job: JobInfo, node: str) -> dict[str, Any] | None:
    """The job as it was before we touched it (owner, restart count); None
    when the job's own record says it is not on ``node`` or is another
    user's than the listing said: not this node's to signal or requeue."""
    try:
        full = ctx.slurm.get_job(job.job_id)
    except JobGone as exc:
        # Any other error propagates: the listing has no restart count, and
        # a guessed 0 would make a job requeued before look requeued already.
        log.warning("cannot read job %s: %s", job.job_id, exc)
        full = job
    if (full.nodes and not full.runs_on(node)) or (job.user and full.user not in (None, job.user)):
        log.warning("job %s: listed on %s as %s's; its record says %s, %s's",
                    job.job_id, node, job.user, full.nodes, full.user)  # fmt: skip
        return None
    return {
        "user": full.user or job.user,
        "name": full.name or job.name,
        "restart_count": full.restart_count,
        "requeue": full.requeue,
        "state": full.state,
        "nodes": full.nodes or job.nodes,
        "signal_intent_at": None,
        "signalled_at": None,
        "requeue_intent_at": None,
        "outcome": None,
    }


#: A job the door returned no outcome for: taken as refused by that call
#: (recorded with whatever else went out, never sent again).
_NO_OUTCOME = SlurmError("no outcome returned for this job")


def signal_jobs(ctx: Context, doc: dict[str, Any], job_ids: list[str]) -> None:
    """Send the checkpoint signals to ``job_ids`` (none of them signalled
    before): one door call per (signal, target) for all of them, so the
    CLI's ``scancel`` reads the job table at most once per target (up to
    Slurm 23.11; not at all from 24.05), not once per job and target.

    The intents of all of them are journalled, in one write, before
    anything goes out: a run that dies after it never sends them again
    (at most once; ``evacuate`` records them as unknown).  A job Slurm
    refuses (no steps, or it just ended) is recorded with what did go out;
    the requeue step will tell.  When slurmctld does not answer, nothing
    more is sent: a job that got nothing has its intent taken back (the
    next run, the XID not being committed either, sends its checkpoint
    signal instead of requeueing without one); a job whose request may
    have reached it (SignalMaybeSent: a stopped slurmctld reads its queued
    requests when it continues) is recorded as signalled, ``unknown``, and
    never asked again; then SlurmUnavailable is raised.  A job that got
    part of its signals keeps its record."""
    jobs = doc["jobs"]
    intent = iso(ctx.clock())
    for job_id in job_ids:
        jobs[job_id]["signal_intent_at"] = intent
    ctx.state.write_incident(doc)  # the intents before the side effect
    sent: dict[str, list[str]] = {job_id: [] for job_id in job_ids}
    unreached: set[str] = set()
    maybe = False
    lost: SlurmUnavailable | None = None
    for sig, target in (
        (doc.get("signal_batch"), SignalTarget.BATCH),
        (doc.get("signal_steps"), SignalTarget.STEPS),
    ):
        if not sig:
            continue
        try:
            results = ctx.door.signal_many(job_ids, sig, target)
        except SlurmUnavailable as exc:  # the controller answered for none
            results = dict.fromkeys(job_ids, exc)
        for job_id in job_ids:
            err = results.get(job_id, _NO_OUTCOME)
            if err is None:
                sent[job_id].append(f"{sig}->{target}")
            elif isinstance(err, SignalMaybeSent):
                sent[job_id].append(f"unknown: {sig}->{target} (no answer; may be delivered)")
                maybe = True
                lost = err
            elif isinstance(err, SlurmUnavailable):
                unreached.add(job_id)
                lost = err
            else:
                log.info("signal %s to job %s (%s) failed: %s", sig, job_id, target, err)
        if lost is not None:
            break  # slurmctld stopped answering: send nothing more
    back = {job_id for job_id in unreached if not sent[job_id]}
    done = iso(ctx.clock())
    for job_id in job_ids:
        rec = jobs[job_id]
        if job_id in back:
            rec["signal_intent_at"] = None
            rec["signal_retries"] = int(rec.get("signal_retries") or 0) + 1
        else:
            rec["signalled_at"] = done
            rec["signals"] = sent[job_id]
    ctx.state.write_incident(doc)
    for job_id in job_ids:
        if job_id in back:
            continue
        ctx.audit.record(
            "signal", node=doc["node"], job=job_id, incident=doc["incident"],
            user=jobs[job_id].get("user"),
            why=f"checkpoint grace {doc['grace_s']:g}s before requeue", signals=sent[job_id],
            actor=ctx.actor,
        )  # fmt: skip
    if lost is not None and (back or maybe):
        raise lost


def finish(
    ctx: Context, incident: str, *, force: bool = False, early: bool = False
) -> list[JobOutcome]:
    """Requeue (or cancel) the incident's jobs once the grace is over.

    With ``early``, before the deadline, settle only the jobs that have
    already stopped running (they checkpointed and exited on the signal,
    or the fault killed them): waiting out the rest of the grace for them
    would only add downtime.  Safe to call any number of times from any
    process.  Returns the jobs settled now (the Engine then starts what
    follows them: ``after_jobs``)."""
    outcomes: list[JobOutcome] = []
    try:
        with ctx.journal.lock(incident):
            doc = ctx.state.read_incident(incident)
            if doc is None or doc.get("jobs_done"):
                return []
            if doc.get("jobs") is None:
                return []
            deadline = parse_time(doc["deadline"]) if doc.get("deadline") else None
            in_grace = bool(deadline and ctx.clock() < deadline and not force)
            if in_grace and not early:
                return []
            for job_id, rec in doc["jobs"].items():
                if rec.get("outcome"):
                    continue
                if in_grace and ctx.job_running(job_id):
                    continue
                outcomes.append(settle(ctx, doc, job_id, rec))
            if all(r.get("outcome") for r in doc["jobs"].values()):
                doc["jobs_done"] = True
                doc["status"] = IncidentStatus.JOBS_DONE
                doc.setdefault("steps", []).append({"step": "jobs_done", "at": iso(ctx.clock())})
            ctx.state.write_incident(doc)
    finally:
        # Sent outside the lock (a hanging webhook must not hold up a hook
        # waiting for the incident), and also when a later job's requeue
        # failed: each job alert was queued with its outcome (record_outcome).
        if outcomes:
            ctx.flush_alerts(incident)
    return outcomes


def after_jobs(ctx: Context, incident: str) -> None:
    """The incident's jobs are settled: a spare for each requeued job
    (act/spares.py), then the repair, which the detached worker carries
    out (act/repair.py; never inside a hook)."""
    from slurm_hooks.act import repair

    doc = ctx.journal.read_doc(incident)
    if not doc or not doc.get("jobs_done"):
        return
    # Jobs a GPU-scoped drain left running: each seen gone is journalled
    # (repair or not: the incident stays pending until they are).
    waiting = bool(doc.get("spared")) and gpu_scope.waiting(ctx, incident)
    if not ctx.repair.enabled:
        return
    if ctx.repair.resume_spares:
        from slurm_hooks.act import spares

        try:
            spares.resume_spares(ctx, incident)
        except (SlurmError, StateError) as exc:
            log.warning("spares for %s not resumed yet: %s", incident, exc)
    if waiting or not repair.due(doc, ctx.repair) or ctx.spawn is None:
        return
    inc = Incident.from_doc(doc)
    if pid_alive((inc.repair or {}).get("worker_pid") or inc.worker_pid):
        return
    try:
        pid = ctx.spawn(ctx.state.incident_path(incident))
    except (OSError, SlurmHooksError) as exc:
        log.error("cannot start the repair worker for %s: %s", incident, exc)
        return
    ctx.journal.update(incident, lambda d: d.setdefault("repair", {}).update(worker_pid=pid))


def settle(ctx: Context, doc: dict[str, Any], job_id: str, rec: dict[str, Any]) -> JobOutcome:
    node = doc["node"]
    try:
        job = ctx.slurm.get_job(job_id)
    except JobGone:
        return record_outcome(ctx, doc, job_id, rec, Outcome.GONE, "job no longer known to Slurm")
    base = job.state.upper().split()[0] if job.state else ""
    restarts = int(rec.get("restart_count") or 0)
    if SlurmDoor.requeued_since(job, restarts):
        # Requeued already (by us before a crash, or by Slurm): never twice.
        return record_outcome(
            ctx, doc, job_id, rec, Outcome.REQUEUED,
            f"restart count already {job.restart_count}; not requeued again", notify=True,
        )  # fmt: skip
    restartable = base in RESTARTABLE_END_STATES and job.requeue is not False
    if (base in TERMINAL_JOB_STATES and not restartable) or base == "PENDING":
        return record_outcome(ctx, doc, job_id, rec, Outcome.FINISHED, f"job is {job.state}")
    rec["requeue_intent_at"] = iso(ctx.clock())
    ctx.state.write_incident(doc)
    requeueable = job.requeue is not False
    if requeueable:
        try:
            ctx.door.requeue_once(job_id, restarts, job=job)
        except NotRequeueable:
            requeueable = False
        except JobGone:
            return record_outcome(
                ctx, doc, job_id, rec, Outcome.GONE, "job no longer known to Slurm"
            )
        else:
            detail = (
                f"ended {base} during the grace; requeued to resume from its checkpoint"
                if restartable
                else f"requeued after {doc['grace_s']:g}s grace"
            )
            return record_outcome(ctx, doc, job_id, rec, Outcome.REQUEUED, detail, notify=True)
    if ctx.policy.cancel_unrequeueable:
        ctx.door.cancel(job_id)
        return record_outcome(
            ctx, doc, job_id, rec, Outcome.CANCELLED, "job cannot be requeued (--no-requeue): cancelled",
            notify=True,
        )  # fmt: skip
    return record_outcome(
        ctx, doc, job_id, rec, Outcome.LEFT_RUNNING, f"not requeueable; left running on draining {node}",
        notify=True,
    )  # fmt: skip


def record_outcome(
    ctx: Context,
    doc: dict[str, Any],
    job_id: str,
    rec: dict[str, Any],
    outcome: Outcome,
    detail: str,
    *,
    notify: bool = False,
) -> JobOutcome:
    now = ctx.clock()
    rec["outcome"] = outcome
    rec["outcome_at"] = iso(now)
    rec["detail"] = detail
    if notify:  # journalled with the outcome: a crash after it cannot lose the alert
        alerts.queue(doc, f"job_{job_id}", job_alert(doc, job_id, rec, outcome), now)
    ctx.state.write_incident(doc)
    signalled = parse_time(rec["signalled_at"]) if rec.get("signalled_at") else None
    waited = (now - signalled).total_seconds() if signalled else None
    ctx.audit.record(
        outcome.audit_action,
        node=doc["node"], job=job_id, incident=doc["incident"], user=rec.get("user"),
        code=doc.get("code"), why=detail, grace_s=doc.get("grace_s"), waited_s=waited,
        actor=ctx.actor,
    )  # fmt: skip
    return JobOutcome(job_id, outcome, detail, notify)


def job_alert(doc: dict[str, Any], job_id: str, rec: dict[str, Any], outcome: str) -> Alert:
    fault = " ".join(p for p in (doc.get("code"), doc.get("component")) if p)
    # The job's name is its user's to choose (newlines, escape sequences,
    # a paragraph posing as ours): one short printable line in the alert.
    name = f" ({sanitize_text(str(rec['name']))[:64]})" if rec.get("name") else ""
    what = {
        "requeued": "was requeued and will restart on a healthy node",
        "cancelled": "could not be requeued (--no-requeue) and was cancelled",
        "left_running": "cannot be requeued and was left running on the draining node",
    }[outcome]
    text = (
        f"job {job_id}{name} {what}: node {doc['node']} failed ({fault}, incident "
        f"{doc['incident']}); it was signalled to checkpoint {doc.get('grace_s', 0):g}s before."
    )
    return Alert(
        f"job_{outcome}" if outcome != "left_running" else "job_signalled",
        text,
        node=doc["node"],
        job_id=job_id,
        user=rec.get("user"),
        incident=doc["incident"],
        code=doc.get("code"),
        fields={"component": doc.get("component"), "outcome": outcome},
    )


def spawn(ctx: Context, incident: str) -> int | None:
    """Start the grace worker for the incident; its pid (None: not started,
    the journal still says what is left and ``resume_pending`` finishes it)."""
    assert ctx.spawn is not None
    try:
        pid = ctx.spawn(ctx.state.incident_path(incident))
    except (OSError, SlurmHooksError) as exc:  # CommandError: could not start
        log.error("cannot start grace worker for %s: %s", incident, exc)
        return None
    # The worker may be writing already: the step takes the incident lock.
    ctx.journal.step(incident, "worker_started", worker_pid=pid)
    return pid


def requeue_before_start(
    ctx: Context, node: str, job_id: str, restarts: int, *, actor: str | None = None
) -> Requeue:
    """The prolog found our drain on its node: requeue the job before it
    starts, exactly once by the door's rule (a restart count past the one
    slurmd handed us means it was requeued already); audited when done."""
    done = ctx.door.requeue_once(job_id, restarts)
    if done is not Requeue.ALREADY:
        ctx.audit.record(
            "requeue", node=node, job=job_id,
            why="prolog failed on this node: requeued before the job started",
            actor=actor or ctx.actor,
        )  # fmt: skip
    return done


def spawn_worker(incident_file: Path, *, env: dict[str, str] | None = None) -> int:
    """Start ``python -m slurm_hooks.agent.worker <incident-file>`` in its own
    session, detached from the hook: slurmd kills a HealthCheckProgram after
    60 s and waits on an epilog, so the grace wait must not happen there.

    Through the detached entry of the one subprocess site
    (``probes.commands.spawn_detached``): this child must outlive us, and
    its stdio is /dev/null and ``worker.log`` so that slurmd, which reads
    the hook's output until EOF, is not kept waiting.
    """
    from slurm_hooks.detect.probes import commands

    log_path = incident_file.parent.parent / "worker.log"
    return commands.spawn_detached(
        [sys.executable, "-m", "slurm_hooks.agent.worker", str(incident_file)],
        output=log_path,
        env=env,
        cwd="/",
    )


def reap() -> None:
    """Collect finished workers so a long-running watcher leaves no zombies."""
    from slurm_hooks.detect.probes import commands

    commands.reap_detached()
