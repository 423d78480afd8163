"""The Slurm door against an in-memory client: the ownership guard refuses
foreign reasons and accepts stale ones; requeue happens exactly once.
(The same door on the real lab: test_slurm_door_lab.py.)"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slurm_hooks.core.errors import ForeignReasonError, NotRequeueable, ReasonChanged, SlurmError
from slurm_hooks.core.model import JobInfo, NodeState
from slurm_hooks.core.ownership import Ownership
from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.slurm import parse
from slurm_hooks.slurm.base import SignalTarget
from slurm_hooks.slurm.door import Requeue, SlurmDoor

DATA = Path(__file__).parent / "data" / "slurm"


def ours(incident: str = "0badf00d", code: str = "XID79") -> str:
    return format_reason(DrainReason(code, incident, "lost", "gpu0"))


class Memory:
    """Just the calls the door makes; ``writes`` records every change."""

    def __init__(self, *nodes: NodeState) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.jobs: dict[str, JobInfo] = {}
        self.writes: list[tuple] = []
        self.reads = 0

    def get_node(self, name: str) -> NodeState:
        self.reads += 1
        return self.nodes[name]

    def drain(self, name: str, reason: str) -> None:
        self.writes.append(("drain", name, reason))
        n = self.nodes[name]
        self.nodes[name] = dataclasses.replace(n, flags=n.flags | {"DRAIN"}, reason=reason)

    def update_reason(self, name: str, reason: str) -> None:
        self.writes.append(("update_reason", name, reason))
        self.nodes[name] = dataclasses.replace(self.nodes[name], reason=reason)

    def resume(self, name: str) -> None:
        self.writes.append(("resume", name))
        self.nodes[name] = dataclasses.replace(self.nodes[name], flags=frozenset(), reason=None)

    def get_job(self, job_id: str) -> JobInfo:
        return self.jobs[job_id]

    def requeue(self, job_id: str) -> None:
        j = self.jobs[job_id]
        if j.requeue is False:
            raise NotRequeueable(job_id)
        self.writes.append(("requeue", job_id))
        self.jobs[job_id] = dataclasses.replace(j, restart_count=j.restart_count + 1)

    def signal_job(self, job_id: str, signal: str, target: SignalTarget) -> None:
        self.writes.append(("signal", job_id, signal, target))

    def cancel(self, job_id: str) -> None:
        self.writes.append(("cancel", job_id))

    def set_job_comment(self, job_id: str, comment: str, *, admin: bool = False) -> None:
        self.writes.append(("comment", job_id, comment, admin))


def drained(reason: str | None, name: str = "n1") -> NodeState:
    return NodeState(name, "idle", frozenset({"DRAIN"}), reason)


FOREIGN = [
    "admin: PSU swap, ticket #4711 (do not resume)",
    "NHC: check_fs_mount: /scratch not mounted",
    "slurm-operator: node being replaced",
    "Kill task failed",
    "slurm-hooks/1 this looks like ours but does not parse",
]


@pytest.mark.parametrize("foreign", FOREIGN)
def test_guard_refuses_foreign_reasons_without_writing(foreign: str) -> None:
    slurm = Memory(drained(foreign), NodeState("n2", "down", frozenset(), foreign))
    door = SlurmDoor(slurm)
    for name in ("n1", "n2"):
        with pytest.raises(ForeignReasonError):
            door.drain(name, ours())
        with pytest.raises(ForeignReasonError):
            door.resume(name)
    assert slurm.writes == []


def test_guard_drains_over_a_stale_reason_left_by_2411() -> None:
    """The recorded 24.11 node: idle, resumed, its admin's old reason kept."""
    (stale,) = parse.parse_scontrol_nodes((DATA / "24.11-node_idle_stale_reason.txt").read_text())
    slurm = Memory(stale)
    view = SlurmDoor(slurm).drain("n1", ours())
    assert view.ownership is Ownership.STALE and view.ours is None
    assert slurm.writes == [("drain", "n1", ours())]
    assert slurm.nodes["n1"].drained


def test_stale_reason_of_ours_is_no_drain_to_lift() -> None:
    slurm = Memory(NodeState("n1", "idle", frozenset(), ours()))
    assert SlurmDoor(slurm).resume("n1") is False
    assert slurm.writes == []


def test_drain_over_ours_relabels_once_and_never_with_a_foreign_text() -> None:
    slurm = Memory(drained(ours()))
    door = SlurmDoor(slurm)
    door.drain("n1", ours())  # the same reason again: nothing written
    assert slurm.writes == []
    door.drain("n1", ours("12345678", "ECC_DBE"))
    assert slurm.writes == [("update_reason", "n1", ours("12345678", "ECC_DBE"))]
    with pytest.raises(ReasonChanged):
        door.drain("n1", ours("0a0b0c0d", "LEND"), over_ours=False)
    with pytest.raises(SlurmError, match="not ours"):
        door.drain("n1", "free text")
    assert len(slurm.writes) == 1


def test_resume_checks_whose_reason_it_is() -> None:
    slurm = Memory(drained(ours()), drained("maint: spare rack 4", "n2"), drained(None, "n3"))
    door = SlurmDoor(slurm)
    with pytest.raises(ForeignReasonError, match="not the one"):
        door.resume("n1", owned=lambda r: r.incident == "ffffffff")
    with pytest.raises(ReasonChanged):
        door.resume("n1", expect_reason=ours("ffffffff"))
    with pytest.raises(ForeignReasonError):
        door.resume("n3")  # drained without a reason: not ours to lift
    assert slurm.writes == []
    assert door.resume("n2", foreign_prefixes=("maint: spare",)) is True  # a site's spare
    assert door.resume("n1", owned=lambda r: r.incident == "0badf00d") is True
    assert door.resume("n1") is False  # nothing left to resume
    assert slurm.writes == [("resume", "n2"), ("resume", "n1")]


def test_requeue_exactly_once() -> None:
    slurm = Memory()
    slurm.jobs["7"] = JobInfo("7", "u", "RUNNING", "n1", restart_count=2)
    slurm.jobs["8"] = JobInfo("8", "u", "RUNNING", "n1", requeue=False)
    door = SlurmDoor(slurm)
    assert door.requeue_once("7", 2) is Requeue.REQUEUED
    assert door.requeue_once("7", 2) is Requeue.ALREADY  # restart count moved: never twice
    assert slurm.writes == [("requeue", "7")]
    with pytest.raises(NotRequeueable):
        door.requeue_once("8", 0)


def test_job_writes_pass_through() -> None:
    slurm = Memory()
    door = SlurmDoor(slurm)
    door.signal("7", "USR1", SignalTarget.BATCH)
    door.cancel("7")
    door.comment("7", "note", admin=True)
    assert slurm.writes == [
        ("signal", "7", "USR1", SignalTarget.BATCH), ("cancel", "7"), ("comment", "7", "note", True),
    ]  # fmt: skip
