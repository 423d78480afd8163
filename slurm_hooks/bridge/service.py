"""The bridge's executor and loop: read Slurm, read Kubernetes, plan, act.

Slurm is the only source of truth; Kubernetes mirrors it.  One pass costs one
Node LIST (on a fleet of ``node_watch_min_nodes`` or more, one watch of the
changes since the last pass instead: ``k8s/cache.py``), one Slurm node
listing and calls proportional to what changed (pods LIST and evictions on
newly held nodes, one job list for nodes whose replacement is still open, one
PATCH per step, the evicted and replacement-requested annotations of an
incident handled in one pass going in one PATCH).

Crash safety: each step is a read-modify-write of the Node that records what
was done in our annotations, and every outward request (replacement, spare
resume) is idempotent per incident, so a bridge killed between any two calls
and started again finishes the incident without doing anything twice.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from slurm_hooks.bridge import plan as planner
from slurm_hooks.bridge._exec import (  # noqa: F401 (StepResult re-exported: importable from here too)
    Obj,
    StepResult,
    evict_pods,
    log_step,
    patch_node,
)
from slurm_hooks.bridge.metrics import BridgeMetrics
from slurm_hooks.bridge.replace import Replacer, make_replacer
from slurm_hooks.bridge.settings import BridgeConfig
from slurm_hooks.bridge.views import NODE_VIEW, POD_VIEW
from slurm_hooks.core.errors import KubernetesError, SlurmError, SlurmHooksError
from slurm_hooks.k8s.cache import WatchedList
from slurm_hooks.k8s.client import KubeClient, nodes_path, pods_path
from slurm_hooks.k8s.lease import LeaderElector
from slurm_hooks.slurm.base import SlurmClient
from slurm_hooks.slurm.door import SlurmDoor
from slurm_hooks.slurm.jobs_index import jobs_by_node

if TYPE_CHECKING:
    from slurm_hooks.bridge.lend_exec import Lender, LendPass
    from slurm_hooks.bridge.slinky_exec import AcceptanceRunner
    from slurm_hooks.store.audit import AuditLog

log = logging.getLogger(__name__)

#: Nodes per LIST page (kubectl's default chunk size): neither the API server
#: nor the bridge holds a whole 50,000-node answer in one buffer.
NODE_PAGE = 500

#: Our reason code for a node lent to inference: out of Slurm on purpose, not
#: a fault, so the fault planner never cordons or replaces it.
LEND_CODE = "LEND"


@dataclass(frozen=True)
class PassResult:
    leader: bool
    plan: planner.Plan | None = None
    results: tuple[StepResult, ...] = ()
    api_calls: Mapping[str, int] = field(default_factory=dict)
    error: str | None = None
    #: The lending pass (None when lending is off or failed).
    lending: LendPass | None = None

    def outcomes(self, outcome: str) -> list[StepResult]:
        return [r for r in self.results if r.outcome == outcome]


def default_identity() -> str:
    """POD_NAME when the Deployment passes it (downward API), else host + a
    random suffix: two processes never share an identity."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _observe_since(histogram: Any, text: str | None, now: datetime) -> None:
    """Observe the seconds from the time ``text`` stamps until ``now`` (an
    annotation or Slurm's reason time); nothing when there is no stamp."""
    when = planner.parse_time(text)
    if when is None:
        return
    if when.tzinfo is None:
        when = when.astimezone()  # Slurm's reason times are local
    histogram.observe(max((now - when).total_seconds(), 0.0))


class Bridge:
    """One reconcile pass per ``reconcile_once()``; ``run()`` loops."""

    def __init__(
        self,
        slurm: SlurmClient,
        kube: KubeClient,
        cfg: BridgeConfig,
        *,
        identity: str | None = None,
        metrics: BridgeMetrics | None = None,
        replacer: Replacer | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        after_step: Callable[[Any], None] | None = None,
        audit: AuditLog | None = None,
        lender: Lender | None = None,
        acceptor: AcceptanceRunner | None = None,
    ) -> None:
        self.slurm = slurm
        self.kube = kube
        self.cfg = cfg
        self.clock = clock
        self.metrics = metrics or BridgeMetrics()
        self.identity = identity or default_identity()
        self.replacer = replacer if replacer is not None else make_replacer(kube, cfg)
        #: Called after every step; tests use it to kill the bridge mid-way.
        self.after_step = after_step
        self.keys = planner.Keys(cfg.annotation_prefix)
        #: The fault planner's view: a LEND drain is never a fault.
        self.plan_cfg = (
            cfg
            if LEND_CODE in cfg.ignore_codes
            else dataclasses.replace(cfg, ignore_codes=(*cfg.ignore_codes, LEND_CODE))
        )
        #: With ``node_mapping = "slinky"``: acceptance on the new machine
        #: (None: the engine's acceptance resumes the node, the bridge follows).
        self.acceptor = acceptor
        self.lender = lender
        if self.lender is None and cfg.lending.enabled:
            from slurm_hooks.bridge.lend_exec import Lender

            self.lender = Lender(slurm, kube, cfg, metrics=self.metrics, clock=clock, audit=audit)
        self._lend_pass: LendPass | None = None
        self._pods = _PodIndex(kube, 0)
        #: The Node list, kept between passes on a large fleet.
        self._nodes = WatchedList(
            kube,
            nodes_path(),
            label_selector=cfg.node_selector or None,
            page=NODE_PAGE,
            item_view=NODE_VIEW,
            watch_seconds=cfg.node_watch_seconds,
        )
        #: Annotations an Evict left for the same node's RequestReplacement
        #: of this pass to write (one PATCH instead of two).
        self._pending_ann: dict[str, dict[str, str | None]] = {}
        self._merge_evicted: set[str] = set()
        self.elector: LeaderElector | None = None
        if cfg.leader_election and not cfg.dry_run:
            self.elector = LeaderElector(
                kube, cfg.namespace, cfg.lease_name, self.identity, cfg.lease_duration, clock
            )
        self.spare_pool: list[str] = []
        if cfg.spare_pool:
            from slurm_hooks.core.hostlist import expand

            self.spare_pool = expand(cfg.spare_pool)
        if kube.on_call is None:
            kube.on_call = self.metrics.on_api_call

    # -- one pass -------------------------------------------------------------

    def reconcile_once(self) -> PassResult:
        started = time.monotonic()
        calls_before = dict(self.kube.calls)
        if self.elector is not None:
            leader = self.elector.try_acquire()
            self.metrics.leader.set(1 if leader else 0)
            if not leader:
                self.metrics.passes.labels("follower").inc()
                return PassResult(False)
        try:
            result = self._pass()
        except SlurmHooksError as exc:
            log.error("reconcile pass failed: %s", exc)
            self.metrics.passes.labels("error").inc()
            return PassResult(True, error=str(exc), api_calls=self._calls_since(calls_before))
        self.metrics.passes.labels("ok").inc()
        self.metrics.pass_seconds.observe(time.monotonic() - started)
        return PassResult(
            True,
            result[0],
            result[1],
            api_calls=self._calls_since(calls_before),
            lending=self._lend_pass,
        )

    def _calls_since(self, before: Mapping[str, int]) -> dict[str, int]:
        return {k: v - before.get(k, 0) for k, v in self.kube.calls.items() if v - before.get(k, 0)}

    def _pass(self) -> tuple[planner.Plan, tuple[StepResult, ...]]:
        cfg = self.cfg
        states = self.slurm.list_nodes()
        nodes = self._node_list()
        if cfg.node_mapping == "slinky":
            return self._slinky_pass(states, nodes)
        current = {n["metadata"]["name"]: n for n in nodes}
        triggers = planner.triggers_of(states, self.plan_cfg)
        # One job list for every open incident (not one squeue per node).
        jobs = jobs_by_node(
            self.slurm,
            planner.job_queries(states, nodes, self.plan_cfg, by_name=current, triggers=triggers),
        )
        the_plan = planner.plan(
            states,
            nodes,
            self.plan_cfg,
            jobs=jobs,
            spare_pool=self.spare_pool,
            by_name=current,
            triggers=triggers,
        )
        for d in the_plan.deferred:
            log.warning("node=%s slurm_node=%s deferred: %s", d.node, d.slurm_node, d.why)
            self.metrics.deferred.labels(d.why.split(" (")[0]).inc()

        failed_nodes: set[str] = set()
        results: list[StepResult] = []
        self._pods = _PodIndex(self.kube, sum(isinstance(s, planner.Evict) for s in the_plan.steps))
        self._pending_ann = {}
        self._merge_evicted = (
            _evict_then_replace(the_plan.steps) if self.replacer is not None else set()
        )
        incident = self.keys.incident
        touched = {step.node for step in the_plan.steps}
        held_touched = _held_count(current, touched, incident)
        for step in _cordons_first(the_plan.steps):
            if step.node in failed_nodes:
                results.append(StepResult(step, "skipped", "an earlier step on this node failed"))
                continue
            if cfg.dry_run:
                log.info("dry-run: would %s", _describe(step))
                results.append(StepResult(step, "dry-run", _describe(step)))
                continue
            if not self._still_leader():
                results.append(StepResult(step, "skipped", "lost the lease during the pass"))
                continue
            try:
                res = self._execute(step, current)
            except (KubernetesError, SlurmError) as exc:
                log.error("node=%s %s failed: %s", step.node, type(step).__name__, exc)
                res = StepResult(step, "failed", str(exc))
            if res.outcome in ("failed", "partial"):
                failed_nodes.add(step.node)
            results.append(res)
            if self.after_step is not None:
                self.after_step(step)
        # The planner counted the held nodes; only the nodes the steps
        # patched can have changed since (at 50,000 nodes, a second look at
        # every node cost more than a tenth of the planner).
        self.metrics.held.set(
            the_plan.held - held_touched + _held_count(current, touched, incident)
        )
        self._lend_pass = None
        if self.lender is not None and (cfg.dry_run or self._still_leader()):
            # After the fault steps, on the nodes as they now are: a fault on
            # a lent node has been cordoned already, and lending sees it.
            try:
                self._lend_pass = self.lender.reconcile(states, current)
            except (KubernetesError, SlurmError) as exc:
                log.error("lending pass failed: %s", exc)
                self.metrics.lend_events.labels("error").inc()
        return the_plan, tuple(results)

    def _node_list(self) -> list[Obj]:
        """Every Node (as ``node_view``): the kept list brought up to date
        on a large fleet, a fresh paged LIST otherwise."""
        items = self._nodes.refresh()
        threshold = self.cfg.node_watch_min_nodes
        if not threshold or len(items) < threshold:
            self._nodes.invalidate()  # small fleet: LIST again next pass
        return list(items.values())

    def _slinky_pass(
        self, states: list[Any], nodes: list[Obj]
    ) -> tuple[planner.Plan, tuple[StepResult, ...]]:
        """Slurm on Kubernetes under Slinky (``bridge/slinky_plan.py``): the
        mapping is read live from the NodeSet pods, replacement moves the
        slurmd pod.  Lending is not combined with it."""
        from slurm_hooks.bridge import slinky_exec
        from slurm_hooks.bridge import slinky_plan as sp

        pods = slinky_exec.list_slurmd_pods(self)
        jobs = jobs_by_node(self.slurm, sp.job_queries(states, nodes, pods, self.cfg))
        the_plan = sp.plan(
            states, nodes, pods, self.cfg, jobs=jobs, accepting=self.acceptor is not None
        )
        for d in the_plan.deferred:
            log.info("node=%s slurm_node=%s waiting: %s", d.node, d.slurm_node, d.why)
        current = {planner.node_name(n): n for n in nodes}
        failed: set[str] = set()
        results: list[StepResult] = []
        for step in the_plan.steps:
            node = step.cordon.node if isinstance(step, sp.Hold) else step.node
            if node in failed:
                results.append(StepResult(step, "skipped", "an earlier step on this node failed"))
                continue
            if self.cfg.dry_run or not self._still_leader():
                why = "dry-run" if self.cfg.dry_run else "skipped"
                results.append(StepResult(step, why, type(step).__name__))
                continue
            try:
                res = self._slinky_step(step, current)
            except (KubernetesError, SlurmError) as exc:
                log.error("node=%s %s failed: %s", node, type(step).__name__, exc)
                res = StepResult(step, "failed", str(exc))
            if res.outcome in ("failed", "partial"):
                failed.add(node)
            results.append(res)
            if self.after_step is not None:
                self.after_step(step)
        plan_view = planner.Plan((), the_plan.deferred, the_plan.acted)
        return plan_view, tuple(results)

    def _slinky_step(self, step: Any, current: dict[str, Obj]) -> StepResult:
        """A method, not a bare call: tests wrap it to kill the bridge mid-step."""
        from slurm_hooks.bridge import slinky_exec

        return slinky_exec.execute(self, step, current, self.acceptor)

    def _still_leader(self) -> bool:
        """Re-checked before every write: a pass that stalled (a hung call)
        past the lease's renew deadline renews first, and stops if another
        replica has taken over meanwhile."""
        if self.elector is None or self.elector.holds():
            return True
        leader = self.elector.try_acquire()
        self.metrics.leader.set(1 if leader else 0)
        if not leader:
            log.warning("lost the lease during the pass: no further writes")
        return leader

    # -- steps ----------------------------------------------------------------

    def _execute(self, step: planner.Step, current: dict[str, Obj]) -> StepResult:
        now = self.clock()
        keys = self.keys
        if isinstance(step, planner.Cordon):
            self._rmw(step.node, current, lambda n: planner.cordon_patch(n, step, self.cfg, now))
            self.metrics.incidents.labels("cordon").inc()
            if step.drained_at is not None:
                _observe_since(self.metrics.drain_to_cordon, step.drained_at.isoformat(), now)
            log_step(log, step, "cordoned and tainted: %s", step.reason)
            return StepResult(step, "done")
        if isinstance(step, planner.ClaimSpare):
            # Intent first, then the resume: a crash in between resumes the same spare.
            node = current[step.node]
            if planner.node_annotations(node).get(keys.spare) != step.spare:
                self._rmw(
                    step.node,
                    current,
                    lambda n: planner.annotate_patch(n, {keys.spare: step.spare}),
                )
            # Through the door: only a spare still held by our SPARE reason or
            # a site's declared spare reason; False when already resumed (a
            # crash after the resume: the same spare, never a second one).
            SlurmDoor(self.slurm).resume(
                step.spare,
                owned=lambda r: r.code == "SPARE",
                foreign_prefixes=self.cfg.spare_reasons,
            )
            self.metrics.incidents.labels("spare_resumed").inc()
            log.warning(
                "node=%s incident=%s resumed spare %s", step.node, step.incident, step.spare
            )
            return StepResult(step, "done", step.spare)
        if isinstance(step, planner.Evict):
            return self._evict(step, current)
        if isinstance(step, planner.RequestReplacement):
            if self.replacer is None:
                return StepResult(step, "skipped", "no replacement method configured")
            pending = self._pending_ann.pop(step.node, {})
            try:
                detail = self.replacer.request(step)
            except (KubernetesError, SlurmError):
                if pending:  # the eviction stands: record it alone
                    self._rmw(step.node, current, lambda n: planner.annotate_patch(n, pending))
                raise
            self._rmw(
                step.node,
                current,
                lambda n: planner.annotate_patch(
                    n,
                    {
                        **pending,
                        keys.replacement: step.incident,
                        keys.replacement_at: planner._iso(now),
                    },
                ),
            )
            self.metrics.incidents.labels("replacement_requested").inc()
            cordoned_at = planner.node_annotations(current[step.node]).get(keys.cordoned_at)
            _observe_since(self.metrics.cordon_to_replacement, cordoned_at, now)
            log.warning(
                "node=%s incident=%s replacement requested: %s", step.node, step.incident, detail
            )
            return StepResult(step, "done", detail)
        if isinstance(step, planner.Uncordon):
            ann = planner.node_annotations(current[step.node])
            out_since = ann.get(keys.drained_at) or ann.get(keys.cordoned_at)
            self._rmw(step.node, current, lambda n: planner.uncordon_patch(n, self.cfg))
            self.metrics.incidents.labels("uncordon").inc()
            _observe_since(self.metrics.drain_to_back, out_since, now)
            log.warning(
                "node=%s incident=%s Slurm resumed the node: taint and annotations removed%s",
                step.node,
                step.incident,
                ", uncordoned" if step.uncordon else " (cordon is not ours, kept)",
            )
            return StepResult(step, "done")
        raise TypeError(f"unknown step {step!r}")

    def _rmw(
        self, name: str, current: dict[str, Obj], make_patch: Callable[[Obj], dict[str, Any]]
    ) -> Obj:
        """A method, not a bare call: tests wrap it to kill the bridge mid-step."""
        return patch_node(self.kube, current, name, make_patch)

    def _evict(self, step: planner.Evict, current: dict[str, Obj]) -> StepResult:
        pods = self._pods.on(step.node)
        todo = planner.pods_to_evict(pods, keep_slurmd=step.keep_slurmd, cfg=self.cfg)
        evicted, blocked = evict_pods(self.kube, todo)
        if evicted:
            self.metrics.incidents.labels("pods_evicted").inc(evicted)
        if blocked:
            log.info(
                "node=%s eviction blocked by a disruption budget: %s", step.node, ", ".join(blocked)
            )
            return StepResult(step, "partial", f"{evicted} evicted, blocked: {', '.join(blocked)}")
        if not step.keep_slurmd:
            done: dict[str, str | None] = {self.keys.evicted: step.incident}
            if step.node in self._merge_evicted:
                # The replacement request follows in this pass: its PATCH
                # carries this annotation too (a crash in between evicts
                # again next pass, which finds nothing left to evict).
                self._pending_ann[step.node] = done
                return StepResult(step, "done", f"{evicted} evicted")
            self._rmw(step.node, current, lambda n: planner.annotate_patch(n, done))
        return StepResult(step, "done", f"{evicted} evicted")

    # -- loop -----------------------------------------------------------------

    def run(self, stop: threading.Event | None = None, *, once: bool = False) -> None:
        stop = stop or threading.Event()
        try:
            while not stop.is_set():
                started = time.monotonic()
                self.reconcile_once()
                if once:
                    return
                stop.wait(max(self.cfg.interval - (time.monotonic() - started), 0.0))
        finally:
            if self.elector is not None:
                self.elector.release()


#: With at least this many evictions in a pass, one pod LIST for the pass
#: (paged, cut to ``pod_view``) instead of one LIST per node.
POD_INDEX_MIN = 2

#: Pods per page of that LIST.
POD_PAGE = 500


def _evict_then_replace(steps: tuple[planner.Step, ...]) -> set[str]:
    """Nodes with both an Evict (not keeping slurmd) and a
    RequestReplacement in this plan: their evicted annotation goes with
    the replacement's PATCH."""
    evicts = {s.node for s in steps if isinstance(s, planner.Evict) and not s.keep_slurmd}
    return {s.node for s in steps if isinstance(s, planner.RequestReplacement)} & evicts


def _held_count(current: Mapping[str, Obj], names: Iterable[str], incident: str) -> int:
    """How many of ``names`` are Nodes carrying our incident annotation."""
    held = 0
    for name in names:
        node = current.get(name)
        if node is not None and incident in ((node.get("metadata") or {}).get("annotations") or ()):
            held += 1
    return held


def _cordons_first(steps: tuple[planner.Step, ...]) -> list[planner.Step]:
    """Every Cordon before any other step (otherwise in plan order): the pod
    LIST the evictions use is taken after the last cordon, so no pod can be
    scheduled onto an evicted node between the LIST and its cordon."""
    return sorted(steps, key=lambda s: not isinstance(s, planner.Cordon))


class _PodIndex:
    """Pods by ``spec.nodeName`` for one pass: one LIST for every eviction of
    the pass when there are several, the node's own LIST otherwise (a single
    incident never reads every pod of the cluster).  Taken on first use,
    after the pass's cordons; finished pods are filtered by the server."""

    def __init__(self, kube: KubeClient, evictions: int) -> None:
        self.kube = kube
        self.shared = evictions >= POD_INDEX_MIN
        self._by_node: dict[str, list[Obj]] | None = None

    def on(self, node: str) -> list[Obj]:
        if not self.shared:
            return list(
                self.kube.list(pods_path(), field_selector=f"spec.nodeName={node}").get("items")
                or []
            )
        if self._by_node is None:
            items = (
                self.kube.list(
                    pods_path(),
                    field_selector="status.phase!=Succeeded,status.phase!=Failed",
                    limit=POD_PAGE,
                    item_view=POD_VIEW,
                ).get("items")
                or []
            )
            by_node: dict[str, list[Obj]] = {}
            for pod in items:
                where = (pod.get("spec") or {}).get("nodeName")
                if where:
                    by_node.setdefault(where, []).append(pod)
            self._by_node = by_node
        return self._by_node.get(node, [])


def _describe(step: planner.Step) -> str:
    if isinstance(step, planner.Cordon):
        return f"cordon and taint {step.node} (incident {step.incident}: {step.reason})"
    if isinstance(step, planner.ClaimSpare):
        return f"resume spare {step.spare} for {step.node}"
    if isinstance(step, planner.Evict):
        return f"evict pods from {step.node}" + (" (keeping slurmd)" if step.keep_slurmd else "")
    if isinstance(step, planner.RequestReplacement):
        return f"request a replacement for {step.node} (incident {step.incident})"
    return f"remove our taint from {step.node}" + (" and uncordon" if step.uncordon else "")
