"""The Kubernetes Node patches for lending's steps (pure: bodies only).

Each patch carries the node's resourceVersion, so a node changed since it
was read is not patched on stale facts; the executor (``lend_exec``) sends
them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from slurm_hooks.bridge import plan as bridge_plan
from slurm_hooks.bridge.lending_steps import (
    Lend,
    LendKeys,
    Obj,
    Open,
    Reclaim,
    Track,
)
from slurm_hooks.bridge.settings import BridgeConfig, LendingConfig


def has_taint(node: Obj, key: str) -> bool:
    return any(t.get("key") == key for t in (node.get("spec") or {}).get("taints") or [])


def iso(when: datetime) -> str:
    return bridge_plan._iso(when)


def _taints_without(node: Obj, key: str) -> list[Any]:
    return [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != key]


def _reserve_taint(lc: LendingConfig) -> dict[str, Any]:
    return {"key": lc.reserve_taint_key, "value": "slurm", "effect": lc.reserve_taint_effect}


def _taint_list_with(node: Obj, lc: LendingConfig, now: datetime) -> list[Any]:
    taint = _reserve_taint(lc)
    if lc.reserve_taint_effect == "NoExecute":
        taint["timeAdded"] = iso(now)
    return _taints_without(node, lc.reserve_taint_key) + [taint]


def _rv(node: Obj) -> dict[str, Any]:
    return {"resourceVersion": node["metadata"]["resourceVersion"]}


def track_patch(node: Obj, step: Track, cfg: BridgeConfig, now: datetime) -> dict[str, Any]:
    lc = cfg.lending
    keys = LendKeys(cfg.annotation_prefix)
    body: dict[str, Any] = {"metadata": _rv(node)}
    ann: dict[str, str | None] = {}
    if step.idle_since is not None:
        ann[keys.idle_since] = step.idle_since
    if step.clear_idle:
        ann[keys.idle_since] = None
    if ann:
        body["metadata"]["annotations"] = ann
    if step.add_taint and lc.reserve_taint_key:
        body["spec"] = {"taints": _taint_list_with(node, lc, now)}
    return body


def open_patch(node: Obj, step: Open | Lend, cfg: BridgeConfig, now: datetime) -> dict[str, Any]:
    """Schedulable for inference: the reserve taint off, our cordon (the
    one our reserve-cordon annotation records) cleared, the lent label on."""
    lc = cfg.lending
    keys = LendKeys(cfg.annotation_prefix)
    ann = bridge_plan.node_annotations(node)
    spec: dict[str, Any] = {}
    if lc.reserve_taint_key and has_taint(node, lc.reserve_taint_key):
        spec["taints"] = _taints_without(node, lc.reserve_taint_key) or None
    if bridge_plan.is_unschedulable(node) and ann.get(keys.reserve_cordon) == "true":
        spec["unschedulable"] = None
    body: dict[str, Any] = {
        "metadata": {
            **_rv(node),
            "labels": {lc.lent_label: "true"},
            "annotations": {
                keys.lent: step.incident,
                keys.lent_at: iso(now),
                keys.idle_since: None,
                keys.reserve_cordon: None,
                keys.reclaimed_at: None,
                keys.reclaiming: None,
                keys.reclaim_at: None,
            },
        }
    }
    if spec:
        body["spec"] = spec
    return body


def reclaim_patch(node: Obj, step: Reclaim, cfg: BridgeConfig, now: datetime) -> dict[str, Any]:
    """Out of inference first: cordon (recording that the cordon is ours),
    the reserve taint on, the lent label off, the reclaim recorded."""
    lc = cfg.lending
    keys = LendKeys(cfg.annotation_prefix)
    ann: dict[str, str | None] = {keys.reclaiming: step.incident, keys.reclaim_at: iso(now)}
    spec: dict[str, Any] = {}
    if not bridge_plan.is_unschedulable(node):
        spec["unschedulable"] = True
        ann[keys.reserve_cordon] = "true"
    if lc.reserve_taint_key:
        spec["taints"] = _taint_list_with(node, lc, now)
    body: dict[str, Any] = {
        "metadata": {**_rv(node), "labels": {lc.lent_label: None}, "annotations": ann},
    }
    if spec:
        body["spec"] = spec
    return body


def finish_patch(node: Obj, cfg: BridgeConfig, now: datetime) -> dict[str, Any]:
    """Handed back: our lend marks gone, reclaimed-at set; the cordon and the
    reserve taint stay (the steady state of a Slurm-owned node)."""
    keys = LendKeys(cfg.annotation_prefix)
    return {
        "metadata": {
            **_rv(node),
            "labels": {cfg.lending.lent_label: None},
            "annotations": {
                keys.lent: None,
                keys.lent_at: None,
                keys.reclaiming: None,
                keys.reclaim_at: None,
                keys.reclaimed_at: iso(now),
            },
        }
    }
