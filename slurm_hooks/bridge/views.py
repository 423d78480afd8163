"""The fields of a Node and of a Pod the bridge reads, and nothing else.

A real Node object is mostly ``status.images``, ``managedFields``,
``nodeInfo`` and capacity figures: several KB each, 50,000 of them on a big
fleet.  The bridge keeps a list of every Node (one LIST, then watches on a
large fleet: ``k8s/cache.py``), so each page and each watch event is cut
down to these views as it is decoded (``NODE_VIEW``: the decoder builds only
these fields): the bridge then holds kilobytes per hundred nodes instead of
megabytes.

What is kept was audited against every Node read in ``slurm_hooks/bridge``
(plan, lending, lend_exec, slinky_plan, slinky_exec, replace, _exec):
metadata name/labels/annotations/resourceVersion/uid, spec
unschedulable/taints/providerID, the Ready condition.  A reader that needs
another field must add it here; the view tests pin the list.  Patches are
merge patches built from these fields (never a whole object written back),
and a PATCH answer, cut to the same view as it is decoded, replaces the
node in the pass's table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from slurm_hooks.k8s.client import ItemView

Obj = Mapping[str, Any]

NODE_METADATA = ("name", "uid", "resourceVersion", "labels", "annotations", "deletionTimestamp")
NODE_SPEC = ("unschedulable", "taints", "providerID")

POD_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "annotations",
    "ownerReferences",
    "deletionTimestamp",
)
POD_SPEC = ("nodeName", "priority", "priorityClassName")


def _pick(src: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(src, Mapping):
        return {}
    return {k: src[k] for k in keys if k in src}


def node_view(node: Obj) -> dict[str, Any]:
    """A Node as the bridge reads it (see the module docstring).  Called once
    per node per pass (50,000 times): plain dict look-ups, no helpers."""
    md = node.get("metadata") or {}
    spec = node.get("spec") or {}
    out: dict[str, Any] = {
        "metadata": {k: md[k] for k in NODE_METADATA if k in md},
        "spec": {k: spec[k] for k in NODE_SPEC if k in spec} if spec else {},
    }
    status = node.get("status")
    if status:
        for c in status.get("conditions") or ():
            if c.get("type") == "Ready":
                out["status"] = {"conditions": [{"type": "Ready", "status": c.get("status")}]}
                break
    return out


def pod_view(pod: Obj) -> dict[str, Any]:
    """A Pod as the fault bridge's eviction reads it: who owns it, where it
    runs, whether it is finished or already going."""
    status = pod.get("status") or {}
    out: dict[str, Any] = {
        "metadata": _pick(pod.get("metadata"), POD_METADATA),
        "spec": _pick(pod.get("spec"), POD_SPEC),
    }
    if isinstance(status, Mapping) and "phase" in status:
        out["status"] = {"phase": status["phase"]}
    return out


# -- the same views, decoded straight from the JSON ----------------------------
#
# The TypedDicts below name exactly the fields of NODE_METADATA/NODE_SPEC and
# POD_METADATA/POD_SPEC (a test pins them together): the client's decoder
# builds only these, so a 50,000-node LIST never materialises ``images`` or
# ``managedFields``.  ``_finish_*`` then gives the shape ``node_view`` and
# ``pod_view`` give (spec always present, only the Ready condition).


class _NodeMeta(TypedDict, total=False):
    """The ObjectMeta fields a Node is read with; a Pod's are these and more."""

    name: str
    uid: str
    resourceVersion: str
    labels: dict[str, str]
    annotations: dict[str, str]
    deletionTimestamp: str


class _NodeSpec(TypedDict, total=False):
    unschedulable: bool
    taints: list[dict[str, Any]]
    providerID: str


class _Condition(TypedDict, total=False):
    type: str
    status: str


class _NodeStatus(TypedDict, total=False):
    conditions: list[_Condition]


class NodeItem(TypedDict, total=False):
    metadata: _NodeMeta
    spec: _NodeSpec
    status: _NodeStatus


class _PodMeta(_NodeMeta, total=False):
    namespace: str
    ownerReferences: list[dict[str, Any]]


class _PodSpec(TypedDict, total=False):
    nodeName: str
    priority: int
    priorityClassName: str


class _PodStatus(TypedDict, total=False):
    phase: str


class PodItem(TypedDict, total=False):
    metadata: _PodMeta
    spec: _PodSpec
    status: _PodStatus


def _finish_node(node: dict[str, Any]) -> dict[str, Any]:
    """Called for every node of a LIST (50,000): the decoded status and
    Ready condition are reused (they hold only the schema's fields) rather
    than built again."""
    if "metadata" not in node:
        node["metadata"] = {}
    if "spec" not in node:
        node["spec"] = {}
    status = node.get("status")
    if status is not None:
        for c in status.get("conditions") or ():
            if c.get("type") == "Ready":
                if "status" not in c:
                    c["status"] = None
                status["conditions"] = [c]
                break
        else:
            del node["status"]
    return node


def _finish_pod(pod: dict[str, Any]) -> dict[str, Any]:
    if "metadata" not in pod:
        pod["metadata"] = {}
    if "spec" not in pod:
        pod["spec"] = {}
    if not pod.get("status"):
        pod.pop("status", None)
    return pod


#: ``node_view``, applied while a LIST page or a watch event is parsed.
NODE_VIEW = ItemView(NodeItem, node_view, _finish_node)
#: ``pod_view``, applied while a LIST page is parsed.
POD_VIEW = ItemView(PodItem, pod_view, _finish_pod)
