"""Lending idle Slurm nodes to Kubernetes inference: the pure policy.

One pool of GPUs, and Slurm decides.  A node is lent only when Kubernetes
asks for capacity (Pending, unschedulable inference pods, or a target in a
ConfigMap) and only after it has been idle in Slurm for a while; it comes
back as soon as pending Slurm jobs need it.  Everything here is pure: the
executor (``lend_exec``) reads Slurm and Kubernetes, calls ``plan_lending``
with ``now`` and carries the steps out.

Where the state lives, so that a restarted bridge picks up where it stopped:

* Slurm: the drain reason ``slurm-hooks/1 LEND inc=<id> :: lent to ...``.
  Its reason time is the moment of lending.  Only a reason that still parses
  as our LEND with the same incident is ever resumed by us: a fault reason
  written over it (the hooks found an XID on the lent node) wins, and the
  bridge's fault path owns the node from there; it returns to Slurm only
  through acceptance.
* Kubernetes, annotations on the Node (``LendKeys``): which lend incident the
  node serves, when it was lent, when a reclaim started, when it was handed
  back (minimum stay in Slurm), and since when Slurm has shown it idle.

Node life cycle (K8s side in brackets):

    Slurm-owned [reserve taint]  --idle long enough + demand-->  Lend (drain LEND)
    --> Open [taint removed, uncordoned, lent label]  --pending jobs-->
    Reclaim [cordon + taint, label removed, pods evicted]  --> resume in Slurm
    --> Slurm-owned [cordoned + reserve taint, reclaimed-at]
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from slurm_hooks.bridge import plan as bridge_plan
from slurm_hooks.bridge.settings import BridgeConfig, LendingConfig
from slurm_hooks.core.model import NodeState
from slurm_hooks.core.reason import DrainReason, format_reason, try_parse_reason
from slurm_hooks.k8s.selectors import label_selector_matches

Obj = Mapping[str, Any]

LEND_CODE = "LEND"
#: Flags that keep an idle node out of lending (Slurm has plans for it).
_BLOCKING_FLAGS = frozenset(
    {"DRAIN", "NOT_RESPONDING", "MAINTENANCE", "RESERVED", "POWERED_DOWN", "POWERING_DOWN"}
)
_SUPPLY_BLOCKING = _BLOCKING_FLAGS - {"NOT_RESPONDING"}
_GPU_GRES_RE = re.compile(r"(?:^|,)gpu(?::[A-Za-z0-9_.-]+)?:(\d+)")


class LendKeys:
    """Our annotation names under the bridge's ``annotation_prefix``.  None
    of them is a bridge (fault) key, so the two never clear each other's."""

    def __init__(self, prefix: str) -> None:
        #: lend incident the node serves (set when it is opened to inference)
        self.lent = f"{prefix}/lent-incident"
        self.lent_at = f"{prefix}/lent-at"
        #: lend incident being reclaimed, and since when
        self.reclaiming = f"{prefix}/reclaiming"
        self.reclaim_at = f"{prefix}/reclaim-started-at"
        #: when the node was last handed back to Slurm (minimum stay)
        self.reclaimed_at = f"{prefix}/reclaimed-at"
        #: since when Slurm has shown the node idle
        self.idle_since = f"{prefix}/idle-since"
        #: "true" only when we set spec.unschedulable ourselves
        self.reserve_cordon = f"{prefix}/reserve-cordon"


# -- inputs ---------------------------------------------------------------------


@dataclass(frozen=True)
class PendingJob:
    """A pending Slurm job as far as reclaiming needs it."""

    job_id: str
    partitions: tuple[str, ...]
    num_nodes: int
    reason: str
    priority: int = 0
    #: squeue's %b (tres per node), e.g. ``gres:gpu:8``; None when none.
    gres: str | None = None


@dataclass(frozen=True)
class Demand:
    """What Kubernetes asks for.  ``pod_nodes``: nodes the pending inference
    pods need; ``target``: nodes a ConfigMap wants lent (None: no ConfigMap)."""

    pod_nodes: int = 0
    pending_pods: int = 0
    target: int | None = None


# -- steps ----------------------------------------------------------------------


@dataclass(frozen=True)
class Track:
    """Bookkeeping on a Slurm-owned node: idle-since and the reserve taint."""

    node: str
    slurm_node: str
    #: set idle-since to this ISO time; None: leave it
    idle_since: str | None = None
    clear_idle: bool = False
    add_taint: bool = False


@dataclass(frozen=True)
class Lend:
    """Drain in Slurm with our LEND reason; once Slurm shows the node idle
    and drained, open it to inference (the executor does both in one go)."""

    node: str
    slurm_node: str
    incident: str
    idle_for: float


@dataclass(frozen=True)
class Open:
    """Slurm has the node drained for LEND: make it schedulable for inference."""

    node: str
    slurm_node: str
    incident: str


@dataclass(frozen=True)
class Abort:
    """A job raced in between our idle check and the drain: give the node
    straight back to Slurm (the reason is still our LEND)."""

    node: str
    slurm_node: str
    incident: str


@dataclass(frozen=True)
class Reclaim:
    """Take a lent node back: cordon + taint + label off (once), evict its
    inference pods, then resume it in Slurm if ``resume`` (the reason is
    still our LEND), else only clear our marks (a fault took over)."""

    node: str
    slurm_node: str
    incident: str
    resume: bool
    #: when the reclaim began (None: this pass begins it)
    started: datetime | None
    #: the drain timeout has passed and on_drain_timeout is "force"
    force: bool = False
    why: str = ""


Step = Track | Lend | Open | Abort | Reclaim


@dataclass(frozen=True)
class Note:
    """Something we would do but may not (a cap, hysteresis, a cordon that
    is not ours); for the log and the metrics."""

    node: str
    why: str


@dataclass(frozen=True)
class LendPlan:
    steps: tuple[Step, ...]
    notes: tuple[Note, ...] = ()
    #: Slurm node -> GPUs, for the nodes out of Slurm for lending now
    lent_gpus: Mapping[str, int] = field(default_factory=dict)
    #: nodes Slurm's pending jobs need back / nodes Kubernetes asks for
    slurm_need: int = 0
    k8s_want: int = 0

    def of(self, kind: type) -> list[Any]:
        return [s for s in self.steps if isinstance(s, kind)]


# -- small pure helpers -------------------------------------------------------------


def lend_reason(incident: str, cfg: LendingConfig) -> str:
    return format_reason(DrainReason(LEND_CODE, incident, cfg.reason_text))


def lend_incident(state: NodeState) -> str | None:
    """The incident of our LEND drain on ``state``, or None.  A LEND reason
    that carries extra fields (for example ``repl=requested`` added by the
    policy for a fault seen meanwhile) is not a plain lend any more."""
    if not (state.drained or state.down) or not state.reason:
        return None
    ours = try_parse_reason(state.reason)
    if ours is None or ours.code != LEND_CODE or ours.extra:
        return None
    return ours.incident


def gpu_count(gres: str | None, default: int) -> int:
    """GPUs in a Slurm Gres string: ``gpu:8``, ``gpu:h100:8(S:0-1)``,
    ``gpu:a100:4,gpu:h100:4``; ``default`` when it names none."""
    if not gres:
        return default
    total = sum(int(m.group(1)) for m in _GPU_GRES_RE.finditer(gres.replace(" ", "")))
    return total or default


def wants_gpu(gres: str | None) -> bool:
    return bool(gres) and "gpu" in str(gres)


def in_scope(state: NodeState, cfg: LendingConfig, hosts: frozenset[str] | None) -> bool:
    if hosts is not None and state.name not in hosts:
        return False
    if cfg.partitions and not set(cfg.partitions) & set(state.partitions):
        return False
    return all(f in state.features for f in cfg.features)


def is_ready(node: Obj) -> bool:
    """Kubernetes' Ready condition; a node reporting no conditions counts
    as ready (the stand-in, a node registering)."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return True


def has_taint(node: Obj, key: str) -> bool:
    return any(t.get("key") == key for t in (node.get("spec") or {}).get("taints") or [])


def _seconds(since: datetime | None, now: datetime) -> float | None:
    if since is None:
        return None
    if since.tzinfo is None and now.tzinfo is not None:
        since = since.astimezone()  # Slurm's times are local
    return (now - since).total_seconds()


def _ann_time(node: Obj, key: str) -> datetime | None:
    return bridge_plan.parse_time(bridge_plan.node_annotations(node).get(key))


def iso(when: datetime) -> str:
    return bridge_plan._iso(when)


def is_unschedulable_pod(pod: Obj) -> bool:
    """Pending with PodScheduled=False/Unschedulable: the scheduler tried and
    found no node (a pod merely not yet looked at gives no demand)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Pending" or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or []
    )


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def pod_gpus(pod: Obj, resource: str) -> int:
    """GPUs a pod asks for: sum over containers (limits, else requests),
    at least the largest init container's."""
    spec = pod.get("spec") or {}

    def ask(c: Obj) -> int:
        res = c.get("resources") or {}
        return _quantity(
            (res.get("limits") or {}).get(resource, (res.get("requests") or {}).get(resource, 0))
        )

    main = sum(ask(c) for c in spec.get("containers") or [])
    init = max((ask(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def is_inference_pod(pod: Obj, cfg: LendingConfig) -> bool:
    """Matches the configured label selector or one of the priority classes."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if cfg.pod_selector and label_selector_matches(cfg.pod_selector, labels):
        return True
    return (pod.get("spec") or {}).get("priorityClassName") in cfg.priority_classes


def pod_demand(pods: Iterable[Obj], cfg: LendingConfig, target: int | None = None) -> Demand:
    """Nodes the unschedulable inference pods need: their GPUs packed into
    nodes of ``gpus_per_node``; a pod asking for no GPU takes a node."""
    gpus = 0
    whole = 0
    count = 0
    for pod in pods:
        if not is_unschedulable_pod(pod):
            continue
        if not is_inference_pod(pod, cfg):
            continue
        count += 1
        n = pod_gpus(pod, cfg.gpu_resource)
        if n:
            gpus += n
        else:
            whole += 1
    nodes = math.ceil(gpus / cfg.gpus_per_node) + whole
    return Demand(pod_nodes=nodes, pending_pods=count, target=target)


def parse_demand_configmap(cm: Obj | None, key: str) -> int | None:
    """The target in a ConfigMap; None when absent or not a number >= 0."""
    if not cm:
        return None
    raw = (cm.get("data") or {}).get(key)
    try:
        value = int(str(raw).strip())
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


#: squeue -o for read_pending_jobs: the free-text reason goes last.
SQUEUE_SEP = "\x1f"
SQUEUE_PENDING_FORMAT = SQUEUE_SEP.join(("%i", "%P", "%D", "%Q", "%b", "%r"))


def parse_pending_jobs(text: str) -> tuple[list[PendingJob], int]:
    """Output of ``squeue -h -t PENDING -o SQUEUE_PENDING_FORMAT``; returns
    the jobs and the count of malformed lines skipped."""
    jobs: list[PendingJob] = []
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(SQUEUE_SEP, 5)
        if len(parts) != 6:
            bad += 1
            continue
        jid, part, num, prio, gres, reason = (p.strip() for p in parts)
        try:
            n = int(num.split("-")[0])
            p = int(prio)
        except ValueError:
            bad += 1
            continue
        jobs.append(
            PendingJob(
                job_id=jid,
                partitions=tuple(x for x in part.split(",") if x),
                num_nodes=max(n, 1),
                reason=reason.strip("()"),
                priority=p,
                gres=None if gres in ("", "N/A", "(null)") else gres,
            )
        )
    return jobs, bad


def eligible_jobs(jobs: Iterable[PendingJob], cfg: LendingConfig) -> list[PendingJob]:
    """Pending jobs that lent nodes could cure, highest priority first."""
    out = [
        j
        for j in jobs
        if any(j.reason.startswith(r) for r in cfg.reclaim_reasons)
        and (not cfg.partitions or not j.partitions or set(j.partitions) & set(cfg.partitions))
    ]
    return sorted(out, key=lambda j: (-j.priority, j.job_id))


def serves(state: NodeState, job: PendingJob) -> bool:
    if job.partitions and not set(job.partitions) & set(state.partitions):
        return False
    return not (wants_gpu(job.gres) and not wants_gpu(state.gres))


def reclaim_order(pods: Sequence[Obj]) -> tuple[int, int]:
    """Fewest pods first, then the lowest highest pod priority."""
    prio = max((int((p.get("spec") or {}).get("priority") or 0) for p in pods), default=0)
    return (len(pods), prio)


# -- the planner -----------------------------------------------------------------


def plan_lending(
    states: Sequence[NodeState],
    k8s_nodes: Sequence[Obj],
    cfg: BridgeConfig,
    now: datetime,
    *,
    demand: Demand,
    jobs: Sequence[PendingJob] = (),
    pods: Mapping[str, Sequence[Obj]] | None = None,
    hosts: Iterable[str] | None = None,
    new_incident: Any = None,
) -> LendPlan:
    """Decide one pass.  ``pods``: Kubernetes node -> workload pods (only the
    lent nodes are needed, for the reclaim order); ``hosts``: the expanded
    ``lending.nodes`` hostlist; ``new_incident``: a callable giving incident
    ids (tests pass a deterministic one)."""
    lc = cfg.lending
    keys = LendKeys(cfg.annotation_prefix)
    bkeys = bridge_plan.Keys(cfg.annotation_prefix)
    host_set = frozenset(hosts) if hosts is not None and lc.nodes else None
    if new_incident is None:
        from slurm_hooks.core.reason import new_incident_id

        new_incident = new_incident_id
    pods = pods or {}
    by_name = {s.name: s for s in states}
    scope = [s for s in states if in_scope(s, lc, host_set)]
    mapping = bridge_plan.map_nodes([s.name for s in scope], k8s_nodes, cfg)

    steps: list[Step] = []
    notes: list[Note] = []
    lent_gpus: dict[str, int] = {}
    #: opened, reclaimable lent nodes: slurm name -> (k8s node, lent at)
    lent_open: dict[str, tuple[Obj, datetime | None]] = {}
    reclaiming: set[str] = set()
    in_flight = 0
    candidates: list[tuple[float, str]] = []
    #: idle, Slurm-owned nodes in scope (the floor counts these)
    idle_owned: list[str] = []

    for state in sorted(scope, key=lambda s: s.name):
        node = mapping.get(state.name)
        if node is None:
            continue
        k = bridge_plan.node_name(node)
        ann = bridge_plan.node_annotations(node)
        inc = lend_incident(state)
        opened = ann.get(keys.lent)
        marked = ann.get(keys.reclaiming)
        gpus = gpu_count(state.gres, lc.gpus_per_node)

        if inc is not None:
            lent_gpus[state.name] = gpus
            if marked == inc:
                started = _ann_time(node, keys.reclaim_at) or now
                reclaiming.add(state.name)
                steps.append(
                    Reclaim(
                        k,
                        state.name,
                        inc,
                        resume=True,
                        started=started,
                        force=_timed_out(started, now, lc),
                        why="reclaim in progress",
                    )
                )
            elif opened != inc:
                if state.busy:
                    if opened is None:
                        steps.append(Abort(k, state.name, inc))
                    continue  # our drain waits for a job that raced in
                steps.append(Open(k, state.name, inc))
                in_flight += 1
            else:
                lent_at = _ann_time(node, keys.lent_at) or state.reason_time
                age = _seconds(lent_at, now)
                if age is not None and age < lc.settle_seconds:
                    in_flight += 1
                lent_open[state.name] = (node, lent_at)
            continue

        if opened is not None or marked is not None:
            # We had lent it, and Slurm no longer says LEND: a fault reason
            # replaced ours, an admin resumed it, or we resumed it and stopped
            # before clearing our marks.  Take it out of inference; never
            # resume it ourselves.
            began = _ann_time(node, keys.reclaim_at) if marked else None
            steps.append(
                Reclaim(
                    k,
                    state.name,
                    marked or opened or "",
                    resume=False,
                    started=began,
                    force=began is not None and _timed_out(began, now, lc),
                    why=f"Slurm reason is no longer our LEND ({state.reason or 'none'})",
                )
            )
            continue

        # Slurm owns the node: bookkeeping, then is it a candidate?
        idle = state.state == "idle" and not state.busy and not (_BLOCKING_FLAGS & set(state.flags))
        since = _idle_since(state, node, keys)
        track = Track(k, state.name)
        if idle and since is None:
            track = Track(k, state.name, idle_since=iso(now))
            since = now
        elif not idle and keys.idle_since in ann:
            track = Track(k, state.name, clear_idle=True)
        if lc.reserve_taint_key and not has_taint(node, lc.reserve_taint_key):
            track = Track(k, state.name, track.idle_since, track.clear_idle, add_taint=True)
        if track != Track(k, state.name):
            steps.append(track)
        if not idle:
            continue
        idle_owned.append(state.name)
        why = _not_lendable(node, state, since, now, lc, keys, bkeys)
        if why:
            notes.append(Note(k, why))
            continue
        idle_for = _seconds(since, now) or 0.0
        candidates.append((idle_for, state.name))

    # -- Slurm first: what do pending jobs need back? -------------------------
    # Supply Slurm has already: idle nodes, including ``idle*`` (a node just
    # resumed shows NOT_RESPONDING until slurmctld's next ping).
    pool = {
        s.name: s
        for s in states
        if s.state == "idle" and not s.busy and not (_SUPPLY_BLOCKING & set(s.flags))
    }
    for name in reclaiming:
        pool[name] = by_name[name]
    reserved: set[str] = set()
    available = dict(lent_open)
    need_total = 0
    for job in eligible_jobs(jobs, lc):
        need = job.num_nodes
        for name in sorted(pool):
            if need and name not in reserved and serves(pool[name], job):
                reserved.add(name)
                need -= 1
        if not need:
            continue
        need_total += need
        usable = [n for n in available if serves(by_name[n], job)]
        young = []
        ready = []
        for n in usable:
            node, lent_at = available[n]
            age = _seconds(lent_at, now)
            if age is not None and age < lc.min_lend_seconds:
                young.append(n)
            elif not is_ready(node) or bkeys.incident in bridge_plan.node_annotations(node):
                notes.append(
                    Note(bridge_plan.node_name(node), "lent node not ready: not reclaimed")
                )
            else:
                ready.append(n)
        ready.sort(
            key=lambda n: (reclaim_order(pods.get(bridge_plan.node_name(available[n][0]), ())), n)
        )
        for n in ready[:need]:
            node, _ = available.pop(n)
            steps.append(
                Reclaim(
                    bridge_plan.node_name(node),
                    n,
                    lend_incident(by_name[n]) or "",
                    resume=True,
                    started=None,
                    why=f"job {job.job_id} pending ({job.reason}) needs {job.num_nodes} node(s)",
                )
            )
            reserved.add(n)
        for n in young[: max(need - len(ready), 0)]:
            notes.append(
                Note(
                    bridge_plan.node_name(available[n][0]),
                    f"lent less than min_lend_seconds ({lc.min_lend_seconds:g}s): "
                    f"job {job.job_id} waits",
                )
            )

    # -- then Kubernetes: lend only when asked, and never what Slurm needs ------
    taken_back = sum(1 for s in steps if isinstance(s, Reclaim) and s.resume and s.started is None)
    lent_count = len(lent_gpus) - len(reclaiming) - taken_back
    want = max(demand.pod_nodes - in_flight, 0)
    if demand.target is not None:
        want = max(want, demand.target - lent_count)
    if want and need_total:
        notes.append(Note("", f"Slurm has {need_total} node(s) of pending work: lending nothing"))
        want_now = 0
    else:
        want_now = want
    if want_now:
        cap = math.floor(lc.max_lent_fraction * len(scope))
        idle_left = sum(1 for n in idle_owned if n not in reserved)
        room = min(
            cap - lent_count,
            idle_left - lc.min_idle_nodes,
            lc.max_lend_per_pass,
        )
        if room < want_now:
            notes.append(
                Note(
                    "",
                    f"lending capped: want {want_now}, may lend {max(room, 0)} "
                    f"(lent {lent_count}/{cap}, idle floor {lc.min_idle_nodes}, "
                    f"per pass {lc.max_lend_per_pass})",
                )
            )
        picks = sorted((c for c in candidates if c[1] not in reserved), key=lambda c: (-c[0], c[1]))
        for idle_for, name in picks[: max(min(want_now, room), 0)]:
            node = mapping[name]
            steps.append(Lend(bridge_plan.node_name(node), name, new_incident(), idle_for))
            lent_gpus[name] = gpu_count(by_name[name].gres, lc.gpus_per_node)
    return LendPlan(tuple(steps), tuple(notes), lent_gpus, need_total, want)


def _timed_out(started: datetime, now: datetime, lc: LendingConfig) -> bool:
    age = _seconds(started, now) or 0.0
    return lc.on_drain_timeout == "force" and age >= lc.drain_timeout


def _idle_since(state: NodeState, node: Obj, keys: LendKeys) -> datetime | None:
    """Slurm's own LastBusyTime when the access layer reports it (22.05+
    prints it in ``scontrol show node``), else our annotation."""
    last_busy = getattr(state, "last_busy", None)
    if isinstance(last_busy, datetime):
        return last_busy
    return _ann_time(node, keys.idle_since)


def _not_lendable(
    node: Obj,
    state: NodeState,
    since: datetime | None,
    now: datetime,
    lc: LendingConfig,
    keys: LendKeys,
    bkeys: bridge_plan.Keys,
) -> str | None:
    ann = bridge_plan.node_annotations(node)
    if bkeys.incident in ann:
        return "held by the bridge for a fault"
    if not is_ready(node):
        return "Kubernetes node not Ready"
    if bridge_plan.is_unschedulable(node) and ann.get(keys.reserve_cordon) != "true":
        return "cordoned by someone else"
    idle_for = _seconds(since, now) or 0.0
    if idle_for < lc.idle_seconds:
        return f"idle {idle_for:.0f}s < {lc.idle_seconds:g}s"
    back = _seconds(_ann_time(node, keys.reclaimed_at), now)
    if back is not None and back < lc.min_slurm_seconds:
        return f"handed back {back:.0f}s ago < min_slurm_seconds {lc.min_slurm_seconds:g}s"
    return None


# -- patch bodies -------------------------------------------------------------------


def _taints_without(node: Obj, key: str) -> list[Any]:
    return [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != key]


def _reserve_taint(lc: LendingConfig) -> dict[str, Any]:
    return {"key": lc.reserve_taint_key, "value": "slurm", "effect": lc.reserve_taint_effect}


def _taint_list_with(node: Obj, lc: LendingConfig, now: datetime) -> list[Any]:
    taint = _reserve_taint(lc)
    if lc.reserve_taint_effect == "NoExecute":
        taint["timeAdded"] = iso(now)
    return _taints_without(node, lc.reserve_taint_key) + [taint]


def _rv(node: Obj) -> dict[str, Any]:
    return {"resourceVersion": node["metadata"]["resourceVersion"]}


def track_patch(node: Obj, step: Track, cfg: BridgeConfig, now: datetime) -> dict[str, Any]:
    lc = cfg.lending
    keys = LendKeys(cfg.annotation_prefix)
    body: dict[str, Any] = {"metadata": _rv(node)}
    ann: dict[str, str | None] = {}
    if step.idle_since is not None:
        ann[keys.idle_since] = step.idle_since
    if step.clear_idle:
        ann[keys.idle_since] = None
    if ann:
        body["metadata"]["annotations"] = ann
    if step.add_taint and lc.reserve_taint_key:
        body["spec"] = {"taints": _taint_list_with(node, lc, now)}
    return body


def open_patch(node: Obj, step: Open | Lend, cfg: BridgeConfig, now: datetime) -> dict[str, Any]:
    """Schedulable for inference: the reserve taint off, our cordon (the
    one our reserve-cordon annotation records) cleared, the lent label on."""
    lc = cfg.lending
    keys = LendKeys(cfg.annotation_prefix)
    ann = bridge_plan.node_annotations(node)
    spec: dict[str, Any] = {}
    if lc.reserve_taint_key and has_taint(node, lc.reserve_taint_key):
        spec["taints"] = _taints_without(node, lc.reserve_taint_key) or None
    if bridge_plan.is_unschedulable(node) and ann.get(keys.reserve_cordon) == "true":
        spec["unschedulable"] = None
    body: dict[str, Any] = {
        "metadata": {
            **_rv(node),
            "labels": {lc.lent_label: "true"},
            "annotations": {
                keys.lent: step.incident,
                keys.lent_at: iso(now),
                keys.idle_since: None,
                keys.reserve_cordon: None,
                keys.reclaimed_at: None,
                keys.reclaiming: None,
                keys.reclaim_at: None,
            },
        }
    }
    if spec:
        body["spec"] = spec
    return body


def reclaim_patch(node: Obj, step: Reclaim, cfg: BridgeConfig, now: datetime) -> dict[str, Any]:
    """Out of inference first: cordon (recording that the cordon is ours),
    the reserve taint on, the lent label off, the reclaim recorded."""
    lc = cfg.lending
    keys = LendKeys(cfg.annotation_prefix)
    ann: dict[str, str | None] = {keys.reclaiming: step.incident, keys.reclaim_at: iso(now)}
    spec: dict[str, Any] = {}
    if not bridge_plan.is_unschedulable(node):
        spec["unschedulable"] = True
        ann[keys.reserve_cordon] = "true"
    if lc.reserve_taint_key:
        spec["taints"] = _taint_list_with(node, lc, now)
    body: dict[str, Any] = {
        "metadata": {**_rv(node), "labels": {lc.lent_label: None}, "annotations": ann},
    }
    if spec:
        body["spec"] = spec
    return body


def finish_patch(node: Obj, cfg: BridgeConfig, now: datetime) -> dict[str, Any]:
    """Handed back: our lend marks gone, reclaimed-at set; the cordon and the
    reserve taint stay (the steady state of a Slurm-owned node)."""
    keys = LendKeys(cfg.annotation_prefix)
    return {
        "metadata": {
            **_rv(node),
            "labels": {cfg.lending.lent_label: None},
            "annotations": {
                keys.lent: None,
                keys.lent_at: None,
                keys.reclaiming: None,
                keys.reclaim_at: None,
                keys.reclaimed_at: iso(now),
            },
        }
    }


def describe(step: Step) -> str:
    if isinstance(step, Track):
        parts = []
        if step.idle_since:
            parts.append(f"idle since {step.idle_since}")
        if step.clear_idle:
            parts.append("busy again")
        if step.add_taint:
            parts.append("reserve taint on")
        return f"track {step.node}: {', '.join(parts)}"
    if isinstance(step, Lend):
        return f"lend {step.slurm_node} (idle {step.idle_for:.0f}s, incident {step.incident})"
    if isinstance(step, Open):
        return f"open {step.node} to inference (incident {step.incident})"
    if isinstance(step, Abort):
        return f"abort lending {step.slurm_node}: a job started there"
    action = "reclaim" if step.resume else "withdraw"
    return f"{action} {step.node} from inference: {step.why}"
