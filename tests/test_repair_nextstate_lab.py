"""What the repair loop relies on from ``scontrol reboot ASAP nextstate=DOWN
reason=...`` (act/repair.py, SlurmDoor.reboot), measured on the real lab so
that every Slurm release of the matrix checks it (tools/run-tests --slurm X):

* the node does not return to service by itself after the reboot: it stays
  DOWN (or drained) until we resume it after acceptance, also with the lab's
  ``ReturnToService=1`` and slurmd registering afresh;
* our reason survives the reboot (22.05 appends ``: reboot issued : reboot
  complete`` to it), so the node is still OURS for the ownership rule
  (core/ownership.py) and names our incident: the next run knows the reboot
  is ours and finished;
* our resume through the door then returns it to service; a reason Slurm
  leaves on the idle node afterwards (24.11) claims nothing (STALE).

And the node ``Extra`` field the health grade goes into ([repair]
health_extra): present on 22.05.8, written through the door, our key only.

The lab's RebootProgram (slurm_hooks_lab.reboot) restarts the node's slurmd
as a boot would, so this is Slurm's own reboot bookkeeping, not ours.
"""

from __future__ import annotations

import json
import time

import pytest
from slurm_hooks_lab import reboot as lab_reboot

from slurm_hooks.core.ownership import Ownership, node_ownership
from slurm_hooks.core.reason import DrainReason, format_reason, try_parse_reason
from slurm_hooks.decide.repair import HEALTH_KEY
from slurm_hooks.slurm.door import SlurmDoor

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REBOOT_FLAGS = {"REBOOT_REQUESTED", "REBOOT_ISSUED", "REBOOT"}
#: Seconds the node is watched after it registered: a few slurmd pings and
#: scheduler passes (the lab: sched_interval=2), enough for ReturnToService.
WATCH_S = 8.0


def test_reboot_nextstate_down_keeps_the_node_out_and_ours(fresh_lab):
    lab = fresh_lab
    client = lab.client()
    door = SlurmDoor(client)
    node = lab.node_names[-1]
    incident = "0ddba11a"
    plain = format_reason(DrainReason("XID79", incident, "GPU has fallen off the bus", "gpu0"))
    step = format_reason(DrainReason("XID79", incident, "GPU has fallen off the bus", "gpu0",
                                     {"step": "reboot"}))  # fmt: skip
    try:
        door.drain(node, plain)
        door.drain(node, step)
        assert door.reboot(node, step, incident=incident, nextstate="DOWN")
        lab.wait_for(lambda: lab_reboot.reboots(lab.base_dir, node) == 1, 60, what="the reboot")
        seen: list[str] = []

        def registered() -> bool:
            n = client.get_node(node)
            seen.append(f"{n.state}+{'+'.join(sorted(n.flags))} {n.reason!r}")
            return not (set(n.flags) & REBOOT_FLAGS) and "NOT_RESPONDING" not in n.flags

        lab.wait_for(registered, 60, what=f"{node} registered after the reboot")
        deadline = time.monotonic() + WATCH_S
        while time.monotonic() < deadline:
            n = client.get_node(node)
            state = f"{n.state}+{'+'.join(sorted(n.flags))} {n.reason!r}"
            if not seen or seen[-1] != state:
                seen.append(state)
            # Out of service until we resume it...
            assert n.down or n.drained, f"back in service by itself: {seen}"
            # ... and still ours, naming our incident.
            ours = try_parse_reason(n.reason)
            assert node_ownership(n) is Ownership.OURS, f"reason not ours: {seen}"
            assert ours is not None and ours.incident == incident, seen
            time.sleep(0.5)
        assert lab_reboot.reboots(lab.base_dir, node) == 1
        # Our resume returns it; what Slurm leaves behind claims nothing.
        assert door.resume(node, owned=lambda r: r.incident == incident)
        lab.wait_for(
            lambda: (n := client.get_node(node)).state == "idle" and not n.drained, 30,
            what=f"{node} idle after our resume",
        )  # fmt: skip
        after = client.get_node(node)
        assert not node_ownership(after).claimed, after
        print("nextstate=DOWN sequence:", " -> ".join(seen))
    finally:
        lab.reset()


def test_health_grade_in_extra_keeps_what_others_wrote(lab):
    """22.05.8 has the node ``Extra`` field (``scontrol update Extra=``,
    shown by scontrol and ``sinfo -O Extra``): the door adds our key to what
    is there, through the real client's single-node read, and leaves free
    text alone."""
    client = lab.client()
    door = SlurmDoor(client)
    node = lab.node_names[0]
    try:
        client.set_node_extra(node, "rack=r4")
        assert door.set_extra(node, HEALTH_KEY, "repair")
        assert client.get_node(node).extra == "rack=r4 slurm_hooks_health=repair"
        client.set_node_extra(node, '{"rack":"r4"}')
        assert door.set_extra(node, HEALTH_KEY, "ok")
        assert json.loads(client.get_node(node).extra or "") == {
            "rack": "r4", "slurm_hooks_health": "ok",
        }  # fmt: skip
        client.set_node_extra(node, "waiting for the vendor")
        assert not door.set_extra(node, HEALTH_KEY, "ok")
        assert client.get_node(node).extra == "waiting for the vendor"
    finally:
        client.set_node_extra(node, "")


def test_reboot_after_reconfigure_brings_slurmd_back(fresh_lab):
    """A reboot after ``scontrol reconfigure`` comes back: slurmd 24.11
    re-execs itself on a reconfigure and passes its listening socket to the
    new image in ``SLURMD_RECONF_LISTEN_FD``, which the RebootProgram (a
    child of slurmd) inherits; the lab's slurmd started from there died at
    once on that fd until the lab dropped the variable (the matrix found it:
    every lab test after the first reboot failed on 24.11)."""
    lab = fresh_lab
    client = lab.client()
    node = lab.node_names[0]
    try:
        client.raw("scontrol", "reconfigure")
        lab.wait_idle(timeout=60)
        client.raw("scontrol", "reboot", "ASAP", "nextstate=RESUME", node)
        lab.wait_for(lambda: lab_reboot.reboots(lab.base_dir, node) == 1, 60, what="the reboot")

        def registered() -> bool:
            n = client.get_node(node)
            return (
                not (set(n.flags) & REBOOT_FLAGS) and "NOT_RESPONDING" not in n.flags and not n.down
            )

        lab.wait_for(registered, 60, what=f"{node} registered after the reboot")
        assert lab.slurmd_pid(node) > 0  # the new slurmd is alive
    finally:
        lab.reset()
