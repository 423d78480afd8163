"""slurm-hooks beside LBNL NHC on the real lab (issue 17).

NHC is the stand-in ``lab/slurm_hooks_lab/nhc_standin`` (written from NHC's
documented helper rules: ``node-mark-offline`` keeps a foreign note and
writes ``NHC: <check>: <text>``; ``node-mark-online`` resumes only notes that
start with ``NHC:``), chained into our healthcheck shim
(``install --chain-healthcheck``); slurmd runs it every 2 s.  slurm-hooks
also runs as epilog and watcher.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import submit
from slurm_hooks_lab.hooks import WebhookRecorder, install

from slurm_hooks.core.reason import try_parse_reason

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STANDIN = Path(__file__).resolve().parent.parent / "lab" / "slurm_hooks_lab" / "nhc_standin"
GRACE_S = 3.0
JOB = """#!/bin/bash
trap 'echo "USR1 $(hostname) restart=${SLURM_RESTART_COUNT:-0}" >> {dir}/ckpt.$SLURM_JOB_ID' USR1
echo "start $(hostname) restart=${SLURM_RESTART_COUNT:-0}" >> {dir}/starts.$SLURM_JOB_ID
for i in $(seq 1 900); do sleep 0.2; done
"""


@pytest.fixture
def nhc(fresh_lab, tmp_path):
    lab = fresh_lab
    state = tmp_path / "nhc"
    state.mkdir()
    wrapper = tmp_path / "nhc" / "nhc"
    wrapper.write_text(f'#!/bin/sh\nNHC_STANDIN_DIR={state} exec {STANDIN} "$@"\n')
    wrapper.chmod(0o755)
    with WebhookRecorder() as hook:
        hooks = install(
            lab, grace_s=GRACE_S, webhook_url=hook.url, healthcheck_interval=2, epilog=True,
            watch={"nvml_interval_s": 0.5}, chain_healthcheck=str(wrapper),
        )  # fmt: skip
        try:
            yield lab, hooks, hook, state
        finally:
            hooks.finish()


def reason(lab, node):
    return lab.client().get_node(node).reason


def test_chained_shim_runs_nhc_then_ours_and_each_keeps_its_reason(nhc):
    lab, hooks, _, state = nhc
    node = "n3"
    (state / f"{node}.fail").write_text("check_fs_mount: /scratch not mounted\n")
    lab.wait_for(lambda: reason(lab, node) == "NHC: check_fs_mount: /scratch not mounted", 20,
                 what="NHC's drain")  # fmt: skip
    # Ours ran too, from the same HealthCheckProgram (its xid state exists).
    lab.wait_for((hooks.node(node).state_dir / "xid").is_dir, 20, what="our healthcheck run")
    (state / f"{node}.fail").unlink()
    lab.wait_for(lambda: not lab.client().get_node(node).drained, 20, what="NHC's resume")


def test_xid_on_a_node_nhc_drained_evacuates_then_drains_when_nhc_resumes(nhc, job_dir):
    lab, hooks, webhook, state = nhc
    script = job_dir / "job.sh"
    script.write_text(JOB.replace("{dir}", str(job_dir)))
    job_id = submit(lab, script, "--requeue", "-N1", "-w", "n2", "-o", str(job_dir / "out.%j"))
    lab.wait_job(job_id, lambda j: j.state == "RUNNING", timeout=30)
    lab.wait_for((job_dir / f"starts.{job_id}").exists, 15, what="job start")
    node = "n2"
    nhc_note = "NHC: check_hw_gpu: GPU 1 missing"
    (state / f"{node}.fail").write_text("check_hw_gpu: GPU 1 missing\n")
    lab.wait_for(lambda: reason(lab, node) == nhc_note, 20, what="NHC's drain")
    hooks.start_watcher(node)

    hooks.inject_xid(node, 79, gpu=1)
    # The job on the broken node is signalled and requeued although the
    # drain is NHC's, and its owner is told ...
    ckpt = job_dir / f"ckpt.{job_id}"
    lab.wait_for(ckpt.exists, 20, what="USR1 in the batch script")
    lab.wait_job(job_id, lambda j: j.restart_count == 1, timeout=60)
    lab.wait_for(lambda: webhook.alerts("job_requeued"), 20, what="owner told")
    # ... and NHC's reason is never written over.
    assert reason(lab, node) == nhc_note
    assert [e for e in hooks.audit(node) if e["action"] == "evacuate"]

    # NHC's own check passes and it resumes the node: our drain follows at
    # once (not after the watcher's refeed_s, 300 s).
    (state / f"{node}.fail").unlink()
    t0 = time.monotonic()
    ours = lab.wait_for(lambda: try_parse_reason(reason(lab, node) or ""), 30,
                        what="our drain after NHC's resume")  # fmt: skip
    print(f"NHC resume -> our drain: {time.monotonic() - t0:.1f}s (from the fail file's removal)")
    assert (ours.code, ours.component) == ("XID79", "gpu1")
    assert lab.client().get_node(node).drained
    # NHC leaves our reason alone from then on (node-mark-online: NHC: only).
    time.sleep(5)
    assert try_parse_reason(reason(lab, node) or "") == ours
    hooks.stop_watcher(node)
