"""dcgmi diag JSON parser and judge on recorded-format outputs (tests/data/dcgmi/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hooks.core.errors import CommandTimeout
from slurm_hooks.detect.engines.dcgm import (
    DcgmParseError,
    DcgmReport,
    diag_argv,
    judge_dcgm,
    parse_dcgmi_diag,
    run_or_timeout,
)
from slurm_hooks.detect.probes.commands import CommandResult

DATA = Path(__file__).parent / "data" / "dcgmi"


def parse(name, rc=0):
    return parse_dcgmi_diag((DATA / name).read_text(), rc=rc)


# file, rc, expected findings (code, status, component)
CASES = [
    ("pass_r2_8gpu.json", 0, [("OK", "OK", "node")]),
    ("fail_gpu_memory_gpu5.json", 226, [("DCGM_FAIL", "FAIL", "gpu5")]),
    ("warn_pcie_gpu2.json", 0, [("DCGM_WARN", "WARN", "gpu2")]),
    ("skip_all.json", 0, [("DCGM_NO_RESULTS", "UNKNOWN", "node")]),
    ("runtime_error.json", 1, [("DCGM_ERROR", "UNKNOWN", "node")]),
    ("dcgm4_entities_fail_gpu1.json", 226, [("DCGM_FAIL", "FAIL", "gpu1")]),
    ("nvvs_uppercase_nulls.json", 0, [("OK", "OK", "node")]),
    ("old_string_warnings_fail.json", 226, [("DCGM_FAIL", "FAIL", "gpu1")]),
    ("not_run_partial.json", 0, [("OK", "OK", "node")]),
    ("fail_pcie_replay_gpu7.json", 226, [("DCGM_FAIL", "FAIL", "gpu7")]),
    ("empty_no_tests.json", 0, [("DCGM_NO_RESULTS", "UNKNOWN", "node")]),
    (
        "fail_targeted_stress_gpu2_gpu3.json",
        226,
        [
            ("DCGM_FAIL", "FAIL", "gpu2"),
            ("DCGM_FAIL", "FAIL", "gpu3"),
            ("DCGM_WARN", "WARN", "gpu4"),
        ],
    ),
    ("pass_r2_8gpu.json", 4, [("DCGM_ERROR", "UNKNOWN", "node")]),
]


@pytest.mark.parametrize("name,rc,expected", CASES)
def test_judge_recorded_outputs(name, rc, expected):
    got = sorted((f.code, f.status.value, f.component.short()) for f in judge_dcgm(parse(name, rc)))
    assert got == sorted(expected)


def test_parse_details():
    r = parse("fail_gpu_memory_gpu5.json")
    assert r.version == "3.3.5"
    fail = r.by_status("fail")[0]
    assert (fail.category, fail.test, fail.gpu) == ("Hardware", "GPU Memory", 5)
    assert fail.error_ids == (83, 28) and "DBE" in fail.warnings[1]
    # the Deployment results cover all GPUs at once
    assert all(x.gpu is None for x in r.results if x.category == "Deployment")
    assert len([x for x in r.results if x.test == "PCIe"]) == 8


def test_shapes():
    dcgm4 = parse("dcgm4_entities_fail_gpu1.json")
    assert {x.gpu for x in dcgm4.results if x.test == "memory"} == {0, 1, 2, 3}
    assert "uncorrectable" in dcgm4.by_status("fail")[0].warnings[0]
    nvvs = parse("nvvs_uppercase_nulls.json")
    assert {x.status for x in nvvs.results} == {"pass"}
    assert sorted(x.gpu for x in nvvs.results if x.test == "software") == list(range(8))
    assert parse("skip_all.json").results[0].info == ("not supported on this device",)
    assert parse("not_run_partial.json").by_status("notrun")
    assert (
        parse("old_string_warnings_fail.json")
        .by_status("fail")[0]
        .warnings[0]
        .startswith("GPU 1 Thermal")
    )
    assert parse("fail_pcie_replay_gpu7.json").by_status("fail")[0].info[0].startswith("GPU 7")


@pytest.mark.parametrize("name", ["hostengine_down.txt", "truncated.json"])
def test_unparseable(name):
    with pytest.raises(DcgmParseError):
        parse(name)


def test_warn_is_fail():
    (f,) = judge_dcgm(parse("warn_pcie_gpu2.json"), warn_is_fail=True)
    assert f.status.value == "FAIL" and "below the minimum" in f.message


def test_run_or_timeout():
    text = (DATA / "fail_gpu_memory_gpu5.json").read_text()
    calls = []

    def fake(argv, *, timeout, check):
        calls.append(argv)
        return CommandResult(tuple(argv), 226, text, "", 120.0)

    r = run_or_timeout(diag_argv(2, [0, 5]), 300, run=fake)
    assert calls == [["dcgmi", "diag", "-r", "2", "-j", "-i", "0,5"]]
    assert r.rc == 226 and r.by_status("fail")

    down = (DATA / "hostengine_down.txt").read_text()
    r = run_or_timeout(
        ["dcgmi"], 10, run=lambda a, **k: CommandResult(tuple(a), 255, down, "", 0.1)
    )
    assert "Host engine connection" in r.runtime_error

    def hang(argv, **kw):
        raise CommandTimeout(argv, kw["timeout"])

    r = run_or_timeout(["dcgmi"], 10, run=hang)
    assert judge_dcgm(r)[0].code == "DCGM_ERROR"
    assert judge_dcgm(DcgmReport())[0].code == "DCGM_NO_RESULTS"
