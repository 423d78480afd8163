"""The prolog on the real Slurm lab (slurmd runs our hook before each job).

Each node gets its own config, state dir, kernel log, fake-NVML scenario
and fake burn-in/NCCL scenario (``slurm_hooks_lab.hooks.install(prolog=True)``);
the prolog shim is the installed one, and the node's config alone picks the
fake engines and their scenarios.  Measured behaviour these
tests pin down: a failing prolog drains with OUR reason (Slurm keeps it),
the job is requeued by the prolog itself and runs on another node; a warm
cache makes the next job cost only the warm checks; a CPU-only job skips
the GPU work; a new XID line voids the cache.  Also the multi-node
preflight with the fake engine inside a 4-node job.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import submit

from slurm_hooks.agent.prolog import CACHE_FILE
from slurm_hooks.core.reason import parse_reason

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

JOB = """#!/bin/bash
echo "run $SLURMD_NODENAME restart=${SLURM_RESTART_COUNT:-0}" >> {dir}/runs.$SLURM_JOB_ID
sleep {sleep}
"""


PREFLIGHT = "import sys; from slurm_hooks.cli.preflight import command; command(sys.argv[1:])"


def add_preflight(hooks, node: str) -> None:
    nf = hooks.node(node)
    with open(nf.config, "a") as fh:
        fh.write(
            f'\n[preflight]\nengine = "lab:fake"\nscenario = "{nf.dir.parent}/{{node}}/engine.toml"\n'
        )


def set_gres_gpus(hooks, node: str, value: bool) -> None:
    nf = hooks.node(node)
    text = nf.config.read_text()
    nf.config.write_text(text.replace("gres_gpus = false", f"gres_gpus = {str(value).lower()}"))


@pytest.fixture
def prolog_lab(fresh_lab):
    """The lab with labhooks' prolog: each node's config alone makes burn-in
    and NCCL use the fake engines on its gpus.json and engine.toml (no
    environment).  The lab has no GPU GRES: every job is a GPU job."""
    from slurm_hooks_lab import hooks as labhooks

    lab = fresh_lab
    hooks = labhooks.install(lab, gpus=4, prolog=True, prolog_settings={"gres_gpus": False})
    for node in lab.node_names:
        hooks.set_engine(node, "[nccl]\nbusbw_gbps = 48\n")
        add_preflight(hooks, node)
    try:
        yield lab, hooks
    finally:
        hooks.close()
        lab.reset()


def job(lab, job_dir: Path, *args: str, sleep: int = 1) -> str:
    script = job_dir / "job.sh"
    script.write_text(JOB.replace("{dir}", str(job_dir)).replace("{sleep}", str(sleep)))
    return submit(lab, script, "-N1", "-o", str(job_dir / "out.%j"), *args)


def done(lab, job_id: str, timeout: float = 60):
    return lab.wait_job(job_id, lambda j: j.state == "COMPLETED", timeout=timeout)


def cache(hooks, node):
    path = hooks.node(node).state_dir / CACHE_FILE
    return json.loads(path.read_text()) if path.exists() else None


def test_healthy_node_full_run_then_warm_cache(prolog_lab, job_dir):
    lab, hooks = prolog_lab
    first = job(lab, job_dir, "-w", "n2")
    done(lab, first)
    entry = cache(hooks, "n2")
    assert entry is not None and entry["job_id"] == first and entry["node"] == "n2"
    second = job(lab, job_dir, "-w", "n2")
    done(lab, second)
    assert cache(hooks, "n2")["job_id"] == first  # served from the cache, not re-run
    assert "run n2 restart=0" in (job_dir / f"runs.{second}").read_text()
    assert not lab.client().get_node("n2").drained


def test_bad_gpu_drained_with_our_reason_and_job_runs_elsewhere(prolog_lab, job_dir):
    lab, hooks = prolog_lab
    (hooks.node("n1").dir / "engine.toml").write_text("[burnin.gpu.2]\nerrors = 40\n")
    job_id = job(lab, job_dir, "--requeue", sleep=2)
    j = lab.wait_job(job_id, lambda j: j.state == "COMPLETED", timeout=90)
    assert j.restart_count == 1
    runs = (job_dir / f"runs.{job_id}").read_text().splitlines()
    assert len(runs) == 1 and not runs[0].startswith("run n1"), runs  # never started on n1
    n1 = lab.client().get_node("n1")
    assert n1.drained
    reason = parse_reason(n1.reason)  # ours, not "Prolog error"
    assert reason.component == "gpu2" and reason.code.startswith("BURNIN")
    from slurm_hooks.detect.probes.commands import run

    sinfo = run(["sinfo", "-R", "-h", "-o", "%E|%N"], env=lab.env(), timeout=10).stdout
    assert any(line.endswith("|n1") and line.startswith("slurm-hooks/1") for line in
               sinfo.splitlines()), sinfo  # fmt: skip
    actions = [e["action"] for e in hooks.audit("n1")]
    assert "drain" in actions and "requeue" in actions


def test_cpu_only_job_skips_gpu_work(prolog_lab, job_dir):
    lab, hooks = prolog_lab
    set_gres_gpus(hooks, "n1", True)  # GRES cluster: no SLURM_JOB_GPUS = CPU job
    (hooks.node("n1").dir / "engine.toml").write_text("[burnin.gpu.2]\nerrors = 40\n")
    job_id = job(lab, job_dir, "-w", "n1")
    done(lab, job_id)
    assert "run n1 restart=0" in (job_dir / f"runs.{job_id}").read_text()
    assert not lab.client().get_node("n1").drained  # the bad GPU was not even looked at
    assert cache(hooks, "n1") is None


def test_new_xid_voids_the_cache_and_drains(prolog_lab, job_dir):
    lab, hooks = prolog_lab
    done(lab, job(lab, job_dir, "-w", "n1"))
    assert cache(hooks, "n1") is not None
    hooks.inject_xid("n1", 79, gpu=1)
    job_id = job(lab, job_dir, "--requeue")
    j = lab.wait_job(job_id, lambda j: j.state == "COMPLETED", timeout=90)
    assert j.restart_count == 1 and "n1" not in (job_dir / f"runs.{job_id}").read_text()
    reason = parse_reason(lab.client().get_node("n1").reason)
    assert reason.code == "XID79"
    assert cache(hooks, "n1") is None


def test_preflight_finds_the_slow_node_in_a_job(prolog_lab, job_dir):
    lab, hooks = prolog_lab
    # n3's network link is slow; its intra-node NCCL (the prolog's check) is fine.
    (hooks.node("n3").dir / "engine.toml").write_text("[internode]\nbusbw_gbps = 9\n")
    script = job_dir / "pre.sh"
    script.write_text(
        "#!/bin/bash\n"
        # Draining n3 evacuates this job too (USR1 to checkpoint, then requeue or cancel).
        f"trap 'echo USR1 >> {job_dir}/pre.sig' USR1\n"
        # = "slurm-hooks preflight --json" once the command is registered
        f"{sys.executable} -c {PREFLIGHT!r} --json > {job_dir}/pre.json\n"
        f"echo rc=$? >> {job_dir}/pre.rc\n"
    )
    cfg = hooks.node("n1").config
    job_id = submit(lab, script, "-N4", "--no-requeue", f"--export=ALL,SLURM_HOOKS_CONFIG={cfg}",
                    "-o", str(job_dir / "pre.out"), user="root")  # fmt: skip
    try:
        lab.wait_for(lambda: (job_dir / "pre.rc").exists(), 60, what="preflight job")
    except Exception:
        j = lab.client().get_job(job_id)
        out = (job_dir / "pre.out").read_text() if (job_dir / "pre.out").exists() else ""
        ctld = [
            line
            for line in (lab.log_dir / "slurmctld.log").read_text().splitlines()
            if f"JobId={job_id}" in line
        ][-8:]
        audits = {n: hooks.audit(n)[-3:] for n in lab.node_names}
        raise AssertionError(f"{j} {out} {ctld} {audits}") from None
    out = (job_dir / "pre.out").read_text() if (job_dir / "pre.out").exists() else ""
    assert (job_dir / "pre.json").read_text().strip(), out
    doc = json.loads((job_dir / "pre.json").read_text())
    assert (job_dir / "pre.rc").read_text().strip() == "rc=1"
    assert doc["culprits"] == ["n3"] and doc["drained"] == ["n3"], doc
    assert parse_reason(lab.client().get_node("n3").reason).code == "NCCL_INTERNODE_SLOW"
    for n in ("n1", "n2", "n4"):
        assert not lab.client().get_node(n).drained
    lab.wait_for(lambda: (job_dir / "pre.sig").exists(), 20, what="checkpoint signal")
    lab.wait_for(lambda: not lab.client().list_jobs(), 60, what="queue empty")
