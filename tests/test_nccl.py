"""nccl-tests parser and judge on recorded-format outputs (tests/data/nccl/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hooks.core.errors import CommandTimeout
from slurm_hooks.detect.engines.nccl.engines import (
    all_reduce_argv,
    bus_bandwidth,
    expected_sum,
    parse_size,
    rows_from_timings,
    run_all_reduce_perf,
    sizes_between,
)
from slurm_hooks.detect.engines.nccl.judge import NcclThresholds, judge_nccl, thresholds_from
from slurm_hooks.detect.engines.nccl.model import NcclRun
from slurm_hooks.detect.engines.nccl.parser import parse_nccl_tests
from slurm_hooks.detect.probes.commands import CommandResult

DATA = Path(__file__).parent / "data" / "nccl"


def parse(name: str) -> NcclRun:
    return parse_nccl_tests((DATA / name).read_text())


# file, completed, nranks, rows, wrong, validated, large busbw (approx), errors?
CASES = [
    ("h100_8gpu_ok.txt", True, 8, 31, 0, True, 491.03, False),
    ("h100_8gpu_slow_nvlink.txt", True, 8, 31, 0, True, 245.72, False),
    ("h100_8gpu_wrong.txt", True, 8, 31, 262160 * 2, True, None, False),
    ("check_disabled_na.txt", True, 8, 6, 0, False, None, False),
    ("a100_8gpu_ok.txt", True, 8, 13, 0, True, None, False),
    ("min_bw_failed.txt", True, 8, 6, 0, True, None, True),
    ("single_gpu_trivial.txt", True, 1, 25, 0, True, 0.0, False),
    ("h100_dip_at_large_sizes.txt", True, 8, 14, 0, True, None, False),
    ("h200_new_version_header.txt", True, 8, 9, 0, True, None, False),
    ("h100_hang_truncated.txt", False, 8, 24, 0, True, None, False),
    ("srun_label.txt", True, 8, 7, 0, True, None, False),
    ("mpirun_tag_output.txt", True, 8, 6, 0, True, None, False),
    ("old_format_v100.txt", True, 4, 8, 0, False, None, False),
    ("nccl_failure_p2p.txt", False, 8, 0, 0, False, None, True),
    ("cuda_failure_fabric_manager.txt", False, 8, 0, 0, False, None, True),
    ("test_timeout.txt", False, 8, 5, 0, True, None, True),
]


@pytest.mark.parametrize("name,completed,nranks,nrows,wrong,validated,large,errors", CASES)
def test_parse_real_outputs(name, completed, nranks, nrows, wrong, validated, large, errors):
    r = parse(name)
    assert r.completed is completed
    assert r.nranks == nranks
    assert len(r.rows) == nrows
    assert r.wrong == wrong
    assert r.validated is validated
    assert bool(r.errors) is errors
    if large is not None:
        assert r.large_busbw() == pytest.approx(large, abs=0.01)


def test_row_fields_and_header():
    r = parse("h100_8gpu_ok.txt")
    last = r.rows[-1]
    assert (last.size, last.count, last.type, last.redop, last.root) == (
        8589934592, 2147483648, "float", "sum", -1
    )  # fmt: skip
    assert (last.oop_time_us, last.oop_algbw, last.oop_busbw) == (31239.0, 274.97, 481.21)
    assert last.ip_busbw == 491.03 and last.busbw == 491.03
    assert r.avg_busbw == pytest.approx(153.047)
    assert r.out_of_bounds == 0
    assert dict(r.header)["nGpus"] == "8" and dict(r.header)["step"] == "2(factor)"
    assert r.devices[3].pci == "0x5d" and r.devices[3].name == "NVIDIA H100 80GB HBM3"
    assert r.devices[0].host == "gpu-a017"


def test_prefixes_and_versions():
    assert parse("srun_label.txt").devices[7].device == 7
    tagged = parse("mpirun_tag_output.txt")
    assert tagged.rows[0].size == 33554432 and tagged.avg_busbw is not None
    new = parse("h200_new_version_header.txt")
    assert dict(new.header)["version"] == "2.13.13"
    assert new.devices[0].pci == "0000:18:00"


def test_failures_are_explained():
    r = parse("nccl_failure_p2p.txt")
    assert "NCCL failure at common.cu:1005" in r.errors[0]
    assert "peer access" in r.warnings[0]
    assert "system not yet initialized" in parse("cuda_failure_fabric_manager.txt").errors[0]
    assert parse("test_timeout.txt").errors[0] == "test timeout (30s)"


def test_wrong_rows():
    r = parse("h100_8gpu_wrong.txt")
    bad = [(row.size, row.oop_wrong, row.ip_wrong) for row in r.rows if row.wrong]
    assert bad == [(1048576, 262144, 262144), (268435456, 16, 16)]
    assert r.out_of_bounds == 2


def test_large_rows_selection():
    r = parse("h100_dip_at_large_sizes.txt")
    assert {row.size for row in r.large_rows(256 * 1024**2)} == {
        2**28,
        2**29,
        2**30,
        2**31,
        2**32,
        2**33,
    }
    assert r.large_rows(2**40) == (r.rows[-1],)  # nothing that large: the largest size
    assert r.large_busbw() < 300 < max(row.busbw for row in r.rows)


def test_garbage_input():
    r = parse_nccl_tests("hello\n 12 34 not a row\n\x00\n")
    assert not r.completed and r.rows == () and r.errors == ()


T = NcclThresholds(busbw_floor_gbps=400.0, gpu_count=8)
JUDGE = [
    ("h100_8gpu_ok.txt", T, [("OK", "OK")]),
    ("h100_8gpu_slow_nvlink.txt", T, [("NCCL_SLOW", "FAIL")]),
    ("h100_8gpu_wrong.txt", T, [("NCCL_WRONG", "FAIL")]),
    ("check_disabled_na.txt", T, [("OK", "OK")]),
    ("a100_8gpu_ok.txt", NcclThresholds(busbw_floor_gbps=200.0), [("OK", "OK")]),
    ("a100_8gpu_ok.txt", NcclThresholds(busbw_floor_gbps=260.0), [("NCCL_SLOW", "WARN")]),
    ("min_bw_failed.txt", T, [("NCCL_FAILED", "FAIL"), ("NCCL_SLOW", "FAIL")]),
    ("single_gpu_trivial.txt", T, [("NCCL_PARTIAL", "WARN")]),
    ("single_gpu_trivial.txt", NcclThresholds(busbw_floor_gbps=400.0), [("OK", "OK")]),
    ("h100_dip_at_large_sizes.txt", T, [("NCCL_SLOW", "FAIL")]),
    ("h100_hang_truncated.txt", T, [("NCCL_FAILED", "FAIL")]),
    ("nccl_failure_p2p.txt", T, [("NCCL_FAILED", "FAIL")]),
    ("cuda_failure_fabric_manager.txt", T, [("NCCL_FAILED", "FAIL")]),
    ("test_timeout.txt", T, [("NCCL_FAILED", "FAIL")]),
    ("old_format_v100.txt", NcclThresholds(busbw_floor_gbps=50.0), [("OK", "OK")]),
    ("mpirun_tag_output.txt", T, [("OK", "OK")]),
]


@pytest.mark.parametrize("name,thresholds,expected", JUDGE)
def test_judge_recorded_outputs(name, thresholds, expected):
    got = sorted((f.code, f.status.value) for f in judge_nccl(parse(name), thresholds))
    assert got == sorted(expected)


def test_judge_empty_run_is_unknown():
    (f,) = judge_nccl(NcclRun(engine="x"), T)
    assert f.status.value == "UNKNOWN" and f.code == "NCCL_FAILED"


def test_thresholds_from_profile():
    t = thresholds_from({"nccl_min_busbw_gbps": 400.0, "gpu_count": 8}, {})
    assert t.busbw_floor_gbps == 400.0 and t.gpu_count == 8
    assert (
        thresholds_from({"nccl_min_busbw_gbps": 400.0}, {"busbw_floor_gbps": 300}).busbw_floor_gbps
        == 300
    )


def test_bandwidth_math_matches_nccl_tests():
    # nccl-tests: 8 ranks, 8 GB in 31239 us -> algbw 274.97, busbw 481.21
    algbw, busbw = bus_bandwidth(8589934592, 31239e-6, 8)
    assert (round(algbw, 2), round(busbw, 2)) == (274.97, 481.21)
    assert bus_bandwidth(1000, 1.0, 1) == (1e-6, 0.0)
    assert expected_sum(8) == 36.0
    assert parse_size("32M") == 33554432 and parse_size("1G") == 2**30 and parse_size("512") == 512
    assert sizes_between(2**25, 2**30) == [2**k for k in range(25, 31)]
    rows = rows_from_timings([(2**30, 3.95e-3, 0), (2**31, 7.85e-3, 3)], 8)
    assert rows[1].oop_wrong == 3 and rows[0].oop_busbw == pytest.approx(475.7, abs=0.1)
    assert NcclRun(engine="torch", rows=rows, completed=True).wrong == 3


def test_argv():
    assert all_reduce_argv(ngpus=8, timeout_s=60) == [
        "all_reduce_perf", "-b", "32M", "-e", "1G", "-f", "2", "-g", "8", "-n", "20", "-w", "5",
        "-c", "1", "-T", "60",
    ]  # fmt: skip


def test_run_all_reduce_perf():
    text = (DATA / "h100_8gpu_ok.txt").read_text()

    def ok(argv, *, timeout, check):
        assert check is False
        return CommandResult(tuple(argv), 0, text, "", 9.0)

    assert run_all_reduce_perf(["x"], timeout=30, run=ok).completed

    def hang(argv, **kw):
        raise CommandTimeout(argv, kw["timeout"])

    r = run_all_reduce_perf(["x"], timeout=30, run=hang)
    assert not r.completed and "hung" in r.errors[0]

    def crash(argv, **kw):
        return CommandResult(tuple(argv), 139, "", "Segmentation fault (core dumped)", 1.0)

    r = run_all_reduce_perf(["x"], timeout=30, run=crash)
    assert not r.completed and r.errors


def test_judge_defaults_are_the_settings_defaults():
    """``[checks.nccl]`` documents its defaults on NcclSettings; the judge
    (fed the raw table, unset keys absent) must use the same ones."""
    import dataclasses

    from slurm_hooks.detect.checks.nccl import NcclSettings
    from slurm_hooks.detect.engines.nccl.judge import thresholds_from

    s = NcclSettings()
    t = thresholds_from({}, {})
    assert (t.floor_fail_fraction, t.large_min_bytes) == (
        s.floor_fail_fraction,
        s.large_min_bytes,
    )
    explicit = {k: v for k, v in dataclasses.asdict(s).items() if v is not None}
    assert thresholds_from({}, explicit) == t


def test_an_all_reduce_limited_to_the_jobs_gpus_expects_only_those():
    run = parse_nccl_tests((DATA / "h100_8gpu_ok.txt").read_text())
    assert run.nranks == 8
    assert thresholds_from({"gpu_count": 16}, {"devices": list(range(8))}).gpu_count == 8
    assert thresholds_from({"gpu_count": 16}, {}).gpu_count == 16
    assert "NCCL_PARTIAL" not in [
        f.code for f in judge_nccl(run, thresholds_from({"gpu_count": 16}, {"devices": [0] * 8}))
    ]
