"""API paths of the Kubernetes objects we read and write (core, coordination,
policy, Cluster API machines and our NodeReplacement resource).

Plain strings, so a caller builds a path without a client and a test can
name the request it expects.
"""

from __future__ import annotations


def nodes_path(name: str | None = None) -> str:
    return "/api/v1/nodes" + (f"/{name}" if name else "")


def pods_path(namespace: str | None = None, name: str | None = None) -> str:
    if namespace is None:
        return "/api/v1/pods"
    return f"/api/v1/namespaces/{namespace}/pods" + (f"/{name}" if name else "")


def eviction_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}/eviction"


def lease_path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    return base + (f"/{name}" if name else "")


def machine_path(namespace: str, name: str | None = None, version: str = "v1beta1") -> str:
    base = f"/apis/cluster.x-k8s.io/{version}/namespaces/{namespace}/machines"
    return base + (f"/{name}" if name else "")


REPLACEMENT_GROUP = "slurm-hooks.io"
REPLACEMENT_VERSION = "v1alpha1"
REPLACEMENT_PLURAL = "nodereplacements"


def replacement_path(namespace: str, name: str | None = None) -> str:
    base = (
        f"/apis/{REPLACEMENT_GROUP}/{REPLACEMENT_VERSION}/namespaces/{namespace}/"
        f"{REPLACEMENT_PLURAL}"
    )
    return base + (f"/{name}" if name else "")


def pdb_path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
    return base + (f"/{name}" if name else "")
