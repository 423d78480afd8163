"""``slurm-hooks check`` through click's runner (the command is not yet registered)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from slurm_hooks.cli.check import command

DATA = Path(__file__).parent / "data"


def _config(tmp_path: Path, scenario: str, extra: str = "") -> str:
    p = tmp_path / "config.toml"
    p.write_text(
        f'[general]\nstate_dir = "{tmp_path}"\n'
        f'[checks]\nnvml = "lab:fake"\nnvml_scenario = "{DATA / "nvml" / scenario}"\n'
        f'sysfs_root = "{DATA / "sysfs" / "dgx_h100_healthy"}"\n' + extra
    )
    return str(p)


def test_healthy_exit_0_and_json(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "h100_healthy.toml")
    r = CliRunner().invoke(
        command,
        ["--config", cfg, "--profile", "h100-sxm5-80gb", "--only", "gpu_count,ecc,ib", "--json"],
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["profile"] == "h100-sxm5-80gb" and data["status"] == "OK"
    assert [f["check"] for f in data["findings"]] == ["gpu_count", "ecc", "ib"]


def test_faults_exit_1_table(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "h100_faults.toml")
    r = CliRunner().invoke(
        command, ["--config", cfg, "--profile", "h100-sxm5-80gb", "--only", "gpu_lost,row_remap"]
    )
    assert r.exit_code == 1, r.output
    assert "GPU_LOST" in r.output and "ROW_REMAP_FAILED" in r.output and "replace" in r.output


def test_bad_config_exit_2_names_file_and_key(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "h100_healthy.toml", "[checks.gpu_temp]\nwarn_cc = 1\n")
    r = CliRunner().invoke(command, ["--config", cfg])
    assert r.exit_code == 2
    assert f"{cfg}:checks.gpu_temp.warn_cc" in r.output


def test_unknown_profile_and_check_exit_2(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "h100_healthy.toml")
    r = CliRunner().invoke(command, ["--config", cfg, "--profile", "b300"])
    assert r.exit_code == 2 and "profiles.b300" in r.output
    r = CliRunner().invoke(command, ["--config", cfg, "--only", "ecc,nope"])
    assert r.exit_code == 2 and "unknown check 'nope'" in r.output


def test_everything_unknown_exit_2(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "driver_not_loaded.json")
    r = CliRunner().invoke(command, ["--config", cfg, "--only", "ecc,pcie"])
    assert r.exit_code == 2 and "UNKNOWN" in r.output


def test_help_and_list() -> None:
    r = CliRunner().invoke(command, ["--help"])
    assert r.exit_code == 0 and "slurm-hooks check --phase epilog" in r.output
    r = CliRunner().invoke(command, ["--list"])
    assert "xid" in r.output and "burnin" in r.output and "gpu_lost" in r.output
