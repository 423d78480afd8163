"""We drain and resume only under our own reason; an admin's drain is never
overwritten and never lifted (checked on the real lab)."""

from __future__ import annotations

import pytest

from slurm_hooks.core.errors import ForeignReasonError, SlurmError
from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.detect.probes.commands import run
from slurm_hooks.slurm.ownership import drain_if_ours_or_clear, resume_if_ours

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
        drain_if_ours_or_clear(c, "n3", ours())
    with pytest.raises(ForeignReasonError):
        resume_if_ours(c, "n3")
    node = c.get_node("n3")
    assert node.drained and node.reason == foreign
    assert sinfo_reasons(fresh_lab)["n3"] == foreign


def test_our_drain_and_resume(fresh_lab) -> None:  # type: ignore[no-untyped-def]
    c = fresh_lab.client()
    reason = ours()
    node = drain_if_ours_or_clear(c, "n2", reason)
    assert node.drained and node.reason == reason
    assert sinfo_reasons(fresh_lab) == {"n2": reason}
    # a newer incident of ours replaces our own reason
    newer = ours(incident="12345678", code="ECC_DBE")
    assert drain_if_ours_or_clear(c, "n2", newer).reason == newer
    with pytest.raises(ForeignReasonError, match="not resuming"):
        resume_if_ours(c, "n2", incident="0badf00d")
    assert resume_if_ours(c, "n2", incident="12345678") is True
    (n2,) = fresh_lab.wait_idle(["n2"])
    assert n2.reason is None
    assert resume_if_ours(c, "n2") is False  # nothing to resume


def test_slurm_reason_is_foreign(fresh_lab) -> None:  # type: ignore[no-untyped-def]
    c = fresh_lab.client()
    run(
        ["scontrol", "update", "NodeName=n4", "State=DOWN", "Reason=Kill task failed"],
        timeout=10,
        env=fresh_lab.env(),
    )
    with pytest.raises(ForeignReasonError, match="slurm reason"):
        resume_if_ours(c, "n4")
    assert c.get_node("n4").down


def test_refuses_to_write_a_reason_that_is_not_ours(fresh_lab) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SlurmError, match="not ours"):
        drain_if_ours_or_clear(fresh_lab.client(), "n1", "free text")
    assert not fresh_lab.client().get_node("n1").drained
