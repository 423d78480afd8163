"""Carries out the lending planner's steps; called by the bridge each pass.

Reads what the planner needs (inference demand from pending pods or a
ConfigMap, pending Slurm jobs, pods on lent nodes), calls the pure
``lending.plan_lending`` and executes its steps.  Every step is safe to
repeat: Slurm writes go through read-before-write checks on the reason
(only our own LEND with the same incident is ever resumed), and Kubernetes
writes are read-modify-write patches carrying the resourceVersion.

Order of writes, chosen so that a crash between any two calls loses
nothing and never hands a node to both sides:

* lend:    Slurm drain (LEND) -> Slurm shows it idle+drained -> K8s open.
* reclaim: K8s cordon + taint + label off (recorded) -> evictions ->
  no pods left -> Slurm resume (reason still our LEND) -> K8s marks cleared.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from slurm_hooks.bridge import lending as L
from slurm_hooks.bridge import plan as bridge_plan
from slurm_hooks.bridge._exec import Obj, evict_pods, patch_node
from slurm_hooks.bridge.lending_inputs import pod_gpus
from slurm_hooks.bridge.metrics import BridgeMetrics
from slurm_hooks.bridge.settings import ALL_NAMESPACES, BridgeConfig
from slurm_hooks.core.errors import (
    ForeignReasonError,
    KubernetesError,
    ReasonChanged,
    SlurmError,
)
from slurm_hooks.core.reason import DrainReason
from slurm_hooks.k8s.client import KubeClient, pods_path
from slurm_hooks.slurm.base import SlurmClient
from slurm_hooks.slurm.door import SlurmDoor
from slurm_hooks.store.audit import AuditLog

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LendResult:
    step: L.Step
    #: done, partial, failed, skipped or dry-run
    outcome: str
    detail: str = ""


@dataclass(frozen=True)
class LendPass:
    plan: L.LendPlan
    results: tuple[LendResult, ...] = ()
    demand: L.Demand = field(default_factory=L.Demand)

    def outcomes(self, outcome: str) -> list[LendResult]:
        return [r for r in self.results if r.outcome == outcome]

    def moves(self) -> list[str]:
        """``Lend n1``-style names of the non-bookkeeping steps done."""
        return [
            f"{type(r.step).__name__} {r.step.slurm_node}"
            for r in self.results
            if not isinstance(r.step, L.Track) and r.outcome == "done"
        ]


def read_pending_jobs(slurm: SlurmClient) -> list[L.PendingJob]:
    """Pending jobs with reason, priority and GRES.  The cli backend's
    ``raw`` runs squeue through its retry/timeout path; other backends give
    JobInfo without a reason, so every pending job counts (conservative: it
    may take nodes back that a job did not strictly need)."""
    raw = getattr(slurm, "raw", None)
    if callable(raw):
        out = raw("squeue", "-h", "-t", "PENDING", "-o", L.SQUEUE_PENDING_FORMAT)
        jobs, bad = L.parse_pending_jobs(out)
        if bad:
            log.warning("squeue: skipped %d malformed pending-job line(s)", bad)
        return jobs
    return [
        L.PendingJob(
            j.job_id,
            tuple(p for p in (j.partition or "").split(",") if p),
            j.num_nodes or 1,
            "Resources",
        )
        for j in slurm.list_jobs(["PENDING"])
    ]


class Lender:
    """Lending and reclaiming, one ``reconcile`` per bridge pass."""

    def __init__(
        self,
        slurm: SlurmClient,
        kube: KubeClient,
        cfg: BridgeConfig,
        *,
        metrics: BridgeMetrics | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        audit: AuditLog | None = None,
        new_incident: Callable[[], str] | None = None,
        pending_jobs: Callable[[SlurmClient], list[L.PendingJob]] = read_pending_jobs,
    ) -> None:
        self.slurm = slurm
        self.kube = kube
        self.cfg = cfg
        self.lc = cfg.lending
        self.metrics = metrics or BridgeMetrics()
        self.clock = clock
        self.audit = audit
        self.new_incident = new_incident
        self.pending_jobs = pending_jobs
        self.keys = L.LendKeys(cfg.annotation_prefix)
        self.hosts: list[str] | None = None
        if self.lc.nodes:
            from slurm_hooks.core.hostlist import expand

            self.hosts = expand(self.lc.nodes)
        self._accounted_at: datetime | None = None

    @property
    def dry_run(self) -> bool:
        return self.cfg.dry_run or self.lc.dry_run

    # -- reads -----------------------------------------------------------------

    def read_demand(self) -> L.Demand:
        lc = self.lc
        target = None
        if lc.demand_configmap:
            ns, name = lc.demand_configmap.split("/")
            try:
                cm = self.kube.get(f"/api/v1/namespaces/{ns}/configmaps/{name}")
            except KubernetesError as exc:
                if exc.status != 404:
                    raise
                cm = None
            target = L.parse_demand_configmap(cm, lc.demand_key)
        if not (lc.pod_selector or lc.priority_classes):
            return L.Demand(target=target)
        path = pods_path() if lc.pod_namespace == ALL_NAMESPACES else pods_path(lc.pod_namespace)
        # Server-side label filtering only when the selector is the sole criterion.
        selector = lc.pod_selector if not lc.priority_classes else None
        pods = (
            self.kube.list(
                path, label_selector=selector, field_selector="status.phase=Pending"
            ).get("items")
            or []
        )
        return L.pod_demand(pods, lc, target)

    def _workload_pods(self, node: str) -> list[Obj]:
        pods = (
            self.kube.list(pods_path(), field_selector=f"spec.nodeName={node}").get("items") or []
        )
        return [p for p in pods if _is_workload(p, self.cfg)]

    # -- the pass -----------------------------------------------------------------

    def reconcile(self, states: list[Any], nodes: dict[str, Obj]) -> LendPass:
        """``states``: Slurm's nodes as read this pass; ``nodes``: Kubernetes
        Node objects by name, as the bridge last read or wrote them (updated
        in place by our patches)."""
        now = self.clock()
        demand = self.read_demand()
        keys = self.keys
        lent_any = any(L.lend_incident(s) for s in states) or any(
            keys.lent in bridge_plan.node_annotations(n) for n in nodes.values()
        )
        jobs: list[L.PendingJob] = []
        if lent_any or demand.pod_nodes or demand.target:
            try:
                jobs = self.pending_jobs(self.slurm)
            except SlurmError as exc:
                # Without the queue we cannot tell whether Slurm needs nodes:
                # lend nothing this pass (reclaims wait for the next one).
                log.warning("pending jobs unknown (%s): lending paused this pass", exc)
                demand = L.Demand()
        pods: dict[str, list[Obj]] = {}
        if L.eligible_jobs(jobs, self.lc):
            for name, node in nodes.items():
                if keys.lent in bridge_plan.node_annotations(node):
                    pods[name] = self._workload_pods(name)
        the_plan = L.plan_lending(
            states,
            list(nodes.values()),
            self.cfg,
            now,
            demand=demand,
            jobs=jobs,
            pods=pods,
            hosts=self.hosts,
            new_incident=self.new_incident,
        )
        self._account(the_plan, now)
        for note in the_plan.notes:
            log.info("lending: node=%s %s", note.node or "-", note.why)
        results: list[LendResult] = []
        for step in the_plan.steps:
            if self.dry_run and not isinstance(step, L.Track):
                log.info("dry-run: would %s", L.describe(step))
                results.append(LendResult(step, "dry-run", L.describe(step)))
                continue
            if self.dry_run:
                continue
            try:
                res = self._execute(step, nodes, states, now)
            except (KubernetesError, SlurmError) as exc:
                log.error("lending: node=%s %s failed: %s", step.node, type(step).__name__, exc)
                res = LendResult(step, "failed", str(exc))
            results.append(res)
        lent_now = sum(
            1
            for n in nodes.values()
            if keys.lent in bridge_plan.node_annotations(n)
            and keys.reclaiming not in bridge_plan.node_annotations(n)
        )
        self.metrics.nodes_lent.set(lent_now)
        self.metrics.lend_demand.labels("slurm").set(the_plan.slurm_need)
        self.metrics.lend_demand.labels("kubernetes").set(the_plan.k8s_want)
        return LendPass(the_plan, tuple(results), demand)

    def _account(self, the_plan: L.LendPlan, now: datetime) -> None:
        """GPU-hours lent: GPUs out of Slurm for lending x time since the last pass."""
        if self._accounted_at is not None:
            hours = max((now - self._accounted_at).total_seconds(), 0.0) / 3600.0
            gpus = sum(
                g
                for n, g in the_plan.lent_gpus.items()
                if not any(isinstance(s, L.Lend) and s.slurm_node == n for s in the_plan.steps)
            )
            if gpus and hours:
                self.metrics.gpu_hours_lent.inc(gpus * hours)
        self._accounted_at = now

    # -- steps ---------------------------------------------------------------------

    def _execute(
        self, step: L.Step, nodes: dict[str, Obj], states: list[Any], now: datetime
    ) -> LendResult:
        if isinstance(step, L.Track):
            self._rmw(step.node, nodes, lambda n: L.track_patch(n, step, self.cfg, now))
            return LendResult(step, "done", L.describe(step))
        if isinstance(step, L.Lend):
            return self._lend(step, nodes, now)
        if isinstance(step, L.Open):
            return self._open(step, nodes, now)
        if isinstance(step, L.Abort):
            if not self._resume_lent(step.slurm_node, step.incident):
                return LendResult(step, "skipped", "reason changed meanwhile")
            self._event("aborted", step, why="a job started on the node before it was lent")
            return LendResult(step, "done")
        return self._reclaim(step, nodes, now)

    @property
    def door(self) -> SlurmDoor:
        """Every Slurm write goes through the door (ownership guard)."""
        return SlurmDoor(self.slurm)

    def _resume_lent(self, node: str, incident: str) -> bool:
        """Resume ``node`` only while it carries our plain LEND of ``incident``
        (a fault's reason written meanwhile wins); False when it did not."""

        def lent_by_us(r: DrainReason) -> bool:
            return r.code == L.LEND_CODE and not r.extra and r.incident == incident

        try:
            return self.door.resume(node, owned=lent_by_us)
        except ForeignReasonError as exc:
            log.warning("lending: node=%s not resumed (a fault wins): %s", node, exc)
            return False

    def _lend(self, step: L.Lend, nodes: dict[str, Obj], now: datetime) -> LendResult:
        view = self.door.look(step.slurm_node)  # read before writing
        current = view.node
        # A stale reason (Slurm 24.11 keeps it on a resumed node) claims nothing.
        if view.ownership.claimed or current.drained or current.down or current.busy:
            return LendResult(step, "skipped", f"node changed: {current.state} {current.reason}")
        try:
            self.door.drain(step.slurm_node, L.lend_reason(step.incident, self.lc), over_ours=False)
        except (ForeignReasonError, ReasonChanged) as exc:  # drained by someone meanwhile
            return LendResult(step, "skipped", f"node changed: {exc}")
        self._event("lent", step, why=f"idle {step.idle_for:.0f}s, inference demand")
        after = self.slurm.get_node(step.slurm_node)
        if after.busy or L.lend_incident(after) != step.incident:
            # A job raced in: the next pass aborts (resumes) or waits.
            return LendResult(step, "partial", "drained, but Slurm shows it busy")
        return self._open(L.Open(step.node, step.slurm_node, step.incident), nodes, now, step)

    def _open(
        self, step: L.Open, nodes: dict[str, Obj], now: datetime, shown: L.Step | None = None
    ) -> LendResult:
        self._rmw(step.node, nodes, lambda n: L.open_patch(n, step, self.cfg, now))
        self._event("opened", shown or step, why="schedulable for inference")
        return LendResult(shown or step, "done", f"incident {step.incident}")

    def _reclaim(self, step: L.Reclaim, nodes: dict[str, Obj], now: datetime) -> LendResult:
        keys = self.keys
        ann = bridge_plan.node_annotations(nodes[step.node])
        if ann.get(keys.reclaiming) != step.incident:
            self._rmw(step.node, nodes, lambda n: L.reclaim_patch(n, step, self.cfg, now))
            self._event("reclaim" if step.resume else "withdrawn", step, why=step.why)
        evicted, blocked = self._evict(step.node)
        left = self._workload_pods(step.node)
        if left and step.force:
            for pod in left:
                md = pod["metadata"]
                try:
                    self.kube.delete(pods_path(md["namespace"], md["name"]))
                except KubernetesError as exc:
                    if exc.status != 404:
                        raise
            self._event("forced", step, why=f"drain timeout: {len(left)} pod(s) deleted")
            left = []
        if left:
            self.metrics.lend_events.labels("evict_blocked").inc(len(blocked) or 0)
            why = f"{evicted} evicted, {len(left)} left"
            if blocked:
                why += f" (disruption budget: {', '.join(blocked)})"
            return LendResult(step, "partial", why)
        resumed = False
        if step.resume:
            resumed = self._resume_lent(step.slurm_node, step.incident)
        self._rmw(step.node, nodes, lambda n: L.finish_patch(n, self.cfg, now))
        self._event("returned" if resumed else "released", step, why=step.why, evicted=evicted)
        return LendResult(
            step, "done", f"{evicted} evicted, {'resumed' if resumed else 'released'}"
        )

    def _evict(self, node: str) -> tuple[int, list[str]]:
        # Every pod that must leave (:func:`_is_workload`) and is not on its way out.
        todo = [
            p
            for p in self._workload_pods(node)
            if not (p.get("metadata") or {}).get("deletionTimestamp")
        ]
        evicted, blocked = evict_pods(self.kube, todo)
        if evicted:
            self.metrics.lend_events.labels("pods_evicted").inc(evicted)
        return evicted, blocked

    def _rmw(
        self, name: str, nodes: dict[str, Obj], make_patch: Callable[[Obj], dict[str, Any]]
    ) -> Obj:
        return patch_node(self.kube, nodes, name, make_patch)

    def _event(self, event: str, step: L.Step, **fields: Any) -> None:
        self.metrics.lend_events.labels(event).inc()
        log.warning(
            "lending: %s node=%s slurm_node=%s incident=%s %s",
            event,
            step.node,
            step.slurm_node,
            getattr(step, "incident", ""),
            fields.get("why", ""),
        )
        if self.audit is not None:
            self.audit.record(
                f"lend.{event}",
                node=step.slurm_node,
                k8s_node=step.node,
                incident=getattr(step, "incident", None),
                **fields,
            )


def _is_workload(pod: Mapping[str, Any], cfg: BridgeConfig) -> bool:
    """A pod that must leave a reclaimed node before Slurm has it back: one
    that holds GPUs (``gpu_resource``), whatever it claims to be, and any
    other that is not a DaemonSet or mirror pod; never the node's slurmd pod
    (:func:`bridge.plan.is_slurmd_pod`), nor a finished one.  Terminating
    pods count (their GPUs are not free yet).  An owner reference, a mirror
    annotation and labels are the pod's creator's to write: a tenant's pod
    dressed as a DaemonSet's must not keep GPUs Slurm's jobs get next."""
    md = pod.get("metadata") or {}
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    if bridge_plan.is_slurmd_pod(pod, cfg):
        return False
    if pod_gpus(pod, cfg.lending.gpu_resource) > 0:
        return True
    if bridge_plan.MIRROR_ANNOTATION in (md.get("annotations") or {}):
        return False
    return not any(o.get("kind") == "DaemonSet" for o in md.get("ownerReferences") or [])
