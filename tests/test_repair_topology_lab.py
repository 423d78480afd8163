"""Spares by topology on a real 2-block Slurm lab (``[repair] resume_spares``).

A 6-node lab of its own with ``topology.conf`` (``TopologyPlugin=topology/tree``):
switch s1 holds n1, n2 and n6, s2 holds n3-n5.  n6 (block 1) and n3
(block 2) are our SPAREs.  A 2-node job on n1,n2 loses n1 (XID 79): the job
is requeued and the spare resumed for it is n6, on the job's switch, not n3
(which a topology-blind choice, first by name, would take)."""

from __future__ import annotations

import shutil

import pytest
from conftest import own_lab, submit
from slurm_hooks_lab.hooks import WebhookRecorder, install

from slurm_hooks.core.ownership import node_ownership
from slurm_hooks.core.reason import DrainReason, format_reason, try_parse_reason

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# s1 = n1, n2, n6 and s2 = n3-n5: the job's switch holds the spare that sorts
# LAST, so a topology-blind choice (first spare by name, n3) cannot pass.
TOPOLOGY = (
    "SwitchName=s1 Nodes=n[1-2],n6\nSwitchName=s2 Nodes=n[3-5]\nSwitchName=top Switches=s[1-2]\n"
)
JOB = "#!/bin/bash\nfor i in $(seq 1 900); do sleep 0.2; done\n"


@pytest.fixture(scope="module")
def block_lab():
    with own_lab("slurm-hooks-topo-lab-", 6, topology_conf=TOPOLOGY) as the_lab:
        yield the_lab


def _reason(lab, node):
    return try_parse_reason(lab.client().get_node(node).reason)


def test_spare_from_the_jobs_block_is_resumed(block_lab, tmp_path):
    lab = block_lab
    assert "topology/tree" in (lab.client().show_config().get("TopologyPlugin") or "")
    with WebhookRecorder() as tickets:
        hooks = install(
            lab, gpus=2, grace_s=1.0, healthcheck_interval=2,
            policy={"breaker_max_share": 1.0, "breaker_max_nodes": 10},
            repair={"enabled": True, "resume_spares": True, "ticket_url": tickets.url},
        )  # fmt: skip
        try:
            spare = format_reason(DrainReason("SPARE", "spare001", "standby"))
            for node in ("n6", "n3"):
                lab.client().drain(node, spare)
            lab.wait_for(lambda: all(lab.client().get_node(n).drained for n in ("n6", "n3")),
                         15, what="spares drained")  # fmt: skip
            jobs = lab.shared_dir / "topo-job"
            shutil.rmtree(jobs, ignore_errors=True)
            jobs.mkdir(parents=True)
            jobs.chmod(0o1777)
            script = jobs / "job.sh"
            script.write_text(JOB)
            job_id = submit(lab, script, "--requeue", "-N2", "-w", "n[1-2]",
                            "-o", str(jobs / "out.%j"))  # fmt: skip
            lab.wait_job(job_id, lambda j: j.state == "RUNNING", timeout=30)
            hooks.inject_xid("n1", 79, gpu=0)
            lab.wait_for(lambda: (_reason(lab, "n1") or DrainReason("X", "x", "x")).code
                         == "XID79", 30, what="n1 drained")  # fmt: skip
            lab.wait_for(lambda: lab.client().get_job(job_id).restart_count >= 1, 30,
                         what="requeue")  # fmt: skip

            def n6_back():
                n = lab.client().get_node("n6")
                # 24.11 keeps a resumed node's reason: a leftover claims nothing
                return not node_ownership(n).claimed and not n.drained

            try:
                lab.wait_for(n6_back, 30, what="block-1 spare n6 resumed")
            except Exception:
                print("AUDIT", [(e.get("action"), e.get("why")) for e in hooks.audit("n1")])
                print(
                    "INCIDENTS", [(i.get("jobs"), i.get("spares")) for i in hooks.incidents("n1")]
                )
                raise
            # Block 2's spare is untouched: still out, still our SPARE.
            n3 = _reason(lab, "n3")
            assert n3 is not None and n3.code == "SPARE" and lab.client().get_node("n3").drained
            (inc,) = [i for i in hooks.incidents("n1") if i.get("code") == "XID79"]
            assert inc["spares"] == {job_id: "n6"}
            spares = [e for e in hooks.audit("n1") if e.get("action") == "spare"]
            assert [(e.get("job"), e.get("spare")) for e in spares] == [(job_id, "n6")]
        finally:
            hooks.close(reconfigure=False)
