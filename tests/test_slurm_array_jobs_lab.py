"""Array tasks on the real lab: the access layer names a task by its own job id.

A task's ``$SLURM_JOB_ID`` (and so its progress directory), ``scontrol show
job`` and slurmrestd all give the task's own id; ``squeue``'s ``%i`` gives
``<array id>_<index>``.  The node's job list must use the former, or the
progress pass would take every array task's directory for a job not running
on the node and never judge it.
"""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.slurm


def test_jobs_on_node_names_array_tasks_by_their_own_job_id(fresh_lab, job_dir, sbatch) -> None:  # type: ignore[no-untyped-def]
    script = job_dir / "array.sh"
    script.write_text(
        "#!/bin/bash\n"
        f'echo "$SLURM_JOB_ID $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID" > {job_dir}/id.$SLURM_ARRAY_TASK_ID\n'
        "sleep 120\n"
    )
    script.chmod(0o755)
    array_id = sbatch(script, "--array=0-1", "-w", "n1", "-o", "/dev/null")
    files = [job_dir / "id.0", job_dir / "id.1"]
    deadline = time.monotonic() + 60
    while not all(f.exists() and f.read_text().strip() for f in files):
        assert time.monotonic() < deadline, "the array tasks never started"
        time.sleep(0.2)
    own_ids = {f.read_text().split()[0] for f in files}
    assert all(f.read_text().split()[1] == array_id for f in files)
    c = fresh_lab.client()
    listed = {j.job_id for j in c.jobs_on_node("n1")}
    assert own_ids <= listed, (own_ids, listed)
    for jid in own_ids:
        assert c.get_job(jid).job_id == jid
