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
* O(1) Slurm work per fault (issue 16): the node is read alone to decide
  (one single-node RPC), the door guards the write with one more
  (``expect``: the reason decided on), and the breaker judges the claim on
  the fault path's one node-table read (``act/claim.py``).
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
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from slurm_hooks.act import alerts, deferred, resume
from slurm_hooks.act.context import Audit, Context, Spawner
from slurm_hooks.act.notify.base import Alert, Notifier
from slurm_hooks.core.errors import (
    ForeignReasonError,
    JobGone,
    NodeNotFound,
    NotRequeueable,
    ReasonChanged,
    SlurmError,
    SlurmHooksError,
    SlurmUnavailable,
    StateError,
)
from slurm_hooks.core.history import FaultEvent
from slurm_hooks.core.incident import IncidentStatus, Outcome
from slurm_hooks.core.model import Finding, JobInfo, NodeState, Status
from slurm_hooks.core.ownership import Ownership, our_reason
from slurm_hooks.core.reason import format_reason
from slurm_hooks.decide.breaker import FleetView, Trip
from slurm_hooks.decide.config import PolicyConfig
from slurm_hooks.decide.decide import decide
from slurm_hooks.decide.decision import Decision, DecisionKind
from slurm_hooks.decide.repair import RepairConfig
from slurm_hooks.detect.probes.process import pid_alive
from slurm_hooks.slurm.base import SignalTarget, SlurmClient
from slurm_hooks.slurm.door import UNSET, NodeView, SlurmDoor, Unset
from slurm_hooks.store import journal as journal_mod
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.journal import Incident, Journal
from slurm_hooks.store.state import BreakerLatch, StateStore, iso, parse_time

log = logging.getLogger(__name__)

#: Seconds the fault path waits for a node-state lock before it drains
#: without that bookkeeping (a stuck holder must not cost the drain).
BOOKKEEPING_WAIT_S = 2.0

Clock = Callable[[], datetime]

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


def _key_at(d: Decision) -> datetime | None:
    """The backed-off claim's Slurm reason time a refusal carries (its key in
    the claims' order: decide.breaker.rank_claim); None when it has none."""
    key_at = d.facts.get("breaker_key_at")
    return key_at if isinstance(key_at, datetime) else None


def _never_drained(doc: dict[str, Any]) -> None:
    """A claim taken back or never written: its drain alert is not owed."""
    (doc.get("alerts") or {}).pop("node_drained", None)


def utcnow() -> datetime:
    return datetime.now(UTC)


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


def _reap() -> None:
    """Collect finished workers so a long-running watcher leaves no zombies."""
    from slurm_hooks.detect.probes import commands

    commands.reap_detached()


@dataclass(frozen=True)
class JobOutcome:
    job_id: str
    outcome: Outcome
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
        repair: RepairConfig | None = None,
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
        #: ``[repair]``: reset/reboot/replace once the node is empty (act/repair.py).
        self.repair = repair or RepairConfig()

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
            slurm,
            policy,
            state,
            audit,
            build_notifier(notify_cfg, slurm),
            observe_only=general.observe_only or policy.observe_only,
            actor=actor,
            **kwargs,
        )

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

    def _decide(
        self, node: str, findings: Sequence[Finding], *, acting: bool = False
    ) -> tuple[list[Decision], NodeState | None]:
        """Decisions and the node as Slurm showed it (None when no decision
        may drain: no Slurm call then).

        Acting, a node that may drain is read alone (``get_node``: one
        single-node RPC, not the table) and decided without the breaker:
        the breaker judges the drain once, on the claim's rank, from the one
        node-table read of the fault path (act/claim.py, docs/breaker.md).
        A dry run (``policy explain``) reads the table and shows the
        breaker's verdict as it stands."""
        now = self.clock()
        history = self.state.history(node)
        first = decide(
            findings, None, history, None, self.policy, now, node=node,
            observe_only=self.observe_only,
        )  # fmt: skip
        if not any(d.kind.drains for d in first):
            return first, None
        fleet: FleetView | None = None
        if acting:
            node_state = self.slurm.get_node(node)
            self._held_reset_seen(node, node_state)
        else:  # a dry run writes nothing, not even here
            table = tuple(self.slurm.list_nodes())
            found = next((n for n in table if n.name == node), None)
            if found is None:
                raise NodeNotFound(node)
            node_state = found
            fleet = FleetView(table, self.latch.read())
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
            self._roll_forward(open_incident, node)
        if not findings:
            self._held_tick(node)
            return []
        absorbed = self._absorb_repeats(node, findings)
        if absorbed is None:
            absorbed = self._absorb_held(node, findings)
        if absorbed is not None:
            return absorbed
        decisions, seen = self._decide(node, findings, acting=True)
        self._remember_drained(node, decisions)
        try:
            self._record_faults(node, decisions)
        except StateError as exc:  # the history is lost for this run; acting is not
            self._state_failed("node", f"fault history of {node} not recorded: {exc}")
        logged = self._log_repeats(node, decisions)
        for i, d in enumerate(decisions):
            if d.kind is not DecisionKind.IGNORE:
                skip, repeated = logged.get(i, (False, 0))
                if skip:
                    continue
                self.audit.record(
                    "decision",
                    node=node,
                    code=d.code,
                    component=d.component,
                    incident=d.incident,
                    decision=str(d.kind),
                    why=d.explanation,
                    outcome="observe_only" if d.observe_only and d.kind.drains else None,
                    repeats_since_last=repeated or None,
                    actor=self.actor,
                )
        for d in decisions:
            if d.observe_only:
                continue
            try:
                self._act(d, seen)
            except SlurmHooksError as exc:
                log.error("acting on %s for %s failed: %s", d.kind, node, exc)
                self.audit.record(
                    str(d.kind), node=node, incident=d.incident, outcome="failed",
                    why=str(exc), actor=self.actor,
                )  # fmt: skip
                raise
        return [self._as_acted(d) for d in decisions]

    def _as_acted(self, d: Decision) -> Decision:
        """A drain whose claim ranked past the breaker's cap and was taken
        back (act/claim.py) is reported as what it became: held."""
        if not d.kind.drains or d.observe_only or d.incident is None:
            return d
        try:
            inc = self.journal.read(d.incident)
        except StateError:
            return d
        if inc is None or inc.status is not IncidentStatus.HELD:
            return d
        claim = inc.claim or {}
        why = claim.get("why") or (
            f"claim ranked {claim.get('rank')} past the breaker's limit {claim.get('limit')} "
            f"in partition {claim.get('partition')}"
        )
        return Decision(
            DecisionKind.BREAKER_TRIPPED, d.node, d.code,
            f"{d.explanation}; NOT drained: {why}: held",
            d.component, d.reason, d.findings,
            facts={**d.facts, "held": True, "would_be": str(d.kind)},
        )  # fmt: skip

    def _log_repeats(self, node: str, decisions: Sequence[Decision]) -> dict[int, tuple[bool, int]]:
        """Log-only repeats (an XID 43 flood, a lost GPU's "could not run"
        from every other check) cost no audit line each: one line per
        ``repeats.LOG_PERIOD_S`` per code, with the count since.  Index of
        each LOG decision -> (absorbed, repeats since the last line).

        This runs before the drain it sits beside, so it is ONE state write
        per run whose lock wait is short (``repeats.LOG_LOCK_WAIT_S``): one
        wait per log-only decision, at the state store's full lock timeout
        each, put a lost GPU's drain (1 FAIL + 9 UNKNOWN) behind 180 s of
        waiting on a lock a stuck process held: past the 60 s slurmd gives a
        health check, so no run ever drained.  Failing here audits every line."""
        from slurm_hooks.act import repeats

        idx = [i for i, d in enumerate(decisions) if d.kind is DecisionKind.LOG]
        try:
            got = repeats.absorb_logs(self.state, node, [decisions[i].code for i in idx],
                                      self.clock(), timeout=repeats.LOG_LOCK_WAIT_S)  # fmt: skip
        except StateError as exc:
            log.warning("log-only repeats of %s not counted (every line audited): %s", node, exc)
            return {}
        return dict(zip(idx, got, strict=True))

    def _state_failed(self, what: str, message: str) -> None:
        """A local state write failed: say it loudly, count it, go on."""
        self.context.state_failed(what, message)

    def _absorb_repeats(self, node: str, findings: Sequence[Finding]) -> list[Decision] | None:
        """Repeats of the fault(s) we already drained this node for: counted,
        no Slurm call, no audit line (``act.repeats``).  None when the
        findings need the full way."""
        from slurm_hooks.act import repeats

        now = self.clock()
        try:
            data = self.state.read_node(node)
        except StateError:
            return None
        if not isinstance(data.get(repeats.KEY), dict):
            return None
        first = decide(
            findings, None, self.state.history(node), None, self.policy, now, node=node,
            observe_only=self.observe_only,
        )  # fmt: skip
        drains = [d for d in first if d.kind.drains]
        if not drains or any(d.kind is not DecisionKind.DRAIN for d in drains):
            return None
        if not repeats.absorbable(data, {d.code for d in drains}, now):
            return None
        counts: dict[str, int] = {}
        for d in drains:
            counts[d.code] = counts.get(d.code, 0) + sum(
                int(c) if isinstance(c := (f.values or {}).get("count"), int) else 1
                for f in d.findings
            )
        try:
            repeats.absorb(self.state, node, counts)
        except StateError as exc:
            self._state_failed("node", f"repeat count of {node} not recorded: {exc}")
        incident = data.get("open_incident")
        out = [
            Decision(
                DecisionKind.ALREADY_HANDLED,
                node,
                d.code,
                f"{d.code} again on {node}, already drained by slurm-hooks (inc={incident}): "
                "repeat counted",
                d.component,
                None,
                d.findings,
                facts={"absorbed": True},
            )
            for d in drains
        ]
        return out + [d for d in first if not d.kind.drains and d.kind is not DecisionKind.IGNORE]

    def _remember_drained(self, node: str, decisions: Sequence[Decision]) -> None:
        """After Slurm confirmed our drain (ALREADY_HANDLED for our open
        incident): trust it for repeats for a while, and summarise the
        repeats absorbed since the last look in one audit line."""
        from slurm_hooks.act import repeats

        for d in decisions:
            if d.kind is not DecisionKind.ALREADY_HANDLED or d.reason is None:
                continue
            try:
                if d.reason.incident != self.state.open_incident(node):
                    continue
                repeats.remember(self.state, node, str(d.reason.incident), d.code, self.clock())
                absorbed = repeats.take_summary(self.state, node)
            except StateError as exc:
                self._state_failed("node", f"drain memo of {node} not recorded: {exc}")
                continue
            if absorbed:
                self.audit.record(
                    "repeats", node=node, incident=d.reason.incident, counts=absorbed,
                    why=f"repeats absorbed without a Slurm call since the last look "
                    f"(at most every {repeats.VERIFY_S:g}s)", actor=self.actor,
                )  # fmt: skip

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
        # Bookkeeping on the way to a drain: a lock held by a stuck process
        # must not hold up the drain (StateError is caught by the caller).
        self.state.record_faults(node, events, timeout=BOOKKEEPING_WAIT_S)

    def _act(self, d: Decision, seen: NodeState | None = None) -> None:
        if d.kind.drains:
            self._drain(d, seen)
        elif d.kind is DecisionKind.BREAKER_TRIPPED:
            self._trip(d)
            self._hold(d)
        elif d.kind is DecisionKind.FOREIGN_REASON and deferred.wanted(d):
            # Their reason stays; the jobs still leave.
            opened = deferred.evacuate(self.context, d)
            if opened is not None:
                if d.evacuate:
                    self._evacuate(opened)
                self.flush_alerts(opened)

    # -- drain ------------------------------------------------------------------

    def _drain(self, d: Decision, seen: NodeState | None = None) -> None:
        """Claim the drain (journal, write, settle and rank: act/claim.py)
        and carry it out.  ``seen``: the node as read when ``d`` was decided;
        the node is judged on it instead of being read again, and the door's
        write is guarded by its reason (``expect``): when the node carries
        another one by then, nothing is written and the drain is judged
        again from a fresh read (an admin's reason is still never written
        over)."""
        assert d.reason is not None
        now = self.clock()
        if seen is not None and seen.name != d.node:
            seen = None
        # read before writing (or the read the decision was made on)
        view = NodeView.of(seen) if seen is not None else self.door.look(d.node)
        expect: str | None | Unset = view.node.reason if seen is not None else UNSET
        current, ours = view.node, view.ours
        if view.ownership is Ownership.FOREIGN:
            self.audit.record(
                "drain", node=d.node, incident=d.incident, outcome="refused",
                why=f"reason changed to a foreign one: {current.reason!r}", actor=self.actor,
            )  # fmt: skip
            return
        text = format_reason(d.reason)
        if d.facts.get("already_drained") and ours is not None:
            # Escalation of our own drain: keep the incident, mark it for replacement.
            self.door.drain(d.node, text)
            self.audit.record(
                "replace", node=d.node, incident=ours.incident, code=d.code,
                why=d.explanation, reason=text, actor=self.actor,
            )  # fmt: skip
            self._incident_alert(
                str(ours.incident), "replacement_requested",
                Alert("replacement_requested", f"{d.node}: {d.explanation}", node=d.node,
                      incident=ours.incident, code=d.code),
            )  # fmt: skip
            return
        if ours is not None and ours.is_fault:
            self.audit.record(
                "drain", node=d.node, incident=ours.incident, outcome="skipped",
                why="already drained by slurm-hooks", actor=self.actor,
            )  # fmt: skip
            return
        doc = self._opened(
            d,
            text,
            now,
            "drain_intent",
            # The catalogue's advice, for the repair ladder (act/repair.py).
            action=str(d.findings[0].action) if d.findings else None,
        ).to_doc()
        alert = Alert(
            "node_held" if d.kind is DecisionKind.HOLD_FOR_HUMAN else "node_drained",
            f"{d.node} drained: {d.explanation}",
            node=d.node, incident=d.incident, code=d.code,
            fields={"component": d.component, "reason": text},
        )  # fmt: skip
        # Queued with the intent, sent after the jobs were signalled (below):
        # a slow webhook never delays a checkpoint, a crash never loses it.
        alerts.queue(doc, "node_drained", alert, now)
        try:
            self.state.write_incident(doc)
            # Open before the drain: a drain that lands although its call failed
            # (timeout) or the process died must still be rolled forward by the
            # next run, which looks for an open incident (hooks' fast path).
            self.state.set_open_incident(d.node, d.incident, timeout=BOOKKEEPING_WAIT_S)
            lock = self.journal.lock(str(d.incident))
            lock.__enter__()
        except StateError as exc:
            # Remediation never waits on local storage: drain anyway.  Our
            # reason names the incident, so a later run with a working state
            # dir rebuilds the journal from Slurm and evacuates the jobs.
            self._state_failed("journal", f"incident {d.incident} not journalled: {exc}")
            self.door.drain(d.node, text)  # a LEND/SPARE hold takes the fault's reason
            self.audit.record(
                "drain", node=d.node, incident=d.incident, code=d.code, component=d.component,
                why=d.explanation, reason=text, outcome="unjournalled", actor=self.actor,
            )  # fmt: skip
            return
        changed: ReasonChanged | None = None
        try:
            # The breaker claim (act/claim.py): our drain is written before any
            # job is signalled; a LEND/SPARE hold takes the fault's reason.
            before = self.door.drain(d.node, text, expect=expect)
            prior = before.ours if before.ours is not None and not before.ours.is_fault else None
            self.journal.step(
                str(d.incident), "claimed", status=IncidentStatus.CLAIMED,
                prior_reason=before.node.reason if prior is not None else None,
            )  # fmt: skip
        except ReasonChanged as exc:
            changed = exc
            self.journal.step(
                str(d.incident), "abandoned", edit=_never_drained,
                status=IncidentStatus.ABANDONED, jobs_done=True,
            )  # fmt: skip
        finally:
            lock.__exit__(None, None, None)
        if changed is not None:
            # Nothing was written: the node changed since it was read.
            # Judge again from a fresh read, as a drain without ``seen`` does.
            self.state.clear_open_incident(d.node, str(d.incident))
            log.info("drain node=%s: %s; judged again", d.node, changed)
            self._drain(d)
            return
        if not self._confirm_claim(str(d.incident)):
            return
        self._after_drain(d, text)

    def _opened(self, d: Decision, text: str, now: datetime, step: str, **more: Any) -> Incident:
        """The journal of a drain about to be claimed (status draining)."""
        return journal_mod.opened(
            incident=str(d.incident), node=d.node, kind=str(d.kind), code=d.code,
            component=d.component, reason=text, why=d.explanation, at=now,
            grace_s=self.policy.grace_seconds, signal_batch=self.policy.signal_batch,
            signal_steps=self.policy.signal_steps, evacuate=d.evacuate,
            status=IncidentStatus.DRAINING, step=step, worker_env=self.worker_env,
            audit_log=str(self.audit.path), **more,
        )  # fmt: skip

    def _after_drain(self, d: Decision, text: str) -> None:
        """A confirmed drain: audit, remember, evacuate, tell people."""
        self.audit.record(
            "replace" if d.kind is DecisionKind.REPLACE else "drain",
            node=d.node, incident=d.incident, code=d.code, component=d.component,
            why=d.explanation, reason=text, actor=self.actor,
        )  # fmt: skip
        self._remember_drain(d.node, str(d.incident), d.code)
        if d.evacuate:
            self._evacuate(str(d.incident))
        self.flush_alerts(str(d.incident))

    def _remember_drain(self, node: str, incident: str, code: str) -> None:
        from slurm_hooks.act import repeats

        try:
            repeats.remember(self.state, node, incident, code, self.clock())
        except StateError as exc:
            self._state_failed("node", f"drain memo of {node} not recorded: {exc}")

    def _incident_alert(self, incident: str, key: str, alert: Alert) -> None:
        """Queue ``alert`` in the incident's journal and send it now (and
        again on roll-forward until delivered); straight out when the
        incident has no journal here."""
        try:
            with self.journal.lock(incident):
                doc = self.state.read_incident(incident)
                if doc is None:
                    raise StateError(f"no journal for incident {incident}")
                if alerts.queue(doc, key, alert, self.clock()):
                    self.state.write_incident(doc)
        except StateError as exc:
            log.warning("alert %s for %s not journalled (%s): sent once, now", key, incident, exc)
            self._alert(alert)
            return
        self.flush_alerts(incident)

    def flush_alerts(self, incident: str) -> int:
        """Send what the incident's journal still owes to people."""
        return self.context.flush_alerts(incident)

    # -- evacuate -------------------------------------------------------------

    def _evacuate(self, incident: str) -> None:
        """Record the node's jobs, signal them, then leave the grace wait to
        the worker (or finish at once when the grace is 0)."""
        with self.journal.lock(incident):
            doc = self.state.read_incident(incident)
            if doc is None:
                raise StateError(f"incident {incident} vanished")
            if doc.get("jobs") is None:
                jobs: dict[str, Any] = {}
                for job in self.slurm.jobs_on_node(doc["node"]):
                    jobs[job.job_id] = self._job_record(job)
                doc["jobs"] = jobs
                doc["status"] = IncidentStatus.EVACUATING
                doc.setdefault("steps", []).append({"step": "jobs_listed", "at": iso(self.clock())})
                self.state.write_incident(doc)
            for job_id, rec in doc["jobs"].items():
                if rec.get("signalled_at"):
                    continue
                if rec.get("signal_intent_at"):
                    # A run died between the intent and the record: the
                    # signal may have gone out.  A checkpoint signal is sent
                    # at most once; the requeue after the grace still comes.
                    rec["signalled_at"] = rec["signal_intent_at"]
                    rec["signals"] = ["unknown: a run died while signalling"]
                    self.state.write_incident(doc)
                    continue
                self._signal(doc, job_id, rec)
            if doc.get("deadline") is None:
                doc["deadline"] = iso(self.clock() + timedelta(seconds=doc["grace_s"]))
                self.state.write_incident(doc)
            empty = not doc["jobs"]
            if empty:
                doc["jobs_done"] = True
                doc["status"] = IncidentStatus.JOBS_DONE
                self.state.write_incident(doc)
        if empty:  # an idle node: straight to the repair (outside the lock)
            self._after_jobs(incident)
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
        except JobGone as exc:
            # Any other error propagates: the listing has no restart count, and
            # a guessed 0 would make a job requeued before look requeued already.
            log.warning("cannot read job %s: %s", job.job_id, exc)
            full = job
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

    def _signal(self, doc: dict[str, Any], job_id: str, rec: dict[str, Any]) -> None:
        rec["signal_intent_at"] = iso(self.clock())
        self.state.write_incident(doc)  # intent before the side effect
        sent = []
        for sig, target in (
            (doc.get("signal_batch"), SignalTarget.BATCH),
            (doc.get("signal_steps"), SignalTarget.STEPS),
        ):
            if not sig:
                continue
            try:
                self.door.signal(job_id, sig, target)
                sent.append(f"{sig}->{target}")
            except SlurmUnavailable:
                if sent:  # part went out: keep the record, never send it twice
                    break
                # slurmctld did not answer: nothing went out.  Take the intent
                # back so the next run (the XID is not committed either) sends
                # the checkpoint signal instead of requeueing without one.
                rec["signal_intent_at"] = None
                rec["signal_retries"] = int(rec.get("signal_retries") or 0) + 1
                self.state.write_incident(doc)
                raise
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
        except (OSError, SlurmHooksError) as exc:  # CommandError: could not start
            # The journal still says what is left; resume_pending() finishes it.
            log.error("cannot start grace worker for %s: %s", incident, exc)
            return
        with self.journal.lock(incident):  # the worker may be writing already
            self.journal.step(incident, "worker_started", worker_pid=pid)

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
            with self.journal.lock(incident):
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
                    doc["status"] = IncidentStatus.JOBS_DONE
                    doc.setdefault("steps", []).append(
                        {"step": "jobs_done", "at": iso(self.clock())}
                    )
                self.state.write_incident(doc)
        finally:
            # Sent outside the lock (a hanging webhook must not hold up a hook
            # waiting for the incident), and also when a later job's requeue
            # failed: each job alert was queued with its outcome (_outcome).
            if outcomes:
                self.flush_alerts(incident)
        if outcomes:
            self._after_jobs(incident)
        return outcomes

    def _after_jobs(self, incident: str) -> None:
        """The incident's jobs are settled: a spare for each requeued job
        (act/spares.py), then the repair, which the detached worker carries
        out (act/repair.py; never inside a hook)."""
        from slurm_hooks.act import repair

        if not self.repair.enabled:
            return
        doc = self.journal.read_doc(incident)
        if not doc or not doc.get("jobs_done"):
            return
        if self.repair.resume_spares:
            from slurm_hooks.act import spares

            try:
                spares.resume_spares(self.context, incident)
            except (SlurmError, StateError) as exc:
                log.warning("spares for %s not resumed yet: %s", incident, exc)
        if not repair.due(doc, self.repair) or self.spawn is None:
            return
        inc = Incident.from_doc(doc)
        if pid_alive((inc.repair or {}).get("worker_pid") or inc.worker_pid):
            return
        try:
            pid = self.spawn(self.state.incident_path(incident))
        except (OSError, SlurmHooksError) as exc:
            log.error("cannot start the repair worker for %s: %s", incident, exc)
            return
        self.journal.update(incident, lambda d: d.setdefault("repair", {}).update(worker_pid=pid))

    def _still_running(self, job_id: str) -> bool:
        try:
            job = self.slurm.get_job(job_id)
        except JobGone:
            return False
        except SlurmError:
            return True  # cannot tell: keep waiting, the deadline settles it
        base = job.state.upper().split()[0] if job.state else ""
        return base in _STILL_RUNNING

    def _settle(self, doc: dict[str, Any], job_id: str, rec: dict[str, Any]) -> JobOutcome:
        node = doc["node"]
        try:
            job = self.slurm.get_job(job_id)
        except JobGone:
            return self._outcome(doc, job_id, rec, Outcome.GONE, "job no longer known to Slurm")
        base = job.state.upper().split()[0] if job.state else ""
        restarts = int(rec.get("restart_count") or 0)
        if SlurmDoor.requeued_since(job, restarts):
            # Requeued already (by us before a crash, or by Slurm): never twice.
            return self._outcome(
                doc, job_id, rec, Outcome.REQUEUED,
                f"restart count already {job.restart_count}; not requeued again", notify=True,
            )  # fmt: skip
        restartable = base in RESTARTABLE_END_STATES and job.requeue is not False
        if (base in TERMINAL_JOB_STATES and not restartable) or base == "PENDING":
            return self._outcome(doc, job_id, rec, Outcome.FINISHED, f"job is {job.state}")
        rec["requeue_intent_at"] = iso(self.clock())
        self.state.write_incident(doc)
        requeueable = job.requeue is not False
        if requeueable:
            try:
                self.door.requeue_once(job_id, restarts, job=job)
            except NotRequeueable:
                requeueable = False
            except JobGone:
                return self._outcome(doc, job_id, rec, Outcome.GONE, "job no longer known to Slurm")
            else:
                detail = (
                    f"ended {base} during the grace; requeued to resume from its checkpoint"
                    if restartable
                    else f"requeued after {doc['grace_s']:g}s grace"
                )
                return self._outcome(doc, job_id, rec, Outcome.REQUEUED, detail, notify=True)
        if self.policy.cancel_unrequeueable:
            self.door.cancel(job_id)
            return self._outcome(
                doc, job_id, rec, Outcome.CANCELLED, "job cannot be requeued (--no-requeue): cancelled",
                notify=True,
            )  # fmt: skip
        return self._outcome(
            doc, job_id, rec, Outcome.LEFT_RUNNING, f"not requeueable; left running on draining {node}",
            notify=True,
        )  # fmt: skip

    def _outcome(
        self,
        doc: dict[str, Any],
        job_id: str,
        rec: dict[str, Any],
        outcome: Outcome,
        detail: str,
        *,
        notify: bool = False,
    ) -> JobOutcome:
        now = self.clock()
        rec["outcome"] = outcome
        rec["outcome_at"] = iso(now)
        rec["detail"] = detail
        if notify:  # journalled with the outcome: a crash after it cannot lose the alert
            alerts.queue(doc, f"job_{job_id}", self._job_alert(doc, job_id, rec, outcome), now)
        self.state.write_incident(doc)
        signalled = parse_time(rec["signalled_at"]) if rec.get("signalled_at") else None
        waited = (now - signalled).total_seconds() if signalled else None
        self.audit.record(
            outcome.audit_action,
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
        for inc in self.journal.pending(node):
            self._roll_forward(inc.id)
            touched.append(inc.id)
        return touched

    def _roll_forward(self, incident: str, node: str | None = None) -> None:
        doc = self.state.read_incident(incident)
        if doc is None and node is not None:
            doc = self._rebuild_incident(node, incident)
        if doc is None:
            return
        inc = Incident.from_doc(doc)
        if inc.deferred:
            # Our drain waits behind a foreign reason: one look, drain once lifted.
            if deferred.roll_forward(self.context, inc) and self._confirm_claim(incident):
                alert = deferred.drained(self.context, inc)
                self._remember_drain(inc.node, incident, str(inc.code))
                self._incident_alert(incident, "node_drained", alert)
            inc = self.journal.read(incident) or inc
        if inc.jobs_done:
            if alerts.unsent(inc.to_doc()):
                self.flush_alerts(incident)
            self._after_jobs(incident)
            return
        self._roll_forward_jobs(inc)
        if alerts.unsent(self.journal.read_doc(incident) or {}):
            self.flush_alerts(incident)

    def _rebuild_incident(self, node: str, incident: str) -> dict[str, Any] | None:
        """The node's open incident has no readable journal (lost, truncated,
        moved aside as corrupt): rebuild it from Slurm's state, where our
        reason names the incident, so its jobs are still evacuated and
        requeued.  When Slurm no longer carries it, the incident is closed."""
        current = self.slurm.get_node(node)
        ours = our_reason(current)
        if ours is None or ours.incident != incident:
            log.warning("incident %s of %s has no journal and Slurm no longer carries it; closed",
                        incident, node)  # fmt: skip
            self.state.clear_open_incident(node, incident)
            return None
        doc = self.journal.open(
            journal_mod.opened(
                incident=incident, node=node, kind="drain", code=ours.code,
                component=ours.component, reason=current.reason or "",
                why="journal rebuilt from Slurm's reason", at=self.clock(),
                grace_s=self.policy.grace_seconds, signal_batch=self.policy.signal_batch,
                signal_steps=self.policy.signal_steps, evacuate=True,
                # Ranked again before any job is touched: a claim whose run died
                # with the state dir is handled like one with a journal.
                status=IncidentStatus.CLAIMED, step="rebuilt_from_slurm",
                worker_env=self.worker_env, audit_log=str(self.audit.path),
            )
        )  # fmt: skip
        log.error("incident %s of %s: journal lost, rebuilt from Slurm's reason %r",
                  incident, node, current.reason)  # fmt: skip
        self.audit.record(
            "rebuild", node=node, incident=incident, reason=current.reason,
            why="incident journal missing or corrupt; rebuilt from Slurm", actor=self.actor,
        )  # fmt: skip
        return doc

    def _roll_forward_jobs(self, inc: Incident) -> None:
        incident, status = inc.id, inc.status
        if status in (IncidentStatus.DRAINING, IncidentStatus.CLAIMED):
            view = self.door.look(inc.node)
            current, ours = view.node, view.ours
            if ours is not None and ours.incident == incident:
                if status is IncidentStatus.DRAINING:
                    self.journal.step(incident, "claimed", status=IncidentStatus.CLAIMED)
            elif not view.ownership.claimed:  # no reason, or a stale one (24.11)
                with self.journal.lock(incident):
                    self.door.drain(inc.node, inc.reason)
                    self.journal.step(incident, "claimed", status=IncidentStatus.CLAIMED)
                self.state.set_open_incident(inc.node, incident)
            else:
                self.journal.step(
                    incident, "abandoned", status=IncidentStatus.ABANDONED, jobs_done=True
                )
                self.state.clear_open_incident(inc.node, incident)
                self.audit.record(
                    "drain", node=inc.node, incident=incident, outcome="skipped",
                    why=f"on recovery the node carries another reason: {current.reason!r}",
                    actor=self.actor,
                )  # fmt: skip
                return
            # A claim not yet confirmed (a run died after writing it): settle
            # and rank again; confirmed or taken back, never signalled before.
            if not self._confirm_claim(incident):
                return
            inc = self.journal.read(incident) or inc
        if not inc.evacuate:
            self.journal.step(
                incident, "jobs_done", jobs_done=True, status=IncidentStatus.JOBS_DONE
            )
            return
        if inc.unsignalled or inc.deadline is None:
            self._evacuate(incident)
            return
        if self.clock() >= parse_time(inc.deadline):
            self.finish_incident(incident)
        elif self.spawn is not None and not pid_alive(inc.worker_pid):
            self._spawn(incident)

    # -- breaker ----------------------------------------------------------------

    def _trip(self, d: Decision) -> None:
        """Latch the partition here.  A claim that backed off because the
        breaker was already latched elsewhere (a held mark ahead of it)
        latches here too, with its own key, so that this held node absorbs
        its repeats at no Slurm cost; the trip's alert went out where it
        tripped, so none is sent again."""
        part = str(d.facts.get("breaker_partition", "*"))
        key_at = _key_at(d)
        latched = bool(d.facts.get("breaker_latched"))
        if latched and key_at is None:
            return
        trip = Trip(
            part,
            self.clock(),
            d.node,
            int(d.facts.get("breaker_counted", 0)),
            int(d.facts.get("breaker_limit", 0)),
            key_at,
        )
        if not self.latch.trip(trip):
            return
        self.audit.record(
            "breaker_trip", node=d.node, partition=part, code=d.code, why=d.explanation,
            counted=trip.counted, limit=trip.limit, actor=self.actor,
            outcome="latched_elsewhere" if latched else None,
        )  # fmt: skip
        if latched:
            return
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

    def _confirm_claim(self, incident: str, fleet: Sequence[NodeState] | None = None) -> bool:
        """Settle and rank the incident's claim (act/claim.py): True to go on
        (signal, grace, requeue); False when it was taken back (held), lost,
        or could not be ranked now (it stays claimed; the next run ranks it).
        ``fleet``: a node table read after settling (``retry_held``'s batch)."""
        from slurm_hooks.act import claim
        from slurm_hooks.decide.breaker import rank_claim

        inc = self.journal.read(incident)
        if inc is None or inc.status is not IncidentStatus.CLAIMED:
            return inc is not None
        node = inc.node
        try:
            if fleet is None:
                claim.settle(self.slurm)
                fleet = self.slurm.list_nodes()
        except SlurmError as exc:
            self._unsettled(node, incident, exc)
            return False
        verdict = rank_claim(node, inc.reason, fleet, self.policy, self.clock(), self.latch.read())
        return self._judged(inc, verdict, verdict.explain())

    def _unsettled(self, node: str, incident: str, exc: SlurmError) -> None:
        log.warning("claim of %s (%s) not ranked yet: %s", node, incident, exc)
        self.audit.record(
            "claim", node=node, incident=incident, outcome="unsettled", why=str(exc),
            actor=self.actor,
        )  # fmt: skip

    def _judged(self, inc: Incident, verdict: Any, why: str) -> bool:
        """Carry out a claim's verdict: lost (abandoned), confirmed (True: go
        on), or past the cap (taken back, held)."""
        incident, node = inc.id, inc.node
        facts = {"rank": verdict.rank, "limit": verdict.limit, "partition": verdict.partition}
        if verdict.lost:
            self.journal.step(
                incident, "abandoned", status=IncidentStatus.ABANDONED, jobs_done=True
            )
            self.state.clear_open_incident(node, incident)
            self.audit.record(
                "claim", node=node, incident=incident, outcome="lost", why=why,
                actor=self.actor,
            )  # fmt: skip
            return False
        if verdict.confirmed:
            self.journal.step(incident, "drained", status=IncidentStatus.DRAINED, claim=facts)
            self.audit.record(
                "claim", node=node, incident=incident, outcome="confirmed", why=why,
                actor=self.actor, **facts,
            )  # fmt: skip
            self._clear_held(node)
            return True
        self._back_off(inc, verdict)
        return False

    def _back_off(self, inc: Incident, verdict: Any) -> None:
        """The claim ranked past the cap: take it back (only if it is still
        exactly ours), hold the fault, latch.  No job was signalled."""
        incident, node = inc.id, inc.node
        try:
            taken = self.door.take_back(node, inc.reason, restore=inc.prior_reason)
        except SlurmError as exc:
            # The claim stays; the next run (roll-forward) ranks it again.
            log.error("claim of %s (%s) past the cap but not taken back: %s", node, incident, exc)
            return
        self.journal.step(
            incident, "taken_back", edit=_never_drained, status=IncidentStatus.HELD,
            jobs_done=True, jobs={}, held=True,
            claim={"rank": verdict.rank, "limit": verdict.limit, "partition": verdict.partition,
                   "taken_back": taken, "latched": verdict.latched, "why": verdict.explain()},
        )  # fmt: skip
        self.state.clear_open_incident(node, incident)
        self.audit.record(
            "claim", node=node, incident=incident, outcome="taken_back", why=verdict.explain(),
            rank=verdict.rank, limit=verdict.limit, partition=verdict.partition, actor=self.actor,
        )  # fmt: skip
        d = Decision(
            DecisionKind.BREAKER_TRIPPED, node, str(inc.code),
            f"{inc.why}; NOT drained: {verdict.explain()}", inc.component,
            facts={"breaker_partition": verdict.partition, "breaker_counted": verdict.rank - 1,
                   "breaker_limit": verdict.limit, "incident": incident,
                   "breaker_key_at": verdict.key_at, "breaker_latched": verdict.latched},
        )  # fmt: skip
        self._trip(d)
        self._hold(d, incident=incident)

    def _hold(self, d: Decision, *, incident: str | None = None) -> None:
        """Keep a refused fault (act/held.py): local state, Slurm's Comment, audit, alert."""
        from slurm_hooks.act import held

        now = self.clock()
        inc = incident or d.incident or str(d.facts.get("incident") or "") or None
        part = str(d.facts.get("breaker_partition", "*"))
        old = self.state.held(d.node).get(d.code)
        marked = bool(old and old.get("marked"))
        if not marked:
            since = held.since_of(old) if old else None
            try:
                text = held.mark_text(d.code, d.component, inc, since or now, _key_at(d))
                marked = self.door.mark_held(d.node, text)
            except (SlurmError, ValueError) as exc:
                log.warning("held mark for %s not written in Slurm: %s", d.node, exc)
        try:
            rec = held.record(
                self.state, d.node, code=d.code, component=d.component, incident=inc,
                partition=part, message=d.explanation, now=now, marked=marked,
            )  # fmt: skip
        except StateError as exc:
            self._state_failed("node", f"held fault of {d.node} not recorded: {exc}")
            rec = {}
        from slurm_hooks.act import metrics

        metrics.set_held({d.code} | set(self._held_codes(d.node)))
        if old is None:
            self.audit.record(
                "held", node=d.node, incident=inc, code=d.code, component=d.component,
                partition=part, why=d.explanation, marked=marked, actor=self.actor,
            )  # fmt: skip
        self._held_alert(d.node, rec or {"code": d.code, "since": iso(now)}, d.explanation)

    def _held_alert(self, node: str, rec: dict[str, Any], why: str) -> None:
        from slurm_hooks.act import held

        now = self.clock()
        if not held.alert_due(rec, now):
            return
        self._alert(
            Alert(
                "fault_held",
                f"{node}: {rec.get('code')} held by the circuit breaker since {rec.get('since')} "
                f"(not drained): {why}",
                node=node, incident=rec.get("incident"), code=rec.get("code"),
                fields={"since": rec.get("since"), "partition": rec.get("partition")},
            )
        )  # fmt: skip
        code = rec.get("code")

        def change(r: dict[str, Any]) -> None:
            if r.get("code") == code:
                r["alerted_at"] = iso(now)

        try:
            self.state.update_held(node, change)
        except StateError:
            pass

    def _held_tick(self, node: str) -> None:
        """A held fault is not forgotten when its event is not seen again
        (an XID is logged once): keep alerting, rate-limited, no Slurm call."""
        from slurm_hooks.act import held, metrics

        try:
            recs = self.state.held(node)
        except StateError:
            return
        if recs and not held.absorbable(recs, set(recs), self.clock()):
            # Every VERIFY_S, one look at Slurm: drained by us since (a reset
            # elsewhere re-examined it), or the mark gone (reset): retry.
            try:
                current = self.slurm.get_node(node)
            except SlurmError as exc:
                log.info("held faults of %s not verified: %s", node, exc)
            else:
                cur = our_reason(current)
                # A mark gone means a reset elsewhere: re-arm here (also when
                # that reset drained this node: else this node's own latch
                # would refuse its next fault for good).
                self._held_reset_seen(node, current)
                if cur is not None and cur.is_fault:
                    self.state.clear_held(node)
                recs = self.state.held(node)
        metrics.set_held(recs)
        for rec in recs.values():
            self._held_alert(node, rec, str(rec.get("message") or "held by the circuit breaker"))

    def _absorb_held(self, node: str, findings: Sequence[Finding]) -> list[Decision] | None:
        """A held fault seen again while this node's latch holds: no Slurm
        call (act/held.py); None when the findings need the full way."""
        from slurm_hooks.act import held

        try:
            recs = self.state.held(node)
        except StateError:
            return None
        if not recs:
            return None
        now = self.clock()
        first = decide(
            findings, None, self.state.history(node), None, self.policy, now, node=node,
            observe_only=self.observe_only,
        )  # fmt: skip
        drains = [d for d in first if d.kind.drains]
        if not drains or not held.absorbable(recs, {d.code for d in drains}, now):
            return None
        if not self.latch.read():
            return None  # re-armed (a shared latch was reset): the full way
        from slurm_hooks.act import metrics

        metrics.set_held(recs)
        out = []
        for d in drains:
            rec = recs[d.code]
            self._held_alert(node, rec, d.explanation)
            out.append(
                Decision(
                    DecisionKind.BREAKER_TRIPPED, node, d.code,
                    f"{d.explanation}; held by the circuit breaker since {rec.get('since')}",
                    d.component, None, d.findings, facts={"held": True, "absorbed": True},
                )
            )  # fmt: skip
        return out

    def _held_reset_seen(self, node: str, current: NodeState) -> None:
        """Our held mark is gone from Slurm: a reset elsewhere; re-arm here and retry."""
        from slurm_hooks.act import held

        try:
            recs = self.state.held(node)
        except StateError:
            return
        if not recs:
            return
        if held.reset_seen(recs, current):
            parts = {str(r.get("partition") or "*") for r in recs.values()}
            for part in parts:
                self.latch.reset(None if part == "*" else part)
            self.state.clear_held(node)
            self.audit.record(
                "held", node=node, outcome="retry", why="held mark cleared in Slurm (breaker "
                "reset): re-armed and retried", actor=self.actor,
            )  # fmt: skip
            return

        def change(r: dict[str, Any]) -> None:
            r["checked_at"] = iso(self.clock())

        self.state.update_held(node, change)

    def _held_codes(self, node: str) -> list[str]:
        try:
            return list(self.state.held(node))
        except StateError:
            return []

    def _clear_held(self, node: str) -> None:
        from slurm_hooks.act import metrics

        try:
            gone = self.state.clear_held(node)
        except StateError:
            return
        metrics.set_held(())
        if gone:
            try:
                self.door.clear_held(node)
            except SlurmError as exc:
                log.warning("held mark of %s not cleared: %s", node, exc)

    def retry_held(self, nodes: Sequence[NodeState] | None = None) -> dict[str, str]:
        """Re-examine held faults at once (``breaker reset``): clear each
        node's mark, claim its drain, settle once, read the table once, and
        confirm or take back each claim by rank.  ``nodes``: the node table
        (default: read now); held nodes are those with our mark in Slurm or a
        held record here.  Returns node -> outcome."""
        from slurm_hooks.act import claim
        from slurm_hooks.core.held import parse_mark
        from slurm_hooks.core.reason import DrainReason
        from slurm_hooks.decide.decide import incident_id

        table = list(nodes) if nodes is not None else self.slurm.list_nodes()
        local = set(self.state.held_nodes())
        now = self.clock()
        todo: list[tuple[Decision, str]] = []
        out: dict[str, str] = {}
        for n in sorted(table, key=lambda x: x.name):
            mark = parse_mark(n.comment)
            rec = next(iter(self.state.held(n.name).values()), None) if n.name in local else None
            if mark is None and rec is None:
                continue
            code = mark.code if mark else str(rec.get("code") if rec else "")
            comp = mark.component if mark else (rec.get("component") if rec else None)
            since = mark.since if mark else None
            if mark is not None:
                self.door.clear_held(n.name, node=n)
            self.state.clear_held(n.name)
            inc = incident_id(n.name, code, comp, now)
            text = f"held by the circuit breaker since {iso(since) if since else '?'}; retried after reset"
            d = Decision(
                DecisionKind.DRAIN, n.name, code, text, comp, DrainReason(code, inc, text, comp),
                evacuate=True,
            )  # fmt: skip
            cur = our_reason(n)
            if cur is not None and cur.is_fault:
                out[n.name] = "already_drained"
                continue
            todo.append((d, text))
        claimed = []
        for d, text in todo:
            if self._claim_only(d):
                claimed.append((d, text))
            else:
                out[d.node] = "not_claimed"
        if not claimed:
            return out
        claim.settle(self.slurm)
        fleet = self.slurm.list_nodes()
        for d, text in claimed:
            if self._confirm_claim(str(d.incident), fleet):
                out[d.node] = "drained"
                self._after_drain(d, format_reason(d.reason) if d.reason else text)
            else:
                out[d.node] = "held"
        return out

    def _claim_only(self, d: Decision) -> bool:
        """Journal and write a claim for ``d`` (no settle): retry_held's batch."""
        assert d.reason is not None
        text = format_reason(d.reason)
        now = self.clock()
        doc = self._opened(d, text, now, "drain_intent").to_doc()
        alerts.queue(
            doc, "node_drained",
            Alert("node_drained", f"{d.node} drained: {d.explanation}", node=d.node,
                  incident=d.incident, code=d.code, fields={"component": d.component,
                                                            "reason": text}),
            now,
        )  # fmt: skip
        self.state.write_incident(doc)
        self.state.set_open_incident(d.node, str(d.incident))
        try:
            with self.journal.lock(str(d.incident)):
                before = self.door.drain(d.node, text)
                prior = before.ours is not None and not before.ours.is_fault
                self.journal.step(
                    str(d.incident), "claimed", status=IncidentStatus.CLAIMED,
                    prior_reason=before.node.reason if prior else None,
                )  # fmt: skip
        except (ForeignReasonError, SlurmError) as exc:
            log.warning("held fault of %s not claimed: %s", d.node, exc)
            self.journal.step(str(d.incident), "abandoned", status=IncidentStatus.ABANDONED,
                       jobs_done=True)  # fmt: skip
            self.state.clear_open_incident(d.node, str(d.incident))
            return False
        return True

    def breaker_reset(self, partition: str | None = None, *, who: str = "") -> list[str]:
        gone = self.latch.reset(partition)
        self.audit.record(
            "breaker_reset", partition=partition or "*", reset=gone, actor=who or self.actor,
        )  # fmt: skip
        return gone

    # -- acceptance and resume -------------------------------------------------

    def record_acceptance(
        self,
        node: str,
        passed: bool,
        *,
        at: datetime | None = None,
        detail: str = "",
        resume: bool = True,
    ) -> Decision | None:
        """Take the acceptance run's verdict; on a pass with an incident open
        here and auto_resume on, try to resume the node (``resume=False``:
        record only, as ``acceptance --no-resume`` asks)."""
        at = at or self.clock()
        self.state.record_acceptance(node, at, passed, detail)
        self.audit.record(
            "acceptance", node=node, outcome="passed" if passed else "failed", why=detail or None,
            acceptance_at=iso(at), actor=self.actor,
        )  # fmt: skip
        if resume and passed and self.policy.auto_resume and self.state.open_incident(node):
            return self.try_resume(node)
        return None

    def try_resume(
        self, node: str, *, human: bool = False, skip_acceptance: bool = False
    ) -> Decision:
        """Resume ``node`` if it carries our reason and passed acceptance since
        the fault (act/resume.py).  Returns the decision (RESUME when resumed)."""
        return resume.try_resume(self.context, node, human=human, skip_acceptance=skip_acceptance)

    # -- telling people -----------------------------------------------------------

    def notify(self, alert: Alert) -> None:
        """Tell people about a finding that drains nothing (a job that hangs
        with no culprit, a straggler): sent and audited like every alert."""
        self._alert(alert)

    def _alert(self, alert: Alert) -> None:
        """An alert outside an incident's journal (``Context.alert``)."""
        self.context.alert(alert)
