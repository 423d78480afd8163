"""gpu_burn parser on recorded-format outputs (tests/data/gpu_burn/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hooks.core.errors import CommandTimeout
from slurm_hooks.detect.engines.burnin.gpu_burn import build_argv, parse_gpu_burn, run_gpu_burn
from slurm_hooks.detect.probes.commands import CommandResult

DATA = Path(__file__).parent / "data" / "gpu_burn"


def load(name: str) -> str:
    return (DATA / name).read_text()


# file, gpus, completed, {gpu: (errors, died, verdict)}, ran-count
CASES = [
    ("ok_8x_h100.txt", 8, True, {}, 8),
    ("faulty_gpu3_errors.txt", 8, True, {3: (51, False, "FAULTY")}, 8),
    ("slow_gpu5.txt", 8, True, {}, 8),
    ("truncated_killed.txt", 8, False, {}, 8),
    ("tensor_cores_h200.txt", 4, True, {}, 4),
    ("old_version_2x_gtx1080.txt", 2, True, {}, 2),
    ("died_compute_failure_hung.txt", 2, False, {0: (0, True, None)}, 2),
    ("init_error_nothing_ran.txt", 8, True, {}, 0),
    ("one_gpu_load_module_died.txt", 4, True, {0: (0, True, "FAULTY")}, 3),
    ("no_clients_alive.txt", 4, False, {i: (0, True, None) for i in range(4)}, 0),
    ("single_gpu_i2.txt", 1, True, {}, 1),
    (
        "negative_overflow_errors.txt",
        4,
        True,
        {1: (524288000, False, "FAULTY"), 2: (524288000, False, "FAULTY")},
        4,
    ),
    ("no_temps.txt", 2, True, {}, 2),
    ("missing_compare_ptx.txt", 2, True, {}, 0),
]


@pytest.mark.parametrize("name,ngpus,completed,special,ran", CASES)
def test_parse_real_outputs(name, ngpus, completed, special, ran):
    run = parse_gpu_burn(load(name))
    assert len(run.gpus) == ngpus
    assert run.completed is completed
    assert sum(1 for g in run.gpus if g.ran) == ran
    for g in run.gpus:
        errors, died, verdict = special.get(g.index, (0, False, run.completed and "OK" or None))
        assert (g.errors, g.died) == (errors, died), g
        if verdict is not None or not run.completed:
            assert g.verdict == verdict


def test_progress_figures_uuids_and_windows():
    run = parse_gpu_burn(load("faulty_gpu3_errors.txt"))
    g3 = run.gpu(3)
    assert g3.uuid == "GPU-4f1c7a2e-1b3d-5e6f-8a9b-0c1d2e3f4a53"
    assert g3.name == "NVIDIA H100 80GB HBM3"
    # 10 progress updates, \r separated, Gflop/s -> TFLOP/s
    assert len(g3.tflops_samples) == 10
    assert g3.tflops == pytest.approx(50.34)
    # errors: 17 in window 2 (k=4,5 -> 34 cumulative), 17 in window 3 (k=8)
    assert g3.errors == 34 + 17
    assert g3.max_temp_c == 54
    assert dict(g3.tflops_by_dtype) == {"fp32": pytest.approx(50.34)}
    assert dict(run.info)["compare_file"] == "compare.ptx"
    assert run.duration_s == 30.0


def test_single_device_run_maps_to_real_index():
    run = parse_gpu_burn(load("single_gpu_i2.txt"))
    (g,) = run.gpus
    assert g.index == 2
    assert g.uuid.endswith("6542")
    assert g.verdict == "OK"


def test_tensor_core_precision_is_tf32():
    run = parse_gpu_burn(load("tensor_cores_h200.txt"))
    assert dict(run.info)["precision"] == "floats tensor"
    assert list(dict(run.gpus[0].tflops_by_dtype)) == ["tf32"]


def test_init_errors_are_kept():
    run = parse_gpu_burn(load("missing_compare_ptx.txt"))
    assert len(run.errors) == 2
    assert "couldn't find compare kernel" in run.errors[0]
    died = parse_gpu_burn(load("died_compute_failure_hung.txt"))
    assert any("Read faultyelemdata" in e for e in died.errors)
    assert dict(died.info)["precision"] == "doubles"


def test_no_temps_are_none_not_zero():
    run = parse_gpu_burn(load("no_temps.txt"))
    assert all(g.temps_c == () for g in run.gpus)


def test_garbage_and_empty_input():
    assert parse_gpu_burn("").gpus == ()
    run = parse_gpu_burn("random text\n\x00\x01 proc'd: nonsense\n", expected_gpus=2)
    assert [g.index for g in run.gpus] == [0, 1]
    assert not run.completed


def test_build_argv():
    assert build_argv("gpu_burn", 10) == ["gpu_burn", "10"]
    assert build_argv("/opt/gpu_burn", 30, tensor_cores=True, device=3, memory="50%") == [
        "/opt/gpu_burn", "-tc", "-m", "50%", "-i3", "30"
    ]  # fmt: skip


def test_run_gpu_burn_uses_commands_run():
    seen = {}

    def fake_run(argv, *, timeout, check, cwd):
        seen.update(argv=argv, timeout=timeout, check=check, cwd=cwd)
        return CommandResult(tuple(argv), 0, load("ok_8x_h100.txt"), "", 30.2)

    run = run_gpu_burn(["gpu_burn", "30"], timeout=60, cwd="/opt/gpu-burn", run=fake_run)
    assert seen == {
        "argv": ["gpu_burn", "30"],
        "timeout": 60,
        "check": False,
        "cwd": "/opt/gpu-burn",
    }
    assert run.completed and len(run.gpus) == 8


def test_run_gpu_burn_timeout_is_a_result():
    def fake_run(argv, **kw):
        raise CommandTimeout(argv, kw["timeout"])

    run = run_gpu_burn(["gpu_burn", "30"], timeout=40, run=fake_run)
    assert not run.completed
    assert "timed out" in run.errors[0]


def test_run_gpu_burn_nonzero_rc_is_not_completed():
    def fake_run(argv, **kw):
        return CommandResult(tuple(argv), 123, load("no_clients_alive.txt"), "", 3.0)

    run = run_gpu_burn(["gpu_burn"], timeout=40, run=fake_run)
    assert not run.completed
    assert run.errors[-1] == "gpu_burn exited with rc=123"


# Written from upstream's printf strings per release family (tests/data/gpu_burn/README.md).
UPSTREAM = [
    # file, gpus, completed, processed-but-no-Gflop/s, faulty
    ("v0.3_2017_2x_gtx1080_ok.txt", 2, True, True, ()),
    ("v0.7_2017_2x_p100_ok.txt", 2, True, False, ()),
    ("v0.8_2019_4x_v100_faulty_gpu2.txt", 4, True, False, (2,)),
    ("v2022_2x_a100_doubles_ok.txt", 2, True, False, ()),
    ("v2023_8x_h100_tc_compare_ok.txt", 8, True, False, ()),
    ("v2026_4x_h200_sigkill_ok.txt", 4, True, False, ()),
    ("pasted_indented_verdict_8x_ok.txt", 8, True, False, ()),
]


@pytest.mark.parametrize("name,ngpus,completed,counts_only,faulty", UPSTREAM)
def test_every_release_format_parses_and_judges(name, ngpus, completed, counts_only, faulty):
    from slurm_hooks.core.model import Status
    from slurm_hooks.detect.engines.burnin.judge import judge_burnin

    run = parse_gpu_burn(load(name))
    assert run.completed is completed
    assert [g.index for g in run.gpus] == list(range(ngpus))
    for g in run.gpus:
        assert g.ran and g.processed > 0
        assert (g.tflops is None) is counts_only
        assert g.max_temp_c is not None
        assert g.verdict == ("FAULTY" if g.index in faulty else "OK")
    findings = judge_burnin(run)
    statuses = {f.status for f in findings}
    if faulty:
        assert Status.FAIL in statuses
        assert {f.component.short() for f in findings if f.status is Status.FAIL} == {
            f"gpu{i}" for i in faulty
        }
    else:
        assert statuses == {Status.OK}, [f.message for f in findings]


def test_header_facts_of_each_release():
    assert parse_gpu_burn(load("v0.3_2017_2x_gtx1080_ok.txt")).duration_s == 10
    r22 = parse_gpu_burn(load("v2022_2x_a100_doubles_ok.txt"))
    assert r22.duration_s == 60 and dict(r22.info)["precision"] == "doubles"
    r23 = parse_gpu_burn(load("v2023_8x_h100_tc_compare_ok.txt"))
    assert dict(r23.info)["compare_file"] == "/opt/gpu-burn/compare.ptx"
    assert dict(r23.info)["precision"] == "floats tensor"
    assert dict(parse_gpu_burn(load("v2026_4x_h200_sigkill_ok.txt")).info)["compare_file"] == (
        "compare.fatbin"
    )


def test_verdict_block_alone_is_complete_but_not_healthy():
    from slurm_hooks.core.model import Status
    from slurm_hooks.detect.engines.burnin.judge import judge_burnin

    run = parse_gpu_burn(load("verdict_only_8x_ok.txt"))
    assert run.completed and len(run.gpus) == 8
    assert [f.status for f in judge_burnin(run)] == [Status.UNKNOWN]


def test_partial_verdict_block_is_incomplete():
    text = load("v2023_8x_h100_tc_compare_ok.txt")
    cut = text[: text.index("\tGPU 5: OK")]
    run = parse_gpu_burn(cut)
    assert not run.completed


def test_cli_judges_a_pasted_indented_run_healthy(tmp_path):
    import subprocess
    import sys

    path = DATA / "pasted_indented_verdict_8x_ok.txt"
    res = subprocess.run(
        [sys.executable, "-m", "slurm_hooks", "burnin", "parse", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "completed=True" in res.stdout and "8 GPUs passed burn-in" in res.stdout


def test_an_overlong_number_skips_its_line_and_parsing_goes_on():
    """A 5,000-digit count (int() refuses it) was a ValueError out of the
    parser; the line is skipped and the verdict block after it still counts."""
    text = (
        "GPU 0: NVIDIA H100 (UUID: GPU-11111111-2222-3333-4444-555555555555)\n"
        f"50.0%  proc'd: {'1' * 5000} (7031 Gflop/s)   errors: 0   temps: 58 C \n"
        "100.0%  proc'd: 5684 (7012 Gflop/s)   errors: 0   temps: 60 C \n"
        "Killing processes.. done\n\nTested 1 GPUs:\n\tGPU 0: OK\n"
    )
    from slurm_hooks.detect.engines.burnin.gpu_burn import parse_gpu_burn

    run = parse_gpu_burn(text)
    assert run.completed
