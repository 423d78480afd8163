"""The incident journal, typed: what an incident is, and the one way to step it.

Each incident has a JSON file (``StateStore.incident_path``) that every run
working on it (the hook, the watcher, the grace worker, ``resume_pending``)
reads and writes under the incident's lock.  Before this module it was a
``dict[str, Any]`` read through ``doc[...]``/``doc.get(...)`` everywhere, and
each room wrote its steps in its own way.  Here:

* :class:`Incident` is the journal as a frozen value: every field a release
  has written, typed; fields it does not know are kept (``extra``) and
  written back unchanged, so a file written by an earlier (or later)
  release reads and round-trips (``Incident.from_doc``, ``to_doc``);
* :class:`Journal` reads and writes those files, and ``step`` is the one
  way to move an incident on: it takes the incident lock (re-entrant within
  a process, so a caller that already holds it does not wait on itself),
  appends the step with its time and writes the file once.

The job records (``jobs``), the queued alerts (``alerts``, ``act/alerts.py``)
and the repair record (``repair``, ``act/repair.py``) are kept as the
mappings those rooms own; ``JobRecord`` is their typed read.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from slurm_hooks.core.errors import StateError
from slurm_hooks.core.incident import IncidentStatus, Outcome
from slurm_hooks.store.state import StateStore, incident_pending, iso

Clock = Callable[[], datetime]
Doc = dict[str, Any]


def _str(v: object) -> str | None:
    return None if v is None else str(v)


def _float(v: object, default: float = 0.0) -> float:
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default


def _int(v: object) -> int | None:
    try:
        return None if v is None else int(v)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Step:
    """One line of the incident's history: what happened, when (ISO time)."""

    step: str
    at: str

    def to_doc(self) -> Doc:
        return {"step": self.step, "at": self.at}


@dataclass(frozen=True)
class JobRecord:
    """A job as the incident found it, and what was done to it."""

    job_id: str
    user: str | None = None
    name: str | None = None
    restart_count: int = 0
    requeue: bool | None = None
    state: str | None = None
    nodes: str | None = None
    signal_intent_at: str | None = None
    signalled_at: str | None = None
    requeue_intent_at: str | None = None
    outcome: Outcome | None = None
    outcome_at: str | None = None
    detail: str | None = None

    @classmethod
    def from_doc(cls, job_id: str, rec: Mapping[str, Any]) -> JobRecord:
        req = rec.get("requeue")
        return cls(
            job_id=str(job_id),
            user=_str(rec.get("user")),
            name=_str(rec.get("name")),
            restart_count=_int(rec.get("restart_count")) or 0,
            requeue=req if isinstance(req, bool) else None,
            state=_str(rec.get("state")),
            nodes=_str(rec.get("nodes")),
            signal_intent_at=_str(rec.get("signal_intent_at")),
            signalled_at=_str(rec.get("signalled_at")),
            requeue_intent_at=_str(rec.get("requeue_intent_at")),
            outcome=Outcome.parse(rec.get("outcome")),
            outcome_at=_str(rec.get("outcome_at")),
            detail=_str(rec.get("detail")),
        )


#: Journal keys the typed fields stand for (the JSON name of each field).
_RENAMED = {"incident": "id", "drain_deferred": "deferred"}


@dataclass(frozen=True)
class Incident:
    """One incident's journal as a value (see the module docstring)."""

    id: str
    node: str
    kind: str = "drain"
    code: str | None = None
    component: str | None = None
    #: Our reason in Slurm (the text written; names the incident).
    reason: str = ""
    why: str | None = None
    opened_at: str | None = None
    grace_s: float = 0.0
    signal_batch: str | None = None
    signal_steps: str | None = None
    evacuate: bool = True
    #: The catalogue's advice, for the repair ladder (act/repair.py).
    action: str | None = None
    status: IncidentStatus | None = None
    #: Job id -> record (``None``: not listed yet; ``{}``: no job to evacuate).
    jobs: Mapping[str, Mapping[str, Any]] | None = None
    jobs_done: bool = False
    deadline: str | None = None
    worker_env: Mapping[str, str] = field(default_factory=dict)
    worker_pid: int | None = None
    audit_log: str | None = None
    steps: tuple[Step, ...] = ()
    #: The breaker claim's verdict (rank, limit, partition; taken back).
    claim: Mapping[str, Any] | None = None
    #: A LEND/SPARE hold of ours the claim replaced (restored on take-back).
    prior_reason: str | None = None
    held: bool = False
    #: Our drain waits for a foreign reason to be lifted (act/deferred.py).
    deferred: bool = False
    foreign_reason: str | None = None
    #: Queued alerts (act/alerts.py), the repair record (act/repair.py),
    #: spares chosen and resumed (act/spares.py): owned by those rooms.
    alerts: Mapping[str, Any] | None = None
    repair: Mapping[str, Any] | None = None
    spares: Mapping[str, str] | None = None
    spares_done: Mapping[str, bool] | None = None
    #: ``[policy] evacuate = "gpu"`` (act/gpu_scope.py): the GPU the
    #: evacuation was scoped to, the jobs it left running (job id -> user,
    #: name, GPUs, when it was seen gone), and the node's GRES GPUs then.
    scope: str | None = None
    spared: Mapping[str, Any] | None = None
    node_gpus: int | None = None
    #: Keys this release does not know, written back as they were read.
    extra: Mapping[str, Any] = field(default_factory=dict)

    # -- reading ------------------------------------------------------------

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Incident:
        """The journal as an earlier release (or this one) wrote it.  Any
        field may be missing or null; a field of the wrong type reads as
        its default rather than failing the incident."""
        known = {_RENAMED.get(f.name, f.name) for f in fields(cls)} | set(_RENAMED)
        known -= {"id", "deferred", "extra"}
        steps = tuple(
            Step(str(s.get("step")), str(s.get("at")))
            for s in doc.get("steps") or ()
            if isinstance(s, Mapping)
        )
        jobs = doc.get("jobs")
        pid = _int(doc.get("worker_pid"))

        def mapping(key: str) -> Mapping[str, Any] | None:
            v = doc.get(key)
            return v if isinstance(v, Mapping) else None

        return cls(
            id=str(doc.get("incident") or ""),
            node=str(doc.get("node") or ""),
            kind=str(doc.get("kind") or "drain"),
            code=_str(doc.get("code")),
            component=_str(doc.get("component")),
            reason=str(doc.get("reason") or ""),
            why=_str(doc.get("why")),
            opened_at=_str(doc.get("opened_at")),
            grace_s=_float(doc.get("grace_s")),
            signal_batch=_str(doc.get("signal_batch")),
            signal_steps=_str(doc.get("signal_steps")),
            evacuate=bool(doc.get("evacuate", True)),
            action=_str(doc.get("action")),
            status=IncidentStatus.parse(doc.get("status")),
            jobs=jobs if isinstance(jobs, Mapping) else None,
            jobs_done=bool(doc.get("jobs_done")),
            deadline=_str(doc.get("deadline")),
            worker_env=dict(doc.get("worker_env") or {}),
            worker_pid=pid,
            audit_log=_str(doc.get("audit_log")),
            steps=steps,
            claim=mapping("claim"),
            prior_reason=_str(doc.get("prior_reason")),
            held=bool(doc.get("held")),
            deferred=bool(doc.get("drain_deferred")),
            foreign_reason=_str(doc.get("foreign_reason")),
            alerts=mapping("alerts"),
            repair=mapping("repair"),
            spares=mapping("spares"),
            spares_done=mapping("spares_done"),
            scope=_str(doc.get("scope")),
            spared=mapping("spared"),
            node_gpus=_int(doc.get("node_gpus")),
            extra={k: v for k, v in doc.items() if k not in known},
        )

    def to_doc(self) -> Doc:
        """The JSON the file holds.  The keys every release wrote are always
        there; the optional ones only when set (what the rooms that set them
        wrote), so a journal read and written back keeps its shape."""
        doc: Doc = {
            "incident": self.id,
            "node": self.node,
            "kind": self.kind,
            "code": self.code,
            "component": self.component,
            "reason": self.reason,
            "why": self.why,
            "opened_at": self.opened_at,
            "grace_s": self.grace_s,
            "signal_batch": self.signal_batch,
            "signal_steps": self.signal_steps,
            "evacuate": self.evacuate,
            "status": str(self.status) if self.status is not None else None,
            "jobs": copy.deepcopy(dict(self.jobs)) if self.jobs is not None else None,
            "jobs_done": self.jobs_done,
            "deadline": self.deadline,
            "worker_env": dict(self.worker_env),
            "audit_log": self.audit_log,
            "steps": [s.to_doc() for s in self.steps],
        }
        optional: dict[str, Any] = {
            "action": self.action,
            "worker_pid": self.worker_pid,
            "claim": self.claim,
            "prior_reason": self.prior_reason,
            "held": self.held or None,
            "drain_deferred": self.deferred or None,
            "foreign_reason": self.foreign_reason,
            "alerts": self.alerts,
            "repair": self.repair,
            "spares": self.spares,
            "spares_done": self.spares_done,
            "scope": self.scope,
            "spared": self.spared,
            "node_gpus": self.node_gpus,
        }
        for key, value in optional.items():
            if value is not None:
                doc[key] = copy.deepcopy(dict(value)) if isinstance(value, Mapping) else value
        for key, value in self.extra.items():
            doc.setdefault(key, copy.deepcopy(value))
        return doc

    # -- asking -----------------------------------------------------------

    @property
    def pending(self) -> bool:
        """Work left (jobs, an alert owed, a deferred drain, a repair)."""
        return incident_pending(self.to_doc())

    def job_records(self) -> list[JobRecord]:
        return [JobRecord.from_doc(k, v) for k, v in (self.jobs or {}).items()]

    @property
    def unsignalled(self) -> bool:
        """Jobs not listed yet, or one not signalled yet."""
        return self.jobs is None or any(not j.signalled_at for j in self.job_records())


def opened(
    *,
    incident: str,
    node: str,
    kind: str,
    code: str | None,
    component: str | None,
    reason: str,
    why: str | None,
    at: datetime,
    grace_s: float,
    signal_batch: str | None,
    signal_steps: str | None,
    evacuate: bool,
    status: IncidentStatus,
    step: str,
    worker_env: Mapping[str, str],
    audit_log: str,
    **more: Any,
) -> Incident:
    """A new incident's journal, with its first step (its intent)."""
    return Incident(
        id=incident, node=node, kind=kind, code=code, component=component, reason=reason,
        why=why, opened_at=iso(at), grace_s=grace_s, signal_batch=signal_batch,
        signal_steps=signal_steps, evacuate=evacuate, status=status, jobs=None,
        jobs_done=False, deadline=None, worker_env=dict(worker_env), audit_log=audit_log,
        steps=(Step(step, iso(at)),), **more,
    )  # fmt: skip


#: Incident locks this thread holds (by lock file), with their depth: a step
#: taken by a caller that already holds the lock does not wait on itself
#: (flock locks per open file, so a second open in one process would).
_held = threading.local()


def _depths() -> dict[Path, int]:
    d: dict[Path, int] | None = getattr(_held, "depths", None)
    if d is None:
        d = _held.depths = {}
    return d


class Journal:
    """The incident files under a state store, and the one way to step them."""

    def __init__(self, state: StateStore, clock: Clock):
        self.state = state
        self.clock = clock

    def path(self, incident: str) -> Path:
        return self.state.incident_path(incident)

    @contextlib.contextmanager
    def lock(self, incident: str, timeout: float | None = None) -> Iterator[None]:
        """The incident lock (``StateStore.incident_lock``), re-entrant in a thread."""
        key = self.path(incident)
        depths = _depths()
        if depths.get(key):
            depths[key] += 1
            try:
                yield
            finally:
                depths[key] -= 1
            return
        with self.state.incident_lock(incident, timeout):
            depths[key] = 1
            try:
                yield
            finally:
                depths.pop(key, None)

    def read(self, incident: str) -> Incident | None:
        doc = self.state.read_incident(incident)
        return Incident.from_doc(doc) if doc is not None else None

    def read_doc(self, incident: str) -> Doc | None:
        """The raw mapping, for the rooms that edit their own records in it
        (job records, queued alerts) between writes."""
        return self.state.read_incident(incident)

    def write(self, inc: Incident | Doc) -> None:
        self.state.write_incident(inc.to_doc() if isinstance(inc, Incident) else inc)

    def update(self, incident: str, change: Callable[[Doc], None]) -> Doc:
        """Read, change and write the journal once, under its lock."""
        with self.lock(incident):
            return self.state.update_incident(incident, change)

    def step(
        self,
        incident: str,
        name: str,
        *,
        edit: Callable[[Doc], None] | None = None,
        **changes: Any,
    ) -> Incident:
        """Take the incident lock, append step ``name`` (now) and the changes
        (journal keys; ``edit``: a change that is not a plain assignment, such
        as dropping a queued alert), write once.  Raises StateError when the
        journal is gone."""
        at = iso(self.clock())

        def change(doc: Doc) -> None:
            steps = doc.get("steps")
            if not isinstance(steps, list):
                steps = doc["steps"] = []
            steps.append({"step": name, "at": at})
            doc.update(changes)
            if edit is not None:
                edit(doc)

        return Incident.from_doc(self.update(incident, change))

    def open(self, inc: Incident) -> Doc:
        """Write a new incident's journal; returns the mapping written (a
        room may queue its first alert in it before: ``act.alerts.queue``)."""
        doc = inc.to_doc()
        self.write(doc)
        return doc

    def pending(self, node: str | None = None) -> list[Incident]:
        return [Incident.from_doc(d) for d in self.state.incidents(node, pending_only=True)]


__all__ = ["Incident", "JobRecord", "Journal", "Step", "StateError", "opened"]
