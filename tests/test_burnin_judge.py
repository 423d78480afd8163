"""Burn-in judge: table-driven on built runs, plus the recorded outputs end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hooks.core.model import Action, Status
from slurm_hooks.detect.engines.burnin.gpu_burn import parse_gpu_burn
from slurm_hooks.detect.engines.burnin.judge import BurninThresholds, judge_burnin, thresholds_from
from slurm_hooks.detect.engines.burnin.model import BurninRun, GpuBurnin

DATA = Path(__file__).parent / "data" / "gpu_burn"


def gpu(i, tf=50.0, **kw):
    return GpuBurnin(index=i, tflops_samples=(tf, tf, tf), tflops_by_dtype=(("fp32", tf),), **kw)


def run(*gpus, completed=True, errors=()):
    return BurninRun(engine="test", gpus=tuple(gpus), completed=completed, errors=errors)


def eight(**special):
    return [special.get(i, gpu(i, 50.0 + (i % 3) * 0.8)) for i in range(8)]


def codes(findings):
    return sorted((f.code, f.status.value, f.component.short()) for f in findings)


T = BurninThresholds()
CASES = [
    ("healthy spread ~5%", run(*eight(**{"2": gpu(2, 48.0)})), T, [("OK", "OK", "node")]),
    ("8% below siblings is fine", run(*eight(**{"4": gpu(4, 46.5)})), T, [("OK", "OK", "node")]),
    (
        "12% below siblings warns",
        run(*[gpu(i, 50.0) for i in range(7)], gpu(7, 44.0)),
        T,
        [("BURNIN_SLOW", "WARN", "gpu7")],
    ),
    (
        "a GPU at 70% fails",
        run(*[gpu(i, 50.0) for i in range(7)], gpu(7, 35.0)),
        T,
        [("BURNIN_SLOW", "FAIL", "gpu7")],
    ),
    (
        "errors fail",
        run(*[gpu(i) for i in range(3)], gpu(3, errors=4, verdict="FAULTY")),
        T,
        [("BURNIN_ERRORS", "FAIL", "gpu3")],
    ),
    (
        "mismatch fails",
        run(*[gpu(i) for i in range(3)], gpu(3, mismatch="checksum differs")),
        T,
        [("BURNIN_MISMATCH", "FAIL", "gpu3")],
    ),
    (
        "died fails",
        run(*[gpu(i) for i in range(3)], gpu(3, died=True, error_text="CUDA error")),
        T,
        [("BURNIN_FAILED", "FAIL", "gpu3")],
    ),
    (
        "silent GPU fails",
        run(*[gpu(i) for i in range(3)], GpuBurnin(index=3)),
        T,
        [("BURNIN_FAILED", "FAIL", "gpu3")],
    ),
    (
        "nothing ran is unknown",
        run(GpuBurnin(index=0), GpuBurnin(index=1), errors=("x",)),
        T,
        [("BURNIN_FAILED", "UNKNOWN", "node")],
    ),
    ("no GPUs at all is unknown", run(), T, [("BURNIN_FAILED", "UNKNOWN", "node")]),
    (
        "below floor warns",
        run(*[gpu(i, 42.0) for i in range(4)]),
        BurninThresholds(floors=(("fp32", 45.0),)),
        [("BURNIN_SLOW", "WARN", f"gpu{i}") for i in range(4)],
    ),
    (
        "far below floor fails",
        run(*[gpu(i, 30.0) for i in range(2)]),
        BurninThresholds(floors=(("fp32", 45.0),)),
        [("BURNIN_SLOW", "FAIL", f"gpu{i}") for i in range(2)],
    ),
    (
        "floor of an unmeasured dtype is ignored",
        run(*[gpu(i, 30.0) for i in range(2)]),
        BurninThresholds(floors=(("bf16", 600.0),)),
        [("OK", "OK", "node")],
    ),
    ("two GPUs: no sibling verdict", run(gpu(0, 50.0), gpu(1, 30.0)), T, [("OK", "OK", "node")]),
    (
        "fewer GPUs than profile",
        run(*[gpu(i) for i in range(7)]),
        BurninThresholds(gpu_count=8),
        [("BURNIN_FAILED", "FAIL", "node")],
    ),
    (
        "hot GPU warns",
        run(*[gpu(i, temps_c=(60, 70)) for i in range(2)], gpu(2, temps_c=(80, 91))),
        BurninThresholds(max_temp_c=85),
        [("BURNIN_HOT", "WARN", "gpu2")],
    ),
    (
        "incomplete healthy run warns",
        run(*[gpu(i) for i in range(4)], completed=False, errors=("timed out",)),
        T,
        [("BURNIN_INCOMPLETE", "WARN", "node")],
    ),
    (
        "incomplete with a fault fails",
        run(*[gpu(i) for i in range(3)], gpu(3, errors=2), completed=False),
        T,
        [("BURNIN_ERRORS", "FAIL", "gpu3"), ("BURNIN_INCOMPLETE", "FAIL", "node")],
    ),
]


@pytest.mark.parametrize("label,data,thresholds,expected", CASES, ids=[c[0] for c in CASES])
def test_judge_table(label, data, thresholds, expected):
    assert codes(judge_burnin(data, thresholds)) == sorted(expected)


def test_fail_findings_recommend_drain_and_carry_figures():
    f = judge_burnin(run(*[gpu(i, 50.0) for i in range(7)], gpu(7, 35.0, uuid="GPU-x")))[0]
    assert f.action is Action.DRAIN
    assert f.component.uuid == "GPU-x"
    assert f.values["ratio"] == pytest.approx(0.7)
    assert f.check == "burnin"


def test_worst_of_floor_and_siblings_is_reported_once():
    t = BurninThresholds(floors=(("fp32", 45.0),))
    data = run(*[gpu(i, 50.0) for i in range(7)], gpu(7, 37.0))  # 74% of siblings, < 85% floor
    fs = judge_burnin(data, t)
    assert codes(fs) == [("BURNIN_SLOW", "FAIL", "gpu7")]


FILES = [
    ("ok_8x_h100.txt", [("OK", "OK", "node")]),
    ("faulty_gpu3_errors.txt", [("BURNIN_ERRORS", "FAIL", "gpu3")]),
    ("slow_gpu5.txt", [("BURNIN_SLOW", "FAIL", "gpu5")]),
    ("truncated_killed.txt", [("BURNIN_INCOMPLETE", "WARN", "node")]),
    ("init_error_nothing_ran.txt", [("BURNIN_FAILED", "UNKNOWN", "node")]),
    ("missing_compare_ptx.txt", [("BURNIN_FAILED", "UNKNOWN", "node")]),
    ("no_clients_alive.txt", [("BURNIN_FAILED", "UNKNOWN", "node")]),
    (
        "one_gpu_load_module_died.txt",
        [("BURNIN_ERRORS", "FAIL", "gpu0"), ("BURNIN_FAILED", "FAIL", "gpu0")],
    ),
    (
        "negative_overflow_errors.txt",
        [("BURNIN_ERRORS", "FAIL", "gpu1"), ("BURNIN_ERRORS", "FAIL", "gpu2")],
    ),
]


@pytest.mark.parametrize("name,expected", FILES)
def test_recorded_outputs_end_to_end(name, expected):
    data = parse_gpu_burn((DATA / name).read_text())
    assert codes(judge_burnin(data, BurninThresholds())) == sorted(expected)


def test_thresholds_from_profile_and_settings():
    profile = {
        "gpu_count": 8,
        "burnin_min_tflops": 45.0,
        "gpu_temp_warn_c": 85,
        "extra": {"burnin_min_tflops_bf16": 600},
    }
    t = thresholds_from(profile, {})
    assert dict(t.floors) == {"fp32": 45.0, "bf16": 600.0}
    assert t.gpu_count == 8 and t.max_temp_c == 85
    t2 = thresholds_from(profile, {"tflops_floor": 40, "fail_below_median": 0.3})
    assert dict(t2.floors)["fp32"] == 40.0 and t2.fail_below_median == 0.3
    with pytest.raises(ValueError):
        thresholds_from({}, {"warn_below_median": 0.5, "fail_below_median": 0.2})


def test_status_enum_values_are_used():
    assert all(isinstance(f.status, Status) for f in judge_burnin(run(gpu(0))))


def test_judge_defaults_are_the_settings_defaults():
    """``[checks.burnin]`` documents its defaults on BurninSettings; the judge
    (fed the raw table, unset keys absent) must use the same ones."""
    import dataclasses

    from slurm_hooks.detect.checks.burnin import BurninSettings
    from slurm_hooks.detect.engines.burnin.judge import thresholds_from

    s = BurninSettings()
    t = thresholds_from({}, {})
    for name in ("warn_below_median", "fail_below_median", "min_siblings", "floor_fail_fraction"):
        assert getattr(t, name) == getattr(s, name), name
    explicit = {k: v for k, v in dataclasses.asdict(s).items() if v is not None}
    assert thresholds_from({}, explicit) == t


def test_a_run_limited_to_the_jobs_gpus_expects_only_those():
    """The prolog burns only the job's GPUs (``devices``; the others belong
    to other users' jobs): a job asking for 2 of 8 GPUs must not drain the
    node for the 6 it did not test.  Without ``devices`` the profile's count
    stands."""
    data = parse_gpu_burn((DATA / "old_version_2x_gtx1080.txt").read_text())
    profile = {"gpu_count": 8}
    limited = judge_burnin(data, thresholds_from(profile, {"devices": [4, 5]}))
    assert "BURNIN_FAILED" not in [f.code for f in limited]
    whole = judge_burnin(data, thresholds_from(profile, {}))
    assert ("BURNIN_FAILED", "FAIL") in [(f.code, f.status.value) for f in whole]
