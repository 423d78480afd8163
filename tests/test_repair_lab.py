"""The repair loop on the real Slurm lab: XID 79 under a job -> drained, job
requeued, node rebooted once by Slurm (the lab's RebootProgram restarts that
node's slurmd, slurm_hooks_lab.reboot), acceptance on the node, resumed; the
same XID again -> no second reboot, REPLACE and one hardware ticket.

Detection and the repair's trigger after the reboot are the node's own
HealthCheckProgram (slurmd runs it when it starts), no shared state dir."""

from __future__ import annotations

import pytest
from conftest import submit
from slurm_hooks_lab import reboot as lab_reboot
from slurm_hooks_lab.hooks import WebhookRecorder, install

from slurm_hooks.core.ownership import node_ownership
from slurm_hooks.core.reason import try_parse_reason

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

JOB = "#!/bin/bash\nfor i in $(seq 1 900); do sleep 0.2; done\n"


@pytest.fixture
def rig(fresh_lab):
    lab = fresh_lab
    with WebhookRecorder() as tickets:
        hooks = install(
            lab, grace_s=1.0, healthcheck_interval=2,
            repair={"enabled": True, "ticket_url": tickets.url, "max_concurrent_reboots": 1},
        )  # fmt: skip
        try:
            yield lab, hooks, tickets
        finally:
            hooks.finish(reconfigure=False)


def _code(lab, node):
    r = try_parse_reason(lab.client().get_node(node).reason)
    return r.code if r else None


def test_xid79_reboot_acceptance_resume_then_replace(rig, job_dir):
    lab, hooks, tickets = rig
    script = job_dir / "job.sh"
    script.write_text(JOB)
    job_id = submit(lab, script, "--requeue", "-N1", "-w", "n1", "-o", str(job_dir / "out.%j"))
    lab.wait_job(job_id, lambda j: j.state == "RUNNING", timeout=30)
    hooks.inject_xid("n1", 79, gpu=0)
    lab.wait_for(lambda: _code(lab, "n1") == "XID79", 30, what="n1 drained for XID79")
    lab.wait_for(lambda: lab.client().get_job(job_id).restart_count >= 1, 30, what="requeue")
    # Rebooted once by Slurm, back, accepted, resumed: in service, no reason.
    lab.wait_for(lambda: lab_reboot.reboots(lab.base_dir, "n1") == 1, 60, what="reboot")

    def back():
        n = lab.client().get_node("n1")
        # a reason left on an idle node claims nothing (24.11 keeps it after a reboot)
        return not node_ownership(n).claimed and not n.drained and not n.down

    try:
        lab.wait_for(back, 90, what="n1 resumed after acceptance")
    except Exception:
        nf = hooks.node("n1")
        log = nf.state_dir / "worker.log"
        print(
            "AUDIT", [(e.get("action"), e.get("outcome"), e.get("why")) for e in hooks.audit("n1")]
        )
        print("NODE", lab.client().get_node("n1"))
        print("WORKER", log.read_text()[-4000:] if log.exists() else None)
        print("INCIDENTS", [i.get("repair") for i in hooks.incidents("n1")])
        raise
    assert lab_reboot.reboots(lab.base_dir, "n1") == 1
    actions = [(e.get("action"), e.get("outcome")) for e in hooks.audit("n1")]
    assert ("repair", "reboot") in actions and ("repair", "accepted") in actions
    # The same XID on the same GPU within the window: replace, not reboot.
    hooks.inject_xid("n1", 79, gpu=0)
    lab.wait_for(lambda: _code(lab, "n1") == "REPLACE", 60, what="n1 REPLACE")
    # What Slurm keeps tells the bridge to ask for a machine (replace_on = "policy").
    replace = try_parse_reason(lab.client().get_node("n1").reason)
    assert replace is not None and replace.extra.get("repl") == "requested"
    lab.wait_for(lambda: tickets.alerts("hardware_ticket"), 30, what="ticket")
    assert lab_reboot.reboots(lab.base_dir, "n1") == 1
    assert len(tickets.alerts("hardware_ticket")) == 1
    body = tickets.alerts("hardware_ticket")[0]
    assert body["kind"] == "hardware_ticket" and body["gpu_slot"] == "gpu0"
    assert body["ladder"][-2:] == ["reboot", "replace"]
