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

Here the planner (``plan_lending``, in phases) and its small helpers; the
inputs and steps are ``lending_steps``, reading pods, ConfigMaps and
``squeue`` is ``lending_inputs``, the Node patches ``lending_patch`` (all
pure; their names are importable from here too).

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
from slurm_hooks.bridge.lending_inputs import (  # noqa: F401 (re-exported: importable from here too)
    SQUEUE_PENDING_FORMAT,
    SQUEUE_SEP,
    is_inference_pod,
    is_unschedulable_pod,
    parse_demand_configmap,
    parse_pending_jobs,
    pod_demand,
    pod_gpus,
)
from slurm_hooks.bridge.lending_patch import (  # noqa: F401 (re-exported: importable from here too)
    finish_patch,
    has_taint,
    iso,
    open_patch,
    reclaim_patch,
    track_patch,
)
from slurm_hooks.bridge.lending_steps import (  # noqa: F401 (re-exported: importable from here too)
    Abort,
    Demand,
    Lend,
    LendKeys,
    LendPlan,
    Note,
    Obj,
    Open,
    PendingJob,
    Reclaim,
    Step,
    Track,
    describe,
)
from slurm_hooks.bridge.settings import BridgeConfig, LendingConfig
from slurm_hooks.core.model import NodeState
from slurm_hooks.core.reason import DrainReason, format_reason, try_parse_reason

LEND_CODE = "LEND"
#: Flags that keep an idle node out of lending (Slurm has plans for it).
_BLOCKING_FLAGS = frozenset(
    {"DRAIN", "NOT_RESPONDING", "MAINTENANCE", "RESERVED", "POWERED_DOWN", "POWERING_DOWN"}
)
_SUPPLY_BLOCKING = _BLOCKING_FLAGS - {"NOT_RESPONDING"}
_GPU_GRES_RE = re.compile(r"(?:^|,)gpu(?::[A-Za-z0-9_.-]+)?:(\d+)")


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


def _seconds(since: datetime | None, now: datetime) -> float | None:
    if since is None:
        return None
    if since.tzinfo is None and now.tzinfo is not None:
        since = since.astimezone()  # Slurm's times are local
    return (now - since).total_seconds()


def _ann_time(node: Obj, key: str) -> datetime | None:
    return bridge_plan.parse_time(bridge_plan.node_annotations(node).get(key))


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


@dataclass
class _Pass:
    """One planning pass: its facts, and what the phases found so far."""

    lc: LendingConfig
    keys: LendKeys
    bkeys: bridge_plan.Keys
    now: datetime
    by_name: dict[str, NodeState]
    #: Slurm node -> Kubernetes node, for the nodes in scope
    mapping: dict[str, Obj]
    steps: list[Step] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    lent_gpus: dict[str, int] = field(default_factory=dict)
    #: opened, reclaimable lent nodes: slurm name -> (k8s node, lent at)
    lent_open: dict[str, tuple[Obj, datetime | None]] = field(default_factory=dict)
    reclaiming: set[str] = field(default_factory=set)
    in_flight: int = 0
    candidates: list[tuple[float, str]] = field(default_factory=list)
    #: idle, Slurm-owned nodes in scope (the floor counts these)
    idle_owned: list[str] = field(default_factory=list)


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
    ids (tests pass a deterministic one).

    Three phases, in this order: survey the nodes in scope (what is lent,
    reclaiming, withdrawn, idle), then Slurm first (what pending jobs need
    back), then Kubernetes (lend only when asked, never what Slurm needs)."""
    lc = cfg.lending
    host_set = frozenset(hosts) if hosts is not None and lc.nodes else None
    if new_incident is None:
        from slurm_hooks.core.reason import new_incident_id

        new_incident = new_incident_id
    scope = [s for s in states if in_scope(s, lc, host_set)]
    p = _Pass(
        lc=lc,
        keys=LendKeys(cfg.annotation_prefix),
        bkeys=bridge_plan.Keys(cfg.annotation_prefix),
        now=now,
        by_name={s.name: s for s in states},
        mapping=dict(bridge_plan.map_nodes([s.name for s in scope], k8s_nodes, cfg)),
    )
    for state in sorted(scope, key=lambda s: s.name):
        node = p.mapping.get(state.name)
        if node is not None:
            _survey(p, state, node)
    reserved, need_total = _slurm_first(p, states, jobs, pods or {})
    want = _lend(p, demand, len(scope), reserved, need_total, new_incident)
    return LendPlan(tuple(p.steps), tuple(p.notes), p.lent_gpus, need_total, want)


def _survey(p: _Pass, state: NodeState, node: Obj) -> None:
    """Phase 1, one node in scope: a lent node (ours: LEND in Slurm), one we
    had lent and Slurm no longer says LEND, or a Slurm-owned node."""
    ann = bridge_plan.node_annotations(node)
    inc = lend_incident(state)
    opened = ann.get(p.keys.lent)
    marked = ann.get(p.keys.reclaiming)
    if inc is not None:
        p.lent_gpus[state.name] = gpu_count(state.gres, p.lc.gpus_per_node)
        _survey_lent(p, state, node, inc, opened, marked)
    elif opened is not None or marked is not None:
        _survey_withdrawn(p, state, node, opened, marked)
    else:
        _survey_owned(p, state, node, ann)


def _survey_lent(
    p: _Pass, state: NodeState, node: Obj, inc: str, opened: str | None, marked: str | None
) -> None:
    k = bridge_plan.node_name(node)
    if marked == inc:
        started = _ann_time(node, p.keys.reclaim_at) or p.now
        p.reclaiming.add(state.name)
        p.steps.append(
            Reclaim(
                k,
                state.name,
                inc,
                resume=True,
                started=started,
                force=_timed_out(started, p.now, p.lc),
                why="reclaim in progress",
            )
        )
    elif opened != inc:
        if state.busy:
            if opened is None:
                p.steps.append(Abort(k, state.name, inc))
            return  # our drain waits for a job that raced in
        p.steps.append(Open(k, state.name, inc))
        p.in_flight += 1
    else:
        lent_at = _ann_time(node, p.keys.lent_at) or state.reason_time
        age = _seconds(lent_at, p.now)
        if age is not None and age < p.lc.settle_seconds:
            p.in_flight += 1
        p.lent_open[state.name] = (node, lent_at)


def _survey_withdrawn(
    p: _Pass, state: NodeState, node: Obj, opened: str | None, marked: str | None
) -> None:
    """We had lent it, and Slurm no longer says LEND: a fault reason replaced
    ours, an admin resumed it, or we resumed it and stopped before clearing
    our marks.  Take it out of inference; never resume it ourselves."""
    began = _ann_time(node, p.keys.reclaim_at) if marked else None
    p.steps.append(
        Reclaim(
            bridge_plan.node_name(node),
            state.name,
            marked or opened or "",
            resume=False,
            started=began,
            force=began is not None and _timed_out(began, p.now, p.lc),
            why=f"Slurm reason is no longer our LEND ({state.reason or 'none'})",
        )
    )


def _survey_owned(p: _Pass, state: NodeState, node: Obj, ann: Mapping[str, str]) -> None:
    """Slurm owns the node: bookkeeping, then is it a candidate?"""
    k = bridge_plan.node_name(node)
    lc, keys, now = p.lc, p.keys, p.now
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
        p.steps.append(track)
    if not idle:
        return
    p.idle_owned.append(state.name)
    why = _not_lendable(node, state, since, now, lc, keys, p.bkeys)
    if why:
        p.notes.append(Note(k, why))
        return
    idle_for = _seconds(since, now) or 0.0
    p.candidates.append((idle_for, state.name))


def _slurm_first(
    p: _Pass,
    states: Sequence[NodeState],
    jobs: Sequence[PendingJob],
    pods: Mapping[str, Sequence[Obj]],
) -> tuple[set[str], int]:
    """Phase 2, Slurm first: what do pending jobs need back?  Returns the
    nodes reserved for them and how many nodes they still lack.

    Supply Slurm has already: idle nodes, including ``idle*`` (a node just
    resumed shows NOT_RESPONDING until slurmctld's next ping)."""
    pool = {
        s.name: s
        for s in states
        if s.state == "idle" and not s.busy and not (_SUPPLY_BLOCKING & set(s.flags))
    }
    for name in p.reclaiming:
        pool[name] = p.by_name[name]
    reserved: set[str] = set()
    available = dict(p.lent_open)
    need_total = 0
    for job in eligible_jobs(jobs, p.lc):
        need = job.num_nodes
        for name in sorted(pool):
            if need and name not in reserved and serves(pool[name], job):
                reserved.add(name)
                need -= 1
        if not need:
            continue
        need_total += need
        _reclaim_for(p, job, need, available, pods, reserved)
    return reserved, need_total


def _reclaim_for(
    p: _Pass,
    job: PendingJob,
    need: int,
    available: dict[str, tuple[Obj, datetime | None]],
    pods: Mapping[str, Sequence[Obj]],
    reserved: set[str],
) -> None:
    """Reclaim up to ``need`` ready lent nodes that serve ``job`` (the
    cheapest to empty first); a node lent too recently makes the job wait."""
    usable = [n for n in available if serves(p.by_name[n], job)]
    young = []
    ready = []
    for n in usable:
        node, lent_at = available[n]
        age = _seconds(lent_at, p.now)
        if age is not None and age < p.lc.min_lend_seconds:
            young.append(n)
        elif not is_ready(node) or p.bkeys.incident in bridge_plan.node_annotations(node):
            p.notes.append(Note(bridge_plan.node_name(node), "lent node not ready: not reclaimed"))
        else:
            ready.append(n)
    ready.sort(
        key=lambda n: (reclaim_order(pods.get(bridge_plan.node_name(available[n][0]), ())), n)
    )
    for n in ready[:need]:
        node, _ = available.pop(n)
        p.steps.append(
            Reclaim(
                bridge_plan.node_name(node),
                n,
                lend_incident(p.by_name[n]) or "",
                resume=True,
                started=None,
                why=f"job {job.job_id} pending ({job.reason}) needs {job.num_nodes} node(s)",
            )
        )
        reserved.add(n)
    for n in young[: max(need - len(ready), 0)]:
        p.notes.append(
            Note(
                bridge_plan.node_name(available[n][0]),
                f"lent less than min_lend_seconds ({p.lc.min_lend_seconds:g}s): "
                f"job {job.job_id} waits",
            )
        )


def _lend(
    p: _Pass,
    demand: Demand,
    scope_size: int,
    reserved: set[str],
    need_total: int,
    new_incident: Any,
) -> int:
    """Phase 3, then Kubernetes: lend only when asked, and never what Slurm
    needs.  Returns how many nodes Kubernetes wants."""
    lc = p.lc
    taken_back = sum(
        1 for s in p.steps if isinstance(s, Reclaim) and s.resume and s.started is None
    )
    lent_count = len(p.lent_gpus) - len(p.reclaiming) - taken_back
    want = max(demand.pod_nodes - p.in_flight, 0)
    if demand.target is not None:
        want = max(want, demand.target - lent_count)
    if want and need_total:
        p.notes.append(Note("", f"Slurm has {need_total} node(s) of pending work: lending nothing"))
        return want
    if not want:
        return want
    cap = math.floor(lc.max_lent_fraction * scope_size)
    idle_left = sum(1 for n in p.idle_owned if n not in reserved)
    room = min(
        cap - lent_count,
        idle_left - lc.min_idle_nodes,
        lc.max_lend_per_pass,
    )
    if room < want:
        p.notes.append(
            Note(
                "",
                f"lending capped: want {want}, may lend {max(room, 0)} "
                f"(lent {lent_count}/{cap}, idle floor {lc.min_idle_nodes}, "
                f"per pass {lc.max_lend_per_pass})",
            )
        )
    picks = sorted((c for c in p.candidates if c[1] not in reserved), key=lambda c: (-c[0], c[1]))
    for idle_for, name in picks[: max(min(want, room), 0)]:
        node = p.mapping[name]
        p.steps.append(Lend(bridge_plan.node_name(node), name, new_incident(), idle_for))
        p.lent_gpus[name] = gpu_count(p.by_name[name].gres, lc.gpus_per_node)
    return want


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
