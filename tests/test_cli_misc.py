"""config, history and completion commands; --help and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from slurm_hooks import cli
from slurm_hooks.cli import completion, config_cmd, history, install, status
from slurm_hooks.store.audit import AuditLog

MINE = {
    "status": ("status", "Nodes out of service, grouped by owner and fault."),
    "history": ("history", "Incident timelines from the audit log."),
    "install": ("install", "Install the hook shims; print the slurm.conf lines."),
    "config": ("config_cmd", "Validate or show the configuration."),
    "completion": ("completion", "Shell completion script (bash, zsh, fish)."),
}


@pytest.fixture
def registered(monkeypatch):
    for name, entry in MINE.items():
        monkeypatch.setitem(cli.COMMANDS, name, entry)


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["history"],
        ["install"],
        ["config"],
        ["config", "validate"],
        ["config", "show"],
        ["config", "defaults"],
        ["completion"],
    ],
)
def test_every_command_has_help_with_an_example(registered, argv):
    r = CliRunner().invoke(cli.main, [*argv, "--help"])
    assert r.exit_code == 0, r.output
    assert "Example" in r.output


def test_usage_errors_exit_2(registered):
    assert CliRunner().invoke(cli.main, ["completion", "tcsh"]).exit_code == 2
    assert CliRunner().invoke(cli.main, ["status", "--bogus"]).exit_code == 2


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_script(shell):
    r = CliRunner().invoke(completion.command, [shell])
    assert r.exit_code == 0
    assert "_SLURM_HOOKS_COMPLETE" in r.output
    assert f"{shell}_complete" in r.output
    if shell == "bash":
        assert "complete -o nosort -F _slurm_hooks_completion slurm-hooks" in r.output
    else:
        assert "#compdef slurm-hooks" in r.output


def test_completion_answers_through_the_group(registered, monkeypatch):
    """What the bash script asks at a TAB: the commands starting with 'st'."""
    env = {
        "_SLURM_HOOKS_COMPLETE": "bash_complete",
        "COMP_WORDS": "slurm-hooks st",
        "COMP_CWORD": "1",
    }
    r = CliRunner(env=env).invoke(cli.main, [], prog_name="slurm-hooks")
    assert "plain,status" in r.output.splitlines()


def test_bash_accepts_the_script(tmp_path):
    script = tmp_path / "c.bash"
    script.write_text(completion.completion_script("bash"))
    out = subprocess.run(
        ["bash", "-c", f"source {script} && complete -p slurm-hooks"],
        check=False,
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert out.returncode == 0, out.stderr
    assert "_slurm_hooks_completion" in out.stdout


def test_config_validate(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text("[general]\nslurm_timeout = 5\n")
    r = CliRunner().invoke(config_cmd.command, ["validate", str(good)])
    assert r.exit_code == 0 and "ok" in r.output
    bad = tmp_path / "bad.toml"
    bad.write_text("[general]\nslurm_timout = 5\n")
    r = CliRunner().invoke(config_cmd.command, ["validate", str(bad)])
    assert r.exit_code == 2
    assert f"{bad}:general.slurm_timout" in r.output
    r = CliRunner().invoke(config_cmd.command, ["validate", str(tmp_path / "missing.toml")])
    assert r.exit_code == 2 and "file not found" in r.output


def test_config_show_is_toml_with_the_files_values(tmp_path):
    import tomllib

    f = tmp_path / "c.toml"
    f.write_text('[general]\nstate_dir = "/srv/sh"\nobserve_only = true\n')
    r = CliRunner().invoke(config_cmd.command, ["show", "-c", str(f)])
    assert r.exit_code == 0, r.output
    data = tomllib.loads(r.output)
    assert data["general"]["state_dir"] == "/srv/sh"
    assert data["general"]["observe_only"] is True
    assert data["general"]["slurm_timeout"] == 10.0


def test_config_defaults_is_valid_and_sets_nothing(tmp_path):
    from slurm_hooks.core import config

    r = CliRunner().invoke(config_cmd.command, ["defaults"])
    f = tmp_path / "d.toml"
    f.write_text(r.output)
    assert config.load(f).data == {}
    assert "# [general]" in r.output and '# state_dir = "/var/lib/slurm-hooks"' in r.output


def test_history_cli(tmp_path):
    from datetime import UTC, datetime, timedelta

    t = [datetime.now(UTC) - timedelta(hours=3)]
    log = AuditLog(tmp_path / "audit.jsonl", clock=lambda: t[0])
    log.record("drain", node="n1", incident="i1", code="XID79")
    t[0] += timedelta(minutes=10)
    log.record("resume", node="n1", incident="i1")
    t[0] = datetime.now(UTC) - timedelta(minutes=5)
    log.record("drain", node="n2", incident="i2", code="ECC_DBE")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[general]\nstate_dir = "{tmp_path}"\n')
    r = CliRunner().invoke(history.command, ["--json", "-c", str(cfg)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert [i["incident"] for i in doc["incidents"]] == ["i1", "i2"]
    assert doc["incidents"][0]["duration_s"] == 600
    r = CliRunner().invoke(history.command, ["--since", "1h", "--json", "-c", str(cfg)])
    assert [i["incident"] for i in json.loads(r.output)["incidents"]] == ["i2"]
    r = CliRunner().invoke(history.command, ["n1", "-c", str(cfg)])
    assert "incident i1  XID79  n1  resolved, 10m" in r.output
    r = CliRunner().invoke(history.command, ["--since", "soon", "-c", str(cfg)])
    assert r.exit_code == 2 and "invalid --since" in r.output
    r = CliRunner().invoke(history.command, ["--audit-log", str(tmp_path / "x.jsonl")])
    assert r.exit_code == 2 and "no audit log" in r.output


def test_commands_do_not_load_on_help(registered):
    """--help on the group lists my commands without importing their modules' heavy deps."""
    code = (
        f"import sys; from slurm_hooks import cli; cli.COMMANDS.update({MINE!r}); "
        "from click.testing import CliRunner; CliRunner().invoke(cli.main, ['--help']); "
        "print('prometheus_client' in sys.modules, 'requests' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ},
    )
    assert out.stdout.strip() == "False False", out.stderr


def test_module_objects_are_click_commands():
    import click

    for mod in (status, history, install, config_cmd, completion):
        assert isinstance(mod.command, click.Command)


@pytest.mark.parametrize(
    ("verbose", "env", "want"),
    [
        (0, None, 30),
        (1, None, 20),
        (2, None, 10),
        (0, "error", 40),
        (1, "ERROR", 20),
        (2, "ERROR", 10),
    ],
)
def test_setup_logging_verbose_wins_over_the_environment(monkeypatch, verbose, env, want):
    """-v, else SLURM_HOOKS_LOG_LEVEL, else WARNING (the CLI reads no
    [general] log_level: the config is loaded per command)."""
    import logging

    from slurm_hooks.cli import setup_logging

    seen = {}
    monkeypatch.setattr(logging, "basicConfig", lambda **kw: seen.update(kw))
    if env:
        monkeypatch.setenv("SLURM_HOOKS_LOG_LEVEL", env)
    else:
        monkeypatch.delenv("SLURM_HOOKS_LOG_LEVEL", raising=False)
    setup_logging(verbose)
    assert seen["level"] == want
