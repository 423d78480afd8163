"""The bridge's pure planner for Slurm on Kubernetes under Slinky.

Under SchedMD's Slinky operator a Slurm node is a NodeSet pod: the Slurm
node name is the pod's hostname (StatefulSet mode: ``spec.hostname`` or the
pod name, so it survives a move), and the machine is the pod's
``spec.nodeName``.  The mapping is therefore live: it is read from one pod
LIST per pass, and a pod that moved is followed.

Replacing a faulty machine = moving the slurmd pod to a spare machine.  The
order of every write is chosen so that Slinky's NodeSet controller (which
only ever mirrors Kubernetes cordons into Slurm drains with a
``slurm-operator:`` reason, and never touches a reason without that prefix)
agrees with us at every step (docs/slinky.md has the table):

1. **Hold** the faulty machine F: one patch sets Slinky's
   ``node-cordon-reason`` (our reason text), our journal and the cordon and
   taint.  Our ``slurm-hooks/1`` reason already holds the Slurm node, so
   the operator leaves it alone.
2. Once the incident's jobs are settled: **mark** the slurmd pod
   (``pod-cordon=true`` + our incident), **reserve** the Slurm node (a MAINT
   reservation, see 3), then **move** it: the pod's uid is
   journalled on F first, then the pod is deleted with a uid precondition
   (never the recreated pod).  Slinky's preStop writes
   ``slurm-operator: Pod is terminating`` (DOWN) over our reason, and on
   registration elsewhere the operator sets the node IDLE (a migration).
3. The recreated pod on a spare machine is **marked** as soon as it is seen,
   so the operator drains its Slurm node after that IDLE.  But the IDLE
   comes from the operator's status sync, at the end of a reconcile, and the
   drain only with its next one: in between, Slurm would start a waiting
   job on a machine nobody has accepted.  The reservation made before the
   move keeps every job off the node through that window (a state update
   does not end a reservation).  Without ``scontrol`` (or refused) the move
   goes on without it, as before, with a warning.
4. Once its slurmd has registered: **reassert** our reason over the
   ``slurm-operator:`` one we caused (the door allows exactly that) and drop
   the reservation (our reason holds the node now), then **unmark** the new
   pod (the operator skips foreign reasons, so nothing undrains it).
5. **Accept** (a runner given to the bridge) and **release**: resume
   through the door, journal ``done``.  Without a runner the engine's own
   acceptance resumes the node and the bridge only journals ``done``.
   F stays cordoned and tainted for the hardware work; the replacement
   request for it goes out as with the other mappings.

Everything is keyed by the incident id and journalled in annotations on F
(which stays), so a bridge or an operator restarted at any point finishes
the incident exactly once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slurm_hooks.bridge.plan import (
    CAPI_MACHINE_ANNOTATION,
    CAPI_NAMESPACE_ANNOTATION,
    Cordon,
    Deferred,
    Keys,
    RequestReplacement,
    cordon_patch,
    is_unschedulable,
    moves,
    node_name,
    trigger,
    uncordon_patch,
)
from slurm_hooks.bridge.settings import BridgeConfig
from slurm_hooks.core.model import JobInfo, NodeState
from slurm_hooks.core.reason import try_parse_reason
from slurm_hooks.k8s.selectors import label_selector_matches

Obj = dict[str, Any]


def ann_of(obj: Obj) -> Mapping[str, str]:
    """An object's annotations (plan.annotations, typed for mypy here)."""
    return (obj.get("metadata") or {}).get("annotations") or {}


#: Slinky's well-known names (api/v1beta1/well_known.go).
POD_CORDON = "nodeset.slinky.slurm.net/pod-cordon"
NODE_CORDON_REASON = "nodeset.slinky.slurm.net/node-cordon-reason"
POD_HOSTNAME_LABEL = "nodeset.slinky.slurm.net/pod-hostname"
SCALING_MODE_LABEL = "nodeset.slinky.slurm.net/scaling-mode"
#: The prefix of every reason the operator writes (slurmcontrol.go).
OPERATOR_PREFIX = "slurm-operator:"


def hold_name(slurm_node: str, incident: str) -> str:
    """The name of the reservation that holds ``slurm_node`` during a move."""
    return f"slurm-hooks-move-{slurm_node}-{incident}"


class SlinkyKeys(Keys):
    """Our journal on the faulty machine, beside the common keys."""

    def __init__(self, prefix: str) -> None:
        super().__init__(prefix)
        #: The Slurm node the incident is about (the pod moves, F stays).
        self.slurm_node = f"{prefix}/slinky-slurm-node"
        #: ``namespace/name`` of the slurmd pod (the name survives the move).
        self.pod = f"{prefix}/slinky-pod"
        #: uid of the pod we delete, written before the delete.
        self.moved_uid = f"{prefix}/slinky-moved-uid"
        #: Incident whose reservation was made before the move.
        self.reserved = f"{prefix}/slinky-reserved"
        #: Incident whose reservation could not be made (moved without it).
        self.reserve_failed = f"{prefix}/slinky-reserve-failed"
        #: Incident whose reason we wrote back after the move.
        self.reasserted = f"{prefix}/slinky-reasserted"
        #: Incident whose acceptance passed on the new machine.
        self.accepted = f"{prefix}/slinky-accepted"
        #: Incident whose acceptance failed: held drained for a human.
        self.accept_failed = f"{prefix}/slinky-acceptance-failed"
        #: Incident finished: resumed, marks removed; F stays cordoned.
        self.done = f"{prefix}/slinky-done"

    @property
    def steps(self) -> tuple[str, ...]:
        """The keys an incident's steps write: cleared for the next one."""
        return (
            self.moved_uid,
            self.reserved,
            self.reserve_failed,
            self.reasserted,
            self.accepted,
            self.accept_failed,
            self.done,
        )


# -- the live mapping ------------------------------------------------------------


@dataclass(frozen=True)
class SlurmdPod:
    namespace: str
    name: str
    uid: str
    #: ``spec.nodeName`` ("" while unscheduled).
    node: str
    slurm_node: str
    phase: str
    terminating: bool
    annotations: Mapping[str, str]
    #: The Ready condition: Slinky's readiness probe asks slurmd (/readyz),
    #: so a Ready pod's slurmd has registered with slurmctld.
    ready: bool = False

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def running(self) -> bool:
        return self.phase == "Running" and not self.terminating and bool(self.node)


def slurm_node_of(pod: Obj) -> str | None:
    """Slinky's GetSlurmNodeName (internal/controller/nodeset/utils): in
    StatefulSet mode hostNetwork -> the machine's name, else spec.hostname,
    else the pod name; in DaemonSet mode spec.hostname.  The pod-hostname
    label, which the controller sets to the same value, is the fallback."""
    md = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    labels = md.get("labels") or {}
    if labels.get(SCALING_MODE_LABEL, "StatefulSet") == "StatefulSet":
        if spec.get("hostNetwork"):
            return spec.get("nodeName") or None
        return spec.get("hostname") or labels.get(POD_HOSTNAME_LABEL) or md.get("name")
    return spec.get("hostname") or labels.get(POD_HOSTNAME_LABEL) or None


def slurmd_pods(pods: Iterable[Obj], selector: str) -> dict[str, list[SlurmdPod]]:
    """Slurm node name -> its NodeSet pods (the live one and any terminating)."""
    out: dict[str, list[SlurmdPod]] = {}
    for p in pods:
        md = p.get("metadata") or {}
        if selector and not label_selector_matches(selector, md.get("labels") or {}):
            continue
        slurm = slurm_node_of(p)
        if not slurm:
            continue
        out.setdefault(slurm, []).append(
            SlurmdPod(
                namespace=str(md.get("namespace") or ""),
                name=str(md.get("name")),
                uid=str(md.get("uid") or ""),
                node=str((p.get("spec") or {}).get("nodeName") or ""),
                slurm_node=slurm,
                phase=str((p.get("status") or {}).get("phase") or ""),
                terminating=bool(md.get("deletionTimestamp")),
                annotations=md.get("annotations") or {},
                ready=any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (p.get("status") or {}).get("conditions") or []
                ),
            )
        )
    return out


def live_pod(pods: Sequence[SlurmdPod], not_uid: str | None = None) -> SlurmdPod | None:
    """The pod serving the Slurm node now (not terminating, not ``not_uid``).
    None also when two pods claim it: a NodeSet keeps one per Slurm node, and
    a pod's hostname and labels are whoever created it's to choose, so which
    machine is that node's is then unknown and nothing is done to either."""
    live = [p for p in pods if not p.terminating and p.uid != not_uid]
    return live[0] if len(live) == 1 else None


def map_slinky(
    slurm_names: Iterable[str], k8s_nodes: Iterable[Obj], pods: Mapping[str, Sequence[SlurmdPod]]
) -> dict[str, Obj]:
    """Slurm node -> the Kubernetes Node its live slurmd pod runs on."""
    by_name = {node_name(n): n for n in k8s_nodes}
    out = {}
    for s in slurm_names:
        p = live_pod(pods.get(s, ()))
        if p is not None and p.node in by_name:
            out[s] = by_name[p.node]
    return out


# -- steps -------------------------------------------------------------------------


@dataclass(frozen=True)
class Hold:
    """Cordon + taint F, Slinky's node-cordon-reason and our journal, one patch."""

    cordon: Cordon
    pod: str


@dataclass(frozen=True)
class MarkPod:
    """``pod-cordon=true`` and our incident on the pod (``mark=False``: remove both)."""

    node: str
    slurm_node: str
    incident: str
    pod: str
    uid: str
    mark: bool = True


@dataclass(frozen=True)
class Reserve:
    """A MAINT reservation ``name`` on the Slurm node, before the move: it
    keeps jobs off through the operator's migration IDLE."""

    node: str
    slurm_node: str
    incident: str
    name: str


@dataclass(frozen=True)
class MovePod:
    """Journal the uid on F, then delete the pod with a uid precondition."""

    node: str
    slurm_node: str
    incident: str
    pod: str
    uid: str


@dataclass(frozen=True)
class Reassert:
    """Our reason back over the ``slurm-operator:`` drain our move caused;
    then the reservation ``unreserve`` (if one was made) is dropped."""

    node: str
    slurm_node: str
    incident: str
    reason: str
    unreserve: str | None = None


@dataclass(frozen=True)
class Accept:
    """Run acceptance on the new machine (through the bridge's runner)."""

    node: str
    slurm_node: str
    incident: str
    machine: str


@dataclass(frozen=True)
class Release:
    """Resume the Slurm node through the door (``resume=False``: the engine
    did already) and journal ``done`` on F, which stays cordoned."""

    node: str
    slurm_node: str
    incident: str
    resume: bool


@dataclass(frozen=True)
class Abandon:
    """The incident ended before the move (an admin resumed the node): F is
    uncordoned (if we cordoned it) and the pod unmarked."""

    node: str
    slurm_node: str
    incident: str
    pod: str | None
    unreserve: str | None = None


SlinkyStep = (
    Hold | MarkPod | Reserve | MovePod | Reassert | Accept | Release | Abandon | RequestReplacement
)


@dataclass(frozen=True)
class SlinkyPlan:
    steps: tuple[SlinkyStep, ...]
    deferred: tuple[Deferred, ...]
    acted: int = 0


def job_queries(
    states: Sequence[NodeState],
    k8s_nodes: Sequence[Obj],
    pods: Mapping[str, Sequence[SlurmdPod]],
    cfg: BridgeConfig,
) -> list[str]:
    """Slurm nodes whose jobs the planner needs: a hold not yet moved, idle
    in Slurm's eyes (a busy node has jobs without asking)."""
    keys = SlinkyKeys(cfg.annotation_prefix)
    by_slurm = {s.name: s for s in states}
    out = set()
    for n in k8s_nodes:
        ann = ann_of(n)
        s = ann.get(keys.slurm_node)
        if s and keys.moved_uid not in ann and ann.get(keys.done) != ann.get(keys.incident):
            if s in by_slurm and not by_slurm[s].busy:
                out.add(s)
    for st in by_slurm.values():
        if moves(trigger(st, cfg)) and not st.busy and st.name in pods:
            out.add(st.name)
    return sorted(out)


def _registered(pod: SlurmdPod, state: NodeState) -> bool:
    """The new slurmd has registered: its pod is Ready and slurmctld does not
    flag the node NOT_RESPONDING (DOWN alone is the preStop's mark)."""
    return pod.running and pod.ready and "NOT_RESPONDING" not in state.flags


def _ours_for(state: NodeState, incident: str) -> bool:
    parsed = try_parse_reason(state.reason) if state.reason else None
    return parsed is not None and parsed.incident == incident


def _out_of_service(state: NodeState) -> bool:
    return state.drained or state.down or "FAIL" in state.flags


def plan(
    states: Sequence[NodeState],
    k8s_nodes: Sequence[Obj],
    pods: Mapping[str, Sequence[SlurmdPod]],
    cfg: BridgeConfig,
    *,
    jobs: Mapping[str, Sequence[JobInfo]] | None = None,
    accepting: bool = False,
) -> SlinkyPlan:
    """The steps of one pass.  ``accepting``: the bridge has an acceptance
    runner (else the engine's acceptance resumes the node)."""
    jobs = jobs or {}
    keys = SlinkyKeys(cfg.annotation_prefix)
    by_slurm = {s.name: s for s in states}
    by_node = {node_name(n): n for n in k8s_nodes}
    steps: list[SlinkyStep] = []
    deferred: list[Deferred] = []
    acted = 0

    # Journals: (slurm node, incident) -> F, for incidents not finished.
    journals: dict[tuple[str, str], Obj] = {}
    finished: set[tuple[str, str]] = set()
    for n in k8s_nodes:
        ann = ann_of(n)
        s, inc = ann.get(keys.slurm_node), ann.get(keys.incident)
        if not s or not inc:
            continue
        if ann.get(keys.done) == inc:
            finished.add((s, inc))
        else:
            journals[(s, inc)] = n

    total = len(map_slinky(by_slurm, k8s_nodes, pods)) + len(journals)
    allowed = max(1, math.floor(cfg.max_cordoned_fraction * max(total, 1)))
    ours_cordoned = sum(
        1
        for n in k8s_nodes
        if ann_of(n).get(keys.cordoned) == "true"
        and ann_of(n).get(keys.done) != ann_of(n).get(keys.incident)
    )
    replacing = sum(
        1
        for n in k8s_nodes
        if keys.replacement in ann_of(n)
        and ann_of(n).get(keys.incident) == ann_of(n).get(keys.replacement)
        and ann_of(n).get(keys.done) != ann_of(n).get(keys.incident)
    )

    # 1. Incidents in flight, from their journals.
    for (s, inc), f in sorted(journals.items(), key=lambda kv: kv[0]):
        acted += 1
        fname = node_name(f)
        ann = ann_of(f)
        state = by_slurm.get(s)
        if state is None:
            deferred.append(Deferred(fname, s, "Slurm does not list this node"))
            continue
        spods = pods.get(s, ())
        moved = ann.get(keys.moved_uid)
        trig = trigger(state, cfg)
        hold = hold_name(s, inc) if ann.get(keys.reserved) == inc else None
        if moved is None:
            if trig is None or trig.incident != inc:
                cur = live_pod(spods)
                steps.append(Abandon(fname, s, inc, cur.ref if cur else None, hold))
                continue
            cur = live_pod(spods)
            if cur is None or cur.node != fname:
                deferred.append(Deferred(fname, s, "no slurmd pod of this node on the machine"))
                continue
            if state.busy or jobs.get(s):
                deferred.append(Deferred(fname, s, "jobs still running: the pod stays"))
                continue
            if cur.annotations.get(POD_CORDON) != "true" or (
                cur.annotations.get(keys.incident) != inc
            ):
                steps.append(MarkPod(fname, s, inc, cur.ref, cur.uid))
            if inc not in (ann.get(keys.reserved), ann.get(keys.reserve_failed)):
                steps.append(Reserve(fname, s, inc, hold_name(s, inc)))
            steps.append(MovePod(fname, s, inc, cur.ref, cur.uid))
            continue

        old = next((p for p in spods if p.uid == moved and not p.terminating), None)
        if old is not None:
            steps.append(MovePod(fname, s, inc, old.ref, old.uid))  # the delete did not happen
            continue
        if cfg.replacement != "none" and ann.get(keys.replacement) != inc:
            if replacing < cfg.max_concurrent_replacements:
                replacing += 1
                steps.append(
                    RequestReplacement(
                        fname,
                        s,
                        inc,
                        ann.get(keys.code, ""),
                        ann.get(keys.reason, ""),
                        ann.get(CAPI_MACHINE_ANNOTATION),
                        ann.get(CAPI_NAMESPACE_ANNOTATION),
                    )
                )
            else:
                deferred.append(Deferred(fname, s, "replacement cap reached"))
        new = live_pod(spods, not_uid=moved)
        if new is None or not new.node:
            deferred.append(Deferred(fname, s, "waiting for the NodeSet to recreate the pod"))
            continue
        if new.node == fname:
            deferred.append(Deferred(fname, s, "the pod came back on the faulty machine"))
            continue
        marked = new.annotations.get(POD_CORDON) == "true" and (
            new.annotations.get(keys.incident) == inc
        )
        reason = ann.get(keys.reason, "")
        ours_now = _ours_for(state, inc)
        accepted = ann.get(keys.accepted) == inc
        reasserted = ann.get(keys.reasserted) == inc or accepted
        registered = _registered(new, state)
        if not reasserted:
            if not ours_now and state.reason and not state.reason.startswith(OPERATOR_PREFIX):
                # An admin (or another tool) holds it now: theirs to lift.
                deferred.append(Deferred(fname, s, f"foreign reason {state.reason!r} holds it"))
                continue
            if not registered:
                # Marked before its slurmd registers: the operator then holds
                # the node drained after its migration IDLE, until we are back.
                if not marked and not ours_now:
                    steps.append(MarkPod(fname, s, inc, new.ref, new.uid))
                deferred.append(Deferred(fname, s, f"waiting for slurmd on {new.node} to register"))
                continue
            # Over the preStop's DOWN, the operator's drain of our mark or the
            # migration IDLE (all caused by our move), or our reason already
            # there (the door then writes nothing): journalled.
            steps.append(Reassert(fname, s, inc, reason, hold))
            ours_now = True
        held = ours_now and (_out_of_service(state) or not reasserted)
        if marked:
            # Our reason holds the node now (the operator skips foreign
            # reasons): the mark goes before any resume, never after.
            steps.append(MarkPod(fname, s, inc, new.ref, new.uid, mark=False))
        if held:
            if ann.get(keys.accept_failed) == inc:
                deferred.append(Deferred(fname, s, "acceptance failed: held for a human"))
            elif accepted:
                steps.append(Release(fname, s, inc, resume=True))
            elif not accepting:
                deferred.append(Deferred(fname, s, "waiting for acceptance on the new machine"))
            elif not registered:
                deferred.append(Deferred(fname, s, f"waiting for slurmd on {new.node} to answer"))
            else:
                steps.append(Accept(fname, s, inc, new.node))
                steps.append(Release(fname, s, inc, resume=True))
        else:
            # In service (the engine's acceptance resumed it, or our resume
            # ran before a crash), or a drain we did not cause: done.
            steps.append(Release(fname, s, inc, resume=False))

    # 2. Fresh incidents: our reason on a Slurm node whose pod is on a machine.
    held_now = {s for (s, _inc) in journals}
    for name in sorted(by_slurm):
        state = by_slurm[name]
        trig = trigger(state, cfg)
        # What users cause moves no pod and replaces no machine (core/user_caused.py).
        if not moves(trig) or name in held_now or (name, trig.incident) in finished:
            continue
        acted += 1
        cur = live_pod(pods.get(name, ()))
        machine: Obj | None = by_node.get(cur.node) if cur is not None else None
        if cur is None or machine is None:
            deferred.append(Deferred("", name, "no slurmd pod of a NodeSet maps to this node"))
            continue
        if not is_unschedulable(machine):
            if ours_cordoned >= allowed:
                deferred.append(
                    Deferred(
                        node_name(machine), name, f"cordon cap reached ({ours_cordoned}/{allowed})"
                    )
                )
                continue
            ours_cordoned += 1
        cordon = Cordon(node_name(machine), name, trig.incident, trig.code, trig.reason,
                        state.reason_time)  # fmt: skip
        steps.append(Hold(cordon, cur.ref))
    return SlinkyPlan(tuple(steps), tuple(deferred), acted)


# -- patch bodies ------------------------------------------------------------------


def hold_patch(node: Obj, step: Hold, cfg: BridgeConfig, now: datetime) -> dict[str, Any]:
    """The common cordon patch plus Slinky's node-cordon-reason (set in the
    same write as the cordon, as Slinky's docs ask: reason before cordon)
    and our journal; an earlier incident's Slinky keys are cleared."""
    keys = SlinkyKeys(cfg.annotation_prefix)
    body = cordon_patch(node, step.cordon, cfg, now)
    ann = body["metadata"]["annotations"]
    for k in keys.steps:
        if k in ann_of(node):
            ann[k] = None
    ann[keys.slurm_node] = step.cordon.slurm_node
    ann[keys.pod] = step.pod
    ann[NODE_CORDON_REASON] = step.cordon.reason[:256]
    return body


def abandon_patch(node: Obj, cfg: BridgeConfig) -> dict[str, Any]:
    keys = SlinkyKeys(cfg.annotation_prefix)
    body = uncordon_patch(node, cfg)
    ann = body["metadata"]["annotations"]
    for k in (keys.slurm_node, keys.pod, *keys.steps):
        if k in ann_of(node):
            ann[k] = None
    if NODE_CORDON_REASON in ann_of(node):
        ann[NODE_CORDON_REASON] = None
    return body


def pod_mark_patch(pod_uid: str, incident: str, cfg: BridgeConfig, *, mark: bool) -> Obj:
    """Merge patch of the pod's marks; the uid guards against a recreated pod
    (the stand-in and the API refuse a patch whose uid differs: 409)."""
    key = f"{cfg.annotation_prefix}/incident"
    values: dict[str, str | None] = (
        {POD_CORDON: "true", key: incident} if mark else {POD_CORDON: None, key: None}
    )
    return {"metadata": {"uid": pod_uid, "annotations": values}}
