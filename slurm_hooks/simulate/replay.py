"""The event loop: one trace, one baseline, simulated time.

Three baselines replay the same trace:

* ``manual``: no automation.  A job whose GPU died stops progressing at
  once and dies at NCCL's collective timeout; a person finds the node
  (``response_s`` plus as long again to diagnose), drains it with their own
  reason, requeues the job and repairs the node (reboot; a fault that comes
  back within a week: replace).
* ``nhc``: a periodic node health check (NHC-style, every
  ``nhc_interval_s``) drains the nodes it can see with an ``NHC:`` reason;
  the job still dies at the NCCL timeout and a person requeues it
  (``response_s``, the node already named) and repairs the node.
* ``slurm-hooks``: the product's judges and ``decide()`` on each fault's
  evidence, drains and requeues exactly once through the real ``SlurmDoor``,
  the breaker (a trip is latched until a person resets it), the repair
  ladder (``plan_repair``, ``reboot_allowed``), the spare pick
  (``pick_spare``) and ``decide_resume`` (flapping, acceptance).

What is simulated: the hardware (repair durations, whether a fault comes
back), the scheduler's placement, the people, and the engine's sequencing
(the engine itself does I/O and is not imported); the verdicts are the
product's.  A job that is requeued starts again after ``restart_s`` from its
last checkpoint once it has nodes.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from slurm_hooks.core.errors import ForeignReasonError, ReasonChanged, SlurmError
from slurm_hooks.core.held import HeldMark, format_mark
from slurm_hooks.core.history import FaultEvent, Trip
from slurm_hooks.core.model import Action, Finding
from slurm_hooks.core.ownership import our_reason
from slurm_hooks.core.reason import REPLACEMENT_ASKED, DrainReason, format_reason, try_parse_reason
from slurm_hooks.core.topology import Topology, pick_spare
from slurm_hooks.decide import PolicyConfig, decide, decide_resume
from slurm_hooks.decide.breaker import rank_claim
from slurm_hooks.decide.decision import DecisionKind
from slurm_hooks.decide.repair import Attempt, RepairConfig, RepairStep, plan_repair, reboot_allowed
from slurm_hooks.detect.progress.settings import ProgressConfig
from slurm_hooks.detect.xid.catalogue import Catalogue
from slurm_hooks.simulate import evidence as evmod
from slurm_hooks.simulate.cluster import PARTITION, SimJob, SimSlurm
from slurm_hooks.simulate.figures import Figures
from slurm_hooks.simulate.params import SimParams
from slurm_hooks.simulate.state import Baseline, NodeRecord, _Job, spare_reason
from slurm_hooks.simulate.trace import EPOCH, Fault, Trace, evidence_table
from slurm_hooks.slurm.door import Requeue, SlurmDoor

#: Seconds a job whose GPU already died takes to exit once signalled.
DEAD_EXIT_S = 10.0
#: Seconds slurmctld waits before marking a silent node DOWN (SlurmdTimeout's default).
SLURMD_TIMEOUT_S = 300.0


class Replay:
    """Replay ``trace`` under ``baseline``; ``run()`` returns the figures."""

    def __init__(self, trace: Trace, params: SimParams, baseline: Baseline, *,
                 policy: PolicyConfig | None = None, repair: RepairConfig | None = None,
                 catalogue: Catalogue | None = None, samples: int = 200) -> None:  # fmt: skip
        params.validate()
        self.p, self.baseline, self.trace = params, baseline, trace
        self.policy = policy or PolicyConfig()
        self.repair = repair or RepairConfig(enabled=True, resume_spares=True)
        self.catalogue = catalogue
        # Unset: the product's own defaults (the watcher's [progress] section).
        progress = ProgressConfig()
        self.hang_s = params.hang_s if params.hang_s is not None else progress.hang_s
        self.progress_interval_s = progress.interval_s
        self.grace_s = params.grace_s if params.grace_s is not None else self.policy.grace_seconds
        self.horizon = params.days * 86400.0
        self.now = 0.0
        self._q: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        n = params.nodes
        self.names = [f"gpu{i:04d}" for i in range(n)]
        self.slurm = SimSlurm(self.names, EPOCH, lambda: self.now)
        self.slurm.on_requeue = self._on_requeue
        self.door = SlurmDoor(self.slurm)
        self.state = {name: NodeRecord() for name in self.names}
        self.spares = set(self.names[n - params.spares :]) if params.spares else set()
        self.topology = Topology("tree", {
            f"leaf{g}": tuple(self.names[i : i + params.switch_nodes])
            for g, i in enumerate(range(0, n, params.switch_nodes))
        })  # fmt: skip
        self.leaf = {m: g for g, ms in self.topology.groups.items() for m in ms}
        self.trips: dict[str, Trip] = {}
        self.fig = Figures(str(baseline))
        self.jobs: dict[str, _Job] = {}
        self.evidence = evidence_table()
        self.samples = samples
        self._useful = 0.0
        #: Incidents whose node was asked to be replaced (a decision or the ladder).
        self._replace_asked: set[str] = set()
        #: Faults the breaker holds (node -> fault), re-examined on reset.
        self._held: dict[str, Fault] = {}
        #: Repairs whose reboot the reboot cap deferred.
        self._reboot_wait: list[tuple[Any, ...]] = []

    # -- the loop ---------------------------------------------------------------------

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._q, (t, self._seq, fn, args))

    def dt(self) -> datetime:
        return EPOCH + timedelta(seconds=self.now)

    def run(self) -> Figures:
        per = self.p.job_nodes
        for k in range(self.p.jobs):
            nodes = self.names[k * per : (k + 1) * per]
            job = _Job(SimJob(str(k + 1), list(nodes)), per)
            self.slurm.jobs[job.sim.job_id] = job.sim
            self.jobs[job.sim.job_id] = job
        if self.baseline is Baseline.HOOKS:
            for s in sorted(self.spares):
                self.door.drain(s, spare_reason())
        for f in self.trace.faults:
            self.at(f.t, self._fault, f)
        step = self.horizon / self.samples
        for i in range(1, self.samples + 1):
            self.at(i * step, self._sample)
        while self._q and self._q[0][0] <= self.horizon:
            t, _, fn, args = heapq.heappop(self._q)
            self.now = t
            fn(*args)
        self.now = self.horizon
        return self._finish()

    def _finish(self) -> Figures:
        for job in self.jobs.values():
            if job.running:
                self._credit(job, self.horizon - job.seg_start)
        useful = self._useful
        total = sum(j.need for j in self.jobs.values()) * self.horizon
        self.fig.ettr = useful / total if total else 0.0
        self.fig.lost_gpu_hours = (total - useful) * self.p.gpus_per_node / 3600.0
        self.slurm.finish()
        self.fig.node_hours_out = self.slurm.out_node_s / 3600.0
        self.fig.requeues = sum(self.slurm.requeues.values())
        return self.fig

    def _credit(self, job: _Job, seconds: float) -> None:
        self._useful += max(seconds, 0.0) * job.need

    def _sample(self) -> None:
        running = sum((self.now - j.seg_start) * j.need for j in self.jobs.values() if j.running)
        total = sum(j.need for j in self.jobs.values()) * self.now
        in_use = sum(1 for s in self.spares for j in self.jobs.values()
                     if j.running and s in j.sim.nodes)  # fmt: skip
        self.fig.max_spares_in_use = max(self.fig.max_spares_in_use, in_use)
        ettr = (self._useful + running) / total if total else 1.0
        self.fig.timeline.append((self.now / 3600.0, ettr, self.slurm.out_count, in_use))

    # -- jobs -------------------------------------------------------------------------

    def _job_on(self, name: str) -> _Job | None:
        for job in self.jobs.values():
            if job.sim.state == "running" and name in job.sim.nodes:
                return job
        return None

    def _stop(self, job: _Job, saved_until: float | None = None) -> None:
        """The job stops progressing now: it keeps what it checkpointed."""
        if not job.running:
            return
        ran = self.now - job.seg_start
        kept = (saved_until - job.seg_start) if saved_until is not None else (
            math.floor(ran / self.p.checkpoint_s) * self.p.checkpoint_s)  # fmt: skip
        self._credit(job, min(kept, ran))
        job.running = False
        self.fig.interruptions += 1
        if saved_until is not None:
            self.fig.checkpointed_on_signal += 1

    def _on_requeue(self, job_id: str) -> None:
        job = self.jobs[job_id]
        self._stop(job)  # still running: killed by the requeue, back to its last checkpoint
        job.gen += 1
        self._place(job)

    def _usable(self, name: str) -> bool:
        n = self.slurm.nodes[name]
        return not (n.drained or n.down) and self.state[name].broken is None

    def _place(self, job: _Job) -> None:
        busy = {m for j in self.jobs.values() if j is not job and j.sim.state == "running"
                for m in j.sim.nodes}  # fmt: skip
        keep = [m for m in job.sim.nodes if m not in busy and self._usable(m)]
        kept = set(keep)
        extra = [m for m in self.names if m not in busy and m not in kept and self._usable(m)]
        extra = extra[: job.need - len(keep)]
        if len(keep) + len(extra) < job.need:
            job.waiting = True
            return
        job.waiting = False
        job.sim.nodes = keep + extra
        job.sim.state = "running"
        self.at(self.now + self.p.restart_s, self._start, job, job.gen)

    def _start(self, job: _Job, gen: int) -> None:
        if gen == job.gen and job.sim.state == "running" and not job.running:
            job.running = True
            job.seg_start = self.now

    def _retry_waiting(self) -> None:
        for job in self.jobs.values():
            if job.waiting:
                self._place(job)

    # -- faults -----------------------------------------------------------------------

    def _fault(self, f: Fault) -> None:
        name = self.names[f.node]
        spec = self.evidence[f.cause]
        kind = str(spec["kind"])
        st = self.state[name]
        self.fig.faults += 1
        hw = bool(spec.get("node_fault", True))
        if hw and kind != "silent":
            st.broken = f
        job = self._job_on(name)
        alive = bool(spec.get("job_alive", False))
        if job is not None and not alive:
            self._stop(job)
        if kind == "node_down":
            self.at(self.now + SLURMD_TIMEOUT_S, self._slurm_down, name, f, job)
            return
        if self.baseline is Baseline.HOOKS and kind not in evmod.INVISIBLE:
            self.at(self.now + self._latency(kind, f), self._detect, name, f)
            return
        if self.baseline is Baseline.NHC and self._nhc_sees(kind, name, f):
            self.at(self.now + self._rng(f).uniform(0, self.p.nhc_interval_s), self._nhc, name, f)
            self._job_dies(job, f, alive, diagnose=False)
            return
        self._job_dies(job, f, alive, diagnose=hw)
        if hw and kind != "silent":
            t = self.now + self.p.nccl_timeout_s + 2 * self.p.response_s
            self.at(t, self._person_drain, name, f)

    def _rng(self, f: Fault) -> random.Random:
        return random.Random(f.node * 1_000_003 + int(f.t * 1000))

    def _latency(self, kind: str, f: Fault) -> float:
        if kind == "hang":
            return self.hang_s + self.progress_interval_s  # the watcher's progress pass
        if kind == "link":  # the ib check runs in the healthcheck phase
            return self._rng(f).uniform(0, self.p.nhc_interval_s)
        return self.p.watch_latency_s

    def _nhc_sees(self, kind: str, name: str, f: Fault) -> bool:
        if kind in evmod.NHC_SEES:
            return True
        if kind != "xid":
            return False
        found = self._findings(name, f, remember=False)
        unusable = (Action.RESET_GPU, Action.REBOOT, Action.REPLACE)
        return any(x.action in unusable for x in found)

    def _job_dies(self, job: _Job | None, f: Fault, alive: bool, *, diagnose: bool) -> None:
        """No automation: the job dies (at NCCL's timeout for a GPU that
        hangs, at once for a crash) and a person requeues it."""
        if job is None:
            return
        kind = str(self.evidence[f.cause]["kind"])
        die = 0.0 if kind == "xid" and not self.evidence[f.cause].get("node_fault") else (
            self.p.nccl_timeout_s)  # fmt: skip
        wait = die + self.p.response_s * (2 if diagnose else 1)
        self.at(self.now + wait, self._person_requeue, job, job.sim.restart_count)

    # -- people, NHC and slurmctld ----------------------------------------------------

    def _person_requeue(self, job: _Job, restarts: int) -> None:
        if job.sim.restart_count != restarts or job.sim.state != "running":
            return
        with self.slurm.as_actor("admin"):
            self.slurm.requeue(job.sim.job_id)

    def _drain_as(self, actor: str, name: str, f: Fault, reason: str) -> bool:
        """Someone else's drain (a person, NHC) of a node ``f`` still breaks;
        False when the fault is gone or the node is already out."""
        n = self.slurm.nodes[name]
        if self.state[name].broken is not f or n.drained or n.down:
            return False
        with self.slurm.as_actor(actor):
            self.slurm.drain(name, reason)
        self.fig.drains += 1
        return True

    def _person_drain(self, name: str, f: Fault) -> None:
        if not self._drain_as("admin", name, f, f"bad node, ticket open ({f.cause})"):
            return
        took, replaced = self._manual_fix_s(name, f)
        self.at(self.now + took, self._person_resume, name, f, replaced)

    def _nhc(self, name: str, f: Fault) -> None:
        if not self._drain_as("nhc", name, f, f"NHC: check_hw_gpu: {f.cause}"):
            return
        self.fig.false_drains += int(not self.evidence[f.cause].get("node_fault", True))
        took, replaced = self._manual_fix_s(name, f)
        self.at(self.now + self.p.response_s + took, self._person_resume, name, f, replaced)

    def _slurm_down(self, name: str, f: Fault, job: _Job | None) -> None:
        with self.slurm.as_actor("slurm"):
            self.slurm.down(name, "Not responding")
            if job is not None and job.sim.state == "running":
                self.slurm.requeue(job.sim.job_id)  # NODE_FAIL: Slurm requeues the batch job
        t = self.now + self.p.response_s + self.p.maintenance_s
        self.at(t, self._person_resume, name, f, False)

    def _manual_fix_s(self, name: str, f: Fault) -> tuple[float, bool]:
        """(seconds, replaced): a person's repair.  Cables and ports: fixed
        by hand; a host back from maintenance; a GPU: reboot, and replace
        when it is the second time within a week."""
        st = self.state[name]
        kind = str(self.evidence[f.cause]["kind"])
        if kind == "link":
            return self.p.fix_s, False
        if kind == "node_down":
            return self.p.maintenance_s, False
        week = self.now - 7 * 86400.0
        if any(t >= week for t in st.fixed):
            self.fig.replacements += 1
            return self.p.replace_s, True
        return self.p.reboot_s + self.p.acceptance_s, False

    def _person_resume(self, name: str, f: Fault, replaced: bool) -> None:
        st = self.state[name]
        st.fixed.append(self.now)
        with self.slurm.as_actor("admin"):
            self.slurm.resume(name)
        kind = str(self.evidence[f.cause]["kind"])
        self._hardware_back(name, f, replaced or kind in ("link", "node_down"))

    def _hardware_back(self, name: str, f: Fault | None, fixed: bool) -> None:
        """The node is back in service.  A persistent fault returns after a
        reset or a reboot; a replacement or a person's repair fixed it."""
        st = self.state[name]
        cur = st.broken or f
        st.broken = None
        if cur is not None and cur.persists and not fixed:
            again = Fault(self.now + cur.recur_after, cur.node, cur.cause, cur.gpu, True,
                          cur.recur_after, None, cur.code)  # fmt: skip
            self.at(again.t, self._fault, again)
        self._retry_waiting()

    # -- slurm-hooks ------------------------------------------------------------------

    def _findings(self, name: str, f: Fault, *, remember: bool = True) -> list[Finding]:
        spec = self.evidence.get(f.cause)
        ev = evmod.Evidence.of(spec) if spec else evmod.Evidence.from_code(f.code or "")
        if ev is None:
            return []
        st = self.state[name]
        job = self._job_on(name)
        found, incs = evmod.findings(
            ev, node=name, gpu=f.gpu, now=EPOCH.timestamp() + self.now, catalogue=self.catalogue,
            xid_history=st.xid, hang_s=self.hang_s, job=job.sim.job_id if job else "0",
        )  # fmt: skip
        if remember:
            st.xid = [i for i in st.xid if i.t >= EPOCH.timestamp() + self.now - 86400.0] + incs
        return found

    def _detect(self, name: str, f: Fault) -> None:
        """The engine's fault path: decide on the node's own state (no
        breaker), claim the drain through the door, rank the claim against
        the node table (``rank_claim``): confirmed, go on; past the cap, take
        it back, hold the fault, latch (act/claim.py, docs/breaker.md)."""
        st = self.state[name]
        hw = bool(self.evidence[f.cause].get("node_fault", True))
        if hw and st.broken is not f:
            return
        found = self._findings(name, f)
        node = self.slurm.nodes[name]
        decisions = decide(found, node, st.history(), None, self.policy, self.dt(), node=name)
        job = self._job_on(name)
        outcome = ""
        for d in decisions:
            if d.kind.drains:
                outcome = self._drain(name, f, d, node.reason) or outcome
                self.fig.decisions[str(DecisionKind.BREAKER_TRIPPED if outcome == "held"
                                       else d.kind)] += 1  # fmt: skip
                continue
            self.fig.decisions[str(d.kind)] += 1
            self.fig.foreign_refusals += int(d.kind is DecisionKind.FOREIGN_REASON)
            if d.kind is DecisionKind.FOREIGN_REASON and d.evacuate and job is not None:
                self._evacuate(job, name, f)
                outcome = "acted"
        if outcome != "acted":  # logged only, or held by the breaker: people take over
            # A held node is named (status lists it); the person re-arms the
            # breaker, which re-examines it.  A fault nothing named has to be
            # found first.
            alive = bool(self.evidence[f.cause].get("job_alive", False))
            self._job_dies(job, f, alive, diagnose=hw and outcome != "held")
            if hw and outcome != "held":
                t = self.now + self.p.nccl_timeout_s + 2 * self.p.response_s
                self.at(t, self._person_drain, name, f)

    def _breaker_reset(self) -> None:
        """``slurm-hooks breaker reset`` by a person: the latch and the held
        marks are cleared and every held fault is examined again at once."""
        self.trips.pop(PARTITION, None)
        held, self._held = self._held, {}
        for name in sorted(held):
            self.door.clear_held(name)
        for name, f in sorted(held.items()):
            if self.state[name].broken is f and not self.slurm.nodes[name].drained:
                self._detect(name, f)

    def _drain(self, name: str, f: Fault, d: Any, seen: str | None) -> str:
        """ "acted", "held" (the claim ranked past the breaker's cap) or ""
        (the door refused: a foreign reason came first)."""
        st = self.state[name]
        assert d.reason is not None
        claim = format_reason(d.reason)
        try:
            self.door.drain(name, claim, expect=seen)
        except (ForeignReasonError, ReasonChanged):
            self.fig.foreign_refusals += 1
            return ""
        incident = d.reason.incident
        if d.facts.get("already_drained"):
            st.faults.append(FaultEvent(self.dt(), d.code, d.component, str(d.kind), incident))
            self._ask_replacement(incident)
            return "acted"
        fleet = list(self.slurm.nodes.values())
        verdict = rank_claim(name, claim, fleet, self.policy, self.dt(), self.trips)
        if not verdict.confirmed:
            prior = try_parse_reason(seen)
            self.door.take_back(name, claim, restore=seen if prior and not prior.is_fault else None)
            self._hold(name, f, d, verdict)
            return "held"
        self.door.clear_held(name)
        st.faults.append(FaultEvent(self.dt(), d.code, d.component, str(d.kind), incident))
        st.incident = incident
        self.fig.drains += 1
        self.fig.false_drains += int(not self.evidence[f.cause].get("node_fault", True))
        if d.kind is DecisionKind.REPLACE:
            self._ask_replacement(incident)
        job = self._job_on(name)
        settled = self.now
        if job is not None and d.evacuate:
            settled = self._evacuate(job, name, f)
        action = d.findings[0].action if d.findings else Action.DRAIN
        human = d.kind is DecisionKind.HOLD_FOR_HUMAN
        self.at(settled, self._repair, name, f, incident, d.code, d.component, action, human)
        return "acted"

    def _hold(self, name: str, f: Fault, d: Any, verdict: Any) -> None:
        """Hold the refused fault: a mark in Slurm's Comment, the latch; a
        person is paged and re-arms the breaker after ``response_s``."""
        self.fig.breaker_held += 1
        self._held[name] = f
        mark = HeldMark(d.code, d.component, d.reason.incident, self.dt(), verdict.key_at)
        self.door.mark_held(name, format_mark(mark))
        if PARTITION not in self.trips:
            self.trips[PARTITION] = Trip(PARTITION, self.dt(), name, verdict.rank - 1,
                                         verdict.limit, verdict.key_at)  # fmt: skip
            self.fig.breaker_trips += 1
            self.at(self.now + self.p.response_s, self._breaker_reset)

    def _ask_replacement(self, incident: str) -> None:
        if incident not in self._replace_asked:
            self._replace_asked.add(incident)
            self.fig.replacements += 1

    def _evacuate(self, job: _Job, name: str, f: Fault) -> float:
        """Signal, grace, requeue exactly once (the door's rule)."""
        before = job.sim.restart_count
        alive = job.running
        wait = self.grace_s if alive else min(self.grace_s, DEAD_EXIT_S)
        if alive:  # it checkpoints on the signal
            self._stop(job, saved_until=self.now)
        self.at(self.now + wait, self._requeue, job, before, name)
        return self.now + wait

    def _requeue(self, job: _Job, before: int, failed: str) -> None:
        try:
            done = self.door.requeue_once(job.sim.job_id, before)
        except SlurmError:
            return
        if done is Requeue.REQUEUED and self.repair.resume_spares:
            self._resume_spare(job, failed)

    def _resume_spare(self, job: _Job, failed: str) -> None:
        spares = [s for s in sorted(self.spares) if (r := our_reason(self.slurm.nodes[s]))
                  is not None and r.code == "SPARE" and self.state[s].broken is None]  # fmt: skip
        group = self.leaf.get(failed)
        near = [m for m in job.sim.nodes if self.leaf.get(m) == group] or [failed]
        spare = pick_spare(near, failed, spares, self.topology)
        if spare is None:
            return
        if self.door.resume(spare, owned=lambda r: r.code == "SPARE"):
            self.fig.spares_resumed += 1
            self._retry_waiting()

    def _repair(self, name: str, f: Fault, incident: str, code: str, comp: str | None,
                action: Action, human: bool) -> None:  # fmt: skip
        st = self.state[name]
        if human or not self.repair.enabled:
            took, replaced = self._manual_fix_s(name, f)
            step = RepairStep.REPLACE if replaced else RepairStep.NONE
            self.at(self.now + self.p.response_s + took, self._repaired, name, f, incident, step,
                    human)  # fmt: skip
            return
        plan = plan_repair(action, code, comp, None, st.attempts, self.repair, self.dt())
        if plan.step is RepairStep.REBOOT:
            fleet = list(self.slurm.nodes.values())
            if not reboot_allowed(name, fleet, self.repair).allowed:
                # Deferred: tried again when a reboot ends (the engine's next pass).
                self._reboot_wait.append((name, f, incident, code, comp, action, human))
                return
        st.attempts.append(Attempt(self.dt(), plan.step, code, comp))
        ours = our_reason(self.slurm.nodes[name])
        if ours is not None and plan.step in (RepairStep.REBOOT, RepairStep.REPLACE):
            extra = {"step": "reboot"} if plan.step is RepairStep.REBOOT else REPLACEMENT_ASKED
            self.door.drain(name, format_reason(ours.with_extra(**extra)))
        took = {
            RepairStep.RESET: self.p.reset_s + self.p.acceptance_s,
            RepairStep.REBOOT: self.p.reboot_s + self.p.acceptance_s,
            RepairStep.REPLACE: self.p.replace_s + self.p.acceptance_s,
            RepairStep.NONE: self.p.response_s + self._manual_fix_s(name, f)[0],
        }[plan.step]
        if plan.step is RepairStep.REPLACE:
            self._ask_replacement(incident)
        self.at(self.now + took, self._repaired, name, f, incident, plan.step, False)

    def _repaired(self, name: str, f: Fault, incident: str, step: RepairStep, human: bool) -> None:
        st = self.state[name]
        ours = our_reason(self.slurm.nodes[name])
        if ours is not None and "step" in ours.extra:  # the reboot is over
            extra = {k: v for k, v in ours.extra.items() if k != "step"}
            self.door.drain(name, format_reason(DrainReason(ours.code, ours.incident, ours.text,
                                                            ours.component, extra)))  # fmt: skip
            waiting, self._reboot_wait = self._reboot_wait, []
            for args in waiting:
                self._repair(*args)
        st.accepted.append(self.dt())
        node = self.slurm.nodes[name]
        d = decide_resume(node, st.history(), self.dt(), human=human)
        self.fig.decisions[f"resume:{d.kind}"] += 1
        if d.kind is DecisionKind.HOLD_FOR_HUMAN:
            t = self.now + self.p.response_s + self.p.fix_s
            self.at(t, self._repaired, name, f, incident, RepairStep.NONE, True)
            return
        if d.kind is not DecisionKind.RESUME:
            return
        try:
            self.door.resume(name, owned=lambda r: r.incident == incident)
        except (ForeignReasonError, ReasonChanged):
            self.fig.foreign_refusals += 1
            return
        st.resumes.append(self.dt())
        st.incident = None
        self._hardware_back(name, f, step in (RepairStep.REPLACE, RepairStep.NONE))


def run_all(trace: Trace, params: SimParams, **kw: Any) -> dict[str, Figures]:
    """The three baselines on the same trace."""
    return {str(b): Replay(trace, params, b, **kw).run() for b in Baseline}


__all__ = ["Baseline", "Replay", "run_all", "spare_reason"]
