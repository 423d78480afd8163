"""The lab's MPI job (lab/slurm_hooks_lab/train/mpi_train.py) as a real
process, one rank (an MPI singleton: no srun, no Slurm): its checkpoint
contract.  Its collective across nodes is tests/test_hang_collective_lab.py's.
It runs on Debian's python3 (mpi4py is a Debian package, not in the venv)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_examples_train import read_metrics, wait_for

MPI_TRAIN = Path(__file__).resolve().parents[1] / "lab/slurm_hooks_lab/train/mpi_train.py"
PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module", autouse=True)
def _mpi4py() -> None:
    probe = subprocess.run([PYTHON, "-c", "import mpi4py, numpy"], capture_output=True,
                           check=False, timeout=30)  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"{PYTHON} has no mpi4py/numpy (tools/bootstrap.sh installs them)")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM", "OMPI_", "PMIX_", "PMI_"))}  # fmt: skip
    return {**env, **extra}


def _argv(ckpt: Path, *args: str) -> list[str]:
    return [PYTHON, str(MPI_TRAIN), "--ckpt-dir", str(ckpt), *args]


def records(ckpt: Path) -> list[dict[str, Any]]:
    return read_metrics(ckpt / "metrics.rank0.jsonl")


def train(ckpt: Path, *args: str, **env: str) -> list[dict[str, Any]]:
    before = len(records(ckpt))
    proc = subprocess.run(_argv(ckpt, "--step-seconds", "0", *args), env=_env(**env),
                          capture_output=True, text=True, check=False, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return records(ckpt)[before:]


def digests(recs: list[dict[str, Any]]) -> dict[int, str]:
    return {r["step"]: r["digest"] for r in recs if r["event"] == "step"}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[int, str]:
    return digests(train(tmp_path_factory.mktemp("straight"), "--max-steps", "20"))


def test_term_checkpoints_at_a_step_boundary_and_the_resume_is_exact(tmp_path, uninterrupted):
    proc = subprocess.Popen(
        _argv(tmp_path, "--max-steps", "20", "--step-seconds", "0.05", "--ckpt-every", "1000"),
        env=_env(SLURM_RESTART_COUNT="0"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        metrics = tmp_path / "metrics.rank0.jsonl"
        wait_for(metrics, lambda r: r["event"] == "step" and r["step"] >= 4, proc)
        proc.send_signal(signal.SIGUSR1)
        asked = wait_for(metrics, lambda r: r.get("reason") == "signal", proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    finally:
        proc.kill()
    first = records(tmp_path)
    (exit_,) = [r for r in first if r["event"] == "exit"]
    saved = [r for r in first if r["event"] == "checkpoint"]
    assert asked["digest"] == uninterrupted[asked["step"]]
    assert saved[-1]["step"] == exit_["step"] and saved[-1]["reason"] in ("term", "signal")
    again = train(tmp_path, "--max-steps", "20", SLURM_RESTART_COUNT="1")
    resume = again[0]
    assert (resume["event"], resume["step"], resume["restart"]) == ("resume", exit_["step"], 1)
    assert resume["digest"] == uninterrupted[exit_["step"]]
    assert digests(again) == {s: d for s, d in uninterrupted.items() if s > exit_["step"]}


def test_a_checkpoint_that_does_not_match_its_digest_is_not_resumed(tmp_path, uninterrupted):
    train(tmp_path, "--max-steps", "6", "--ckpt-every", "3")
    ckpt = tmp_path / "checkpoint.json"
    body = json.loads(ckpt.read_text())
    assert body["step"] == 6
    body["w"][0] += 1.0  # one flipped value: the digest no longer matches
    ckpt.write_text(json.dumps(body))
    again = train(tmp_path, "--max-steps", "4")
    assert again[0]["event"] == "start" and again[0]["step"] == 0
    assert digests(again) == {s: uninterrupted[s] for s in range(1, 5)}
