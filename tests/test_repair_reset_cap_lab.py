"""The repair loop on the real Slurm lab, beyond the reboot path
(tests/test_repair_lab.py):

* a reset-class XID (95, NVIDIA's RESET_GPU bucket) on an idle node: the GPU
  is reset through the fake NVML (its ``reset_gpu``, one line in the
  scenario's ``.resets`` log), acceptance passes, the node is resumed; no
  reboot;
* the cap on concurrent reboots (``max_concurrent_reboots = 1``) with three
  nodes faulting at once: Slurm never shows two of them rebooting, each is
  rebooted once, and all three come back into service.

Detection and the repair's trigger are each node's own HealthCheckProgram."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from slurm_hooks_lab import reboot as lab_reboot
from slurm_hooks_lab.hooks import WebhookRecorder, install

from slurm_hooks.core.ownership import node_ownership
from slurm_hooks.core.reason import try_parse_reason

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REBOOT_FLAGS = {"REBOOT_REQUESTED", "REBOOT_ISSUED", "REBOOT"}


@pytest.fixture
def rig(fresh_lab):
    lab = fresh_lab
    with WebhookRecorder() as tickets:
        hooks = install(
            lab, gpus=2, grace_s=1.0, healthcheck_interval=2,
            policy={"breaker_max_share": 1.0, "breaker_max_nodes": 10},
            repair={"enabled": True, "ticket_url": tickets.url, "max_concurrent_reboots": 1},
        )  # fmt: skip
        try:
            yield lab, hooks, tickets
        finally:
            hooks.finish(reconfigure=False)


def _code(lab, node):
    r = try_parse_reason(lab.client().get_node(node).reason)
    return r.code if r else None


def _in_service(lab, node) -> bool:
    n = lab.client().get_node(node)
    # a reason left on an idle node claims nothing (24.11 keeps it after a reboot)
    return not node_ownership(n).claimed and not n.drained and not n.down


def _dump(lab, hooks, nodes) -> None:
    for node in nodes:
        nf = hooks.node(node)
        log = nf.state_dir / "worker.log"
        print("NODE", lab.client().get_node(node))
        print(
            "AUDIT", [(e.get("action"), e.get("outcome"), e.get("why")) for e in hooks.audit(node)]
        )
        print("INCIDENTS", [i.get("repair") for i in hooks.incidents(node)])
        print("WORKER", log.read_text()[-3000:] if log.exists() else None)


def test_reset_class_xid_on_idle_node_resets_gpu_and_resumes(rig):
    lab, hooks, tickets = rig
    node = "n2"
    hooks.set_gpu(node, 0, resettable=True)
    resets = Path(str(hooks.node(node).scenario) + ".resets")
    assert not resets.exists()
    hooks.inject_xid(node, 95, gpu=0)
    lab.wait_for(lambda: _code(lab, node) == "XID95", 30, what=f"{node} drained for XID95")
    try:
        lab.wait_for(lambda: resets.exists() and _in_service(lab, node), 60,
                     what=f"{node} reset and resumed")  # fmt: skip
    except Exception:
        _dump(lab, hooks, [node])
        raise
    # Reset once, GPU 0, through the fake NVML; no reboot; no ticket.
    assert resets.read_text().split() == ["0"]
    assert lab_reboot.reboots(lab.base_dir, node) == 0
    assert not tickets.alerts("hardware_ticket")

    # The journal says "resumed" once the resume call returned: the node can
    # be seen back in service a moment before (resume_intent until then).
    def journal_resumed():
        incs = [i for i in hooks.incidents(node) if i.get("code") == "XID95"]
        return len(incs) == 1 and (incs[0].get("repair") or {}).get("status") == "resumed"

    lab.wait_for(journal_resumed, 30, what=f"{node}'s repair journalled as resumed")
    outcomes = [(e.get("action"), e.get("outcome")) for e in hooks.audit(node)]
    assert ("repair", "reset") in outcomes and ("repair", "accepted") in outcomes
    assert ("acceptance", "passed") in outcomes
    (inc,) = [i for i in hooks.incidents(node) if i.get("code") == "XID95"]
    assert inc["repair"]["step"] == "reset" and inc["repair"]["status"] == "resumed"
    # Still in service a couple of health checks later (the fault is gone).
    time.sleep(4)
    assert _in_service(lab, node)
    assert resets.read_text().split() == ["0"]


def _rebooting_now(lab, nodes) -> set[str]:
    """Nodes whose reboot is under way: asked of Slurm (REBOOT_* flags) or
    done and not yet back in service (acceptance pending).  A ``step=reboot``
    reason alone is not counted: it is the cap's claim, written before the
    count and taken back by a node that finds itself past the cap
    (act/repair.py ``_still_allowed``), so two nodes may show one for a
    moment without either rebooting."""
    out = set()
    for n in lab.client().list_nodes():
        if n.name not in nodes:
            continue
        ours = try_parse_reason(n.reason)
        claimed = ours is not None and ours.extra.get("step") == "reboot"
        if set(n.flags) & REBOOT_FLAGS or (
            claimed and lab_reboot.reboots(lab.base_dir, n.name) >= 1
            and not _in_service(lab, n.name)
        ):  # fmt: skip
            out.add(n.name)
    return out


def test_reboot_cap_holds_with_three_nodes_faulting(rig):
    lab, hooks, tickets = rig
    nodes = ["n1", "n2", "n3"]
    for node in nodes:
        hooks.inject_xid(node, 79, gpu=0)
    most = 0
    seen: list[set[str]] = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            now = _rebooting_now(lab, nodes)
            most = max(most, len(now))
            if now and (not seen or seen[-1] != now):
                seen.append(now)
            if all(lab_reboot.reboots(lab.base_dir, n) >= 1 for n in nodes) and all(
                _in_service(lab, n) for n in nodes
            ):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"not all of {nodes} rebooted and resumed; seen {seen}")
    except AssertionError:
        _dump(lab, hooks, nodes)
        raise
    assert most == 1, f"more than one node rebooting at once: {seen}"
    assert [lab_reboot.reboots(lab.base_dir, n) for n in nodes] == [1, 1, 1]
    # The ones that waited said so (deferred by the cap), then proceeded.
    deferred = [n for n in nodes
                if ("repair", "deferred") in [(e.get("action"), e.get("outcome"))
                                              for e in hooks.audit(n)]]  # fmt: skip
    assert len(deferred) >= 1, seen
    assert not tickets.alerts("hardware_ticket")
