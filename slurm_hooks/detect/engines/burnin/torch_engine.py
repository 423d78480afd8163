"""The PyTorch burn-in engine: matrix products on every GPU at once.

One thread per GPU (CUDA work releases the GIL), all starting together so
the node is stressed as a whole (power and cooling too).  Each GPU runs, per
precision, timed batches of ``size`` x ``size`` products and records:
TFLOP/s per batch, a checksum per batch (self-consistency), the final
checksum (compared with the siblings') and a small product compared with a
float64 reference from the same inputs (see ``verify``).

torch is imported inside :func:`run_torch_burnin` only: importing it costs
seconds and this module is imported on the prolog path.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_hooks.detect.engines.burnin import verify
from slurm_hooks.detect.engines.burnin.model import BurninRun, GpuBurnin
from slurm_hooks.detect.engines.burnin.telemetry import NvmlSampler

log = logging.getLogger(__name__)

ENGINE = "torch"


@dataclass(frozen=True)
class TorchBurninConfig:
    duration_s: float = 10.0
    #: Matrix side of the stress products (8192 keeps an H100 busy ~1-2 ms each in bf16).
    size: int = 8192
    #: Precisions to run, the first is the one judged against the floor.
    dtypes: tuple[str, ...] = ("bf16", "fp32")
    seed: int = 1234
    #: Target seconds per timed batch (one TFLOP/s sample each).
    sample_s: float = 0.5
    #: Allowed relative drift between repeated checksums on one GPU.
    self_rtol: float = 0.0
    #: Allowed relative difference between GPUs' checksums.
    sibling_rtol: float = 1e-6
    #: Side of the small product checked against the float64 reference.
    ref_size: int = 48
    #: CUDA device indices; unset or empty: every visible GPU (see gpu_indices).
    devices: tuple[int, ...] | None = None
    #: Seconds allowed for every worker to finish after the burn should have ended.
    join_grace_s: float = 30.0


def gpu_indices(devices: Sequence[int] | None, count: int) -> list[int]:
    """The GPUs a torch engine runs on: ``devices``, or every one of the
    ``count`` visible GPUs when it is unset *or empty*.  ``devices = []``
    means all GPUs for gpu_burn, nccl-tests and dcgmi (no
    CUDA_VISIBLE_DEVICES, no ``-i``); the torch engines read it the same way."""
    return list(devices) if devices else list(range(count))


def whole_node_view(environ: MutableMapping[str, str] = os.environ) -> None:
    """Make CUDA, in this process and the ranks it spawns, number every GPU
    of the node as Slurm, NVML and nvidia-smi do (PCI bus order), so
    ``devices`` and the findings name the same GPUs as every other check.

    Two things in an inherited environment would change that, and CUDA
    reads both once, when it starts: its own default order (fastest
    first), and ``CUDA_VISIBLE_DEVICES``, which slurmd puts in the prolog's
    environment for the job's GPUs (``2,3``).  Under it CUDA shows those
    two as 0 and 1 and hides the rest, so the job's GPUs (Slurm's 2 and 3)
    could not be asked for by their index.  The subprocess engines are
    given their own ``CUDA_VISIBLE_DEVICES`` (``_engine_check.on_devices``)."""
    environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    inherited = environ.pop("CUDA_VISIBLE_DEVICES", None)
    if inherited is not None:
        log.debug("torch engine: inherited CUDA_VISIBLE_DEVICES=%s set aside", inherited)


def cuda_torch(
    devices: Sequence[int] | None, torch_module: Any | None = None
) -> tuple[Any, list[int]]:
    """torch and the GPUs a torch engine (burn-in, all-reduce) runs on
    (:func:`gpu_indices`), by the node's own indices (:func:`whole_node_view`,
    set before CUDA starts).  torch is imported here, on first use, so only a
    torch run pays for it; ``torch_module`` stands in for it in tests.
    RuntimeError when torch sees no CUDA device."""
    whole_node_view()
    if torch_module is None:
        import torch  # noqa: PLC0415 - lazy on purpose
    else:
        torch = torch_module
    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    return torch, gpu_indices(devices, torch.cuda.device_count())


@dataclass
class _Worker:
    index: int
    tflops: dict[str, list[float]] = field(default_factory=dict)
    checksums: dict[str, list[float]] = field(default_factory=dict)
    ref_errors: list[str] = field(default_factory=list)
    iterations: int = 0
    error_text: str | None = None
    uuid: str | None = None
    name: str | None = None


_TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def _burn_one(
    torch: Any,
    w: _Worker,
    cfg: TorchBurninConfig,
    start: threading.Barrier,
    ends: Sequence[float],
    refs: dict[str, tuple[Any, Any, list[float]]],
) -> None:
    dev = torch.device("cuda", w.index)
    try:
        torch.cuda.set_device(dev)
        props = torch.cuda.get_device_properties(dev)
        w.name = props.name
        uuid = str(getattr(props, "uuid", "") or "")
        w.uuid = (uuid if uuid.startswith("GPU-") else f"GPU-{uuid}") if uuid else None
        gen = torch.Generator().manual_seed(cfg.seed)
        a32 = torch.rand(cfg.size, cfg.size, generator=gen) * 2 - 1
        b32 = torch.rand(cfg.size, cfg.size, generator=gen) * 2 - 1
    except Exception as exc:  # noqa: BLE001 - reported per GPU
        w.error_text = f"setup failed: {type(exc).__name__}: {exc}"
        # Still meet the others at the barrier: their burn must go on.
        try:
            start.wait()
        except threading.BrokenBarrierError:
            pass
        return
    try:
        start.wait()
    except threading.BrokenBarrierError:
        return
    try:
        for dtype, end in zip(cfg.dtypes, ends, strict=True):
            tdt = getattr(torch, _TORCH_DTYPES[dtype])
            a = a32.to(dev, tdt)
            b = b32.to(dev, tdt)
            c = torch.empty_like(a)
            # Reference check on the same quantised inputs.
            qa, qb, want = refs[dtype]
            got = (qa.to(dev) @ qb.to(dev)).double().flatten().tolist()
            msg = verify.reference_mismatch(got, want, dtype)
            if msg:
                w.ref_errors.append(msg)
            torch.matmul(a, b, out=c)  # warm-up (cuBLAS heuristics, clocks)
            torch.cuda.synchronize(dev)
            batch = 1
            samples: list[float] = []
            sums: list[float] = []
            while time.monotonic() < end:
                t0 = time.perf_counter()
                for _ in range(batch):
                    torch.matmul(a, b, out=c)
                s = torch.sum(c, dtype=torch.float64).item()  # synchronises
                dt = time.perf_counter() - t0
                w.iterations += batch
                samples.append(verify.matmul_tflops(cfg.size, batch, dt))
                sums.append(float(s))
                batch = max(1, min(10_000, int(batch * cfg.sample_s / max(dt, 1e-6))))
            w.tflops[dtype] = samples
            w.checksums[dtype] = sums
            del a, b, c
    except Exception as exc:  # noqa: BLE001 - a CUDA error on one GPU is a result
        w.error_text = f"{type(exc).__name__}: {exc}"


def run_torch_burnin(
    cfg: TorchBurninConfig,
    *,
    nvml: Any | None = None,
    nvml_shared: bool = False,
    torch_module: Any | None = None,
) -> BurninRun:
    """Run the burn-in; raises ImportError without torch, RuntimeError
    without CUDA devices (both mean "could not run").  ``nvml_shared``: the
    NVML module belongs to an initialised session (do not init/shut down)."""
    torch, devices = cuda_torch(cfg.devices, torch_module)
    if not devices:
        raise RuntimeError("no GPU to burn")
    torch.backends.cuda.matmul.allow_tf32 = False
    n = cfg.ref_size
    ra = torch.tensor(verify.seeded_matrix(n, cfg.seed), dtype=torch.float32).reshape(n, n)
    rb = torch.tensor(verify.seeded_matrix(n, cfg.seed + 1), dtype=torch.float32).reshape(n, n)
    refs = {}
    for dtype in cfg.dtypes:
        qa = ra.to(getattr(torch, _TORCH_DTYPES[dtype]))
        qb = rb.to(getattr(torch, _TORCH_DTYPES[dtype]))
        want = verify.reference_matmul(
            qa.double().flatten().tolist(), qb.double().flatten().tolist(), n
        )
        refs[dtype] = (qa, qb, want)
    workers = [_Worker(i) for i in devices]
    per = cfg.duration_s / len(cfg.dtypes)
    # The phase ends are fixed when every worker is ready (barrier action),
    # so slow setup on one GPU does not shorten the others' burn.
    ends: list[float] = []

    def _set_ends() -> None:
        t0 = time.monotonic()
        ends.extend(t0 + per * (k + 1) for k in range(len(cfg.dtypes)))

    start = threading.Barrier(len(workers) + 1, action=_set_ends)
    threads = []
    t_start = time.monotonic()
    sampler = NvmlSampler(nvml, devices, manage_init=not nvml_shared) if nvml is not None else None
    for w in workers:
        th = threading.Thread(
            target=_burn_one,
            args=(torch, w, cfg, start, ends, refs),
            name=f"burnin-gpu{w.index}",
            daemon=True,
        )
        th.start()
        threads.append(th)
    try:
        start.wait(timeout=cfg.join_grace_s)
    except threading.BrokenBarrierError:
        pass
    if sampler is not None:
        sampler.__enter__()
    deadline = time.monotonic() + cfg.duration_s + cfg.join_grace_s
    for th in threads:
        th.join(timeout=max(0.0, deadline - time.monotonic()))
    if sampler is not None:
        sampler.__exit__(None, None, None)
    hung = [w.index for w, th in zip(workers, threads, strict=True) if th.is_alive()]
    return build_run(
        workers,
        cfg,
        temps=sampler.temps if sampler else {},
        clocks=sampler.clocks if sampler else {},
        hung=hung,
        duration_s=time.monotonic() - t_start,
    )


def build_run(
    workers: Sequence[_Worker],
    cfg: TorchBurninConfig,
    *,
    temps: dict[int, list[int]] | None = None,
    clocks: dict[int, list[int]] | None = None,
    hung: Sequence[int] = (),
    duration_s: float | None = None,
) -> BurninRun:
    """Turn the workers' raw figures into a BurninRun (pure: tested without torch)."""
    temps = temps or {}
    clocks = clocks or {}
    primary = cfg.dtypes[0]
    mismatches: dict[int, list[str]] = {w.index: list(w.ref_errors) for w in workers}
    for dtype in cfg.dtypes:
        finals = {w.index: w.checksums[dtype][-1] for w in workers if w.checksums.get(dtype)}
        for idx, msg in verify.sibling_mismatches(finals, cfg.sibling_rtol).items():
            mismatches[idx].append(f"{dtype}: {msg}")
    gpus = []
    for w in workers:
        bad_batches = sum(
            verify.inconsistent_batches(w.checksums.get(d, []), cfg.self_rtol) for d in cfg.dtypes
        )
        by_dtype = tuple(
            (d, float(_median_tail(w.tflops[d]))) for d in cfg.dtypes if w.tflops.get(d)
        )
        err = w.error_text
        if w.index in hung:
            err = (err + "; " if err else "") + "worker did not finish (hung)"
        gpus.append(
            GpuBurnin(
                index=w.index,
                uuid=w.uuid,
                name=w.name,
                errors=bad_batches,
                died=err is not None and bool(w.tflops.get(primary)),
                processed=w.iterations,
                tflops_samples=tuple(w.tflops.get(primary, ())),
                temps_c=tuple(temps.get(w.index, ())),
                sm_clocks_mhz=tuple(clocks.get(w.index, ())),
                mismatch="; ".join(mismatches[w.index]) or None,
                tflops_by_dtype=by_dtype,
                error_text=err,
            )
        )
    # Observed spreads, reported so that the tolerances can be tuned on real nodes.
    drift = max(
        (
            verify.relative_difference(c, w.checksums[d][0])
            for w in workers
            for d in cfg.dtypes
            for c in w.checksums.get(d, [])
        ),
        default=0.0,
    )
    spread = 0.0
    for d in cfg.dtypes:
        last = [w.checksums[d][-1] for w in workers if w.checksums.get(d)]
        if len(last) > 1:
            spread = max(spread, max(verify.relative_difference(a, last[0]) for a in last))
    completed = not hung and all(w.error_text is None for w in workers)
    errors = tuple(f"gpu{w.index}: {w.error_text}" for w in workers if w.error_text)
    return BurninRun(
        engine=ENGINE,
        gpus=tuple(gpus),
        completed=completed,
        duration_s=duration_s,
        errors=errors,
        info=(
            ("dtypes", ",".join(cfg.dtypes)),
            ("size", str(cfg.size)),
            ("self_drift_max", f"{drift:.3g}"),
            ("sibling_spread_max", f"{spread:.3g}"),
        ),
    )


def _median_tail(samples: Sequence[float]) -> float:
    s = [x for x in samples if x > 0]
    if len(s) >= 3:
        s = s[1:]
    s.sort()
    return s[len(s) // 2] if s else 0.0


Factory = Callable[[TorchBurninConfig], BurninRun]
