"""Lending's inputs, read: what Kubernetes asks for (unschedulable inference
pods, a target in a ConfigMap) and Slurm's pending jobs (``squeue``).

Pure parsing; the executor (``lend_exec``) fetches the objects and the text.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from slurm_hooks.bridge.lending_steps import (
    Demand,
    Obj,
    PendingJob,
)
from slurm_hooks.bridge.settings import ALL_NAMESPACES, LendingConfig
from slurm_hooks.k8s.selectors import label_selector_matches


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
    """In ``pod_namespace`` (unless "*"), and matches the configured label
    selector or one of the priority classes: both are the pod's creator's
    to choose, the namespace is not."""
    md = pod.get("metadata") or {}
    if cfg.pod_namespace != ALL_NAMESPACES and md.get("namespace") != cfg.pod_namespace:
        return False
    labels = md.get("labels") or {}
    if cfg.pod_selector and label_selector_matches(cfg.pod_selector, labels):
        return True
    return (pod.get("spec") or {}).get("priorityClassName") in cfg.priority_classes


def pod_demand(pods: Iterable[Obj], cfg: LendingConfig, target: int | None = None) -> Demand:
    """Nodes the unschedulable inference pods need: their GPUs packed into
    nodes of ``gpus_per_node``; a pod asking for no GPU takes a node.  A pod
    asking for more GPUs than a node has fits on no node we could lend, so
    it adds nothing (one pod asking for 100,000 GPUs is not 12,500 nodes)."""
    gpus = 0
    whole = 0
    count = 0
    for pod in pods:
        if not is_unschedulable_pod(pod):
            continue
        if not is_inference_pod(pod, cfg):
            continue
        n = pod_gpus(pod, cfg.gpu_resource)
        if n > cfg.gpus_per_node:
            continue
        count += 1
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
