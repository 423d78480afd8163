"""Kubernetes writes that the fault bridge and the lender both make: a Node
patched read-modify-write, and pods evicted through the Eviction API; and
what a step carried out returns (``StepResult``), for every executor."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from slurm_hooks.bridge.views import NODE_VIEW
from slurm_hooks.core.errors import ConflictError, KubernetesError
from slurm_hooks.k8s.client import KubeClient, eviction_path, nodes_path

log = logging.getLogger(__name__)

#: Read-modify-write attempts on a Node before a step counts as failed.
PATCH_ATTEMPTS = 4

Obj = dict[str, Any]


@dataclass(frozen=True)
class StepResult:
    #: A ``plan.Step``, or a ``slinky_plan.SlinkyStep`` with the slinky mapping.
    step: Any
    #: done, partial, failed, skipped or dry-run
    outcome: str
    detail: str = ""


class IncidentStep(Protocol):
    """A step on the Kubernetes node of one Slurm incident (plan's and slinky_plan's)."""

    @property
    def node(self) -> str: ...
    @property
    def slurm_node(self) -> str: ...
    @property
    def incident(self) -> str: ...


def log_step(logger: logging.Logger, step: IncidentStep, done: str, *args: object) -> None:
    """The warning an executor writes for a step it carried out, always led
    by ``node= slurm_node= incident=``: one grep follows an incident through
    the fault bridge and the Slinky executor alike."""
    logger.warning(
        "node=%s slurm_node=%s incident=%s " + done,
        step.node,
        step.slurm_node,
        step.incident,
        *args,
    )


def patch_node(
    kube: KubeClient, nodes: dict[str, Obj], name: str, make_patch: Callable[[Obj], dict[str, Any]]
) -> Obj:
    """Patch from the object as last read; on 409 read it again and redo.
    ``nodes[name]`` becomes what the server returned, cut to ``NODE_VIEW``
    like every other node of the table (the parser skips the rest: a real
    Node's answer is mostly images and managedFields)."""
    obj = nodes[name]
    for attempt in range(PATCH_ATTEMPTS):
        try:
            new = kube.patch(nodes_path(name), make_patch(obj), "merge", view=NODE_VIEW)
        except ConflictError:
            if attempt == PATCH_ATTEMPTS - 1:
                raise
            log.info("node=%s changed meanwhile (409), reading it again", name)
            obj = kube.get(nodes_path(name))
            continue
        nodes[name] = new
        return new
    raise AssertionError("unreachable")


def evict_pods(kube: KubeClient, pods: Iterable[Mapping[str, Any]]) -> tuple[int, list[str]]:
    """Ask for each pod's eviction: how many were evicted, and the
    ``namespace/name`` of those a disruption budget kept (429: the next pass
    tries again).  A pod already gone (404) is neither."""
    evicted = 0
    blocked: list[str] = []
    for pod in pods:
        md = pod["metadata"]
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": md["name"], "namespace": md["namespace"]},
        }
        try:
            kube.create(eviction_path(md["namespace"], md["name"]), body)
            evicted += 1
        except KubernetesError as exc:
            if exc.status == 404:
                continue
            if exc.status == 429:
                blocked.append(f"{md['namespace']}/{md['name']}")
                continue
            raise
    return evicted, blocked
