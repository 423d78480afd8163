"""The stale-reason case on the real Slurm of this release (issue 15).

Slurm 24.11 keeps a resumed node's last ``Reason`` (22.05 and 26.05 clear
it).  An XID 79 on a node that an admin once drained and then resumed must be
drained all the same: the leftover reason claims nothing.  On 24.11 the test
first asserts that the leftover really is there, so the stale path is what
runs there (it failed there before the one ownership rule: the policy took
the admin's old reason for a live claim and answered FOREIGN_REASON).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from slurm_hooks.core.model import Action, Component, Finding, Status
from slurm_hooks.core.ownership import Ownership, node_ownership
from slurm_hooks.core.reason import format_reason
from slurm_hooks.decide import DecisionKind, PolicyConfig, decide
from slurm_hooks.detect.probes.commands import run
from slurm_hooks.slurm import parse
from slurm_hooks.slurm.door import SlurmDoor

pytestmark = pytest.mark.slurm

XID79 = Finding("xid", Status.FAIL, "XID79", "GPU has fallen off the bus",
                Component("gpu", index=0), Action.RESET_GPU)  # fmt: skip
#: Releases seen keeping a resumed node's reason (Debian's 24.11.5, in the
#: matrix root); 22.05.8 and 26.05.5 clear it.
KEEPS_RESUMED_REASON = {(24, 11)}


def scontrol(lab, *args: str) -> None:  # type: ignore[no-untyped-def]
    run(["scontrol", "update", *args], timeout=10, env=lab.env())


def test_xid79_on_a_node_an_admin_drained_and_resumed_is_drained(fresh_lab) -> None:  # type: ignore[no-untyped-def]
    c = fresh_lab.client()
    version = parse.parse_version(fresh_lab.status().slurm_version or "")
    scontrol(fresh_lab, "NodeName=n3", "State=DRAIN", "Reason=admin: memory test #12")
    scontrol(fresh_lab, "NodeName=n3", "State=RESUME")
    (node,) = fresh_lab.wait_idle(["n3"])
    assert not node.drained
    if tuple(version[:2]) in KEEPS_RESUMED_REASON:
        # the precondition of the case: this release kept the admin's reason
        assert node.reason == "admin: memory test #12"
        assert node_ownership(node) is Ownership.STALE
    else:
        assert node.reason is None and node_ownership(node) is Ownership.NONE

    (d,) = decide([XID79], node, None, None, PolicyConfig(), datetime.now(UTC))
    assert d.kind is DecisionKind.DRAIN and d.acts, d.explanation
    assert d.reason is not None and d.reason.code == "XID79"
    # ... and the door writes our drain over the leftover
    SlurmDoor(c).drain("n3", format_reason(d.reason))
    after = c.get_node("n3")
    assert after.drained and node_ownership(after) is Ownership.OURS
