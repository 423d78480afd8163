"""Pod objects the Kubernetes tests put into the API stand-in, shaped as the
real API returns them (only the fields the bridge and the lender read)."""

from __future__ import annotations

from typing import Any


def controller(kind: str, name: str, uid: str) -> list[dict[str, Any]]:
    """``ownerReferences`` naming the pod's controller (ReplicaSet, DaemonSet)."""
    return [{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": True}]


def pod(
    name: str,
    namespace: str,
    node: str,
    *,
    labels: dict[str, str] | None = None,
    owners: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Running pod bound to ``node``; ``spec`` adds fields (``priority``)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels is not None:
        metadata["labels"] = labels
    if owners is not None:
        metadata["ownerReferences"] = owners
    return {
        "metadata": metadata,
        "spec": {"nodeName": node, **spec},
        "status": {"phase": "Running"},
    }


def slurmd_pod(node: str) -> dict[str, Any]:
    """The node's slurmd pod, as Slinky runs it: never evicted while Slurm has jobs there."""
    return pod(f"slurmd-{node}", "slurm", node, labels={"app.kubernetes.io/name": "slurmd"})
