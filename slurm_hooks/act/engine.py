"""The remediation engine: the only code that changes Slurm and tells people.

``Engine.handle(node, findings)`` turns findings into decisions (pure policy)
and carries them out: drain with our reason, signal each job so it can
checkpoint, wait the grace period in a detached worker (hooks must return
within Slurm's limits), requeue (or cancel) the job, note it on the job,
alert its owner, audit everything.

Rules that keep it safe:

* On a healthy node with nothing open locally, ``handle`` makes no Slurm
  call at all: hooks run before every job on every node.
* Every write is preceded by a read of what is there now: a foreign reason is
  never overwritten, our own drain is not written twice.
* Each incident has a journal (``state.StateStore``): a step is written
  *before* the call it announces (intent) and after it (done).  A crash at
  any point is rolled forward by ``resume_pending()``, and a job is requeued
  exactly once: before requeueing again we ask Slurm whether its restart
  count already moved.
* Notification failures are logged and audited, never raised.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from slurm_hooks.act.notify.base import Alert, Notifier
from slurm_hooks.core.errors import SlurmError, SlurmHooksError, StateError
from slurm_hooks.core.history import FaultEvent
from slurm_hooks.core.model import Finding, JobInfo, NodeState, ReasonOwner, Status
from slurm_hooks.core.reason import classify_owner, format_reason, try_parse_reason
from slurm_hooks.decide.breaker import FleetView, Trip
from slurm_hooks.decide.config import PolicyConfig
from slurm_hooks.decide.decide import decide, decide_resume
from slurm_hooks.decide.decision import Decision, DecisionKind
from slurm_hooks.detect.probes.process import pid_alive
from slurm_hooks.slurm.base import SignalTarget, SlurmClient
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import BreakerLatch, StateStore, iso, parse_time

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
#: Starts the grace worker for an incident file; returns its pid (or None).
Spawner = Callable[[Path], int | None]

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
#: States of a job that still runs (or is being torn down): wait for it.
_STILL_RUNNING = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING", "STOPPED"})
#: Words in Slurm's answer to ``scontrol requeue`` for a job that cannot be requeued.
_NOT_REQUEUEABLE = ("presently disabled", "not requeueable", "requeue is disabled")
_GONE = ("invalid job id", "not found")


def utcnow() -> datetime:
    return datetime.now(UTC)


def spawn_worker(incident_file: Path, *, env: dict[str, str] | None = None) -> int:
    """Start ``python -m slurm_hooks.agent.worker <incident-file>`` in its own
    session, detached from the hook: slurmd kills a HealthCheckProgram after
    60 s and waits on an epilog, so the grace wait must not happen there.

    Not through probes.commands.run on purpose: that one waits for its child
    and this child must outlive us.  Stdio is /dev/null so that slurmd, which
    reads the hook's output until EOF, is not kept waiting.
    """
    log_path = incident_file.parent.parent / "worker.log"
    with open(os.devnull, "rb") as null_in, open(log_path, "ab") as out:
        proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
            [sys.executable, "-m", "slurm_hooks.agent.worker", str(incident_file)],
            stdin=null_in,
            stdout=out,
            stderr=out,
            start_new_session=True,
            close_fds=True,
            env={**os.environ, **(env or {})},
            cwd="/",
        )
    _CHILDREN.append(proc)
    _reap()
    return proc.pid


_CHILDREN: list[subprocess.Popen[bytes]] = []


def _reap() -> None:
    """Collect finished workers so a long-running watcher leaves no zombies."""
    _CHILDREN[:] = [p for p in _CHILDREN if p.poll() is None]


@dataclass(frozen=True)
class JobOutcome:
    job_id: str
    outcome: str
    detail: str = ""
    #: The owner is to be told (after the incident lock is released).
    notify: bool = field(default=False, compare=False, repr=False)


class Engine:
    """Decide and act for one node at a time.

    ``slurm`` is any SlurmClient; ``spawn`` starts the grace worker (tests
    pass ``None`` to drive the grace by hand, or an in-process function).
    ``worker_env`` is passed to the worker (SLURM_CONF, SLURM_HOOKS_CONFIG)
    so it can rebuild the same engine.
    """

    def __init__(
        self,
        slurm: SlurmClient,
        policy: PolicyConfig,
        state: StateStore,
        audit: AuditLog,
        notifier: Notifier | None = None,
        *,
        clock: Clock = utcnow,
        latch: BreakerLatch | None = None,
        spawn: Spawner | None = spawn_worker,
        observe_only: bool = False,
        actor: str = "slurm-hooks",
        worker_env: dict[str, str] | None = None,
    ):
        self.slurm = slurm
        self.policy = policy
        self.state = state
        self.audit = audit
        self.notifier = notifier or Notifier()
        self.clock = clock
        self.latch = latch or BreakerLatch(policy.breaker_state_file or state.root / "breaker.json")
        self.spawn = spawn
        self.observe_only = observe_only or policy.observe_only
        self.actor = actor
        self.worker_env = dict(worker_env or {})

    # -- building -------------------------------------------------------------

    @classmethod
    def from_config(
        cls,
        config: Any,
        slurm: SlurmClient | None = None,
        *,
        actor: str = "slurm-hooks",
        **kwargs: Any,
    ) -> Engine:
        """An engine from a loaded ``config.Config``: policy and notify
        sections, general.state_dir, and unless ``slurm`` is given the
        backend ``[general]`` names (``slurm.factory.client_from_config``)."""
        from slurm_hooks.act.notify import build_notifier
        from slurm_hooks.act.notify.config import NotifyConfig

        general = config.general
        policy = config.section("policy", PolicyConfig)
        notify_cfg = config.section("notify", NotifyConfig)
        if slurm is None:
            from slurm_hooks.slurm import factory

            slurm = factory.client_from_config(config)
        state = StateStore(general.state_dir)
        audit = AuditLog(policy.audit_log or Path(general.state_dir) / "audit.jsonl", actor=actor)
        worker_env = {}
        if config.path:
            worker_env["SLURM_HOOKS_CONFIG"] = str(config.path)
        if os.environ.get("SLURM_CONF"):
            worker_env["SLURM_CONF"] = os.environ["SLURM_CONF"]
        kwargs.setdefault("worker_env", worker_env)
        return cls(
            slurm,
            policy,
            state,
            audit,
            build_notifier(notify_cfg, slurm),
            observe_only=general.observe_only or policy.observe_only,
            actor=actor,
            **kwargs,
        )

    # -- deciding ---------------------------------------------------------------

    def evaluate(self, node: str, findings: Sequence[Finding]) -> list[Decision]:
        """Decisions without acting (dry run, ``policy explain``).  Asks Slurm
        only when a decision may drain the node."""
        decisions, _ = self._decide(node, findings)
        return decisions

    def _decide(
        self, node: str, findings: Sequence[Finding]
    ) -> tuple[list[Decision], NodeState | None]:
        now = self.clock()
        history = self.state.history(node)
        first = decide(
            findings, None, history, None, self.policy, now, node=node,
            observe_only=self.observe_only,
        )  # fmt: skip
        if not any(d.kind.drains for d in first):
            return first, None
        node_state = self.slurm.get_node(node)
        fleet = FleetView(tuple(self.slurm.list_nodes()), self.latch.read())
        decisions = decide(
            findings, node_state, history, fleet, self.policy, now, node=node,
            observe_only=self.observe_only,
        )  # fmt: skip
        return decisions, node_state

    # -- the loop -----------------------------------------------------------------

    def handle(self, node: str, findings: Iterable[Finding]) -> list[Decision]:
        """Decide for ``node`` and act.  Returns the decisions (acted on unless
        observe-only).  Findings that are all OK with no incident open here
        cost nothing: no Slurm call, no write."""
        findings = [f for f in findings if f.status is not Status.OK]
        open_incident = self.state.open_incident(node)
        if open_incident:
            self._roll_forward(open_incident)
        if not findings:
            return []
        decisions, _ = self._decide(node, findings)
        self._record_faults(node, decisions)
        for d in decisions:
            if d.kind is not DecisionKind.IGNORE:
                self.audit.record(
                    "decision",
                    node=node,
                    code=d.code,
                    component=d.component,
                    incident=d.incident,
                    decision=str(d.kind),
                    why=d.explanation,
                    outcome="observe_only" if d.observe_only and d.kind.drains else None,
                    actor=self.actor,
                )
        for d in decisions:
            if d.observe_only:
                continue
            try:
                self._act(d)
            except SlurmHooksError as exc:
                log.error("acting on %s for %s failed: %s", d.kind, node, exc)
                self.audit.record(
                    str(d.kind), node=node, incident=d.incident, outcome="failed",
                    why=str(exc), actor=self.actor,
                )  # fmt: skip
                raise
        return decisions

    def _record_faults(self, node: str, decisions: Sequence[Decision]) -> None:
        now = self.clock()
        events = []
        for d in decisions:
            if d.kind is DecisionKind.IGNORE:
                continue
            for i, f in enumerate(d.findings):
                # Only a new drain counts as a hardware event towards REPLACE;
                # a fault seen again on an already drained node does not.
                if d.kind.drains and i == 0:
                    severity = str(d.kind)
                elif d.kind is DecisionKind.LOG:
                    severity = "log"
                else:
                    severity = str(d.kind) if not d.kind.drains else "secondary"
                comp = d.component if i == 0 else None
                if comp is None and f.component.kind != "node":
                    comp = f.component.short()
                events.append(FaultEvent(now, f.code, comp, severity, d.incident))
        self.state.record_faults(node, events)

    def _act(self, d: Decision) -> None:
        if d.kind.drains:
            self._drain(d)
        elif d.kind is DecisionKind.BREAKER_TRIPPED:
            self._trip(d)

    # -- drain ------------------------------------------------------------------

    def _drain(self, d: Decision) -> None:
        assert d.reason is not None
        now = self.clock()
        current = self.slurm.get_node(d.node)  # read before writing
        owner = classify_owner(current.reason)
        ours = try_parse_reason(current.reason)
        if owner not in (ReasonOwner.NONE, ReasonOwner.OURS):
            self.audit.record(
                "drain", node=d.node, incident=d.incident, outcome="refused",
                why=f"reason changed to a foreign one: {current.reason!r}", actor=self.actor,
            )  # fmt: skip
            return
        text = format_reason(d.reason)
        if d.facts.get("already_drained") and ours is not None:
            # Escalation of our own drain: keep the incident, mark it for replacement.
            self.slurm.update_reason(d.node, text)
            self.audit.record(
                "replace", node=d.node, incident=ours.incident, code=d.code,
                why=d.explanation, reason=text, actor=self.actor,
            )  # fmt: skip
            self._alert(
                Alert("replacement_requested", f"{d.node}: {d.explanation}", node=d.node,
                      incident=ours.incident, code=d.code),
            )  # fmt: skip
            return
        if ours is not None and ours.is_fault and (current.drained or current.down):
            self.audit.record(
                "drain", node=d.node, incident=ours.incident, outcome="skipped",
                why="already drained by slurm-hooks", actor=self.actor,
            )  # fmt: skip
            return
        doc = {
            "incident": d.incident,
            "node": d.node,
            "kind": str(d.kind),
            "code": d.code,
            "component": d.component,
            "reason": text,
            "why": d.explanation,
            "opened_at": iso(now),
            "grace_s": self.policy.grace_seconds,
            "signal_batch": self.policy.signal_batch,
            "signal_steps": self.policy.signal_steps,
            "evacuate": d.evacuate,
            "status": "draining",
            "jobs": None,
            "jobs_done": False,
            "deadline": None,
            "worker_env": self.worker_env,
            "audit_log": str(self.audit.path),
            "steps": [{"step": "drain_intent", "at": iso(now)}],
        }
        self.state.write_incident(doc)
        # Open before the drain: a drain that lands although its call failed
        # (timeout) or the process died must still be rolled forward by the
        # next run, which looks for an open incident (hooks' fast path).
        self.state.set_open_incident(d.node, d.incident)
        with self.state.incident_lock(str(d.incident)):
            if ours is not None and not ours.is_fault and (current.drained or current.down):
                self.slurm.update_reason(d.node, text)  # LEND/SPARE -> the fault's reason
            else:
                self.slurm.drain(d.node, text)
            self._step(str(d.incident), "drained", status="drained")
        self.audit.record(
            "replace" if d.kind is DecisionKind.REPLACE else "drain",
            node=d.node, incident=d.incident, code=d.code, component=d.component,
            why=d.explanation, reason=text, actor=self.actor,
        )  # fmt: skip
        self._alert(
            Alert(
                "node_held" if d.kind is DecisionKind.HOLD_FOR_HUMAN else "node_drained",
                f"{d.node} drained: {d.explanation}",
                node=d.node, incident=d.incident, code=d.code,
                fields={"component": d.component, "reason": text},
            )
        )  # fmt: skip
        if d.evacuate:
            self._evacuate(str(d.incident))

    def _step(self, incident: str, step: str, **changes: Any) -> dict[str, Any]:
        at = iso(self.clock())

        def change(doc: dict[str, Any]) -> None:
            doc.setdefault("steps", []).append({"step": step, "at": at})
            doc.update(changes)

        return self.state.update_incident(incident, change)

    # -- evacuate -------------------------------------------------------------

    def _evacuate(self, incident: str) -> None:
        """Record the node's jobs, signal them, then leave the grace wait to
        the worker (or finish at once when the grace is 0)."""
        with self.state.incident_lock(incident):
            doc = self.state.read_incident(incident)
            if doc is None:
                raise StateError(f"incident {incident} vanished")
            if doc.get("jobs") is None:
                jobs: dict[str, Any] = {}
                for job in self.slurm.jobs_on_node(doc["node"]):
                    jobs[job.job_id] = self._job_record(job)
                doc["jobs"] = jobs
                doc["status"] = "evacuating"
                doc.setdefault("steps", []).append({"step": "jobs_listed", "at": iso(self.clock())})
                self.state.write_incident(doc)
            for job_id, rec in doc["jobs"].items():
                if not rec.get("signalled_at"):
                    self._signal(doc, job_id, rec)
            if doc.get("deadline") is None:
                doc["deadline"] = iso(self.clock() + timedelta(seconds=doc["grace_s"]))
                self.state.write_incident(doc)
            if not doc["jobs"]:
                doc["jobs_done"] = True
                doc["status"] = "jobs_done"
                self.state.write_incident(doc)
                return
        if doc["grace_s"] <= 0 or self.spawn is None:
            if doc["grace_s"] <= 0:
                self.finish_incident(incident)
            return
        self._spawn(incident)

    def _job_record(self, job: JobInfo) -> dict[str, Any]:
        """The job as it was before we touched it (owner, restart count)."""
        try:
            full = self.slurm.get_job(job.job_id)
        except SlurmError as exc:
            if not any(w in str(exc).lower() for w in _GONE):
                # The listing has no restart count: a guessed 0 would make a
                # job requeued before look requeued already, and never be.
                raise
            log.warning("cannot read job %s: %s", job.job_id, exc)
            full = job
        return {
            "user": full.user or job.user,
            "name": full.name or job.name,
            "restart_count": full.restart_count,
            "requeue": full.requeue,
            "state": full.state,
            "nodes": full.nodes or job.nodes,
            "signalled_at": None,
            "requeue_intent_at": None,
            "outcome": None,
        }

    def _signal(self, doc: dict[str, Any], job_id: str, rec: dict[str, Any]) -> None:
        sent = []
        for sig, target in (
            (doc.get("signal_batch"), SignalTarget.BATCH),
            (doc.get("signal_steps"), SignalTarget.STEPS),
        ):
            if not sig:
                continue
            try:
                self.slurm.signal_job(job_id, sig, target)
                sent.append(f"{sig}->{target}")
            except SlurmError as exc:
                # No steps, or the job just ended: the requeue step will tell.
                log.info("signal %s to job %s (%s) failed: %s", sig, job_id, target, exc)
        rec["signalled_at"] = iso(self.clock())
        rec["signals"] = sent
        self.state.write_incident(doc)
        self.audit.record(
            "signal", node=doc["node"], job=job_id, incident=doc["incident"], user=rec.get("user"),
            why=f"checkpoint grace {doc['grace_s']:g}s before requeue", signals=sent,
            actor=self.actor,
        )  # fmt: skip

    def _spawn(self, incident: str) -> None:
        assert self.spawn is not None
        path = self.state.incident_path(incident)
        try:
            pid = self.spawn(path)
        except OSError as exc:
            # The journal still says what is left; resume_pending() finishes it.
            log.error("cannot start grace worker for %s: %s", incident, exc)
            return
        with self.state.incident_lock(incident):  # the worker may be writing already
            self._step(incident, "worker_started", worker_pid=pid)

    # -- finishing (worker, resume_pending) ----------------------------------------

    def finish_incident(
        self, incident: str, *, force: bool = False, early: bool = False
    ) -> list[JobOutcome]:
        """Requeue (or cancel) the incident's jobs once the grace is over.

        With ``early``, before the deadline, settle only the jobs that have
        already stopped running (they checkpointed and exited on the signal,
        or the fault killed them): waiting out the rest of the grace for them
        would only add downtime.  Safe to call any number of times from any
        process."""
        outcomes: list[JobOutcome] = []
        try:
            with self.state.incident_lock(incident):
                doc = self.state.read_incident(incident)
                if doc is None or doc.get("jobs_done"):
                    return []
                if doc.get("jobs") is None:
                    return []
                deadline = parse_time(doc["deadline"]) if doc.get("deadline") else None
                in_grace = bool(deadline and self.clock() < deadline and not force)
                if in_grace and not early:
                    return []
                for job_id, rec in doc["jobs"].items():
                    if rec.get("outcome"):
                        continue
                    if in_grace and self._still_running(job_id):
                        continue
                    outcomes.append(self._settle(doc, job_id, rec))
                if all(r.get("outcome") for r in doc["jobs"].values()):
                    doc["jobs_done"] = True
                    doc["status"] = "jobs_done"
                    doc.setdefault("steps", []).append(
                        {"step": "jobs_done", "at": iso(self.clock())}
                    )
                self.state.write_incident(doc)
        finally:
            # Told outside the lock (a hanging webhook, timeout x retries per
            # alert, must not hold up a hook waiting for the incident), and
            # also when a later job's requeue failed: its outcome is recorded.
            for o in outcomes:
                if o.notify:
                    self._alert(self._job_alert(doc, o.job_id, doc["jobs"][o.job_id], o.outcome))
        return outcomes

    def _still_running(self, job_id: str) -> bool:
        try:
            job = self.slurm.get_job(job_id)
        except SlurmError as exc:
            return not any(w in str(exc).lower() for w in _GONE)
        base = job.state.upper().split()[0] if job.state else ""
        return base in _STILL_RUNNING

    def _settle(self, doc: dict[str, Any], job_id: str, rec: dict[str, Any]) -> JobOutcome:
        node = doc["node"]
        try:
            job = self.slurm.get_job(job_id)
        except SlurmError as exc:
            if any(w in str(exc).lower() for w in _GONE):
                return self._outcome(doc, job_id, rec, "gone", "job no longer known to Slurm")
            raise
        base = job.state.upper().split()[0] if job.state else ""
        if job.restart_count > int(rec.get("restart_count") or 0):
            # Requeued already (by us before a crash, or by Slurm): never twice.
            return self._outcome(
                doc, job_id, rec, "requeued",
                f"restart count already {job.restart_count}; not requeued again", notify=True,
            )  # fmt: skip
        restartable = base in RESTARTABLE_END_STATES and job.requeue is not False
        if (base in TERMINAL_JOB_STATES and not restartable) or base == "PENDING":
            return self._outcome(doc, job_id, rec, "finished", f"job is {job.state}")
        rec["requeue_intent_at"] = iso(self.clock())
        self.state.write_incident(doc)
        requeueable = job.requeue is not False
        if requeueable:
            try:
                self.slurm.requeue(job_id)
            except SlurmError as exc:
                if not any(w in str(exc).lower() for w in _NOT_REQUEUEABLE):
                    raise
                requeueable = False
            else:
                detail = (
                    f"ended {base} during the grace; requeued to resume from its checkpoint"
                    if restartable
                    else f"requeued after {doc['grace_s']:g}s grace"
                )
                return self._outcome(doc, job_id, rec, "requeued", detail, notify=True)
        if self.policy.cancel_unrequeueable:
            self.slurm.cancel(job_id)
            return self._outcome(
                doc, job_id, rec, "cancelled", "job cannot be requeued (--no-requeue): cancelled",
                notify=True,
            )  # fmt: skip
        return self._outcome(
            doc, job_id, rec, "left_running", f"not requeueable; left running on draining {node}",
            notify=True,
        )  # fmt: skip

    def _outcome(
        self,
        doc: dict[str, Any],
        job_id: str,
        rec: dict[str, Any],
        outcome: str,
        detail: str,
        *,
        notify: bool = False,
    ) -> JobOutcome:
        now = self.clock()
        rec["outcome"] = outcome
        rec["outcome_at"] = iso(now)
        rec["detail"] = detail
        self.state.write_incident(doc)
        signalled = parse_time(rec["signalled_at"]) if rec.get("signalled_at") else None
        waited = (now - signalled).total_seconds() if signalled else None
        self.audit.record(
            {"requeued": "requeue", "cancelled": "cancel"}.get(outcome, outcome),
            node=doc["node"], job=job_id, incident=doc["incident"], user=rec.get("user"),
            code=doc.get("code"), why=detail, grace_s=doc.get("grace_s"), waited_s=waited,
            actor=self.actor,
        )  # fmt: skip
        return JobOutcome(job_id, outcome, detail, notify)

    def _job_alert(
        self, doc: dict[str, Any], job_id: str, rec: dict[str, Any], outcome: str
    ) -> Alert:
        fault = " ".join(p for p in (doc.get("code"), doc.get("component")) if p)
        name = f" ({rec['name']})" if rec.get("name") else ""
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

    def resume_pending(self, node: str | None = None) -> list[str]:
        """Roll forward every unfinished incident (after a crash or a reboot):
        finish a drain that was announced, signal what was not signalled,
        requeue what is past its grace, restart a dead worker.  Returns the
        incidents touched."""
        touched = []
        for doc in self.state.incidents(node, pending_only=True):
            self._roll_forward(doc["incident"])
            touched.append(doc["incident"])
        return touched

    def _roll_forward(self, incident: str) -> None:
        doc = self.state.read_incident(incident)
        if doc is None or doc.get("jobs_done"):
            return
        if doc.get("status") == "draining":
            current = self.slurm.get_node(doc["node"])
            ours = try_parse_reason(current.reason)
            if ours is not None and ours.incident == incident:
                self._step(incident, "drained", status="drained")
            elif classify_owner(current.reason) is ReasonOwner.NONE:
                with self.state.incident_lock(incident):
                    self.slurm.drain(doc["node"], doc["reason"])
                    self._step(incident, "drained", status="drained")
                self.state.set_open_incident(doc["node"], incident)
            else:
                self._step(incident, "abandoned", status="abandoned", jobs_done=True)
                self.state.clear_open_incident(doc["node"], incident)
                self.audit.record(
                    "drain", node=doc["node"], incident=incident, outcome="skipped",
                    why=f"on recovery the node carries another reason: {current.reason!r}",
                    actor=self.actor,
                )  # fmt: skip
                return
            doc = self.state.read_incident(incident) or doc
        if not doc.get("evacuate", True):
            self._step(incident, "jobs_done", jobs_done=True, status="jobs_done")
            return
        pending_signal = doc.get("jobs") is None or any(
            not r.get("signalled_at") for r in doc["jobs"].values()
        )
        if pending_signal or doc.get("deadline") is None:
            self._evacuate(incident)
            return
        deadline = parse_time(doc["deadline"])
        if self.clock() >= deadline:
            self.finish_incident(incident)
        elif self.spawn is not None and not pid_alive(doc.get("worker_pid")):
            self._spawn(incident)

    # -- breaker ----------------------------------------------------------------

    def _trip(self, d: Decision) -> None:
        part = str(d.facts.get("breaker_partition", "*"))
        if d.facts.get("breaker_latched"):
            return
        trip = Trip(
            part,
            self.clock(),
            d.node,
            int(d.facts.get("breaker_counted", 0)),
            int(d.facts.get("breaker_limit", 0)),
        )
        if not self.latch.trip(trip):
            return
        self.audit.record(
            "breaker_trip", node=d.node, partition=part, code=d.code, why=d.explanation,
            counted=trip.counted, limit=trip.limit, actor=self.actor,
        )  # fmt: skip
        self._alert(
            Alert(
                "breaker_tripped",
                f"circuit breaker tripped for partition {part}: {trip.counted} node(s) already "
                f"drained by slurm-hooks (limit {trip.limit}); {d.node} NOT drained for "
                f"{d.code}. Drains are off until 'slurm-hooks breaker reset'.",
                node=d.node, code=d.code,
                fields={"partition": part, "counted": trip.counted, "limit": trip.limit},
            )
        )  # fmt: skip

    def breaker_reset(self, partition: str | None = None, *, who: str = "") -> list[str]:
        gone = self.latch.reset(partition)
        self.audit.record(
            "breaker_reset", partition=partition or "*", reset=gone, actor=who or self.actor,
        )  # fmt: skip
        return gone

    # -- acceptance and resume -------------------------------------------------

    def record_acceptance(
        self, node: str, passed: bool, *, at: datetime | None = None, detail: str = ""
    ) -> Decision | None:
        """Take the acceptance run's verdict; on a pass with an incident open
        here and auto_resume on, try to resume the node."""
        at = at or self.clock()
        self.state.record_acceptance(node, at, passed, detail)
        self.audit.record(
            "acceptance", node=node, outcome="passed" if passed else "failed", why=detail or None,
            acceptance_at=iso(at), actor=self.actor,
        )  # fmt: skip
        if passed and self.policy.auto_resume and self.state.open_incident(node):
            return self.try_resume(node)
        return None

    def try_resume(
        self, node: str, *, human: bool = False, skip_acceptance: bool = False
    ) -> Decision:
        """Resume ``node`` if it carries our reason and passed acceptance since
        the fault.  Returns the decision (RESUME when it was resumed)."""
        current = self.slurm.get_node(node)
        d = decide_resume(
            current, self.state.history(node), self.clock(),
            skip_acceptance=skip_acceptance, human=human,
        )  # fmt: skip
        if self.observe_only and d.kind is DecisionKind.RESUME:
            d = d.observed()
        self.audit.record(
            "decision", node=node, decision=str(d.kind), code=d.code, incident=d.incident,
            why=d.explanation, actor=self.actor,
        )  # fmt: skip
        if d.kind is not DecisionKind.RESUME or d.observe_only:
            return d
        latest = self.slurm.get_node(node)  # the reason must still be the one we judged
        if latest.reason != current.reason:
            self.audit.record(
                "resume", node=node, outcome="refused", why="reason changed meanwhile",
                actor=self.actor,
            )  # fmt: skip
            return Decision(DecisionKind.LOG, node, d.code, "reason changed meanwhile; not resumed")
        self.slurm.resume(node)
        self.state.record_resume(node, self.clock(), d.incident)
        if d.incident and self.state.read_incident(d.incident):
            with self.state.incident_lock(d.incident):
                self._step(d.incident, "resumed", status="closed")
        self.audit.record(
            "resume", node=node, incident=d.incident, code=d.code, why=d.explanation,
            actor=self.actor,
        )  # fmt: skip
        self._alert(
            Alert("node_resumed", f"{node} resumed: {d.explanation}", node=node,
                  incident=d.incident, code=d.code)
        )  # fmt: skip
        return d

    # -- telling people -----------------------------------------------------------

    def _alert(self, alert: Alert) -> None:
        for delivery in self.notifier.send(alert):
            self.audit.record(
                "notify", node=alert.node, job=alert.job_id, incident=alert.incident,
                user=alert.user, sink=delivery.sink, kind=alert.kind,
                outcome="sent" if delivery.ok else "failed", why=delivery.error,
                actor=self.actor,
            )  # fmt: skip
