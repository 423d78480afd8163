"""Operator commands fail fast and say why: a SLURM_CONF that names no file
is reported before any Slurm command runs, and an unreachable controller
within one total deadline, with what to check.  The hooks keep their own
per-call timeouts and retries (a client without ``deadline_s``)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hooks.cli import _common
from slurm_hooks.core.errors import CommandTimeout, ConfigError, SlurmUnavailable
from slurm_hooks.detect.probes.commands import CommandResult
from slurm_hooks.slurm.cli_backend import CliClient


class FakeTime:
    """A clock that the fake commands and sleeps move forward."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls: list[float] = []  # each attempt's timeout
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s

    def hang(self, argv: list[str], *, timeout: float, **_kw: object) -> CommandResult:
        self.calls.append(timeout)
        self.now += timeout
        raise CommandTimeout(argv, timeout)

    def refuse(self, argv: list[str], *, timeout: float, **_kw: object) -> CommandResult:
        self.calls.append(timeout)
        self.now += 0.05
        return CommandResult(tuple(argv), 1, "", "Unable to contact slurm controller", 0.05)


@pytest.mark.parametrize(
    ("timeout", "behaviour"), [(10.0, "hang"), (3.0, "hang"), (10.0, "refuse")]
)
def test_every_attempt_and_backoff_fits_in_one_deadline(timeout: float, behaviour: str) -> None:
    t = FakeTime()
    client = CliClient(
        timeout=timeout,
        runner=getattr(t, behaviour),
        sleep=t.sleep,
        clock=t.clock,
        deadline_s=10.0,
    )
    with pytest.raises(SlurmUnavailable, match="within the 10s deadline"):
        client.list_nodes()
    assert t.now <= 10.0 + 1e-9
    assert t.calls and all(c > 0 for c in t.calls)
    # A later call of the same command has no time left: it does not run.
    before = len(t.calls)
    t.now = 10.0
    with pytest.raises(SlurmUnavailable, match="after 0 attempt"):
        client.list_nodes()
    assert len(t.calls) == before


def test_without_a_deadline_hooks_keep_their_per_call_retries() -> None:
    t = FakeTime()
    client = CliClient(timeout=10.0, retries=3, runner=t.hang, sleep=t.sleep, clock=t.clock)
    with pytest.raises(SlurmUnavailable, match="after 4 attempt"):
        client.list_nodes()
    assert t.calls == [10.0] * 4 and t.sleeps == [0.5, 1.0, 2.0]


def test_check_slurm_conf(tmp_path: Path) -> None:
    assert _common.check_slurm_conf({}) is None
    conf = tmp_path / "slurm.conf"
    with pytest.raises(ConfigError, match=f"SLURM_CONF: {conf} does not exist"):
        _common.check_slurm_conf({"SLURM_CONF": str(conf)})
    with pytest.raises(ConfigError, match=f"SLURM_CONF: {tmp_path} is not a file"):
        _common.check_slurm_conf({"SLURM_CONF": str(tmp_path)})
    conf.write_text("ClusterName=x\n")
    assert _common.check_slurm_conf({"SLURM_CONF": str(conf)}) == str(conf)


# -- the command, as an operator runs it ----------------------------------------


def _fake_slurm(bindir: Path, log: Path, body: str) -> None:
    """scontrol/sinfo/squeue stand-ins that record each call and run ``body``."""
    bindir.mkdir()
    for tool in ("scontrol", "sinfo", "squeue"):
        path = bindir / tool
        path.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{log}"\n{body}\n')
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _status(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[general]\nstate_dir = "{tmp_path / "state"}"\n')
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "PYTHON"))}
    return subprocess.run(
        [sys.executable, "-m", "slurm_hooks", "status", "--config", str(cfg)],
        capture_output=True,
        text=True,
        env={**base, **env},
        # Only catches a hang: the deadline is asserted above, the figure is bench's.
        timeout=60,
        check=False,
    )


def test_status_names_a_missing_slurm_conf_before_running_slurm(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    _fake_slurm(tmp_path / "bin", log, "sleep 30")
    missing = tmp_path / "etc" / "slurm.conf"
    proc = _status(tmp_path, SLURM_CONF=str(missing), PATH=str(tmp_path / "bin") + ":/usr/bin:/bin")
    assert proc.returncode == 2
    assert f"SLURM_CONF: {missing} does not exist" in proc.stderr
    assert not log.exists()  # no Slurm command ran


def test_status_says_what_to_check_when_the_controller_does_not_answer(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    _fake_slurm(
        tmp_path / "bin",
        log,
        'echo "slurm_load_node error: Unable to contact slurm controller" >&2; exit 1',
    )
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    proc = _status(tmp_path, SLURM_CONF=str(conf), PATH=str(tmp_path / "bin") + ":/usr/bin:/bin")
    assert proc.returncode == 2
    assert "slurm controller unreachable" in proc.stderr
    assert f"within the {_common.INTERACTIVE_DEADLINE_S:g}s deadline" in proc.stderr
    assert f"SLURM_CONF names this cluster's slurm.conf (now: {conf})" in proc.stderr
    assert "scontrol ping" in proc.stderr
    calls = log.read_text().splitlines()
    assert 1 <= len(calls) <= 4 and all(c.startswith("scontrol") for c in calls)
