"""``slurm-hooks job JOBID`` as a subprocess: per-rank progress and the verdict,
exit 0 progressing, 1 hang / straggler, 2 unknown job or no records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_hooks.detect.runner import node_name
from slurm_hooks.jobside.progress import Progress

JOB = "8642"
HERE = node_name()


def _config(tmp_path: Path, **extra) -> Path:
    keys = {"dir": str(tmp_path), "hang_s": 5.0, "first_step_allowance_s": 1.0,
            "window_steps": 5, "slow_windows": 2, **extra}  # fmt: skip
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in keys.items())
    path = tmp_path / "config.toml"
    path.write_text(f"[progress]\n{body}\n")
    return path


def _cli(cfg: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLURM_HOOKS_CONFIG": str(cfg), "NO_COLOR": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "slurm_hooks", "job", *args], capture_output=True, text=True,
        env=env, timeout=60, check=False,
    )  # fmt: skip


def _write(tmp_path, rank, node, *, ago, steps=30, busy=0.1, pid=None, job=JOB):
    now = time.time()
    clock = iter([now - ago - steps] + [now - ago - steps + s for s in range(1, steps + 1)])
    p = Progress(str(tmp_path), job, rank, node=node, clock=lambda: next(clock))
    if pid is not None:
        p._head = p._head.replace(f"pid={os.getpid()}", f"pid={pid}")
    for s in range(1, steps + 1):
        p.step(s, busy=busy)
    p.close()


def test_progressing_job_table_and_json(tmp_path):
    for r in range(3):
        _write(tmp_path, r, f"n{r}", ago=0.5)
    cfg = _config(tmp_path)
    out = _cli(cfg, JOB, "--no-slurm")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"job {JOB}: progressing")
    assert lines[1].split() == ["RANK", "NODE", "STEP", "LAST", "STEP", "TIME", "BUSY", "SKEW",
                                "PROCESS"]  # fmt: skip
    assert all(len(x) <= 80 for x in lines)
    doc = json.loads(_cli(cfg, JOB, "--no-slurm", "--json").stdout)
    assert doc["exit_code"] == 0 and doc["judge"] == "healthy" and doc["culprit"] is None
    assert [(r["rank"], r["step"], r["process"]) for r in doc["ranks"]] == [
        (0, 30, "remote"), (1, 30, "remote"), (2, 30, "remote")]  # fmt: skip
    assert all(abs(r["step_time_median_s"] - 1.0) < 1e-3 for r in doc["ranks"])
    assert all(r["skew"] == 1.0 for r in doc["ranks"])


def test_stopped_rank_on_this_host_is_the_culprit_exit_1(tmp_path):
    # A real process, stopped: what the watcher sees on the culprit's node.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        time.sleep(0.3)  # the rank's process started before its first record, as a rank does
        for rank, node, pid in ((0, "other", None), (1, HERE, child.pid)):
            t0 = time.time()
            clock = iter([t0] + [t0 + 0.01 * s for s in range(1, 6)])
            p = Progress(str(tmp_path), JOB, rank, node=node, clock=lambda c=clock: next(c))
            if pid is not None:
                p._head = p._head.replace(f"pid={os.getpid()}", f"pid={pid}")
            for s in range(1, 6):
                p.step(s, busy=0.01)
            p.close()
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(1.5)  # past hang_s = 1
        cfg = _config(tmp_path, hang_s=1.0, first_step_allowance_s=0.5)
        out = _cli(cfg, JOB, "--no-slurm", "--json")
    finally:
        child.kill()
        child.wait()
    doc = json.loads(out.stdout)
    assert out.returncode == 1
    assert doc["culprit"] == {"rank": 1, "node": HERE, "cause": "process stopped (state T)"}
    assert doc["verdict"].startswith("hang suspected:")
    assert {r["rank"]: r["process"] for r in doc["ranks"]} == {0: "remote", 1: "stopped"}


def test_stall_named_by_flight_recorder_dumps(tmp_path):
    data = Path(__file__).parent / "data" / "flight_recorder"
    for r in range(4):
        _write(tmp_path, r, f"n{r}", ago=30, pid=1000 + r)
        (tmp_path / JOB / f"nccl_trace_rank_{r}.json").write_bytes(
            (data / f"nccl_trace_rank_{r}.json").read_bytes())  # fmt: skip
    cfg = _config(tmp_path, flight_recorder_path=f"{tmp_path}/{{job}}/nccl_trace_rank_*")
    doc = json.loads(_cli(cfg, JOB, "--no-slurm", "--json").stdout)
    assert doc["exit_code"] == 1
    assert doc["culprit"]["rank"] == 2 and doc["culprit"]["cause"] == "flight_recorder: behind"
    out = _cli(cfg, JOB, "--no-slurm")
    assert "flight_recorder: rank 2 behind" in out.stdout


def test_straggler_exit_1_with_skew(tmp_path):
    _write(tmp_path, 0, "n0", ago=0.5, busy=0.1)
    _write(tmp_path, 1, "n1", ago=0.5, busy=0.13)
    _write(tmp_path, 2, "n2", ago=0.5, busy=0.1)
    doc = json.loads(_cli(_config(tmp_path), JOB, "--no-slurm", "--json").stdout)
    assert doc["exit_code"] == 1 and doc["verdict"].startswith("straggler: rank 1")
    assert {r["rank"]: r["skew"] for r in doc["ranks"]} == {0: 1.0, 1: 1.3, 2: 1.0}
    assert doc["stragglers"][0]["rank"] == 1


def test_no_records_and_bad_job_id_exit_2(tmp_path):
    out = _cli(_config(tmp_path), "999", "--no-slurm")
    assert out.returncode == 2 and "no progress records" in out.stdout
    assert _cli(_config(tmp_path), "12;reboot", "--no-slurm").returncode == 2


@pytest.mark.slurm
def test_unknown_job_to_slurm_exit_2_and_a_running_job_judged(lab, tmp_path):
    """Records of a job Slurm does not know: exit 2.  A running job of the
    lab: its records judged, Slurm's state shown."""
    _write(tmp_path, 0, "n0", ago=0.5)
    out = _cli(_config(tmp_path), JOB, "--json", env=lab.env())
    assert out.returncode == 2 and json.loads(out.stdout)["verdict"] == "unknown job"
    from slurm_hooks.detect.probes.commands import run

    job = run(["sbatch", "--parsable", "-N1", "--wrap", "sleep 60", f"--output={tmp_path}/o"],
              timeout=30, env=lab.env()).stdout.strip()  # fmt: skip
    try:
        lab.wait_for(lambda: lab.client().get_job(job).state == "RUNNING", 30, what="job start")
        _write(tmp_path, 0, "n0", ago=0.5, job=job)
        out = _cli(_config(tmp_path), job, env=lab.env())
        assert out.returncode == 0, out.stdout + out.stderr
        assert "progressing" in out.stdout.splitlines()[0] and "Slurm: RUNNING" in out.stdout
    finally:
        run(["scancel", job], timeout=30, env=lab.env(), check=False)
