"""The bridge's planner: Slurm's view + Kubernetes' view -> actions, as values.

Pure: no HTTP, no subprocess, no clock (``now`` is passed in).  All state the
bridge needs to survive a restart lives in two places the planner reads:
Slurm's drain reasons (which incident, which fault) and annotations on the
Kubernetes Node (what we already did for that incident).  A restarted bridge
therefore plans exactly the steps that are still missing.

Rules, per mapped node:

* Slurm has the node drained (or down) with a reason we act on -> Cordon
  (unschedulable + our NoSchedule taint + annotations), ClaimSpare (resume a
  standby node), Evict (pods that must leave), and, once Slurm shows no jobs
  there, RequestReplacement; each step once per incident.
* We hold the node (our incident annotation) but Slurm no longer has a reason
  we act on -> Uncordon: remove our taint and annotations and clear
  ``unschedulable`` only if our annotation says we set it.  A
  ``slurm-operator:`` reason on a node we hold is the Slinky operator echoing
  our cordon into Slurm, not a resume: we keep the node.
* Everything else (admin drains, NHC unless configured, the operator's own
  drains) is foreign and left alone.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeGuard

from slurm_hooks.bridge.settings import BridgeConfig
from slurm_hooks.core.clock import (
    UTC_SECONDS,
    format_utc,
    parse_time,  # noqa: F401 - re-exported (lending)
)
from slurm_hooks.core.model import JobInfo, NodeState, ReasonOwner
from slurm_hooks.core.reason import classify_owner, try_parse_reason
from slurm_hooks.core.user_caused import USERS_CAUSE
from slurm_hooks.decide.repair import REPLACE_CODE
from slurm_hooks.k8s.selectors import label_selector_matches

Obj = Mapping[str, Any]

CAPI_MACHINE_ANNOTATION = "cluster.x-k8s.io/machine"
CAPI_NAMESPACE_ANNOTATION = "cluster.x-k8s.io/cluster-namespace"
CAPI_REMEDIATE_ANNOTATION = "cluster.x-k8s.io/remediate-machine"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


class Keys:
    """Our annotation names under ``cfg.annotation_prefix``."""

    def __init__(self, prefix: str) -> None:
        self.incident = f"{prefix}/incident"
        self.reason = f"{prefix}/reason"
        self.code = f"{prefix}/code"
        self.drained_at = f"{prefix}/drained-at"
        self.cordoned_at = f"{prefix}/cordoned-at"
        #: "true" only when we flipped spec.unschedulable ourselves.
        self.cordoned = f"{prefix}/cordoned"
        self.evicted = f"{prefix}/evicted"
        self.replacement = f"{prefix}/replacement-requested"
        self.replacement_at = f"{prefix}/replacement-requested-at"
        self.spare = f"{prefix}/spare"

    def all(self) -> tuple[str, ...]:
        return tuple(v for k, v in vars(self).items() if not k.startswith("_"))


# -- actions ------------------------------------------------------------------


@dataclass(frozen=True)
class Cordon:
    node: str
    slurm_node: str
    incident: str
    code: str
    reason: str
    drained_at: datetime | None


@dataclass(frozen=True)
class ClaimSpare:
    """Record ``spare`` on the node first, then resume it in Slurm: a crash in
    between resumes the same spare again, never a second one."""

    node: str
    slurm_node: str
    incident: str
    spare: str


@dataclass(frozen=True)
class Evict:
    node: str
    slurm_node: str
    incident: str
    #: Slurm still runs jobs there: the slurmd pod stays.
    keep_slurmd: bool


@dataclass(frozen=True)
class RequestReplacement:
    node: str
    slurm_node: str
    incident: str
    code: str
    reason: str
    machine: str | None
    machine_namespace: str | None


@dataclass(frozen=True)
class Uncordon:
    node: str
    slurm_node: str
    incident: str
    #: Clear spec.unschedulable (only when we set it).
    uncordon: bool


@dataclass(frozen=True)
class Deferred:
    """Something we would do but may not now (a cap, no mapped node)."""

    node: str
    slurm_node: str
    why: str


Step = Cordon | ClaimSpare | Evict | RequestReplacement | Uncordon


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    deferred: tuple[Deferred, ...]
    #: Slurm nodes we hold or act on, mapped and unmapped.
    acted: int = 0
    #: Kubernetes Nodes that carried our incident annotation when planned
    #: (the executor adjusts it for the nodes its steps change: the held
    #: gauge without a second look at every node).
    held: int = 0


@dataclass(frozen=True)
class Trigger:
    """A Slurm reason we act on, with its incident id and fault code."""

    incident: str
    code: str
    reason: str
    #: Whether the machine is handed to ``replacement`` (``replace_on``):
    #: the policy asked for it in the reason, or the site replaces on any drain.
    replace: bool = False


# -- helpers --------------------------------------------------------------------


def node_annotations(node: Obj) -> Mapping[str, str]:
    """A Node's annotations.  Not named ``annotations``: that name is the
    ``from __future__ import annotations`` feature in this module."""
    return (node.get("metadata") or {}).get("annotations") or {}


def node_name(node: Obj) -> str:
    return str(node["metadata"]["name"])


def is_unschedulable(node: Obj) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def foreign_incident(name: str, reason: str, when: datetime | None) -> str:
    """A stable incident id for a reason that carries none (NHC and the like):
    the same drain gives the same id after a restart."""
    key = f"{name}|{reason}|{when.isoformat() if when else ''}"
    return "x" + hashlib.sha256(key.encode()).hexdigest()[:8]


def moves(trig: Trigger | None) -> TypeGuard[Trigger]:
    """Whether the drain behind ``trig`` moves what runs on the machine
    (evict, take a spare, replace it, move a slurmd pod): not for what the
    node's users can cause (core/user_caused.py), which is cordoned only."""
    return trig is not None and trig.code not in USERS_CAUSE


def trigger(state: NodeState, cfg: BridgeConfig) -> Trigger | None:
    """The reason we act on, or None.  Only drained or down nodes count."""
    if not (state.drained or state.down) or not state.reason:
        return None
    ours = try_parse_reason(state.reason)
    if ours is not None:
        if cfg.act_on_ours and ours.code not in cfg.ignore_codes:
            # REPLACE without repl=: the repair ladder of a release before
            # the bridge waited for repl= (act/repair.py writes both now).
            asked = ours.replacement_asked or ours.code == REPLACE_CODE or cfg.replace_on == "drain"
            return Trigger(ours.incident, ours.code, state.reason, asked)
        return None
    for prefix in cfg.foreign_prefixes:
        if state.reason.startswith(prefix):
            code = re.sub(r"[^A-Z0-9_]", "_", prefix.rstrip(":").upper()) or "FOREIGN"
            inc = foreign_incident(state.name, state.reason, state.reason_time)
            return Trigger(inc, code, state.reason, cfg.replace_on == "drain")
    return None


def triggers_of(states: Iterable[NodeState], cfg: BridgeConfig) -> dict[str, Trigger]:
    """Slurm node name -> the reason we act on, for the nodes that have one.
    Computed once per pass and given to ``job_queries`` and ``plan``: each
    used to parse every node's reason again (50,000 calls each)."""
    # ``s.reason and``: most of a fleet carries no reason, and ``trigger``
    # returns None for those; skipping the call saves 50,000 calls.
    return {s.name: t for s in states if s.reason and (t := trigger(s, cfg)) is not None}


def is_standby(state: NodeState, cfg: BridgeConfig) -> bool:
    """A spare: drained with our SPARE code or a configured foreign reason."""
    if not state.drained or not state.reason:
        return False
    ours = try_parse_reason(state.reason)
    if ours is not None:
        return ours.code == "SPARE"
    return any(state.reason.startswith(p) for p in cfg.spare_reasons)


def map_nodes(
    slurm_names: Iterable[str],
    k8s_nodes: Iterable[Obj],
    cfg: BridgeConfig,
    by_name: Mapping[str, Obj] | None = None,
) -> dict[str, Obj]:
    """Slurm node name -> Kubernetes Node object (only those that exist).
    ``by_name``: the same nodes by ``metadata.name``, when the caller has
    that index already (building it is most of this function's cost at
    50,000 nodes, and a pass maps twice)."""
    if cfg.node_mapping == "label":
        index = {
            (n.get("metadata", {}).get("labels") or {}).get(cfg.node_label): n for n in k8s_nodes
        }
        index.pop(None, None)
        return {s: index[s] for s in slurm_names if s in index}
    if by_name is None:
        by_name = {n["metadata"]["name"]: n for n in k8s_nodes}  # inlined: 50,000 calls
    if cfg.node_mapping == "same":
        return {s: by_name[s] for s in slurm_names if s in by_name}
    out = {}
    for s in slurm_names:
        k = cfg.node_template.format(name=s)
        if k in by_name:
            out[s] = by_name[k]
    return out


def _replacement_name(node: str, incident: str) -> str:
    """A DNS-1123 name derived from the incident: creating it twice gives 409."""
    base = re.sub(r"[^a-z0-9-]", "-", f"{node}-{incident}".lower()).strip("-")
    return base[:253] or incident.lower()


replacement_name = _replacement_name


def job_queries(
    states: Sequence[NodeState],
    k8s_nodes: Sequence[Obj],
    cfg: BridgeConfig,
    by_name: Mapping[str, Obj] | None = None,
    triggers: Mapping[str, Trigger] | None = None,
) -> list[str]:
    """Slurm nodes whose jobs the planner needs: acted on, not visibly busy
    (a busy node has jobs, no need to ask) and with a job-dependent step
    (slurmd eviction or replacement) still open.  Proportional to incidents,
    not to the fleet.  ``triggers``: ``triggers_of(states, cfg)``, when the
    caller has it already."""
    keys = Keys(cfg.annotation_prefix)
    if triggers is None:
        triggers = triggers_of(states, cfg)
    acted = {s.name: (s, t) for s in states if (t := triggers.get(s.name)) is not None}
    mapping = map_nodes(acted, k8s_nodes, cfg, by_name)
    out = []
    for name, (state, trig) in acted.items():
        node = mapping.get(name)
        if node is None or state.busy:
            continue
        ann = node_annotations(node)
        held = ann.get(keys.incident) == trig.incident
        evict_open = (
            moves(trig) and cfg.evict and not (held and ann.get(keys.evicted) == trig.incident)
        )
        repl_open = (moves(trig) and trig.replace and cfg.replacement != "none") and not (
            held and ann.get(keys.replacement) == trig.incident
        )
        if evict_open or repl_open:
            out.append(name)
    return sorted(out)


def plan(
    states: Sequence[NodeState],
    k8s_nodes: Sequence[Obj],
    cfg: BridgeConfig,
    *,
    jobs: Mapping[str, Sequence[JobInfo]] | None = None,
    spare_pool: Sequence[str] = (),
    by_name: Mapping[str, Obj] | None = None,
    triggers: Mapping[str, Trigger] | None = None,
) -> Plan:
    """Decide the steps of one reconcile pass.  ``spare_pool`` is the expanded
    ``cfg.spare_pool`` (the caller expands hostlists, keeping this pure of
    ClusterShell); ``by_name`` as for ``map_nodes``; ``triggers`` as for
    ``job_queries``."""
    jobs = jobs or {}
    keys = Keys(cfg.annotation_prefix)
    by_slurm = {s.name: s for s in states}
    if triggers is None:
        triggers = triggers_of(states, cfg)
    mapping = map_nodes(by_slurm, k8s_nodes, cfg, by_name)

    # Fleet-wide counts for the caps, from what Kubernetes shows now; the
    # cordon cap is a share of the nodes Slurm and Kubernetes share.  One
    # look at each node's annotations (at 50,000 nodes the per-call cost of
    # three passes over the fleet was most of the planner's time), and only
    # nodes that carry any of ours count.
    total = len(mapping)
    allowed_cordoned = max(1, math.floor(cfg.max_cordoned_fraction * total))
    ours_cordoned = replacing = 0
    claimed: set[str] = set()
    held_nodes: set[int] = set()  # id() of the Node objects we hold
    k_incident, k_cordoned, k_replacement, k_spare = (
        keys.incident,
        keys.cordoned,
        keys.replacement,
        keys.spare,
    )  # locals: this loop runs 50,000 times
    for n in k8s_nodes:
        ann = (n.get("metadata") or {}).get("annotations")  # inlined: 50,000 calls
        if not ann:
            continue
        if k_incident in ann:
            held_nodes.add(id(n))
        if ann.get(k_cordoned) == "true":
            ours_cordoned += 1
        rep = ann.get(k_replacement)
        if rep is not None and ann.get(k_incident) == rep:
            replacing += 1
        spare = ann.get(k_spare)
        if spare is not None:
            claimed.add(spare)
    spares = [
        s for s in spare_pool if s in by_slurm and is_standby(by_slurm[s], cfg) and s not in claimed
    ]

    steps: list[Step] = []
    deferred: list[Deferred] = []
    acted = 0
    # Only Slurm nodes with a trigger or a node we hold have anything to
    # plan: at fleet size that is a few hundred names, not 50,000.
    held_names = [s for s, n in mapping.items() if id(n) in held_nodes] if held_nodes else []
    for name in sorted(triggers.keys() | held_names):
        state = by_slurm[name]
        trig = triggers.get(name)
        node = mapping.get(name)
        if node is None:
            if trig is not None:
                acted += 1
                deferred.append(Deferred("", name, "no Kubernetes node maps to this Slurm node"))
            continue
        ann = node_annotations(node)
        held = ann.get(keys.incident)
        if trig is None and held is None:
            continue  # the common case at fleet size: nothing to do, no name lookup
        k = node_name(node)
        if trig is None:
            assert held is not None  # for mypy: both None was skipped above
            acted += 1
            if state.drained and classify_owner(state.reason) is ReasonOwner.OPERATOR:
                continue  # Slinky mirrored our cordon into Slurm; the drain stands
            steps.append(Uncordon(k, name, held, uncordon=ann.get(keys.cordoned) == "true"))
            continue

        acted += 1
        fresh = held != trig.incident
        if fresh:
            we_cordoned = ann.get(keys.cordoned) == "true"
            if not is_unschedulable(node) and not we_cordoned:
                if ours_cordoned >= allowed_cordoned:
                    deferred.append(
                        Deferred(
                            k,
                            name,
                            f"cordon cap reached ({ours_cordoned}/{allowed_cordoned} nodes)",
                        )
                    )
                    continue
                ours_cordoned += 1
            steps.append(Cordon(k, name, trig.incident, trig.code, trig.reason, state.reason_time))
            done: Mapping[str, str] = {}
        else:
            done = ann

        if not moves(trig):
            continue  # cordoned like any drain, nothing more (see moves())
        if spare_pool:
            mine = done.get(keys.spare)
            if mine is None and spares:
                steps.append(ClaimSpare(k, name, trig.incident, spares.pop(0)))
            elif mine is not None and mine in by_slurm and is_standby(by_slurm[mine], cfg):
                steps.append(ClaimSpare(k, name, trig.incident, mine))  # resume did not happen
            elif mine is None:
                deferred.append(Deferred(k, name, "no standby node left in the spare pool"))

        has_jobs = state.busy or bool(jobs.get(name))
        if cfg.evict and done.get(keys.evicted) != trig.incident:
            steps.append(Evict(k, name, trig.incident, keep_slurmd=has_jobs))

        if (
            cfg.replacement != "none"
            and trig.replace
            and done.get(keys.replacement) != trig.incident
        ):
            if has_jobs:
                continue
            if replacing >= cfg.max_concurrent_replacements:
                deferred.append(
                    Deferred(
                        k,
                        name,
                        f"replacement cap reached ({replacing}/{cfg.max_concurrent_replacements})",
                    )
                )
                continue
            replacing += 1
            steps.append(
                RequestReplacement(
                    k,
                    name,
                    trig.incident,
                    trig.code,
                    trig.reason,
                    ann.get(CAPI_MACHINE_ANNOTATION),
                    ann.get(CAPI_NAMESPACE_ANNOTATION),
                )
            )
    return Plan(tuple(steps), tuple(deferred), acted, len(held_nodes))


# -- pods -----------------------------------------------------------------------


def is_slurmd_pod(pod: Obj, cfg: BridgeConfig) -> bool:
    """A node's slurmd pod: ``slurmd_pod_selector`` in ``slinky_namespace``.
    Labels are the pod's creator's to choose: a tenant's pod labelled as
    slurmd in a namespace of theirs is a workload like any other."""
    md = pod.get("metadata") or {}
    return (
        bool(cfg.slurmd_pod_selector)
        and md.get("namespace") == cfg.slinky_namespace
        and label_selector_matches(cfg.slurmd_pod_selector, md.get("labels") or {})
    )


def pods_to_evict(pods: Iterable[Obj], *, keep_slurmd: bool, cfg: BridgeConfig) -> list[Obj]:
    """Pods that must leave a cordoned node: not DaemonSet pods (they tolerate
    the cordon and would come back), not mirror/static pods (the kubelet owns
    them), not finished or already terminating pods, and not the node's
    slurmd pod while Slurm still runs jobs there."""
    out = []
    for pod in pods:
        md = pod.get("metadata") or {}
        if md.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if MIRROR_ANNOTATION in (md.get("annotations") or {}):
            continue
        if any(o.get("kind") == "DaemonSet" for o in md.get("ownerReferences") or []):
            continue
        if keep_slurmd and is_slurmd_pod(pod, cfg):
            continue
        out.append(pod)
    return out


# -- patch bodies ---------------------------------------------------------------


def _taints_without(node: Obj, key: str) -> list[Any]:
    return [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != key]


def cordon_patch(node: Obj, step: Cordon, cfg: BridgeConfig, now: datetime) -> dict[str, Any]:
    """A merge patch for ``node`` as read: taints is an atomic list, so the
    patch carries the whole new list and the resourceVersion it was computed
    from (the server answers 409 if the node changed meanwhile)."""
    keys = Keys(cfg.annotation_prefix)
    ann = node_annotations(node)
    ours_before = ann.get(keys.cordoned) == "true"
    set_cordon = ours_before or not is_unschedulable(node)
    # NoExecute evicts what does not tolerate it: never for what users cause.
    effect = "NoSchedule" if step.code in USERS_CAUSE else cfg.taint_effect
    taint: dict[str, Any] = {"key": cfg.taint_key, "value": step.code, "effect": effect}
    if effect == "NoExecute":
        taint["timeAdded"] = now.strftime(UTC_SECONDS)
    new_ann: dict[str, str | None] = {k: None for k in keys.all() if k in ann}
    new_ann.update(
        {
            keys.incident: step.incident,
            keys.code: step.code,
            keys.reason: step.reason,
            keys.cordoned_at: _iso(now),
        }
    )
    if step.drained_at is not None:
        new_ann[keys.drained_at] = _iso(step.drained_at)
    if set_cordon:
        new_ann[keys.cordoned] = "true"
    body: dict[str, Any] = {
        "metadata": {
            "resourceVersion": node["metadata"]["resourceVersion"],
            "annotations": new_ann,
        },
        "spec": {"taints": _taints_without(node, cfg.taint_key) + [taint]},
    }
    if set_cordon:
        body["spec"]["unschedulable"] = True
    return body


def uncordon_patch(node: Obj, cfg: BridgeConfig) -> dict[str, Any]:
    keys = Keys(cfg.annotation_prefix)
    ann = node_annotations(node)
    body: dict[str, Any] = {
        "metadata": {
            "resourceVersion": node["metadata"]["resourceVersion"],
            "annotations": {k: None for k in keys.all() if k in ann},
        },
        "spec": {"taints": _taints_without(node, cfg.taint_key) or None},
    }
    # Re-checked on the object as read: never clear someone else's cordon.
    if ann.get(keys.cordoned) == "true":
        body["spec"]["unschedulable"] = None
    return body


def annotate_patch(node: Obj, values: Mapping[str, str | None]) -> dict[str, Any]:
    return {
        "metadata": {
            "resourceVersion": node["metadata"]["resourceVersion"],
            "annotations": dict(values),
        }
    }


def _iso(when: datetime) -> str:
    if when.tzinfo is None:
        return when.isoformat()
    return format_utc(when)
