"""``slurm-hooks nccl parse`` and ``slurm-hooks burnin parse``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hooks.cli.burnin import command as burnin_cmd
from slurm_hooks.cli.nccl import command as nccl_cmd

DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def no_site_config(monkeypatch, tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text('[profiles.mine]\nbase = "h100-sxm5-80gb"\nnccl_min_busbw_gbps = 200.0\n')
    monkeypatch.setenv("SLURM_HOOKS_CONFIG", str(cfg))


def invoke(cmd, *args):
    return CliRunner().invoke(cmd, ["parse", *map(str, args)])


def test_nccl_json():
    r = invoke(nccl_cmd, DATA / "nccl" / "h100_8gpu_ok.txt", "--json", "--floor", "400")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["completed"] is True and doc["wrong"] == 0
    assert doc["avg_busbw_gbps"] == pytest.approx(153.047)
    assert len(doc["rows"]) == 31 and doc["rows"][-1]["oop_busbw_gbps"] == 481.21
    assert doc["findings"][0]["code"] == "OK"


@pytest.mark.parametrize(
    "name,args,code",
    [
        ("h100_8gpu_slow_nvlink.txt", ["--profile", "h100-sxm5-80gb"], 1),
        ("h100_8gpu_slow_nvlink.txt", ["--profile", "mine"], 0),
        ("h100_8gpu_wrong.txt", [], 1),
        ("h100_hang_truncated.txt", [], 1),
        ("check_disabled_na.txt", ["--floor", "400"], 0),
    ],
)
def test_nccl_exit_codes(name, args, code):
    r = invoke(nccl_cmd, DATA / "nccl" / name, *args)
    assert r.exit_code == code, r.output


def test_nccl_errors_exit_2(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert invoke(nccl_cmd, empty).exit_code == 2
    assert invoke(nccl_cmd, tmp_path / "missing.txt").exit_code == 2
    r = invoke(nccl_cmd, DATA / "nccl" / "h100_8gpu_ok.txt", "--profile", "nope")
    assert r.exit_code == 2 and "no profile 'nope'" in r.output


def test_burnin_json_and_codes():
    r = invoke(burnin_cmd, DATA / "gpu_burn" / "faulty_gpu3_errors.txt", "--json")
    assert r.exit_code == 1
    doc = json.loads(r.output)
    g3 = doc["gpus"][3]
    assert g3["verdict"] == "FAULTY" and g3["errors"] == 51 and g3["tflops"] == pytest.approx(50.34)
    assert [f["code"] for f in doc["findings"]] == ["BURNIN_ERRORS"]
    assert (
        invoke(
            burnin_cmd, DATA / "gpu_burn" / "ok_8x_h100.txt", "--profile", "h100-sxm5-80gb"
        ).exit_code
        == 0
    )
    assert invoke(burnin_cmd, DATA / "gpu_burn" / "ok_8x_h100.txt", "--floor", "60").exit_code == 1
    assert invoke(burnin_cmd, DATA / "gpu_burn" / "missing_compare_ptx.txt").exit_code == 2
    r = invoke(burnin_cmd, DATA / "gpu_burn" / "ok_8x_h100.txt", "--gpus", "16")
    assert r.exit_code == 1 and "profile expects 16" in r.output
