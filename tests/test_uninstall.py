"""``slurm-hooks uninstall`` as an admin runs it (a subprocess): it removes
exactly what ``install`` wrote, keeps config and state unless --purge,
never removes a file that is not our shim, and keeps a shim the running
Slurm still calls (checked against the real lab)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hooks.cli import installer as inst
from slurm_hooks.cli.task_prolog import task_prolog_path


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slurm_hooks", *args],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip


def _install(tmp_path: Path) -> tuple[Path, Path]:
    prefix, config = tmp_path / "etc-slurm", tmp_path / "config.toml"
    config.write_text(f'[general]\nstate_dir = "{tmp_path / "state"}"\n')
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "audit.jsonl").write_text("{}\n")
    r = _cli("install", "--prefix", str(prefix), "--config", str(config), "--no-check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert all(inst.shim_path(prefix, p).exists() for p in inst.Phase)
    return prefix, config


def test_dry_run_then_uninstall_keeps_config_and_state(tmp_path: Path) -> None:
    prefix, config = _install(tmp_path)
    args = ("uninstall", "--prefix", str(prefix), "--config", str(config), "--no-check")
    dry = _cli(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.count("would be removed") == 4  # 3 shims and the TaskProlog
    assert all(inst.shim_path(prefix, p).exists() for p in inst.Phase)
    assert f"TaskProlog={task_prolog_path(prefix)}" in dry.stdout
    # the lines to take out name the installed shims
    assert f"HealthCheckProgram={prefix}/healthcheck/slurm-hooks-healthcheck" in dry.stdout
    assert f"Prolog={prefix}/prolog.d/*" in dry.stdout

    r = _cli(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not any(inst.shim_path(prefix, p).exists() for p in inst.Phase)
    assert not task_prolog_path(prefix).exists()
    assert (prefix / "prolog.d").is_dir()  # a site's other hooks live there
    assert config.exists() and (tmp_path / "state" / "audit.jsonl").exists()
    again = _cli(*args)
    assert again.returncode == 0 and again.stdout.count("absent") == 4


def test_purge_removes_config_state(tmp_path: Path) -> None:
    prefix, config = _install(tmp_path)
    r = _cli("uninstall", "--prefix", str(prefix), "--config", str(config), "--no-check", "--purge")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not config.exists() and not (tmp_path / "state").exists()


def test_never_removes_a_file_that_is_not_our_shim(tmp_path: Path) -> None:
    prefix, config = _install(tmp_path)
    site = inst.shim_path(prefix, inst.Phase.EPILOG)
    site.write_text("#!/bin/sh\n/usr/local/sbin/site-epilog\n")
    r = _cli("uninstall", "--prefix", str(prefix), "--config", str(config), "--no-check")
    assert r.returncode == 1
    assert site.exists() and "not a slurm-hooks shim" in r.stdout
    assert not inst.shim_path(prefix, inst.Phase.PROLOG).exists()


def test_the_task_prolog_slurm_still_names_or_a_sites_own_is_kept(tmp_path: Path) -> None:
    from slurm_hooks.cli.uninstall import remove_task_prolog

    prefix, _ = _install(tmp_path)
    path = task_prolog_path(prefix)
    step = remove_task_prolog(prefix, {"TaskProlog": str(path)}, force=False, dry_run=False)
    assert step.change == "kept" and "still names it" in step.why and path.exists()
    path.write_text("#!/bin/sh\necho export SITE=1\n")
    step = remove_task_prolog(prefix, {}, force=True, dry_run=False)
    assert step.change == "kept" and path.exists()


def test_slurm_unreachable_is_an_error_not_a_guess(tmp_path: Path) -> None:
    prefix, config = _install(tmp_path)
    env = {"PATH": "/nonexistent", "SLURM_CONF": str(tmp_path / "nope.conf")}
    r = _cli("uninstall", "--prefix", str(prefix), "--config", str(config), env=env)
    assert r.returncode == 2 and "--no-check" in r.stderr
    assert all(inst.shim_path(prefix, p).exists() for p in inst.Phase)


@pytest.mark.slurm
def test_keeps_a_shim_the_running_slurm_still_calls(lab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prefix = tmp_path / "etc-slurm"
    # /bin/true as the interpreter: slurmd may run the program, it must do nothing
    inst.install_shims(prefix, python="/bin/true")
    hc = inst.shim_path(prefix, inst.Phase.HEALTHCHECK)
    lab.reconfigure(f"HealthCheckProgram={hc}\nHealthCheckInterval=3600")
    try:
        r = _cli("uninstall", "--prefix", str(prefix), env=lab.env())
        assert r.returncode == 1, r.stdout + r.stderr
        assert hc.exists() and f"HealthCheckProgram={hc} still names it" in r.stdout
        assert not inst.shim_path(prefix, inst.Phase.PROLOG).exists()
    finally:
        lab.reconfigure("")
    r = _cli("uninstall", "--prefix", str(prefix), env=lab.env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert not hc.exists()
