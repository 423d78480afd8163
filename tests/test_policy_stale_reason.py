"""Slurm 24.11 keeps a resumed node's last reason (22.05 clears it).  Such a
stale reason must not pass for an owner: an XID 79 on a node an admin once
drained and resumed is drained (issue 15).  The node is the recorded 24.11
capture, not a hand-made one."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

from slurm_hooks.core.model import Action, Component, Finding, NodeState, Status
from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.decide import DecisionKind, PolicyConfig, decide, decide_resume
from slurm_hooks.slurm import parse

DATA = Path(__file__).parent / "data" / "slurm"
NOW = datetime(2026, 12, 1, 21, 0, tzinfo=UTC)
XID79 = Finding("xid", Status.FAIL, "XID79", "GPU has fallen off the bus",
                Component("gpu", index=3), Action.RESET_GPU)  # fmt: skip


def resumed_on_2411() -> NodeState:
    (n,) = parse.parse_scontrol_nodes((DATA / "24.11-node_idle_stale_reason.txt").read_text())
    return dataclasses.replace(n, partitions=("gpu",))


def test_xid79_on_a_node_with_a_stale_admin_reason_is_drained() -> None:
    node = resumed_on_2411()
    assert node.reason == "admin: probe" and not node.drained
    (d,) = decide([XID79], node, None, None, PolicyConfig(), NOW)
    assert d.kind is DecisionKind.DRAIN and d.acts
    assert d.reason is not None and d.reason.code == "XID79"
    assert "stale" in d.explanation


def test_a_stale_reason_of_ours_is_not_already_handled() -> None:
    old = format_reason(DrainReason("XID79", "0badf00d", "lost", "gpu3"))
    node = dataclasses.replace(resumed_on_2411(), reason=old)
    (d,) = decide([XID79], node, None, None, PolicyConfig(), NOW)
    assert d.kind is DecisionKind.DRAIN and d.reason is not None
    assert d.reason.incident != "0badf00d"
    # ... and such a node is in service, not a drain of ours to resume.
    r = decide_resume(node, None, NOW, skip_acceptance=True)
    assert r.kind is DecisionKind.IGNORE


def test_the_same_reason_on_a_drained_node_still_belongs_to_the_admin() -> None:
    node = dataclasses.replace(resumed_on_2411(), flags=frozenset({"DRAIN"}))
    (d,) = decide([XID79], node, None, None, PolicyConfig(), NOW)
    assert d.kind is DecisionKind.FOREIGN_REASON and not d.acts
