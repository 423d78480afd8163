"""The plain MPI training job of the hang lab tests, in one place.

``lab/slurm_hooks_lab/train/mpi_train.py`` under ``srun --mpi=pmix`` (mpi4py
over Debian's Open MPI, nothing of slurm-hooks imported, no progress
records), submitted with sbatch by the unprivileged test user, and what its
ranks write: one JSON line a step in ``<ckpt>/metrics.rank<N>.jsonl``.  The
collective, wedge and exit/partition modules each set up the same job; they
differ only in what they do to it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import REQUIRE_LAB
from slurm_hooks_lab.lab import TEST_USER, Lab

from slurm_hooks.detect.probes.commands import run

TRAIN_DIR = Path(__file__).resolve().parent.parent / "lab/slurm_hooks_lab/train"
MPI_TRAIN = TRAIN_DIR / "mpi_train.py"
#: The user's own Python (Debian's, with python3-mpi4py and numpy).
USER_PYTHON = "/usr/bin/python3"
#: The job comment that opts a job into a requeue on a hang (docs/progress.md).
OPT_IN = "slurm-hooks:requeue-on-hang"
#: Every lab node is 127.0.0.1: Open MPI's TCP transport on the loopback
#: (Open MPI 5 finds no "reachable pairing" between the host's interfaces).
LAB_MPI_ENV = {"OMPI_MCA_btl_tcp_if_include": "lo"}


def require_mpi(lab: Lab) -> None:
    """Skip where this Slurm has no pmix MPI plugin (a release's build, not
    ours to fix); fail under SLURM_HOOKS_REQUIRE_LAB where the user's Python
    lacks mpi4py or numpy (tools/bootstrap.sh installs them)."""
    plugins = run(["srun", "--mpi=list"], timeout=30, env=lab.env(), check=False)
    if "pmix" not in (plugins.stdout + plugins.stderr):
        pytest.skip(f"this Slurm has no pmix MPI plugin (srun --mpi=list: {plugins.stdout!r})")
    probe = run(["runuser", "-u", TEST_USER, "--", USER_PYTHON, "-c", "import mpi4py, numpy"],
                timeout=30, check=False)  # fmt: skip
    if not probe.ok:
        why = (
            f"{USER_PYTHON} of {TEST_USER} lacks mpi4py or numpy (tools/bootstrap.sh installs them)"
        )
        if REQUIRE_LAB:
            pytest.fail(why, False)
        pytest.skip(why)


def workspace(lab: Lab, name: str) -> tuple[Path, Path]:
    """``(work, progress dir)`` under the lab's shared directory, both
    writable by the test user (sticky, as /tmp): the job's working directory,
    and a records directory of this module's own (a default one shared with
    other runs on the host would only add their files to the watchers')."""
    work = lab.shared_dir / name
    pdir = work / "progress"
    pdir.mkdir(parents=True, exist_ok=True)
    for d in (work, pdir):
        d.chmod(0o1777)
    return work, pdir


def submit(
    lab: Lab,
    work: Path,
    name: str,
    args: Sequence[str],
    *,
    nodes: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> tuple[str, Path, Path]:
    """Submit the two-node job as the test user, opted in to a requeue on a
    hang, checkpointing to ``work/name``; ``args`` go to mpi_train.py after
    0.2 s steps and a checkpoint every 3.  Returns ``(job id, checkpoint
    dir, output file)``."""
    ckpt, out = work / name, work / f"{name}.out"
    job_env = {**lab.env(), **LAB_MPI_ENV, **(env or {}), "PYTHON": USER_PYTHON,
               "MPI_TRAIN_PY": str(MPI_TRAIN), "CKPT_DIR": str(ckpt)}  # fmt: skip
    where = [f"--nodelist={','.join(nodes)}"] if nodes else []
    argv = ["runuser", "-u", TEST_USER, "--", "sbatch", "--parsable", "-N2", *where,
            "--comment", OPT_IN, f"--output={out}", f"--chdir={work}",
            str(TRAIN_DIR / "mpi_train.sbatch"), "--step-seconds", "0.2", "--ckpt-every", "3",
            *args]  # fmt: skip
    job = run(argv, timeout=30, env=job_env).stdout.strip().split(";")[0]
    return job, ckpt, out


def records(path: Path) -> list[dict[str, Any]]:
    """A rank's JSON lines (none yet: empty)."""
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def steps(path: Path, restart: int | None = None) -> list[dict[str, Any]]:
    """A rank's step records, of one run (``restart``) or all."""
    return [r for r in records(path) if r["event"] == "step"
            and (restart is None or r["restart"] == restart)]  # fmt: skip


def first_records(ckpt: Path) -> dict[int, dict[str, Any]]:
    """Each rank's first record: its pid and node."""
    return {r: records(ckpt / f"metrics.rank{r}.jsonl")[0] for r in (0, 1)}


def proc_sample(pid: int) -> tuple[str, int]:
    """(state letter, CPU ticks) of ``pid`` from /proc/PID/stat; ("gone", -1)
    once it has exited."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return "gone", -1
    return fields[0], int(fields[11]) + int(fields[12])
