"""The fields of a Node and of a Pod the bridge reads, and nothing else.

A real Node object is mostly ``status.images``, ``managedFields``,
``nodeInfo`` and capacity figures: several KB each, 50,000 of them on a big
fleet.  The bridge keeps one LIST of every Node per pass, so each page is cut
down to these views as it is decoded (``KubeClient.list(item_view=...)``):
the pass then holds kilobytes per hundred nodes instead of megabytes.

What is kept was audited against every Node read in ``slurm_hooks/bridge``
(plan, lending, lend_exec, slinky_plan, slinky_exec, replace, _exec):
metadata name/labels/annotations/resourceVersion/uid, spec
unschedulable/taints/providerID, the Ready condition.  A reader that needs
another field must add it here; the view tests pin the list.  Patches are
merge patches built from these fields, and a PATCH answer (the full object)
replaces the view in the pass's node table, so nothing is written back from
a cut-down object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
