"""The example training job (lab/slurm_hooks_lab/train/train.py), run as real processes.

Its NumPy backend is what runs here.  The claims tested are the ones the
README makes to users: a checkpoint on SIGUSR1 at a step boundary, a
checkpoint and a non-zero exit on SIGTERM, an exact resume (no step lost or
repeated, the model bitwise identical to an uninterrupted run), and a corrupt
latest checkpoint that falls back to the previous one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

TRAIN = Path(__file__).resolve().parents[1] / "lab" / "slurm_hooks_lab" / "train" / "train.py"
ARRAYS = [f"{kind}_{name}" for kind in "pmv" for name in ("w1", "b1", "w2", "b2")]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(extra)
    return env


def _argv(ckpt: Path, *args: str) -> list[str]:
    return [sys.executable, str(TRAIN), "--backend", "numpy", "--ckpt-dir", str(ckpt), *args]


def train(ckpt: Path, *args: str, rc: int = 0, **env: str) -> list[dict]:
    """Run to completion; return this run's metrics records of rank 0 (or SLURM_PROCID)."""
    metrics = ckpt / f"metrics.rank{env.get('SLURM_PROCID', '0')}.jsonl"
    before = len(read_metrics(metrics))
    proc = subprocess.run(
        _argv(ckpt, "--step-seconds", "0", *args),
        env=_env(**env),
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == rc, proc.stderr
    return read_metrics(metrics)[before:]


def read_metrics(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def events(records: list[dict], name: str) -> list[dict]:
    return [r for r in records if r["event"] == name]


def steps(records: list[dict]) -> dict[int, tuple[float, str]]:
    return {r["step"]: (r["loss"], r["digest"]) for r in events(records, "step")}


def ckpt_arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in ARRAYS}


def wait_for(path: Path, predicate, proc: subprocess.Popen, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in read_metrics(path):
            if predicate(record):
                return record
        if proc.poll() is not None:
            pytest.fail(f"training exited with {proc.returncode} before the expected record")
        time.sleep(0.01)
    pytest.fail("timed out waiting for a metrics record")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[list[dict], Path]:
    """An uninterrupted 30-step run: the ground truth every resumed run must match."""
    ckpt = tmp_path_factory.mktemp("reference")
    records = train(ckpt, "--max-steps", "30", "--ckpt-every", "5", "--keep", "3")
    return records, ckpt / "ckpt-00000030.npz"


def test_uninterrupted_run_logs_every_step_and_keeps_last_checkpoints(reference):
    records, last = reference
    assert sorted(steps(records)) == list(range(1, 31))
    assert events(records, "start")[0]["step"] == 0
    ckpts = events(records, "checkpoint")
    assert [(c["step"], c["reason"]) for c in ckpts] == [(s, "periodic") for s in range(5, 31, 5)]
    assert sorted(p.name for p in last.parent.glob("ckpt-*")) == [
        "ckpt-00000020.npz",
        "ckpt-00000025.npz",
        "ckpt-00000030.npz",
    ]
    assert not list(last.parent.glob(".*tmp*"))
    assert events(records, "done")[0]["digest"] == ckpts[-1]["digest"]
    losses = [loss for loss, _ in steps(records).values()]
    assert np.mean(losses[-10:]) < np.mean(losses[:10])  # it does learn


def test_usr1_then_term_then_resume_loses_and_repeats_nothing(tmp_path, reference):
    ref_records, ref_last = reference
    metrics = tmp_path / "metrics.rank0.jsonl"
    # --ckpt-every larger than the run: every checkpoint here comes from a signal.
    args = ("--max-steps", "30", "--ckpt-every", "1000", "--step-seconds", "0.1")
    proc = subprocess.Popen(
        _argv(tmp_path, *args),
        env=_env(SLURM_JOB_ID="42", SLURM_RESTART_COUNT="0", SLURMD_NODENAME="n1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(metrics, lambda r: r["event"] == "step" and r["step"] >= 3, proc)
        proc.send_signal(signal.SIGUSR1)
        ck = wait_for(metrics, lambda r: r["event"] == "checkpoint", proc)
        wait_for(metrics, lambda r: r["event"] == "step" and r["step"] >= ck["step"] + 2, proc)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr.read().decode()
    first = read_metrics(metrics)
    assert ck["reason"] == "signal" and ck["job"] == "42" and ck["node"] == "n1"
    exit_record = events(first, "exit")[0]
    last_step = max(steps(first))
    assert exit_record["step"] == last_step > ck["step"]
    assert exit_record["signal"] == "SIGTERM" and exit_record["rc"] == 143
    term_ckpt = events(first, "checkpoint")[-1]
    assert (term_ckpt["step"], term_ckpt["reason"]) == (last_step, "term")
    assert last_step < 30

    second = train(tmp_path, *args[:4], SLURM_JOB_ID="42", SLURM_RESTART_COUNT="1")
    resume = events(second, "resume")[0]
    assert resume["step"] == last_step and resume["restart"] == 1
    assert resume["digest"] == term_ckpt["digest"]

    # Every step exactly once across both runs, each equal to the uninterrupted run's.
    logged = [r["step"] for r in events(first + second, "step")]
    assert logged == list(range(1, 31))
    assert steps(first) | steps(second) == steps(ref_records)
    assert events(second, "done")[0]["digest"] == events(ref_records, "done")[0]["digest"]
    got, want = ckpt_arrays(tmp_path / "ckpt-00000030.npz"), ckpt_arrays(ref_last)
    for name in ARRAYS:
        assert got[name].tobytes() == want[name].tobytes(), name


def test_signals_at_an_already_saved_step_do_not_rewrite_it(tmp_path):
    metrics = tmp_path / "metrics.rank0.jsonl"
    proc = subprocess.Popen(
        _argv(tmp_path, "--max-steps", "5", "--ckpt-every", "1", "--step-seconds", "30"),
        env=_env(),
    )
    try:
        wait_for(metrics, lambda r: r["event"] == "checkpoint" and r["step"] == 1, proc)
        proc.send_signal(signal.SIGUSR1)  # interrupts the 30 s pacing sleep
        wait_for(metrics, lambda r: r["event"] == "checkpoint" and r["step"] == 2, proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 143
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    records = read_metrics(metrics)
    ckpts = events(records, "checkpoint")
    assert [(c["step"], c["reason"], c.get("existing", False)) for c in ckpts] == [
        (1, "periodic", False),
        (1, "signal", True),
        (2, "periodic", False),
        (2, "term", True),  # reported, not rewritten
    ]
    assert events(records, "exit")[0]["step"] == 2
    assert sorted(p.name for p in tmp_path.glob("ckpt-*")) == [
        "ckpt-00000001.npz",
        "ckpt-00000002.npz",
    ]


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(b"\0" * 64)


def _tamper(path: Path) -> None:
    """A well-formed archive whose parameters no longer match the digest it carries."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["p_w1"] = arrays["p_w1"] + np.float32(1e-3)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def _drop_rng_state(path: Path) -> None:
    """Parameters and digest intact, but the random state needed to resume is gone."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(bytes(arrays["meta"]).decode())
    del meta["rng"]
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


@pytest.mark.parametrize(
    "damage", [_truncate, _garbage, _tamper, _drop_rng_state], ids=lambda f: f.__name__
)
def test_corrupt_latest_checkpoint_falls_back_to_previous(tmp_path, reference, damage):
    ref_records, _ = reference
    train(tmp_path, "--max-steps", "20", "--ckpt-every", "5", "--keep", "3")
    damage(tmp_path / "ckpt-00000020.npz")
    stale = tmp_path / ".ckpt-00000025.npz.tmp-999"
    stale.write_bytes(b"half a checkpoint")

    second = train(tmp_path, "--max-steps", "30", "--ckpt-every", "5", "--keep", "3")
    rejected = events(second, "checkpoint_rejected")
    assert [Path(r["path"]).name for r in rejected] == ["ckpt-00000020.npz"]
    assert events(second, "resume")[0]["step"] == 15
    assert sorted(steps(second)) == list(range(16, 31))
    assert steps(second) == {s: v for s, v in steps(ref_records).items() if s > 15}
    assert not stale.exists()


def test_all_checkpoints_unusable_starts_from_scratch(tmp_path, reference):
    ref_records, _ = reference
    train(tmp_path, "--max-steps", "10", "--ckpt-every", "5")
    for p in tmp_path.glob("ckpt-*"):
        _garbage(p)
    second = train(tmp_path, "--max-steps", "30", "--ckpt-every", "5")
    assert len(events(second, "checkpoint_rejected")) == 2
    assert events(second, "start") and not events(second, "resume")
    assert steps(second) == steps(ref_records)


def test_two_ranks_share_rank0_checkpoints_and_stay_identical(tmp_path):
    common = ("--max-steps", "10", "--ckpt-every", "5")
    # Sequential, so that rank 1 cannot pick up a checkpoint rank 0 is still producing.
    rank1 = train(tmp_path, *common, SLURM_PROCID="1", SLURM_NTASKS="2")
    rank0 = train(tmp_path, *common, SLURM_PROCID="0", SLURM_NTASKS="2")
    assert not events(rank1, "checkpoint")
    assert [c["step"] for c in events(rank0, "checkpoint")] == [5, 10]
    s0, s1 = steps(rank0), steps(rank1)
    assert sorted(s0) == sorted(s1) == list(range(1, 11))
    # Same replica (digests) trained on different shards (losses).
    assert all(s0[k][1] == s1[k][1] for k in s0)
    assert any(s0[k][0] != s1[k][0] for k in s0)

    more = ("--max-steps", "15", "--ckpt-every", "5")
    rank1_b = train(tmp_path, *more, SLURM_PROCID="1", SLURM_NTASKS="2", SLURM_RESTART_COUNT="1")
    assert events(rank1_b, "resume")[0]["step"] == 10
    assert sorted(steps(rank1_b)) == list(range(11, 16))


@pytest.mark.parametrize(
    "args",
    [("--ckpt-signal", "NOSUCH"), ("--ckpt-every", "0"), ("--dropout", "1.5")],
)
def test_bad_arguments_are_usage_errors(tmp_path, args):
    proc = subprocess.run(
        _argv(tmp_path, *args), check=False, env=_env(), capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2
    assert "error" in proc.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.slurm
@pytest.mark.slow
def test_sbatch_script_on_real_slurm_checkpoints_requeues_and_resumes(fresh_lab, job_dir):
    """train.sbatch as users submit it: the batch shell's trap forwards USR1
    to both ranks, `scontrol requeue` (TERM) makes rank 0 save, and the
    requeued job resumes from that checkpoint on other nodes, appending to the
    same output file and ending with the uninterrupted run's model."""
    from slurm_hooks.detect.probes.commands import run

    lab = fresh_lab
    script = TRAIN.with_name("train.sbatch")
    ckpt = job_dir / "ckpt"
    env = {**lab.env(), "PYTHON": sys.executable, "TRAIN_PY": str(TRAIN), "CKPT_DIR": str(ckpt)}
    train_args = ["--backend", "numpy", "--max-steps", "40", "--step-seconds", "0.1"]
    train_args += ["--ckpt-every", "1000"]
    out = job_dir / "train.out"
    job_id = run(
        ["sbatch", "--parsable", f"--output={out}", f"--chdir={job_dir}", str(script), *train_args],
        timeout=30,
        env=env,
    ).stdout.strip()
    rank0, rank1 = ckpt / "metrics.rank0.jsonl", ckpt / "metrics.rank1.jsonl"

    def first(path: Path, predicate) -> dict | None:
        return next((r for r in read_metrics(path) if predicate(r)), None)

    drained = None
    try:
        lab.wait_for(lambda: first(rank0, lambda r: r.get("step", 0) >= 5), 30, what="training")
        run(["scancel", "--batch", "--signal=USR1", job_id], timeout=30, env=env)
        ck = lab.wait_for(
            lambda: first(rank0, lambda r: r["event"] == "checkpoint"), 15, what="USR1 checkpoint"
        )
        lab.wait_for(lambda: first(rank1, lambda r: r["event"] == "signal"), 15, what="rank 1")
        drained = first(rank1, lambda r: r["event"] == "start")["node"]
        run(
            ["scontrol", "update", f"nodename={drained}", "state=drain", "reason=test"],
            timeout=30,
            env=env,
        )
        run(["scontrol", "requeue", job_id], timeout=30, env=env)
        lab.wait_for(lambda: first(rank0, lambda r: r["event"] == "done"), 90, what="rerun")
    finally:
        run(["scancel", job_id], timeout=30, env=env, check=False)
        if drained:
            run(
                ["scontrol", "update", f"nodename={drained}", "state=resume"],
                timeout=30,
                env=env,
                check=False,
            )

    records = read_metrics(rank0)
    assert ck["reason"] == "signal" and ck["job"] == job_id
    term = [c for c in events(records, "checkpoint") if c["reason"] == "term"]
    assert len(term) == 1 and term[0]["restart"] == 0
    resume = events(records, "resume")[0]
    assert resume["restart"] == 1 and resume["step"] == term[0]["step"]
    assert [r["step"] for r in events(records, "step")] == list(range(1, 41))
    assert {r["restart"] for r in events(records, "step") if r["step"] > resume["step"]} == {1}
    rank1_nodes_after = {r["node"] for r in read_metrics(rank1) if r["restart"] == 1}
    assert drained not in rank1_nodes_after
    text = out.read_text()
    assert "batch shell got SIGUSR1" in text and "batch shell got SIGTERM" in text
    assert "restart 0] starting" in text and "restart 1] starting" in text  # appended

    reference = train(
        job_dir / "reference", "--max-steps", "40", "--ckpt-every", "1000", SLURM_NTASKS="2"
    )
    assert events(records, "done")[0]["digest"] == events(reference, "done")[0]["digest"]
