"""The one ownership rule (core/ownership.py): a node's reason is ours,
foreign, stale or none, and only a node out of service (DRAIN, DOWN, FAIL)
gives a reason any meaning.  Slurm 22.05 clears a reason on resume, 24.11
keeps it (recorded captures), 26.05 clears it again."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hooks.core.model import NodeState, ReasonOwner
from slurm_hooks.core.ownership import (
    Ownership,
    classify,
    effective_owner,
    node_ownership,
    our_reason,
    reason_counts,
)
from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.slurm import parse

DATA = Path(__file__).parent / "data" / "slurm"
OURS = format_reason(DrainReason("XID79", "0badf00d", "GPU has fallen off the bus", "gpu3"))
FOREIGN = {
    "admin": "admin: PSU swap, ticket #4711",
    "nhc": "NHC: check_fs_mount: /scratch not mounted",
    "operator": "slurm-operator: node being replaced",
    "slurm": "Not responding",
    "fake-ours": "slurm-hooks/1 this looks like ours but does not parse",
}
#: State strings as scontrol (``IDLE+DRAIN``) and sinfo (``drained``) print them.
IN_SERVICE = ["IDLE", "ALLOCATED", "MIXED", "MIXED+COMPLETING", "IDLE+NOT_RESPONDING", "idle*"]
OUT_OF_SERVICE = [
    "IDLE+DRAIN", "drained", "draining", "MIXED+DRAIN", "ALLOCATED+DRAIN", "DOWN",
    "DOWN+NOT_RESPONDING", "DOWN+DRAIN+NOT_RESPONDING", "IDLE+FAIL", "ALLOCATED+FAILING",
]  # fmt: skip


def node(state: str, reason: str | None) -> NodeState:
    base, flags = parse.parse_state(state)
    return NodeState("n1", base, flags, reason)


@pytest.mark.parametrize("state", IN_SERVICE + OUT_OF_SERVICE)
def test_no_reason_is_none_on_every_state(state: str) -> None:
    assert node_ownership(node(state, None)) is Ownership.NONE
    assert node_ownership(node(state, "  ")) is Ownership.NONE


@pytest.mark.parametrize("state", OUT_OF_SERVICE)
def test_out_of_service_reason_is_ours_or_foreign(state: str) -> None:
    assert node_ownership(node(state, OURS)) is Ownership.OURS
    assert our_reason(node(state, OURS)) == DrainReason(
        "XID79", "0badf00d", "GPU has fallen off the bus", "gpu3"
    )
    for owner, text in FOREIGN.items():
        n = node(state, text)
        assert node_ownership(n) is Ownership.FOREIGN, owner
        assert effective_owner(n) not in (ReasonOwner.NONE, ReasonOwner.OURS)


@pytest.mark.parametrize("state", IN_SERVICE)
def test_in_service_reason_is_stale_whoever_wrote_it(state: str) -> None:
    for text in (OURS, *FOREIGN.values()):
        n = node(state, text)
        assert node_ownership(n) is Ownership.STALE
        assert not node_ownership(n).claimed
        assert effective_owner(n) is ReasonOwner.NONE
        assert our_reason(n) is None


def test_reason_counts_on_exactly_the_holding_states() -> None:
    assert all(reason_counts(*parse.parse_state(s)) for s in OUT_OF_SERVICE)
    assert not any(reason_counts(*parse.parse_state(s)) for s in IN_SERVICE)
    assert classify("down", (), "x") is Ownership.FOREIGN


def capture(name: str) -> NodeState:
    (n,) = parse.parse_scontrol_nodes((DATA / name).read_text())
    return n


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("22.05-node_idle.txt", Ownership.NONE),
        ("22.05-node_mixed_drain.txt", Ownership.OURS),
        ("22.05-node_down_not_responding.txt", Ownership.FOREIGN),  # Slurm's "Not responding"
        ("22.05-node_down_drain_not_responding.txt", Ownership.FOREIGN),
        # 24.11 keeps an admin's old reason on the resumed, idle node: stale.
        ("24.11-node_idle_stale_reason.txt", Ownership.STALE),
        ("26.05-node_after_resume.txt", Ownership.NONE),
    ],
)
def test_recorded_nodes_per_release(name: str, expected: Ownership) -> None:
    assert node_ownership(capture(name)) is expected


def test_the_2411_capture_really_is_a_resumed_node_with_an_admin_reason() -> None:
    n = capture("24.11-node_idle_stale_reason.txt")
    assert (n.state, n.drained, n.down, n.reason) == ("idle", False, False, "admin: probe")
    assert effective_owner(n) is ReasonOwner.NONE
