"""The ports a step of an incident's life needs, handed to it by the Engine.

A room of ``act/`` (drain, evacuate, roll-forward, held, repeats, deferred,
repair, spares, resume) never takes the Engine: it takes a ``Context`` and
returns what happened, and only the Engine sequences the rooms.  So each room
can be read (and tested) with no more than the ports it uses, and nothing
below the Engine calls back into it.

* ``slurm``: reads (node, jobs, table); every write goes through ``door``;
* ``journal``: the incidents (store/journal.py), ``state``: the node files;
* ``audit``: the audit log with the actor bound once;
* ``clock``, ``policy``, ``notifier``, ``spawn`` (starts the detached worker),
  ``latch`` (the breaker), and the settings a journal is opened with.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slurm_hooks.act import alerts
from slurm_hooks.act.notify.base import Alert, Notifier
from slurm_hooks.core.errors import JobGone, SlurmError, StateError
from slurm_hooks.decide.config import PolicyConfig
from slurm_hooks.decide.repair import RepairConfig
from slurm_hooks.slurm.base import SlurmClient
from slurm_hooks.slurm.door import SlurmDoor
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.journal import Journal
from slurm_hooks.store.state import BreakerLatch, StateStore

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
#: Starts the grace (or repair) worker for an incident file; returns its pid.
Spawner = Callable[[Path], int | None]


def utcnow() -> datetime:
    """The clock port's default: the wall clock, in UTC (tests pass their own)."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class Audit:
    """The audit log with the actor bound once (an explicit ``actor=`` still
    wins: ``breaker reset --who``)."""

    log: AuditLog
    actor: str

    @property
    def path(self) -> Path:
        return self.log.path

    def record(self, action: str, **fields: Any) -> None:
        fields.setdefault("actor", self.actor)
        self.log.record(action, **fields)


#: Job states of a job that still holds its node (or is being torn down).
_STILL_RUNNING = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING", "STOPPED"})


@dataclass(frozen=True)
class Context:
    """What a room may use (see the module docstring)."""

    slurm: SlurmClient
    door: SlurmDoor
    journal: Journal
    state: StateStore
    audit: Audit
    clock: Clock
    policy: PolicyConfig
    notifier: Notifier
    spawn: Spawner | None
    latch: BreakerLatch
    observe_only: bool
    worker_env: Mapping[str, str]
    repair: RepairConfig

    @property
    def actor(self) -> str:
        return self.audit.actor

    def alert(self, alert: Alert) -> None:
        """An alert outside an incident's journal (node resumed, breaker
        tripped): off the critical path, with a total deadline
        (``alerts.send_bounded``): a hanging webhook never delays the
        resume or the breaker decision."""

        def record(delivery: Any) -> None:
            self.audit.record(
                "notify", node=alert.node, job=alert.job_id, incident=alert.incident,
                user=alert.user, sink=delivery.sink, kind=alert.kind,
                outcome="sent" if delivery.ok else "failed", why=delivery.error,
            )  # fmt: skip

        alerts.send_bounded(self.notifier, alert, record)

    def incident_alert(self, incident: str, key: str, alert: Alert) -> None:
        """Queue ``alert`` in the incident's journal and send it now (and
        again on roll-forward until delivered); straight out when the
        incident has no journal here."""
        try:
            with self.journal.lock(incident):
                doc = self.journal.read_doc(incident)
                if doc is None:
                    raise StateError(f"no journal for incident {incident}")
                if alerts.queue(doc, key, alert, self.clock()):
                    self.journal.write(doc)
        except StateError as exc:
            log.warning("alert %s for %s not journalled (%s): sent once, now", key, incident, exc)
            self.alert(alert)
            return
        self.flush_alerts(incident)

    def flush_alerts(self, incident: str) -> int:
        """Send what the incident's journal still owes to people."""
        return alerts.flush(
            self.state, incident, self.notifier, self.audit.log, clock=self.clock,
            actor=self.actor,
        )  # fmt: skip

    def job_running(self, job_id: str, node: str | None = None) -> bool:
        """Whether Slurm still runs the job (on ``node``, when given): a
        job being torn down (COMPLETING) still counts, and so does one
        Slurm cannot be asked about now (the caller waits and asks again)."""
        try:
            job = self.slurm.get_job(job_id)
        except JobGone:
            return False
        except SlurmError:
            return True
        base = job.state.upper().split()[0] if job.state else ""
        return base in _STILL_RUNNING and not (node and job.nodes and not job.runs_on(node))

    def state_failed(self, what: str, message: str) -> None:
        """A local state write failed: say it loudly, count it, go on."""
        from slurm_hooks.act.metrics import count_state_failure

        log.error("STATE DIR BROKEN (%s): %s", what, message)
        count_state_failure(what)


__all__ = ["Audit", "Clock", "Context", "Spawner", "utcnow"]
