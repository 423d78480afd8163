"""install refuses to leave shims that would fail open everywhere (issue 17):
an interpreter that is missing or lacks slurm_hooks, a config that does not
validate, a slurm.conf that cannot be read; each shim is run once dry.  Also
configless Slurm, hints merged into slurm.conf's own values, and the
healthcheck shim chaining a site program (NHC)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_hooks.cli import installer as inst

CLI = [sys.executable, "-m", "slurm_hooks"]


def install(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    conf = tmp_path / "slurm.conf"
    if not conf.exists():
        conf.write_text("ClusterName=lab\nAuthInfo=socket=/run/munge/lab.socket\n")
    argv = [*CLI, "install", "--prefix", str(tmp_path / "p"), "--config",
            str(tmp_path / "c.toml"), "--slurm-conf", str(conf), *args]  # fmt: skip
    return subprocess.run(
        argv, check=False, capture_output=True, text=True, timeout=120, env=env, cwd="/"
    )


def test_nonexistent_python_is_an_error_and_writes_nothing(tmp_path):
    r = install(tmp_path, "--python", "/nonexistent/bin/python3", "--dry-run")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "/nonexistent/bin/python3 cannot run slurm_hooks" in r.stderr
    assert not (tmp_path / "p").exists()


def test_python_without_slurm_hooks_is_an_error(tmp_path):
    bare = Path("/usr/bin/python3")
    probe = subprocess.run(["/usr/bin/env", "-i", str(bare), "-c", "import slurm_hooks"],
                           cwd="/", capture_output=True, check=False)  # fmt: skip
    if probe.returncode == 0:
        pytest.skip("the system python has slurm_hooks installed")
    r = install(tmp_path, "--python", str(bare), "--no-check")
    assert r.returncode == 2 and "No module named 'slurm_hooks'" in r.stderr
    assert not (tmp_path / "p").exists()


def test_invalid_config_is_an_error(tmp_path):
    (tmp_path / "c.toml").write_text("[general\nobserve_only = maybe\n")
    r = install(tmp_path, "--dry-run")
    assert r.returncode == 2 and "config does not validate" in r.stderr


def test_missing_slurm_conf_is_said_at_once(tmp_path):
    t0 = time.monotonic()
    r = install(tmp_path, "--slurm-conf", str(tmp_path / "nope.conf"), "--dry-run")
    assert r.returncode == 2
    assert f"cannot read {tmp_path}/nope.conf" in r.stderr
    assert "unreachable" not in r.stderr
    assert time.monotonic() - t0 < 30, "not after scontrol's retries (47 s before)"


def test_configless_slurm_is_detected(tmp_path):
    cache = tmp_path / "run" / "slurm.conf"
    assert inst.find_slurm_conf(None, caches=[str(cache)]).path in (None, inst.DEFAULT_SLURM_CONF)
    if Path(inst.DEFAULT_SLURM_CONF).exists():
        pytest.skip("this host has /etc/slurm/slurm.conf")
    assert inst.find_slurm_conf(None, caches=[str(cache)]).error.startswith("cannot read")
    cache.parent.mkdir()
    cache.write_text("ClusterName=x\n")
    found = inst.find_slurm_conf(None, caches=[str(cache)])
    assert found.path is None and found.cache == str(cache) and not found.error
    shim = inst.render_shim("healthcheck", slurm_conf=found.path)
    assert "SLURM_CONF" not in shim.split("\n", 3)[3], "configless: no SLURM_CONF set"


def test_authinfo_hint_merges_the_existing_value(tmp_path):
    r = install(tmp_path, "--no-check", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "AuthInfo=socket=/run/munge/lab.socket,cred_expire=30" in r.stdout
    assert "\nAuthInfo=cred_expire=30" not in r.stdout


def test_dry_run_runs_each_shim_once(tmp_path):
    r = install(tmp_path, "--no-check", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "p").exists()
    # The chained site program must exist: checked by the shim's dry run.
    r = install(tmp_path, "--no-check", "--dry-run", "--chain-healthcheck", "/nonexistent/nhc")
    assert r.returncode == 2 and "not executable" in r.stderr


def fake(path: Path, rc: int, log: Path, name: str) -> Path:
    path.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\nexit {rc}\n')
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(("site_rc", "ours_rc", "want"), [(0, 0, 0), (1, 0, 1), (0, 1, 1),
                                                         (1, 2, 1)])  # fmt: skip
def test_chained_healthcheck_always_runs_both(tmp_path, site_rc, ours_rc, want):
    log = tmp_path / "log"
    site = fake(tmp_path / "nhc", site_rc, log, "nhc")
    py = fake(tmp_path / "python3", ours_rc, log, "ours")
    shim = tmp_path / "shim"
    shim.write_text(inst.render_shim("healthcheck", python=str(py), chain=str(site)))
    r = subprocess.run(
        ["/bin/sh", str(shim)], check=False, capture_output=True, text=True, timeout=30
    )
    assert log.read_text().splitlines() == ["nhc ", "ours -m slurm_hooks hook healthcheck"]
    assert r.returncode == want


def test_chain_is_kept_on_reinstall_and_dropped_by_none(tmp_path):
    site = fake(tmp_path / "nhc", 0, tmp_path / "log", "nhc")
    shim = inst.shim_path(tmp_path / "p", "healthcheck")
    assert install(tmp_path, "--no-check", "--chain-healthcheck", str(site)).returncode == 0
    assert inst.chained_program(shim.read_text()) == str(site)
    r = install(tmp_path, "--no-check")
    assert r.returncode == 0 and inst.chained_program(shim.read_text()) == str(site)
    assert install(tmp_path, "--no-check", "--chain-healthcheck", "none").returncode == 0
    assert inst.chained_program(shim.read_text()) is None


@pytest.mark.parametrize("bad", ["nhc", "/usr/sbin/nhc; rm -rf /", "/a b", "/x/$(id)"])
def test_chain_program_must_be_a_plain_absolute_path(bad):
    with pytest.raises(ValueError):
        inst.check_chain_program(bad)


@pytest.mark.slurm
def test_install_dry_run_passes_on_the_lab_with_nhc_chained(fresh_lab, tmp_path):
    """Against the real lab: with the lines in slurm.conf, --dry-run (which
    still runs --check) exits 0, HealthCheckProgram pointing at our chaining
    shim counts as ours; the shims were run dry."""
    lab = fresh_lab
    site = fake(tmp_path / "nhc", 0, tmp_path / "log", "nhc")
    prefix = tmp_path / "p"
    env = {**lab.env(), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    args = ["--slurm-conf", str(lab.slurm_conf), "--chain-healthcheck", str(site)]
    first = install(tmp_path, *args, "--no-check", env=env)
    assert first.returncode == 0, first.stderr
    lines = [ln for ln in first.stdout.splitlines()
             if ln.split("=", 1)[0] in ("Prolog", "Epilog", "PrologFlags", "PrologEpilogTimeout",
                                        "HealthCheckProgram", "HealthCheckInterval",
                                        "HealthCheckNodeState")]  # fmt: skip
    assert f"HealthCheckProgram={prefix}/healthcheck/slurm-hooks-healthcheck" in lines
    lab.reconfigure("\n".join(lines))
    r = install(tmp_path, *args, "--dry-run", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok       HealthCheckProgram" in r.stdout
    assert not (tmp_path / "log").exists() or "nhc" not in (tmp_path / "log").read_text(), (
        "the dry run never runs the site program"
    )
