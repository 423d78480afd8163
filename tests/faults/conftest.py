"""The fault suite's shared bits: a job that counts its checkpoint signals,
a webhook recorder, the outcome matrix printed at the end of the run."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

#: (scenario, process, step, outcome) rows, printed as one table at the end.
MATRIX: list[tuple[str, str, str, str]] = []

JOB = """#!/bin/bash
trap 'echo USR1 >> {dir}/usr1.$SLURM_JOB_ID' USR1
echo "start $SLURMD_NODENAME restart=${SLURM_RESTART_COUNT:-0}" >> {dir}/starts.$SLURM_JOB_ID
for i in $(seq 1 1500); do sleep 0.2; done
"""


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    """The outcome matrix, pasteable into the issue's closing note."""
    if not MATRIX:
        return
    tr = terminalreporter
    tr.write_sep("-", "fault matrix")
    tr.write_line("| scenario | process | step | outcome |")
    tr.write_line("|---|---|---|---|")
    for a, b, c, d in MATRIX:
        tr.write_line(f"| {a} | {b} | {c} | {d} |")


@pytest.fixture
def faults_dir(lab, request: pytest.FixtureRequest) -> Path:  # type: ignore[no-untyped-def]
    """A job directory the test user can write to."""
    path = lab.shared_dir / ("faults-" + request.node.name.replace("[", "_").replace("]", "_"))
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    os.chmod(path, 0o1777)
    return path
