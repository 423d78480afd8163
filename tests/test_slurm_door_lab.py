"""The Slurm door on the real lab: we drain and resume only under our own
reason; an admin's drain is never overwritten and never lifted; Slurm's
refusals reach callers as typed errors."""

from __future__ import annotations

import pytest

from slurm_hooks.core.errors import (
    ForeignReasonError,
    JobGone,
    NodeNotFound,
    NotRequeueable,
    ReasonChanged,
    SlurmError,
)
from slurm_hooks.core.ownership import node_ownership
from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.detect.probes.commands import run
from slurm_hooks.slurm.base import SignalTarget
from slurm_hooks.slurm.door import Requeue, SlurmDoor

pytestmark = pytest.mark.slurm


def ours(incident: str = "0badf00d", code: str = "XID79") -> str:
    return format_reason(DrainReason(code=code, incident=incident, component="gpu0", text="lost"))


def admin_drain(lab, node: str, reason: str) -> None:  # type: ignore[no-untyped-def]
    run(
        ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"],
        timeout=10,
        env=lab.env(),
    )


def sinfo_reasons(lab) -> dict[str, str]:  # type: ignore[no-untyped-def]
    out = run(["sinfo", "-R", "-h", "-o", "%N|%E"], timeout=10, env=lab.env()).stdout
    return dict(line.split("|", 1) for line in out.splitlines())


@pytest.mark.parametrize(
    "foreign",
    [
        "admin: PSU swap, ticket #4711 (do not resume)",
        "NHC: check_fs_mount: /scratch not mounted",
        "slurm-operator: node being replaced",
        "slurm-hooks/1 this looks like ours but does not parse",
    ],
)
def test_foreign_drain_left_alone(fresh_lab, foreign: str) -> None:  # type: ignore[no-untyped-def]
    c = fresh_lab.client()
    admin_drain(fresh_lab, "n3", foreign)
    with pytest.raises(ForeignReasonError):
        SlurmDoor(c).drain("n3", ours())
    with pytest.raises(ForeignReasonError):
        SlurmDoor(c).resume("n3")
    node = c.get_node("n3")
    assert node.drained and node.reason == foreign
    assert sinfo_reasons(fresh_lab)["n3"] == foreign


def test_our_drain_and_resume(fresh_lab) -> None:  # type: ignore[no-untyped-def]
    c = fresh_lab.client()
    door = SlurmDoor(c)
    reason = ours()
    door.drain("n2", reason)
    node = c.get_node("n2")
    assert node.drained and node.reason == reason
    assert sinfo_reasons(fresh_lab) == {"n2": reason}
    # a newer incident of ours replaces our own reason
    newer = ours(incident="12345678", code="ECC_DBE")
    assert door.drain("n2", newer).node.reason == reason  # the view before the write
    assert c.get_node("n2").reason == newer and c.get_node("n2").drained
    with pytest.raises(ForeignReasonError, match="not resuming"):
        door.resume("n2", owned=lambda r: r.incident == "0badf00d")
    with pytest.raises(ReasonChanged):
        door.resume("n2", expect_reason=reason)
    assert door.resume("n2", owned=lambda r: r.incident == "12345678") is True
    (n2,) = fresh_lab.wait_idle(["n2"])
    # 22.05 and 26.05 clear the reason; 24.11 keeps it on the idle node,
    # where it claims nothing (core/ownership.py)
    assert n2.reason is None or not node_ownership(n2).claimed
    assert door.resume("n2") is False  # nothing to resume


def test_reason_written_on_an_idle_node_is_not_kept_on_2205(fresh_lab) -> None:  # type: ignore[no-untyped-def]
    """The 24.11 stale-reason case cannot be made on 22.05: a reason written
    on an idle node is dropped (24.11 keeps a resumed node's last reason).
    Where the lab keeps it (24.11 and later), the door must drain over it."""
    c = fresh_lab.client()
    run(["scontrol", "update", "NodeName=n1", "Reason=admin: old ticket #12"], timeout=10,
        env=fresh_lab.env())  # fmt: skip
    admin_drain(fresh_lab, "n3", "admin: memory test")
    run(["scontrol", "update", "NodeName=n3", "State=RESUME"], timeout=10, env=fresh_lab.env())
    for name in ("n1", "n3"):
        node = c.get_node(name)
        assert not node.drained
        if node.reason is None:
            continue  # 22.05: nothing stale to test on this node
        view = SlurmDoor(c).drain(name, ours())  # 24.11: a stale reason claims nothing
        assert view.node.reason == node.reason
        assert c.get_node(name).drained and c.get_node(name).reason == ours()


def test_slurm_reason_is_foreign(fresh_lab) -> None:  # type: ignore[no-untyped-def]
    c = fresh_lab.client()
    run(
        ["scontrol", "update", "NodeName=n4", "State=DOWN", "Reason=Kill task failed"],
        timeout=10,
        env=fresh_lab.env(),
    )
    with pytest.raises(ForeignReasonError, match="slurm reason"):
        SlurmDoor(c).resume("n4")
    assert c.get_node("n4").down


def test_refuses_to_write_a_reason_that_is_not_ours(fresh_lab) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SlurmError, match="not ours"):
        SlurmDoor(fresh_lab.client()).drain("n1", "free text")
    assert not fresh_lab.client().get_node("n1").drained


def test_refusals_are_typed(fresh_lab, sbatch, job_dir) -> None:  # type: ignore[no-untyped-def]
    """What Slurm really answers, as the types the engine catches."""
    c = fresh_lab.client()
    door = SlurmDoor(c)
    with pytest.raises(JobGone):
        c.get_job("99999")
    with pytest.raises(JobGone):
        door.signal("99999", "TERM", SignalTarget.BATCH)
    with pytest.raises(JobGone):
        c.requeue("99999")
    with pytest.raises(NodeNotFound):
        c.get_node("nosuchnode")
    with pytest.raises(NodeNotFound):
        c.drain("nosuchnode", ours())
    script = job_dir / "sleep.sh"
    script.write_text("#!/bin/sh\nsleep 300\n")
    script.chmod(0o755)
    job = sbatch(script, "--no-requeue", "-o", "/dev/null")
    fresh_lab.wait_job(job, lambda j: j.state == "RUNNING", timeout=30)
    with pytest.raises(NotRequeueable):
        door.requeue_once(job, 0)
    assert door.requeue_once(job, -1) is Requeue.ALREADY  # restart count 0 > -1: never again
    door.cancel(job)
