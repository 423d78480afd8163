"""The fake engines print what the real tools print: the real parsers read them."""

from __future__ import annotations

import subprocess
import sys

from slurm_hooks_lab.fake_engines import (
    EngineScenario,
    FakeGpu,
    all_reduce_perf_output,
    gpu_burn_output,
    main,
)

from slurm_hooks.detect.engines.burnin.gpu_burn import parse_gpu_burn
from slurm_hooks.detect.engines.nccl.parser import parse_nccl_tests


def sc(*gpus, **kw):
    return EngineScenario(gpus=tuple(gpus), host="lab1", **kw)


def test_gpu_burn_fake_roundtrip():
    s = sc(FakeGpu(0), FakeGpu(1, gflops=30000), FakeGpu(2, errors=9), FakeGpu(3, died=True))
    run = parse_gpu_burn(gpu_burn_output(s, 10))
    assert run.completed
    g = {x.index: x for x in run.gpus}
    assert g[0].tflops == 51.0 and g[1].tflops == 30.0
    assert g[2].errors > 0 and g[2].verdict == "FAULTY"
    assert g[3].died and not g[0].died


def test_gpu_burn_fake_all_dead_aborts():
    run = parse_gpu_burn(gpu_burn_output(sc(FakeGpu(0, died=True)), 10))
    assert not run.completed and "no clients are alive" in run.errors[0]


def test_all_reduce_fake_roundtrip():
    r = parse_nccl_tests(all_reduce_perf_output(sc(*[FakeGpu(i) for i in range(8)], wrong=5)))
    assert r.completed and r.nranks == 8 and r.wrong == 10 and r.out_of_bounds == 1
    assert 400 < r.large_busbw() < 500
    r = parse_nccl_tests(all_reduce_perf_output(sc(FakeGpu(0)), check=0))
    assert r.completed and not r.validated and r.large_busbw() == 0.0
    r = parse_nccl_tests(all_reduce_perf_output(sc(*[FakeGpu(i) for i in range(4)], fail="nccl")))
    assert not r.completed and r.warnings and r.errors


def test_main_stands_in_for_the_binaries(capsys, monkeypatch):
    monkeypatch.delenv("SLURM_HOOKS_NVML_SCENARIO", raising=False)
    monkeypatch.delenv("SLURM_HOOKS_ENGINE_SCENARIO", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert main(["gpu_burn", "-tc", "5"]) == 0
    out = capsys.readouterr().out
    assert "using Tensor Cores" in out and parse_gpu_burn(out).completed
    assert main(["all_reduce_perf", "-g", "2", "-b", "1M", "-e", "4M"]) == 0
    r = parse_nccl_tests(capsys.readouterr().out)
    assert r.nranks == 2 and [x.size for x in r.rows] == [2**20, 2**21, 2**22]
    assert main(["nope"]) == 2


def test_module_runs_as_a_program():
    p = subprocess.run(
        [sys.executable, "-m", "slurm_hooks_lab.fake_engines", "gpu_burn", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert p.returncode == 0 and "Tested 8 GPUs:" in p.stdout


def test_the_stand_in_sees_only_the_visible_devices(capsys, monkeypatch, tmp_path):
    """Under CUDA_VISIBLE_DEVICES (what the checks set for a job's GPUs) the
    stand-in, like CUDA, shows only those GPUs, numbered from 0: a lost GPU
    of another job's is not there to fail the run."""
    nv = tmp_path / "nvml.toml"
    nv.write_text('preset = "h100-sxm5-80gb"\ngpu_count = 8\n[gpu.6]\nlost = true\n')
    monkeypatch.setenv("SLURM_HOOKS_NVML_SCENARIO", str(nv))
    monkeypatch.delenv("SLURM_HOOKS_ENGINE_SCENARIO", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert main(["gpu_burn", "3"]) == 0
    run = parse_gpu_burn(capsys.readouterr().out)
    assert [g.index for g in run.gpus] == [0, 1] and run.completed
    assert all(g.error_text is None for g in run.gpus)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    assert main(["all_reduce_perf", "-g", "2"]) == 1  # GPU 6 (now 1) is lost
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,7")
    assert main(["all_reduce_perf", "-g", "7"]) == 0
