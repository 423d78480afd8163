"""``CliClient.job_steps`` against a live Slurm of each release (the hang
judge's question when a node's ranks are all gone, slurm/steps.py): a
running step is RUNNING, a step that ended is ended or no longer listed,
the batch step is listed while the shell runs, and a step name the job's
user chose to look like a state (``Name=x State=COMPLETED``, after the
real ``State=``) changes nothing."""

from __future__ import annotations

import pytest
from conftest import submit

from slurm_hooks.slurm.steps import ENDED

pytestmark = [pytest.mark.slurm]

#: Step 0 waits for the file ``go``; the batch shell stays on afterwards.
JOB = """#!/bin/bash
D={dir}
srun -n1 -J "x State=COMPLETED StepId=$SLURM_JOB_ID.9 State=COMPLETED" bash -c \\
  "echo up > $D/step-up; while [ ! -e $D/go ]; do sleep 0.1; done"
echo done > $D/step-done
sleep 300
"""


def test_job_steps_reads_a_live_step_and_its_end(fresh_lab, job_dir) -> None:  # type: ignore[no-untyped-def]
    lab = fresh_lab
    script = job_dir / "job.sh"
    script.write_text(JOB.format(dir=job_dir))
    jid = submit(lab, script, "-N1", "-o", str(job_dir / "out"))
    client = lab.client()
    try:
        lab.wait_for(lambda: (job_dir / "step-up").exists(), 30, what="step 0 to start")
        steps = client.job_steps(jid)
        assert steps.get("0") == "RUNNING", steps
        assert steps.get("batch") == "RUNNING", steps
        assert "9" not in steps, steps  # the name's words are not a step
        (job_dir / "go").write_text("")
        lab.wait_for(lambda: (job_dir / "step-done").exists(), 30, what="step 0 to end")
        lab.wait_for(lambda: client.job_steps(jid).get("0", "COMPLETED") in ENDED, 30,
                     what="Slurm to list step 0 as over")  # fmt: skip
        steps = client.job_steps(jid)
        assert steps.get("batch") == "RUNNING", steps
    finally:
        client.cancel(jid)
        lab.wait_for(lambda: not client.list_jobs(), 60, what="queue empty")
