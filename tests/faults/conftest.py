"""The fault suite's shared bits: a job that counts its checkpoint signals,
a webhook recorder, the outcome matrix printed at the end of the run."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from slurm_hooks_lab.hooks import WebhookRecorder, install

#: Grace of the trials' jobs (seconds).
GRACE_S = 2.0

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


@pytest.fixture(scope="module")
def recorder():  # type: ignore[no-untyped-def]
    with WebhookRecorder() as rec:
        yield rec


@pytest.fixture(scope="module")
def hooks(lab, recorder):  # type: ignore[no-untyped-def]
    """Each node's real config (file kernel log, fake NVML, the recorder as
    the owner's webhook); slurm.conf untouched: the test runs the hooks."""
    lab.reset()
    h = install(
        lab, gpus=2, grace_s=GRACE_S, webhook_url=recorder.url, reconfigure=False,
        policy={"breaker_max_share": 1.0, "breaker_max_nodes": 10},
    )  # fmt: skip
    try:
        yield h
    finally:
        h.close(reconfigure=False)
        lab.reset()
