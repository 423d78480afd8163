"""The executor of the Slinky planner's steps (``slinky_plan``).

Every step writes its journal entry on the faulty machine F where a crash
could otherwise repeat it: the uid before the delete, ``reasserted`` after
the drain, ``accepted`` after acceptance, ``done`` after the resume.  Steps
whose repeat is harmless (a merge patch of the same marks, the same drain
reason, a resume of a node in service) need no intent record.  Slurm writes
go through the door only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from slurm_hooks.bridge import slinky_plan as sp
from slurm_hooks.bridge._exec import Obj, StepResult, log_step
from slurm_hooks.bridge.plan import annotate_patch
from slurm_hooks.core.errors import ConflictError, KubernetesError, SlurmError
from slurm_hooks.k8s.client import pods_path
from slurm_hooks.slurm.door import SlurmDoor

if TYPE_CHECKING:
    from datetime import datetime

    from slurm_hooks.bridge.metrics import BridgeMetrics
    from slurm_hooks.bridge.settings import BridgeConfig
    from slurm_hooks.k8s.client import KubeClient
    from slurm_hooks.slurm.base import SlurmClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    passed: bool
    detail: str = ""


#: How long the reservation made before a move may last: it only has to
#: outlive the new slurmd's registration (it is dropped then), and a lost
#: bridge must not leave the node reserved for ever.
HOLD_MINUTES = 24 * 60

#: Runs acceptance for a Slurm node on the machine its slurmd now runs on.
#: Raises SlurmHooksError when it could not run (tried again next pass).
AcceptanceRunner = Callable[[str, str], Verdict]


class Bridge(Protocol):
    """What a slinky step needs of the bridge (``service.Bridge``, which
    passes itself): named here so this module never imports the service."""

    @property
    def cfg(self) -> BridgeConfig: ...
    @property
    def kube(self) -> KubeClient: ...
    @property
    def slurm(self) -> SlurmClient: ...
    @property
    def metrics(self) -> BridgeMetrics: ...
    @property
    def clock(self) -> Callable[[], datetime]: ...
    def _rmw(
        self, name: str, current: dict[str, Obj], make_patch: Callable[[Obj], dict[str, Any]]
    ) -> Obj: ...
    def _execute(self, step: Any, current: dict[str, Obj]) -> StepResult: ...


def list_slurmd_pods(bridge: Bridge) -> dict[str, list[sp.SlurmdPod]]:
    """The one pod LIST per pass (NodeSet label selector, one namespace)."""
    cfg = bridge.cfg
    path = pods_path(cfg.slinky_namespace or None)
    items = bridge.kube.list(path, label_selector=cfg.slurmd_pod_selector or None).get("items")
    return sp.slurmd_pods(items or [], cfg.slurmd_pod_selector)


def _split(ref: str) -> tuple[str, str]:
    ns, _, name = ref.partition("/")
    return ns, name


def _on_pod(
    call: Callable[[], object], replaced: StepResult, gone: StepResult
) -> StepResult | None:
    """Make one call on a slurmd pod, which the NodeSet may have replaced
    (409: the step's pod is no longer that one) or deleted (404) meanwhile:
    the step then ends as ``replaced`` or ``gone``.  None: the call went
    through."""
    try:
        call()
    except ConflictError:
        return replaced
    except KubernetesError as exc:
        if exc.status != 404:
            raise
        return gone
    return None


def execute(
    bridge: Bridge, step: sp.SlinkyStep, current: dict[str, Obj], acceptor: AcceptanceRunner | None
) -> StepResult:
    cfg = bridge.cfg
    keys = sp.SlinkyKeys(cfg.annotation_prefix)
    now = bridge.clock()
    if isinstance(step, sp.Hold):
        bridge._rmw(step.cordon.node, current, lambda n: sp.hold_patch(n, step, cfg, now))
        bridge.metrics.incidents.labels("cordon").inc()
        log_step(log, step.cordon, "held (cordon, taint, node-cordon-reason)")
        return StepResult(step, "done")
    if isinstance(step, sp.MarkPod):
        ns, name = _split(step.pod)
        marks = sp.pod_mark_patch(step.uid, step.incident, cfg, mark=step.mark)
        missed = _on_pod(
            lambda: bridge.kube.patch(pods_path(ns, name), marks, "merge"),
            StepResult(step, "skipped", "the pod was replaced meanwhile"),
            StepResult(step, "skipped", "the pod is gone"),
        )
        if missed is not None:
            return missed
        log.info("pod=%s %s", step.pod, "cordoned (Slinky)" if step.mark else "marks removed")
        return StepResult(step, "done")
    if isinstance(step, sp.Reserve):
        return _reserve(bridge, step, current, keys)
    if isinstance(step, sp.MovePod):
        if sp.ann_of(current[step.node]).get(keys.moved_uid) != step.uid:
            bridge._rmw(step.node, current, lambda n: annotate_patch(n, {keys.moved_uid: step.uid}))
        ns, name = _split(step.pod)
        options: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": step.uid},
        }
        missed = _on_pod(
            lambda: bridge.kube.request("DELETE", pods_path(ns, name), body=options),
            StepResult(step, "done", "already recreated"),
            StepResult(step, "done", "already gone"),
        )
        if missed is not None:
            return missed
        bridge.metrics.incidents.labels("slurmd_pod_moved").inc()
        log_step(
            log,
            step,
            "slurmd pod %s deleted: the NodeSet recreates it on a spare machine",
            step.pod,
        )
        return StepResult(step, "done")
    if isinstance(step, sp.Reassert):
        # Only over a slurm-operator: reason (the one our move caused) or
        # over nothing / our own; an admin's reason raises ForeignReasonError.
        SlurmDoor(bridge.slurm).drain(
            step.slurm_node, step.reason, foreign_prefixes=(sp.OPERATOR_PREFIX,)
        )
        if step.unreserve is not None:
            # Our reason holds the node now; dropped before the journal, so
            # a crash in between only repeats this (the drop then finds none).
            SlurmDoor(bridge.slurm).drop_reservation(step.unreserve)
        bridge._rmw(
            step.node, current, lambda n: annotate_patch(n, {keys.reasserted: step.incident})
        )
        log.warning("slurm_node=%s incident=%s our reason is back", step.slurm_node, step.incident)
        return StepResult(step, "done")
    if isinstance(step, sp.Accept):
        if acceptor is None:
            return StepResult(step, "skipped", "no acceptance runner")
        verdict = acceptor(step.slurm_node, step.machine)
        key = keys.accepted if verdict.passed else keys.accept_failed
        bridge._rmw(step.node, current, lambda n: annotate_patch(n, {key: step.incident}))
        log.warning(
            "slurm_node=%s machine=%s incident=%s acceptance %s: %s",
            step.slurm_node,
            step.machine,
            step.incident,
            "passed" if verdict.passed else "FAILED",
            verdict.detail,
        )
        return StepResult(step, "done" if verdict.passed else "failed", verdict.detail)
    if isinstance(step, sp.Release):
        if step.resume:
            SlurmDoor(bridge.slurm).resume(
                step.slurm_node, owned=lambda r: r.incident == step.incident
            )
        bridge._rmw(step.node, current, lambda n: annotate_patch(n, {keys.done: step.incident}))
        bridge.metrics.incidents.labels("uncordon").inc()
        log.warning(
            "slurm_node=%s incident=%s back in service on its new machine; %s stays cordoned",
            step.slurm_node,
            step.incident,
            step.node,
        )
        return StepResult(step, "done")
    if isinstance(step, sp.Abandon):
        # The machine first, then the pod: with neither cordoned, Slinky
        # lifts any drain of its own it wrote meanwhile.
        if step.unreserve is not None:
            SlurmDoor(bridge.slurm).drop_reservation(step.unreserve)
        bridge._rmw(step.node, current, lambda n: sp.abandon_patch(n, cfg))
        if step.pod is not None:
            ns, name = _split(step.pod)
            marks = {sp.POD_CORDON: None, keys.incident: None}
            try:
                bridge.kube.patch(pods_path(ns, name), {"metadata": {"annotations": marks}})
            except KubernetesError as exc:
                if exc.status != 404:
                    raise
        log_step(log, step, "ended before the move: released")
        return StepResult(step, "done")
    return bridge._execute(step, current)


def _reserve(
    bridge: Bridge, step: sp.Reserve, current: dict[str, Obj], keys: sp.SlinkyKeys
) -> StepResult:
    """Make the reservation that holds the node through the move, or journal
    that it could not be made: the move goes on without it (as it would on
    a bridge with no ``scontrol``), so the outcome is never ``failed``."""
    try:
        SlurmDoor(bridge.slurm).ensure_reservation(step.name, step.slurm_node, HOLD_MINUTES)
    except SlurmError as exc:
        bridge._rmw(
            step.node, current, lambda n: annotate_patch(n, {keys.reserve_failed: step.incident})
        )
        log.warning(
            "slurm_node=%s incident=%s no reservation before the move (%s): Slurm may start "
            "a job on the new machine before acceptance",
            step.slurm_node,
            step.incident,
            exc,
        )
        return StepResult(step, "skipped", f"no reservation: {exc}")
    bridge._rmw(step.node, current, lambda n: annotate_patch(n, {keys.reserved: step.incident}))
    log.info("slurm_node=%s reservation %s holds it through the move", step.slurm_node, step.name)
    return StepResult(step, "done")
