"""The lending executor's Slurm writes go through the door: a stale reason
(Slurm 24.11 keeps it on a resumed node) does not stop a lend, an admin's
drain that lands meanwhile is never overwritten, and a fault's reason
written over our LEND is never lifted."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

from slurm_hooks.bridge import lending as L
from slurm_hooks.bridge.lend_exec import Lender
from slurm_hooks.bridge.settings import BridgeConfig
from slurm_hooks.core.model import NodeState
from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.slurm import parse

DATA = Path(__file__).parent / "data" / "slurm"
NOW = datetime(2026, 12, 1, 21, 0, tzinfo=UTC)
CFG = BridgeConfig()


class Slurm:
    def __init__(self, node: NodeState) -> None:
        self.node = node
        self.writes: list[tuple[str, str]] = []
        self.before_write = None

    def get_node(self, name: str) -> NodeState:
        if self.before_write is not None:
            self.before_write, hook = None, self.before_write
            hook()
        return self.node

    def drain(self, name: str, reason: str) -> None:
        self.writes.append(("drain", reason))
        self.node = dataclasses.replace(self.node, flags=frozenset({"DRAIN"}), reason=reason)

    def resume(self, name: str) -> None:
        self.writes.append(("resume", name))
        self.node = dataclasses.replace(self.node, flags=frozenset(), reason=None)


def lender(slurm: Slurm) -> tuple[Lender, list[L.Open]]:
    opened: list[L.Open] = []
    lend = Lender(slurm, None, CFG)  # type: ignore[arg-type]
    lend._open = lambda step, nodes, now, shown=None: opened.append(step)  # type: ignore[method-assign]
    return lend, opened


def stale_2411() -> NodeState:
    (n,) = parse.parse_scontrol_nodes((DATA / "24.11-node_idle_stale_reason.txt").read_text())
    return n


def test_lend_drains_a_node_whose_old_reason_is_stale() -> None:
    slurm = Slurm(stale_2411())
    lend, opened = lender(slurm)
    lend._lend(L.Lend("k1", "n1", "0a0b0c0d", 900.0), {}, NOW)
    assert slurm.writes == [("drain", L.lend_reason("0a0b0c0d", CFG.lending))]
    assert [o.incident for o in opened] == ["0a0b0c0d"]


def test_lend_never_overwrites_a_drain_that_landed_meanwhile() -> None:
    slurm = Slurm(NodeState("n1", "idle"))
    lend, opened = lender(slurm)

    def admin() -> None:
        slurm.before_write = lambda: setattr(
            slurm, "node", NodeState("n1", "idle", frozenset({"DRAIN"}), "admin: rack work")
        )

    slurm.before_write = admin  # the first read sees it idle, the door's read the drain
    r = lend._lend(L.Lend("k1", "n1", "0a0b0c0d", 900.0), {}, NOW)
    assert r.outcome == "skipped" and slurm.writes == [] and opened == []
    assert slurm.node.reason == "admin: rack work"


def test_abort_never_lifts_a_fault_written_over_our_lend() -> None:
    fault = format_reason(DrainReason("XID79", "0badf00d", "lost", "gpu3"))
    slurm = Slurm(NodeState("n1", "idle", frozenset({"DRAIN"}), fault))
    lend, _ = lender(slurm)
    assert lend._resume_lent("n1", "0a0b0c0d") is False
    slurm.node = NodeState(
        "n1", "idle", frozenset({"DRAIN"}), L.lend_reason("0a0b0c0d", CFG.lending)
    )
    assert lend._resume_lent("n1", "0a0b0c0d") is True
    assert slurm.writes == [("resume", "n1")]
