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


def _pod(ns: str, name: str, *, gpus: int = 0, labels=None, owner=None, ann=None) -> dict:
    res = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "metadata": {"namespace": ns, "name": name, "labels": labels or {},
                     "annotations": ann or {},
                     "ownerReferences": [{"kind": owner, "name": "x"}] if owner else []},
        "spec": {"nodeName": "k1", "containers": [{"name": "c", "resources": res}]},
        "status": {"phase": "Running"},
    }  # fmt: skip


def test_a_reclaim_moves_every_pod_holding_gpus_whatever_it_claims_to_be() -> None:
    """Labels, owner references and the mirror annotation are a pod's
    creator's to write: a tenant's pod dressed as slurmd, as a DaemonSet's
    or as a static pod still has to leave before Slurm gets the node back.
    The node's own slurmd pod (in slinky_namespace) and a real DaemonSet
    pod that holds no GPU stay."""
    slurmd = {"app.kubernetes.io/name": "slurmd"}
    pods = [
        _pod("slurm", "slurmd-n1", labels=slurmd),
        _pod("monitoring", "dcgm-exporter-k1", owner="DaemonSet"),
        _pod("tenant", "fake-slurmd", gpus=8, labels=slurmd),
        _pod("tenant", "fake-ds", gpus=8, owner="DaemonSet"),
        _pod("tenant", "fake-static", gpus=8, ann={"kubernetes.io/config.mirror": "x"}),
        _pod("tenant", "plain", gpus=1),
    ]

    class Kube:
        evicted: list[str] = []

        def list(self, path: str, **kw: object) -> dict:
            return {"items": pods}

        def create(self, path: str, body: dict) -> None:
            self.evicted.append(body["metadata"]["name"])

    lend = Lender(Slurm(NodeState("n1", "idle")), Kube(), CFG)  # type: ignore[arg-type]
    left = {p["metadata"]["name"] for p in lend._workload_pods("k1")}
    assert left == {"fake-slurmd", "fake-ds", "fake-static", "plain"}
    evicted, blocked = lend._evict("k1")
    assert (evicted, blocked) == (4, []) and set(Kube.evicted) == left
