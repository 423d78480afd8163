"""``slurm-hooks lab`` through click's runner."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from slurm_hooks_lab.cli_lab import command


@pytest.mark.parametrize("sub", [[], ["up"], ["down"], ["status"], ["env"]])
def test_help_has_example(sub: list[str]) -> None:
    res = CliRunner().invoke(command, [*sub, "--help"])
    assert res.exit_code == 0 and "Example:" in res.output


def test_env_and_status_without_lab(tmp_path) -> None:  # type: ignore[no-untyped-def]
    res = CliRunner().invoke(command, ["env", "--dir", str(tmp_path)])
    assert res.output == f"export SLURM_CONF={tmp_path}/etc/slurm.conf\n"
    res = CliRunner().invoke(command, ["status", "--dir", str(tmp_path)])
    assert res.exit_code == 1 and "not running" in res.output
    res = CliRunner().invoke(command, ["down", "--dir", str(tmp_path)])
    assert res.exit_code == 0 and "no lab running" in res.output


def test_default_dir_from_env(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SLURM_HOOKS_LAB_DIR", str(tmp_path / "x"))
    res = CliRunner().invoke(command, ["env"])
    assert res.output.strip() == f"export SLURM_CONF={tmp_path}/x/etc/slurm.conf"


@pytest.mark.slurm
def test_status_of_running_lab(lab) -> None:  # type: ignore[no-untyped-def]
    res = CliRunner().invoke(command, ["status", "--dir", str(lab.base_dir)])
    assert res.exit_code == 0, res.output
    assert "running" in res.output and "slurmctld" in res.output
    for name in lab.node_names:
        assert f"  {name} " in res.output
    res = CliRunner().invoke(command, ["status", "--json", "--dir", str(lab.base_dir)])
    doc = json.loads(res.output)
    assert doc["running"] and [n["name"] for n in doc["nodes"]] == lab.node_names


@pytest.mark.slurm
def test_up_refused_when_running(lab) -> None:  # type: ignore[no-untyped-def]
    from slurm_hooks.cli import main

    res = CliRunner().invoke(main, ["lab", "up", "--dir", str(lab.base_dir)])
    assert res.exit_code == 2 and "already running" in res.output
