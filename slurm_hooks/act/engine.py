"""The remediation engine: it sequences the rooms of an incident's life.

``Engine.handle(node, findings)`` turns findings into decisions (pure policy)
and carries them out through the rooms of ``act/``; each takes the ports it
needs (``act/context.py``) and returns what happened, and only this module
sequences them (docs/architecture.md, "The incident's life"):

* ``drain``: claim, confirm (settle, rank), take back past the cap, trip;
* ``evacuate``: signal, grace (the detached worker), requeue exactly once;
* ``rollforward``: after a crash or a lost journal; ``held``: what the
  breaker refused; ``repeats``: repeats and floods at O(1); ``deferred``: a
  fault under someone else's reason; ``repair``, ``spares``, ``resume``.

Rules that keep it safe: a healthy node with nothing open costs no Slurm
call; every write is preceded by a read (a foreign reason is never
overwritten); O(1) Slurm work per fault (the node read alone, the door's
write guarded by the reason decided on, the claim ranked on one table read);
each step journalled before the call it announces (``store/journal.py``), so
a crash is rolled forward and a job requeued exactly once; notification
failures are logged and audited, never raised.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from slurm_hooks.act import alerts, deferred, drain, evacuate, held, own_job, repeats, rollforward
from slurm_hooks.act import resume as resume_mod
from slurm_hooks.act.context import Audit, Clock, Context, Spawner, utcnow
from slurm_hooks.act.evacuate import RESTARTABLE_END_STATES, TERMINAL_JOB_STATES, JobOutcome
from slurm_hooks.act.evacuate import reap as _reap  # noqa: F401 - agent/watch.py calls it here
from slurm_hooks.act.notify.base import Alert, Notifier
from slurm_hooks.act.repeats import BOOKKEEPING_WAIT_S
from slurm_hooks.core.errors import NodeNotFound, SlurmHooksError, StateError
from slurm_hooks.core.history import NodeHistory
from slurm_hooks.core.incident import IncidentStatus
from slurm_hooks.core.model import Finding, NodeState, Status
from slurm_hooks.core.reason import format_reason
from slurm_hooks.decide.breaker import FleetView
from slurm_hooks.decide.config import PolicyConfig
from slurm_hooks.decide.decide import decide
from slurm_hooks.decide.decision import Decision, DecisionKind
from slurm_hooks.decide.repair import RepairConfig
from slurm_hooks.slurm.base import SlurmClient
from slurm_hooks.slurm.door import SlurmDoor
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.journal import Incident, Journal
from slurm_hooks.store.state import BreakerLatch, StateStore

log = logging.getLogger(__name__)
spawn_worker = evacuate.spawn_worker

__all__ = [
    "BOOKKEEPING_WAIT_S", "RESTARTABLE_END_STATES", "TERMINAL_JOB_STATES", "Clock", "Engine",
    "JobOutcome", "Spawner", "spawn_worker", "utcnow",
]  # fmt: skip


class _First(NamedTuple):
    """The Slurm-free decisions of a run, made once (``Engine.handle``)."""

    now: datetime
    history: NodeHistory
    decisions: list[Decision]


class Engine:
    """Decide and act for one node at a time.

    ``slurm`` is any SlurmClient; ``spawn`` starts the grace worker (tests
    pass ``None`` to drive the grace by hand, or an in-process function).
    ``worker_env`` is passed to the worker (SLURM_CONF, SLURM_HOOKS_CONFIG)
    so it can rebuild the same engine.
    """

    def __init__(
        self, slurm: SlurmClient, policy: PolicyConfig, state: StateStore, audit: AuditLog,
        notifier: Notifier | None = None, *, clock: Clock = utcnow,
        latch: BreakerLatch | None = None, spawn: Spawner | None = spawn_worker,
        observe_only: bool = False, actor: str = "slurm-hooks",
        worker_env: dict[str, str] | None = None, repair: RepairConfig | None = None,
    ):  # fmt: skip
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
        #: ``[repair]``: reset/reboot/replace once the node is empty (act/repair.py).
        self.repair = repair or RepairConfig()

    @classmethod
    def from_config(
        cls, config: Any, slurm: SlurmClient | None = None, *, actor: str = "slurm-hooks",
        **kwargs: Any,
    ) -> Engine:  # fmt: skip
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
        audit = AuditLog(
            policy.audit_log or Path(general.state_dir) / "audit.jsonl",
            actor=actor, shared_dir=general.audit_dir or None,
        )  # fmt: skip
        worker_env = {}
        if config.path:
            worker_env["SLURM_HOOKS_CONFIG"] = str(config.path)
        if os.environ.get("SLURM_CONF"):
            worker_env["SLURM_CONF"] = os.environ["SLURM_CONF"]
        kwargs.setdefault("worker_env", worker_env)
        kwargs.setdefault("repair", config.section("repair", RepairConfig))
        return cls(
            slurm, policy, state, audit, build_notifier(notify_cfg, slurm),
            observe_only=general.observe_only or policy.observe_only, actor=actor, **kwargs,
        )  # fmt: skip

    @property
    def context(self) -> Context:
        """The ports the rooms of act/ take (act/context.py), built from
        this engine's settings as they are now."""
        return Context(
            slurm=self.slurm, door=self.door, journal=self.journal, state=self.state,
            audit=Audit(self.audit, self.actor), clock=self.clock, policy=self.policy,
            notifier=self.notifier, spawn=self.spawn, latch=self.latch,
            observe_only=self.observe_only, worker_env=self.worker_env, repair=self.repair,
        )  # fmt: skip

    @property
    def journal(self) -> Journal:
        """The incidents' journal (store/journal.py): typed reads, one ``step``."""
        return Journal(self.state, self.clock)

    @property
    def door(self) -> SlurmDoor:
        """Every write to Slurm goes through the door (ownership guard,
        requeue exactly once, typed refusals)."""
        return SlurmDoor(self.slurm)

    # -- deciding ---------------------------------------------------------------

    def evaluate(self, node: str, findings: Sequence[Finding]) -> list[Decision]:
        """Decisions without acting (dry run, ``policy explain``).  Asks Slurm
        only when a decision may drain the node."""
        decisions, _ = self._decide(node, findings)
        return decisions

    def _first(self, node: str, findings: Sequence[Finding]) -> _First:
        now, history = self.clock(), self.state.history(node)
        first = decide(
            findings, None, history, None, self.policy, now, node=node,
            observe_only=self.observe_only,
        )  # fmt: skip
        return _First(now, history, first)

    def _decide(
        self, node: str, findings: Sequence[Finding], *, acting: bool = False,
        first: _First | None = None,
    ) -> tuple[list[Decision], NodeState | None]:  # fmt: skip
        """Decisions and the node as Slurm showed it (None when no decision
        may drain: no Slurm call then).  ``first``: the Slurm-free decisions
        already made (decided once per run: at most two ``decide`` calls).

        Acting, a node that may drain is read alone (one single-node RPC) and
        decided without the breaker: the breaker judges the drain once, on
        the claim's rank (act/drain.py, docs/breaker.md).  A dry run reads
        the table and shows the breaker's verdict as it stands."""
        first = first or self._first(node, findings)
        if not any(d.kind.drains for d in first.decisions):
            return first.decisions, None
        fleet: FleetView | None = None
        if acting:
            node_state = self.slurm.get_node(node)
            held.rearm(self.context, node, node_state)
        else:  # a dry run writes nothing, not even here
            table = tuple(self.slurm.list_nodes())
            found = next((n for n in table if n.name == node), None)
            if found is None:
                raise NodeNotFound(node)
            node_state = found
            fleet = FleetView(table, self.latch.read())
        decisions = decide(
            findings, node_state, first.history, fleet, self.policy, first.now, node=node,
            observe_only=self.observe_only,
        )  # fmt: skip
        return decisions, node_state

    # -- the loop -----------------------------------------------------------------

    def handle(self, node: str, findings: Iterable[Finding]) -> list[Decision]:
        """Decide for ``node`` and act.  Returns the decisions (acted on unless
        observe-only).  Findings that are all OK with no incident open here
        cost nothing: no Slurm call, no write."""
        findings = [f for f in findings if f.status is not Status.OK]
        ctx = self.context
        open_incident = self.state.open_incident(node)
        if open_incident:
            self._roll_forward(open_incident, node)
        if not findings:
            held.tick(ctx, node)
            return []
        first = self._first(node, findings)
        if open_incident and evacuate.take_back(ctx, open_incident, first.decisions):
            self._evacuate(open_incident)  # jobs a GPU-scoped drain spared: this fault moves them
        absorbed = repeats.absorb_drained(ctx, node, first.decisions)
        if absorbed is None:
            absorbed = held.absorb(ctx, node, first.decisions)
        if absorbed is not None:
            return absorbed
        decisions, seen = self._decide(node, findings, acting=True, first=first)
        repeats.remember_confirmed(ctx, node, decisions)
        try:
            repeats.record_faults(ctx, node, decisions)
        except StateError as exc:  # the history is lost for this run; acting is not
            ctx.state_failed("node", f"fault history of {node} not recorded: {exc}")
        repeats.audit_decisions(ctx, node, decisions)
        for d in decisions:
            if d.observe_only:
                continue
            try:
                self._act(d, seen)
            except SlurmHooksError as exc:
                log.error("acting on %s for %s failed: %s", d.kind, node, exc)
                ctx.audit.record(
                    str(d.kind), node=node, incident=d.incident, outcome="failed", why=str(exc)
                )
                raise
        return [drain.as_acted(ctx, d) for d in decisions]

    def _act(self, d: Decision, seen: NodeState | None = None) -> None:
        if d.kind.drains:
            self._drain(d, seen)
        elif d.kind is DecisionKind.BREAKER_TRIPPED:
            self._refused(d)
        elif d.kind is DecisionKind.FOREIGN_REASON and deferred.wanted(d):
            # Their reason stays; the jobs still leave.
            opened = deferred.evacuate(self.context, d)
            if opened is not None:
                if d.evacuate:
                    self._evacuate(opened)
                self.flush_alerts(opened)
        elif d.kind is DecisionKind.REQUEUE_JOB:
            # That one job, never the node (decide/trust.py).
            own_job.requeue_opted_in(self.context, d)

    # -- the drain's sequence ----------------------------------------------------------

    def _drain(self, d: Decision, seen: NodeState | None = None) -> None:
        """Claim (act/drain.py); a node that changed since it was read is
        judged again from a fresh read; a claim is ranked, and only a
        confirmed one is evacuated."""
        got = drain.claim(self.context, d, seen)
        if got is drain.Claimed.CHANGED:
            self._drain(d)
        elif got is drain.Claimed.CLAIMED and self._confirm_claim(str(d.incident)):
            assert d.reason is not None
            self._after_drain(d, format_reason(d.reason))

    def _confirm_claim(self, incident: str, fleet: Sequence[NodeState] | None = None) -> bool:
        """Rank the claim (act/drain.py): True to go on (signal, grace,
        requeue); a confirmed claim clears the node's held faults, one past
        the cap is taken back and held.  ``fleet``: retry_held's table."""
        ctx = self.context
        ranked = drain.confirm(ctx, incident, list(fleet) if fleet is not None else None)
        if ranked.rank is drain.Rank.CONFIRMED and ranked.inc is not None:
            held.clear(ctx, ranked.inc.node)
        elif ranked.rank is drain.Rank.PAST_CAP and ranked.inc is not None:
            refusal = drain.take_back(ctx, ranked.inc, ranked.verdict)
            if refusal is not None:
                self._refused(refusal, incident=incident)
        return ranked.go

    def _refused(self, d: Decision, *, incident: str | None = None) -> None:
        """The breaker refused ``d``: latch, then keep the fault (act/held.py)."""
        drain.trip(self.context, d)
        held.hold(self.context, d, incident=incident)

    def _after_drain(self, d: Decision, text: str) -> None:
        """A confirmed drain: audit, remember, evacuate, tell people."""
        drain.drained(self.context, d, text)
        repeats.remember_drain(self.context, d.node, str(d.incident), d.code)
        if d.evacuate:
            self._evacuate(str(d.incident))
        self.flush_alerts(str(d.incident))

    def flush_alerts(self, incident: str) -> int:
        """Send what the incident's journal still owes to people."""
        return self.context.flush_alerts(incident)

    # -- the evacuation's sequence -----------------------------------------------------

    def _evacuate(self, incident: str) -> None:
        """Signal the jobs (act/evacuate.py), then what follows."""
        step = evacuate.evacuate(self.context, incident)
        if step is evacuate.Next.AFTER_JOBS:
            evacuate.after_jobs(self.context, incident)
        elif step is evacuate.Next.FINISH:
            self.finish_incident(incident)
        elif step is evacuate.Next.SPAWN:
            self._spawn(incident)

    def _spawn(self, incident: str) -> None:
        evacuate.spawn(self.context, incident)

    def finish_incident(
        self, incident: str, *, force: bool = False, early: bool = False
    ) -> list[JobOutcome]:
        """Requeue (or cancel) the incident's jobs once the grace is over
        (``early``: the ones that already stopped); then spares and repair.
        Safe to call any number of times from any process."""
        outcomes = evacuate.finish(self.context, incident, force=force, early=early)
        if outcomes:
            evacuate.after_jobs(self.context, incident)
        return outcomes

    # -- rolling forward ---------------------------------------------------------------

    def resume_pending(self, node: str | None = None) -> list[str]:
        """Roll forward every unfinished incident (after a crash or a reboot).
        Returns the incidents touched."""
        touched = [inc.id for inc in self.journal.pending(node)]
        for incident in touched:
            self._roll_forward(incident)
        return touched

    def _roll_forward(self, incident: str, node: str | None = None) -> None:
        ctx = self.context
        doc = self.journal.read_doc(incident)
        if doc is None and node is not None:
            doc = rollforward.rebuild(ctx, node, incident)
        if doc is None:
            return
        inc = Incident.from_doc(doc)
        if inc.deferred:
            # Our drain waits behind a foreign reason: one look, drain once lifted.
            if deferred.roll_forward(ctx, inc) and self._confirm_claim(incident):
                alert = deferred.drained(ctx, inc)
                repeats.remember_drain(ctx, inc.node, incident, str(inc.code))
                ctx.incident_alert(incident, "node_drained", alert)
            doc = self.journal.read_doc(incident) or doc
            inc = Incident.from_doc(doc)
        if inc.jobs_done:
            if alerts.unsent(doc):
                self.flush_alerts(incident)
            evacuate.after_jobs(self.context, incident)
            return
        self._roll_forward_jobs(ctx, inc)
        if alerts.unsent(self.journal.read_doc(incident) or {}):
            self.flush_alerts(incident)

    def _roll_forward_jobs(self, ctx: Context, inc: Incident) -> None:
        if inc.status in (IncidentStatus.DRAINING, IncidentStatus.CLAIMED):
            # A claim not confirmed (a run died after writing it): ranked
            # again; confirmed or taken back, never signalled before.
            if not rollforward.reclaim(ctx, inc) or not self._confirm_claim(inc.id):
                return
            inc = self.journal.read(inc.id) or inc
        step = rollforward.next_step(ctx, inc)
        if step is rollforward.Next.EVACUATE:
            self._evacuate(inc.id)
        elif step is rollforward.Next.FINISH:
            self.finish_incident(inc.id)
        elif step is rollforward.Next.SPAWN:
            self._spawn(inc.id)

    # -- the breaker ---------------------------------------------------------------------

    def retry_held(self, nodes: Sequence[NodeState] | None = None) -> dict[str, str]:
        """Re-examine held faults at once (``breaker reset``): clear the marks,
        claim each drain, settle once, read the table once, rank each claim.
        ``nodes``: the node table (default: read now).  Node -> outcome."""
        from slurm_hooks.act import claim

        ctx = self.context
        table = list(nodes) if nodes is not None else self.slurm.list_nodes()
        todo, out = held.to_retry(ctx, table)
        claimed = []
        for d in todo:
            if drain.claim_only(ctx, d):
                claimed.append(d)
            else:
                out[d.node] = "not_claimed"
        if not claimed:
            return out
        claim.settle(self.slurm)
        fleet = self.slurm.list_nodes()
        for d in claimed:
            if self._confirm_claim(str(d.incident), fleet):
                out[d.node] = "drained"
                self._after_drain(d, format_reason(d.reason) if d.reason else d.explanation)
            else:
                out[d.node] = "held"
        return out

    def breaker_reset(self, partition: str | None = None, *, who: str = "") -> list[str]:
        gone = self.latch.reset(partition)
        self.audit.record(
            "breaker_reset", partition=partition or "*", reset=gone, actor=who or self.actor,
        )  # fmt: skip
        return gone

    # -- acceptance, resume, telling people ----------------------------------------

    def record_acceptance(
        self,
        node: str,
        passed: bool,
        *,
        at: datetime | None = None,
        detail: str = "",
        resume: bool = True,
    ) -> Decision | None:
        """Take the acceptance run's verdict (act/resume.py); ``resume=False``:
        record only, as ``acceptance --no-resume`` asks."""
        return resume_mod.record_acceptance(
            self.context, node, passed, at=at, detail=detail, resume=resume
        )

    def try_resume(self, node: str, **how: bool) -> Decision:
        """Resume ``node`` if it carries our reason and passed acceptance since
        the fault (act/resume.py: ``human``, ``skip_acceptance``, ``cleared``).
        Returns the decision (RESUME when resumed)."""
        return resume_mod.try_resume(self.context, node, **how)

    def notify(self, alert: Alert) -> None:
        """Tell people about a finding that drains nothing (a job that hangs
        with no culprit, a straggler): sent and audited like every alert."""
        self.context.alert(alert)
