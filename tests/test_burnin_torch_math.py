"""The torch engine's arithmetic, without torch: TFLOP/s, checksums, reference."""

from __future__ import annotations

import math
import os

import pytest

from slurm_hooks.detect.engines.burnin import verify
from slurm_hooks.detect.engines.burnin.judge import judge_burnin
from slurm_hooks.detect.engines.burnin.torch_engine import TorchBurninConfig, _Worker, build_run


def test_matmul_tflops():
    # 100 products of 8192^3: 2*8192^3*100 = 1.0995e14 flop in 0.2 s
    assert verify.matmul_tflops(8192, 100, 0.2) == pytest.approx(549.76, rel=1e-4)
    assert verify.matmul_tflops(4, 1, 1e-12, m=2, k=3) == pytest.approx(48.0)
    with pytest.raises(ValueError):
        verify.matmul_tflops(8, 1, 0)


def test_seeded_matrix_is_deterministic_and_bounded():
    a = verify.seeded_matrix(8, 7)
    assert a == verify.seeded_matrix(8, 7)
    assert a != verify.seeded_matrix(8, 8)
    assert all(-1.0 <= x < 1.0 for x in a)


def test_reference_matmul_identity():
    n = 3
    ident = [1.0 if i == j else 0.0 for i in range(n) for j in range(n)]
    a = verify.seeded_matrix(n, 1)
    assert verify.reference_matmul(a, ident, n) == a


@pytest.mark.parametrize(
    "got_delta,dtype,bad",
    [
        (0.0, "fp32", False),
        (1e-6, "fp32", False),
        (1e-3, "fp32", True),
        (1e-3, "bf16", False),
        (0.2, "bf16", True),
        (float("nan"), "fp32", True),
    ],
)
def test_reference_mismatch(got_delta, dtype, bad):
    want = verify.reference_matmul(verify.seeded_matrix(4, 1), verify.seeded_matrix(4, 2), 4)
    scale = max(abs(w) for w in want)
    got = list(want)
    got[5] += got_delta * scale
    assert (verify.reference_mismatch(got, want, dtype) is not None) is bad


def test_inconsistent_batches():
    assert verify.inconsistent_batches([1.5, 1.5, 1.5]) == 0
    assert verify.inconsistent_batches([1.5, 1.5, 1.5000001, 1.5]) == 1
    assert verify.inconsistent_batches([1.5, 1.5000001], rtol=1e-6) == 0
    assert verify.inconsistent_batches([1.5, math.nan]) == 1
    assert verify.inconsistent_batches([]) == 0


def test_sibling_mismatches():
    sums = {i: 1234.5 for i in range(8)}
    assert verify.sibling_mismatches(sums, 1e-6) == {}
    sums[6] = 1234.6
    assert set(verify.sibling_mismatches(sums, 1e-6)) == {6}
    assert set(verify.sibling_mismatches({0: 1.0, 1: 2.0}, 1e-6)) == {0, 1}
    assert verify.sibling_mismatches({0: 1.0}, 0) == {}
    assert set(verify.sibling_mismatches({0: 1.0, 1: 1.0, 2: math.nan}, 1e-6)) == {2}


def worker(i, tf=600.0, sums=(10.0, 10.0, 10.0), fp32=50.0, **kw):
    w = _Worker(i)
    w.tflops = {"bf16": [tf * 0.9, tf, tf, tf], "fp32": [fp32, fp32, fp32]}
    w.checksums = {"bf16": list(sums), "fp32": [3.0, 3.0]}
    w.iterations = 100
    for k, v in kw.items():
        setattr(w, k, v)
    return w


def test_build_run_healthy():
    cfg = TorchBurninConfig()
    r = build_run([worker(i) for i in range(4)], cfg, temps={0: [40, 60]}, clocks={0: [1980]})
    assert r.completed and r.engine == "torch"
    g0 = r.gpus[0]
    assert g0.tflops == pytest.approx(600.0)  # first (ramp-up) sample dropped
    assert dict(g0.tflops_by_dtype) == {"bf16": pytest.approx(600.0), "fp32": pytest.approx(50.0)}
    assert g0.max_temp_c == 60 and g0.sm_clocks_mhz == (1980,)
    assert [f.code for f in judge_burnin(r)] == ["OK"]


def test_build_run_flags_corruption_drift_and_hangs():
    cfg = TorchBurninConfig()
    ws = [worker(i) for i in range(4)]
    ws[1] = worker(1, sums=(10.0, 10.0, 10.5))  # drifts on itself and vs siblings
    ws[2] = worker(2, ref_errors=["bf16 product off the float64 reference by 0.3"])
    ws[3] = worker(3, error_text="RuntimeError: CUDA error: an illegal memory access")
    r = build_run(ws, cfg, hung=[3])
    assert not r.completed
    assert r.gpus[1].errors == 1 and "differs from siblings" in r.gpus[1].mismatch
    assert "reference" in r.gpus[2].mismatch
    assert r.gpus[3].died and "hung" in r.gpus[3].error_text
    got = sorted((f.code, f.component.short()) for f in judge_burnin(r) if f.is_problem)
    assert got == [
        ("BURNIN_ERRORS", "gpu1"),
        ("BURNIN_FAILED", "gpu3"),
        ("BURNIN_INCOMPLETE", "node"),
        ("BURNIN_MISMATCH", "gpu1"),
        ("BURNIN_MISMATCH", "gpu2"),
    ]


def test_run_torch_burnin_without_cuda_raises():
    from slurm_hooks.detect.engines.burnin.torch_engine import run_torch_burnin

    class NoCuda:
        class cuda:  # noqa: N801 - mimics torch.cuda
            @staticmethod
            def is_available():
                return False

    with pytest.raises(RuntimeError, match="no CUDA"):
        run_torch_burnin(TorchBurninConfig(), torch_module=NoCuda)


@pytest.mark.parametrize(
    ("devices", "count", "want"),
    [
        (None, 4, [0, 1, 2, 3]),
        ((), 4, [0, 1, 2, 3]),
        ([], 2, [0, 1]),
        ((2, 5), 8, [2, 5]),
        ((), 0, []),
    ],
)
def test_gpu_indices_empty_means_every_gpu(devices, count, want):
    """``devices = []`` is "all GPUs" for gpu_burn, nccl-tests and dcgmi; the
    torch engines read it the same way (it used to mean "no GPU")."""
    from slurm_hooks.detect.engines.burnin.torch_engine import gpu_indices

    assert gpu_indices(devices, count) == want


class _PastTheDeviceCheck(Exception):
    pass


class _FakeTorch:
    """Just enough torch for the engines to choose their GPUs."""

    class cuda:  # noqa: N801 - torch's name
        @staticmethod
        def is_available():
            return True

        @staticmethod
        def device_count():
            return 2

    @property
    def backends(self):
        raise _PastTheDeviceCheck


def test_torch_burnin_with_empty_devices_burns_every_gpu():
    from slurm_hooks.detect.engines.burnin.torch_engine import run_torch_burnin

    with pytest.raises(_PastTheDeviceCheck):  # not RuntimeError("no GPU to burn")
        run_torch_burnin(TorchBurninConfig(devices=()), torch_module=_FakeTorch())


def test_torch_all_reduce_with_empty_devices_uses_every_gpu(monkeypatch):
    import multiprocessing

    from slurm_hooks.detect.engines.nccl.engines import TorchNcclConfig, run_torch_all_reduce

    def get_context(method):
        raise _PastTheDeviceCheck

    monkeypatch.setattr(multiprocessing, "get_context", get_context)
    with pytest.raises(_PastTheDeviceCheck):  # not RuntimeError("no GPU")
        run_torch_all_reduce(TorchNcclConfig(devices=()), torch_module=_FakeTorch())


class _CudaOfAnEightGpuNode:
    """torch on a node of eight GPUs, as CUDA starts: it reads
    CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER from the environment then
    (and shows only the visible GPUs, numbered from 0)."""

    def __init__(self) -> None:
        self.order: str | None = None
        node = self

        class cuda:  # noqa: N801 - torch's name
            @staticmethod
            def is_available():
                node.order = os.environ.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
                return True

            @staticmethod
            def device_count():
                visible = os.environ.get("CUDA_VISIBLE_DEVICES")
                return 8 if visible is None else len(visible.split(","))

        self.cuda = cuda


def test_the_torch_engines_name_the_jobs_gpus_by_the_nodes_index(monkeypatch):
    """slurmd puts the job's CUDA_VISIBLE_DEVICES=2,3 in the prolog's
    environment, and the prolog asks the torch engines for GPUs 2 and 3
    (Slurm's indices).  Under that variable CUDA shows two GPUs, 0 and 1:
    GPU 2 does not exist (its burn-in "failed setup", a drain of a healthy
    node where the job's other GPU was in range), and in its default order
    CUDA numbers them fastest first.  The engines see the whole node in PCI
    bus order."""
    from slurm_hooks.detect.engines.burnin.torch_engine import cuda_torch

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    node = _CudaOfAnEightGpuNode()
    torch, devices = cuda_torch((2, 3), node)
    assert devices == [2, 3]
    assert all(d < torch.cuda.device_count() for d in devices)
    assert node.order == "PCI_BUS_ID"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # nor in the ranks the NCCL check spawns
