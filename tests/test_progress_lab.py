"""Hangs and stragglers of a real training job on the real lab (train.sbatch,
file barrier across ranks, our watchers on every node, short thresholds)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from slurm_hooks_lab.hooks import install, wait_drained

from slurm_hooks.core.reason import parse_reason
from slurm_hooks.detect.probes.commands import run

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TRAIN = Path(__file__).resolve().parent.parent / "lab/slurm_hooks_lab/train/train.py"
PROGRESS = {
    "hang_s": 4.0,
    "first_step_allowance_s": 2.0,
    "interval_s": 0.5,
    "no_culprit_report_s": 2.0,
    "window_steps": 5,
    "slow_windows": 3,
    "slow_percent": 15.0,
}


def read_metrics(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.fixture
def rig(fresh_lab, job_dir):
    lab = fresh_lab
    pdir = job_dir / "progress"
    pdir.mkdir(mode=0o1777)
    # The NVML poll runs once, at the watcher's start: a GPU lost later is found
    # by the progress pass's own look (its trusted evidence), not drained as
    # GPU_LOST first.
    hooks = install(lab, grace_s=3.0, progress={**PROGRESS, "dir": str(pdir)},
                    watch={"nvml_interval_s": 3600.0})  # fmt: skip
    try:
        for node in lab.node_names:
            hooks.start_watcher(node)
        yield lab, hooks, pdir
    finally:
        hooks.finish(reconfigure=False)


def sbatch(lab, job_dir: Path, pdir: Path | None, *train_args: str, nodes: int = 2) -> str:
    env = {**lab.env(), "PYTHON": sys.executable, "TRAIN_PY": str(TRAIN),
           "CKPT_DIR": str(job_dir / "ckpt")}  # fmt: skip
    if pdir is not None:
        env["SLURM_HOOKS_PROGRESS_DIR"] = str(pdir)
    else:
        env["SLURM_HOOKS_PROGRESS_DIR"] = "/nonexistent/opted-out"
    script = TRAIN.with_name("train.sbatch")
    argv = ["sbatch", "--parsable", f"-N{nodes}", f"--output={job_dir}/train.out",
            f"--chdir={job_dir}", str(script), "--backend", "numpy", "--collective", "file",
            *train_args]  # fmt: skip
    return run(argv, timeout=30, env=env).stdout.strip()


def rank_file(pdir: Path, job: str, rank: int) -> Path:
    return pdir / job / f"rank{rank}.log"


def last_record(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines() if path.exists() else []
    return dict(tok.split("=", 1) for tok in lines[-1].split()[1:]) if lines else {}


def test_hung_rank_on_a_lost_gpu_blocks_the_job_its_node_is_drained_and_job_resumes(rig, job_dir):
    """A stopped rank alone is the owner's doing (tests/test_trust_lab.py): here
    its node's GPU is lost as NVML sees it, the trusted evidence that blames it."""
    lab, hooks, pdir = rig
    job = sbatch(lab, job_dir, pdir, "--max-steps", "40", "--step-seconds", "0.2",
                 "--ckpt-every", "1000")  # fmt: skip
    ckpt = job_dir / "ckpt"
    try:
        lab.wait_for(lambda: int(last_record(rank_file(pdir, job, 1)).get("step", 0)) >= 5, 60,
                     what="training progress")  # fmt: skip
        rec = last_record(rank_file(pdir, job, 1))
        culprit, pid = rec["node"], int(rec["pid"])
        hooks.lose_gpu(culprit, 0)
        os.kill(pid, signal.SIGSTOP)
        reason = parse_reason(wait_drained(lab, culprit, timeout=30))
        assert reason.code == "HANG" and reason.component == f"job:{job}/rank1"
        assert "process stopped" in reason.text and "GPU_IS_LOST" in reason.text
        # The other rank was blocked: it went no further than one step past the culprit.
        stopped_at = int(last_record(rank_file(pdir, job, 1))["step"])
        rank0 = read_metrics(ckpt / "metrics.rank0.jsonl")
        before = [r["step"] for r in rank0 if r["event"] == "step" and r["restart"] == 0]
        assert max(before) <= stopped_at + 1
        lab.wait_for(lambda: any(r["event"] == "done"
                                 for r in read_metrics(ckpt / "metrics.rank0.jsonl")), 120,
                     what="the requeued job to finish")  # fmt: skip
    finally:
        run(["scancel", job], timeout=30, env=lab.env(), check=False)
    rank0 = read_metrics(ckpt / "metrics.rank0.jsonl")
    steps = [r["step"] for r in rank0 if r["event"] == "step"]
    assert steps == list(range(1, 41))  # no lost, no repeated step
    resume = [r for r in rank0 if r["event"] == "resume"]
    assert resume and resume[0]["restart"] >= 1
    rank1_after = {r["node"] for r in read_metrics(ckpt / "metrics.rank1.jsonl")
                   if r["restart"] >= 1}  # fmt: skip
    assert rank1_after and culprit not in rank1_after
    assert any(e.get("action") == "job_hang" and e.get("job") == job for e in hooks.audit(culprit))


def test_slow_rank_reported_not_drained_opted_out_and_slow_start_never_touched(rig, job_dir):
    lab, hooks, pdir = rig
    slow = sbatch(lab, job_dir, pdir, "--max-steps", "45", "--step-seconds", "0.2",
                  "--slow-rank", "1:1.3", "--ckpt-every", "1000")  # fmt: skip
    quiet_dir, start_dir = job_dir / "quiet", job_dir / "start"
    for d in (quiet_dir, start_dir):
        d.mkdir()
        os.chmod(d, 0o1777)
    # Never reports progress: never judged.
    quiet = sbatch(lab, quiet_dir, pdir, "--no-progress", "--max-steps", "1000", nodes=1)
    # A first step three times hang_s: a slow start, no alarm.
    start = sbatch(lab, start_dir, pdir, "--first-step-seconds", "12", "--max-steps", "30",
                   "--step-seconds", "0.1", nodes=1)  # fmt: skip
    try:
        lab.wait_for(lambda: any(e.get("action") == "job_straggler" and e.get("job") == slow
                                 for n in lab.node_names for e in hooks.audit(n)), 60,
                     what="SLOW report")  # fmt: skip
        node = last_record(rank_file(pdir, slow, 1))["node"]
        entry = next(e for e in hooks.audit(node) if e.get("action") == "job_straggler")
        assert entry["rank"] == 1 and "slower than the median" in entry["why"]
        lab.wait_for(lambda: any(e.get("code") == "SLOW" and e.get("decision") == "log"
                                 for e in hooks.audit(node)), 10, what="SLOW decision")  # fmt: skip
        lab.wait_for(lambda: lab.client().get_job(start).state not in ("RUNNING", "PENDING"), 60,
                     what="slow-start job end")  # fmt: skip
        lab.wait_for(lambda: lab.client().get_job(slow).state != "RUNNING", 60, what="slow job end")
        for n in lab.node_names:
            node = lab.client().get_node(n)  # a reason counts only out of service
            assert not (node.drained or node.down), (n, node.reason)
            assert not any(e.get("job") in (quiet, start) for e in hooks.audit(n))
        assert lab.client().get_job(start).state == "COMPLETED"
        assert lab.client().get_job(quiet).state == "RUNNING" and not (pdir / quiet).exists()
    finally:
        run(["scancel", slow, quiet, start], timeout=30, env=lab.env(), check=False)


def test_four_node_job_one_rank_stopped_others_blocked_drained_requeued(rig, job_dir):
    """Four nodes, rank 2 SIGSTOPped on a node whose GPU NVML reports lost
    (the trusted evidence): the three others block in the barrier,
    rank 2's node is drained with HANG job:<id>/rank2 and the job requeued.
    The lab has four nodes, so the job waits for one; an admin returns the
    node, and the job resumes from its checkpoint with no lost or repeated step."""
    lab, hooks, pdir = rig
    if len(lab.node_names) < 4:
        pytest.skip("needs a 4-node lab")
    job = sbatch(lab, job_dir, pdir, "--max-steps", "30", "--step-seconds", "0.2",
                 "--ckpt-every", "1000", nodes=4)  # fmt: skip
    ckpt = job_dir / "ckpt"
    try:
        lab.wait_for(lambda: all(int(last_record(rank_file(pdir, job, r)).get("step", 0)) >= 4
                                 for r in range(4)), 90, what="4-rank progress")  # fmt: skip
        rec = last_record(rank_file(pdir, job, 2))
        culprit = rec["node"]
        hooks.lose_gpu(culprit, 0)
        os.kill(int(rec["pid"]), signal.SIGSTOP)
        reason = parse_reason(wait_drained(lab, culprit, timeout=30))
        assert reason.code == "HANG" and reason.component == f"job:{job}/rank2"
        stopped_at = int(last_record(rank_file(pdir, job, 2))["step"])
        for r in (0, 1, 3):
            steps = [m["step"] for m in read_metrics(ckpt / f"metrics.rank{r}.jsonl")
                     if m["event"] == "step" and m["restart"] == 0]  # fmt: skip
            assert max(steps) <= stopped_at + 1, r
        others = [n for n in lab.node_names if n != culprit]
        assert not any(lab.client().get_node(n).drained for n in others)
        lab.wait_for(lambda: lab.client().get_job(job).restart_count >= 1, 60, what="requeue")
        hooks.heal_gpus(culprit)  # repaired
        run(["scontrol", "update", f"nodename={culprit}", "state=resume"], timeout=30,
            env=lab.env())  # fmt: skip
        try:
            lab.wait_for(lambda: any(r["event"] == "done"
                                     for r in read_metrics(ckpt / "metrics.rank0.jsonl")), 180,
                         what="the requeued job to finish")  # fmt: skip
        except Exception:
            for argv in (["scontrol", "show", "job", job], ["sinfo", "-N", "-o", "%N %T %E"]):
                print(run(argv, timeout=30, env=lab.env(), check=False).stdout)
            print((job_dir / "train.out").read_text()[-3000:])
            raise
    finally:
        run(["scancel", job], timeout=30, env=lab.env(), check=False)
    steps = [r["step"] for r in read_metrics(ckpt / "metrics.rank0.jsonl") if r["event"] == "step"]
    assert steps == list(range(1, 31))
    assert any(e.get("action") == "job_hang" and e.get("job") == job for e in hooks.audit(culprit))
