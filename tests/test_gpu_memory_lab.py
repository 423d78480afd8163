"""GPU memory held with no process, through the health check on real Slurm.

A user's job runs on n2; NVML (the fake: no GPU here) lists its process on
GPU 1, which holds 30 GiB.  The health check, run on the node as slurmd runs
it, drains nothing: memory a listed process holds is its owner's.  Once the
job has ended and the memory is still held with no process at both looks,
the same run drains n2 with our reason naming gpu1 and GPU_MEMORY_HELD, as
``sinfo -R`` shows.  Run on 22.05, 24.11 and 26.05."""

from __future__ import annotations

import pytest
from conftest import submit
from slurm_hooks_lab.hooks import install, wait_drained
from test_trust_lab import script

from slurm_hooks.core.reason import parse_reason
from slurm_hooks.detect.probes.commands import run

pytestmark = [pytest.mark.slurm]


def test_memory_held_with_no_process_drains_a_users_own_never(fresh_lab):
    lab = fresh_lab
    node = "n2"
    hooks = install(lab, grace_s=2.0)
    try:
        shim = str(hooks.shims["healthcheck"])
        work = lab.shared_dir / "gpu-memory"
        work.mkdir(parents=True, exist_ok=True)
        work.chmod(0o1777)
        job = submit(lab, script(work / "hold.sh", "exec sleep 300\n"), "-w", node,
                     "-o", "/dev/null")  # fmt: skip
        lab.wait_job(job, lambda j: j.state == "RUNNING", timeout=60)
        pids: list[int] = []

        def job_pids() -> bool:
            out = run(["scontrol", "listpids", job, node], timeout=30, check=False, env=lab.env())
            pids[:] = [int(w.split()[0]) for w in out.stdout.splitlines()[1:] if w.split()]
            return bool(pids)

        lab.wait_for(job_pids, 30, what="the job's processes")
        hooks.set_gpu(node, 1, memory_used_mib=30000, processes=pids)
        assert lab.run_on_node(node, [shim], timeout=60).rc == 0
        assert lab.client().get_node(node).reason in (None, "")
        run(["scancel", "--", job], timeout=30, env=lab.env(), check=False)
        lab.wait_job(job, lambda j: j.state not in ("RUNNING", "COMPLETING"), timeout=60)
        hooks.set_gpu(node, 1, processes=[])  # gone, and its memory still held
        assert lab.run_on_node(node, [shim], timeout=60).rc == 1
        ours = parse_reason(wait_drained(lab, node, timeout=30))
        assert (ours.code, ours.component) == ("GPU_MEMORY_HELD", "gpu1")
    finally:
        hooks.finish()
