"""GPUs as Slurm GRES on the real lab (``Lab(gpus=4)``: ``Gres=gpu:4`` per
node, gres.conf naming character devices): Slurm allocates them, and the
prolog's environment carries the job's ``SLURM_JOB_GPUS`` and
``CUDA_VISIBLE_DEVICES`` as on a GPU cluster (measured on 22.05: a second
``--gres=gpu:2`` job on a node gets ``2,3`` in both; the job itself gets
``SLURM_JOB_GPUS=2,3`` on every release, asserted below).

* A job given GPUs 2 and 3 beside another user's job on 0 and 1: its prolog
  burns in 2 and 3 only, so a fault on GPU 0 (under the other job) neither
  drains the node from this prolog nor touches the other user's job.
* The acceptance job (``slurm-hooks acceptance NODE``, run through srun in a
  reservation) is given every GPU of the node: ``--exclusive`` alone gives
  the step none, and where ``ConstrainDevices=yes`` a step without GPUs is
  denied their device files (the lab has no cgroups: its allocation is what
  is asserted).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import own_lab, submit
from slurm_hooks_lab import hooks as labhooks
from slurm_hooks_lab.lab import TEST_USER, Lab
from test_trust_lab import script

from slurm_hooks.detect.probes.commands import run

pytestmark = [pytest.mark.slurm]

OTHER_USER = "sltest2"
GPUS = 4
SHARDS = 8


@pytest.fixture(scope="module")
def gres_lab() -> Iterator[Lab]:
    with own_lab("slurm-hooks-test-gres-", 2, users=(TEST_USER, OTHER_USER), gpus=GPUS,
                 shards=SHARDS) as lab:  # fmt: skip
        yield lab


@pytest.fixture
def work(gres_lab: Lab, request: pytest.FixtureRequest) -> Path:
    path = gres_lab.shared_dir / request.node.name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    os.chmod(path, 0o1777)
    return path


def test_a_jobs_prolog_burns_in_its_own_gpus_not_its_neighbours(gres_lab, work):
    lab = gres_lab
    hooks = labhooks.install(lab, gpus=GPUS, prolog=True, prolog_settings={"gres_gpus": True})
    try:
        signals = work / "theirs.signals"
        theirs = script(work / "theirs.sh", f"trap 'echo USR1 >> {signals}' USR1\n"
                        f"trap 'echo TERM >> {signals}; exit 0' TERM\n"
                        f"touch {signals}\nfor i in $(seq 600); do sleep 1; done\n")  # fmt: skip
        other = submit(lab, theirs, "-w", "n1", "-n1", f"--gres=gpu:{GPUS // 2}",
                       "-o", "/dev/null", user=OTHER_USER)  # fmt: skip
        # Its script runs: its prolog (which burned in GPUs 0 and 1) is over.
        lab.wait_for(signals.exists, 60, what="the other user's job to start")
        # GPU 0, under the other user's job, now miscomputes.
        hooks.set_engine("n1", "[burnin.gpu.0]\nerrors = 40\n")
        mine = script(work / "mine.sh", f'echo "$SLURM_JOB_GPUS" > {work}/mine.gpus\n')
        job = submit(lab, mine, "-w", "n1", "-n1", f"--gres=gpu:{GPUS // 2}", "-o", "/dev/null")
        done = lab.wait_job(job, lambda j: j.state == "COMPLETED" or j.restart_count > 0,
                            timeout=90)  # fmt: skip
        assert (done.state, done.restart_count) == ("COMPLETED", 0), (done, hooks.audit("n1"))
        assert (work / "mine.gpus").read_text().strip() == "2,3"
        n1 = lab.client().get_node("n1")
        assert not (n1.drained or n1.down), n1.reason
        info = lab.client().get_job(other)
        assert (info.state, info.restart_count) == ("RUNNING", 0), info
        assert signals.read_text() == ""  # never signalled
        assert not [e for e in hooks.audit("n1") if e["action"] in ("drain", "requeue", "signal")]
    finally:
        run(["scancel", "-u", OTHER_USER], timeout=30, env=lab.env(), check=False)
        hooks.close()
        lab.reset()


def test_the_acceptance_job_is_given_every_gpu_of_the_node(gres_lab, work):
    """``[acceptance] python`` is a wrapper here that notes the GPUs Slurm
    gave the step (``SLURM_STEP_GPUS``), then runs the product's python."""
    lab = gres_lab
    hooks = labhooks.install(lab, gpus=GPUS, prolog=False)
    try:
        seen = work / "step.gpus"
        wrapper = script(work / "python", f'echo "$SLURM_STEP_GPUS" > {seen}\n'
                         f'exec {sys.executable} "$@"\n')  # fmt: skip
        cfg = work / "acceptance.toml"
        cfg.write_text(
            hooks.node("n2").config.read_text() + f'\n[acceptance]\npython = "{wrapper}"\n'
        )
        env = {**os.environ, **lab.env()}
        res = subprocess.run(
            [sys.executable, "-m", "slurm_hooks", "acceptance", "n2", "--no-resume", "--json",
             "-c", str(cfg)],
            env=env, capture_output=True, text=True, timeout=240, check=False, cwd="/",
        )  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr
        assert seen.read_text().strip() == ",".join(map(str, range(GPUS)))
    finally:
        hooks.close()
        lab.reset()


def test_install_takes_this_slurm_for_one_with_gpus_as_gres_and_shared(gres_lab):
    """What ``install --check`` reads from the running Slurm here: GPUs are
    GRES and shared (``GresTypes=gpu,shard``), so ``gres_gpus = true`` and
    ``gpu_sharing = true`` fit; each other value gets its hint."""
    from slurm_hooks.cli.gres_advice import advice

    running = gres_lab.client().show_config().get("GresTypes")
    assert advice(running, gres_gpus=True, gpu_sharing=True) == []
    (tip,) = advice(running, gres_gpus=False, gpu_sharing=True)
    assert "Set [prolog] gres_gpus = true." in tip
    (tip,) = advice(running, gres_gpus=True, gpu_sharing=False)
    assert "Set [prolog] gpu_sharing = true" in tip


def test_a_jobs_share_of_a_gpu_is_burned_in_by_no_prolog(gres_lab, work):
    """sltest2's ``--gres=shard:2`` job: Slurm names the GPU it shares in its
    prolog's environment as if it were whole (``SLURM_JOB_GPUS=0``, measured
    on every release).  Every GPU now miscomputes in a burn-in; with
    ``gpu_sharing = true`` the prolog asks Slurm, sees the share and burns
    nothing: the job runs, the node stays in service."""
    lab = gres_lab
    hooks = labhooks.install(lab, gpus=GPUS, prolog=True,
                             prolog_settings={"gres_gpus": True, "gpu_sharing": True})  # fmt: skip
    try:
        hooks.set_engine("n1", "".join(f"[burnin.gpu.{i}]\nerrors = 40\n" for i in range(GPUS)))
        share = script(work / "share.sh", f'echo "$SLURM_JOB_GPUS" > {work}/share.gpus\n')
        job = submit(lab, share, "-w", "n1", "-n1", "--gres=shard:2", "-o", "/dev/null",
                     user=OTHER_USER)  # fmt: skip
        done = lab.wait_job(job, lambda j: j.state == "COMPLETED" or j.restart_count > 0,
                            timeout=90)  # fmt: skip
        assert (done.state, done.restart_count) == ("COMPLETED", 0), (done, hooks.audit("n1"))
        assert (work / "share.gpus").read_text().strip() == "0"  # the GPU, as if whole
        n1 = lab.client().get_node("n1")
        assert not (n1.drained or n1.down), n1.reason
        assert not [e for e in hooks.audit("n1") if e["action"] in ("drain", "requeue", "signal")]
    finally:
        hooks.close()
        lab.reset()
