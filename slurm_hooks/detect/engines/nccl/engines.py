"""Engines that measure intra-node all-reduce: nccl-tests' ``all_reduce_perf``
(preferred: the reference tool, with data validation) and, where it is not
installed, ``torch.distributed`` with the NCCL backend.

Both return an :class:`~slurm_hooks.detect.engines.nccl.model.NcclRun`; the torch engine
reports the same figures nccl-tests would (algbw = bytes / time,
busbw = algbw * 2(n-1)/n, wrong elements after a known sum), so one judge
serves both.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from slurm_hooks.core.errors import CommandTimeout
from slurm_hooks.detect.engines.nccl.model import NcclRow, NcclRun
from slurm_hooks.detect.engines.nccl.parser import parse_nccl_tests
from slurm_hooks.detect.probes import commands

log = logging.getLogger(__name__)


def all_reduce_argv(
    binary: str = "all_reduce_perf",
    *,
    ngpus: int,
    min_bytes: str = "32M",
    max_bytes: str = "1G",
    factor: int = 2,
    iters: int = 20,
    warmup: int = 5,
    check: int = 1,
    timeout_s: int | None = None,
) -> list[str]:
    """Single-process, one thread, ``ngpus`` GPUs (``-g``): no MPI needed on
    the node.  ``-T`` makes nccl-tests abort a hung collective itself."""
    argv = [
        binary,
        "-b", min_bytes,
        "-e", max_bytes,
        "-f", str(factor),
        "-g", str(ngpus),
        "-n", str(iters),
        "-w", str(warmup),
        "-c", str(check),
    ]  # fmt: skip
    if timeout_s:
        argv += ["-T", str(int(timeout_s))]
    return argv


Runner = Callable[..., commands.CommandResult]


def run_all_reduce_perf(
    argv: Sequence[str], *, timeout: float, run: Runner = commands.run
) -> NcclRun:
    """Run nccl-tests and parse it.  A timeout is a result (a hang: not
    completed); a missing binary raises CommandError."""
    try:
        res = run(list(argv), timeout=timeout, check=False)
    except CommandTimeout:
        return NcclRun(
            engine="nccl-tests",
            completed=False,
            errors=(f"all_reduce_perf hung: killed after {timeout:g}s",),
            killed_after=timeout,
        )
    parsed = parse_nccl_tests(res.stdout + "\n" + res.stderr)
    if res.rc != 0 and parsed.completed and not parsed.errors:
        # Completed but failed: nccl-tests exits 1 on out-of-bounds values.
        return replace(parsed, errors=(f"all_reduce_perf exited with rc={res.rc}",))
    if res.rc != 0 and not parsed.completed and not parsed.errors:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [""]
        return replace(
            parsed, errors=(f"all_reduce_perf exited with rc={res.rc}: {tail[0][:200]}",)
        )
    return parsed


# --- torch.distributed engine ------------------------------------------------


def bus_bandwidth(size_bytes: int, seconds: float, nranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for one all-reduce of ``size_bytes``, as
    nccl-tests computes them (GB = 1e9 bytes)."""
    if seconds <= 0:
        raise ValueError("seconds must be positive")
    algbw = size_bytes / seconds / 1e9
    factor = 2.0 * (nranks - 1) / nranks if nranks > 0 else 0.0
    return algbw, algbw * factor


def expected_sum(nranks: int) -> float:
    """Each rank fills its buffer with rank+1; the sum is n(n+1)/2, exact in float32."""
    return nranks * (nranks + 1) / 2.0


def parse_size(text: str) -> int:
    """``32M`` -> 33554432, as nccl-tests reads sizes (K/M/G are powers of 1024)."""
    t = text.strip()
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    if t and t[-1].upper() in units:
        return int(float(t[:-1]) * units[t[-1].upper()])
    return int(t)


def sizes_between(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    out = []
    s = min_bytes
    while s <= max_bytes:
        out.append(s)
        s = s * factor if factor > 1 else s + 1
    return out


@dataclass(frozen=True)
class TorchNcclConfig:
    min_bytes: int = 32 * 1024**2
    max_bytes: int = 1024**3
    factor: int = 2
    iters: int = 20
    warmup: int = 5
    #: Seconds for the whole run (spawn, init, every size); past it: a hang.
    timeout_s: float = 120.0
    #: CUDA device indices, one rank each; unset or empty: every visible GPU.
    devices: tuple[int, ...] | None = None


def rows_from_timings(
    timings: Sequence[tuple[int, float, int]], nranks: int, dtype: str = "float"
) -> tuple[NcclRow, ...]:
    """Rows from (size_bytes, seconds per all-reduce, wrong elements), in the
    shape nccl-tests prints (out-of-place only: the torch engine reduces in place)."""
    rows = []
    for size, secs, wrong in timings:
        algbw, busbw = bus_bandwidth(size, secs, nranks)
        rows.append(
            NcclRow(
                size=size,
                count=size // 4,
                type=dtype,
                redop="sum",
                root=-1,
                oop_time_us=round(secs * 1e6, 2),
                oop_algbw=round(algbw, 2),
                oop_busbw=round(busbw, 2),
                oop_wrong=wrong,
            )
        )
    return tuple(rows)


@contextmanager
def private_rendezvous() -> Iterator[str]:
    """The ``file://`` URL the ranks meet at, in a fresh directory only this
    process's user can enter (``mkdtemp``: 0700), removed afterwards.

    Why not a TCP store on 127.0.0.1: any user of the node can connect to a
    loopback port (the store has no authentication) and write the keys the
    ranks exchange, or take the port first; a failed or hung check would then
    drain the node on what a user did.  A file in a directory of root's is
    evidence root can vouch for."""
    workdir = tempfile.mkdtemp(prefix="slurm-hooks-nccl-")
    try:
        yield "file://" + os.path.join(workdir, "store")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _torch_worker(
    rank: int, world: int, store: str, devices: list[int], cfg: TorchNcclConfig, queue: Any
) -> None:  # pragma: no cover - needs GPUs
    import datetime  # noqa: PLC0415

    # Surface NCCL errors as exceptions instead of hanging the collective.
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    try:
        torch.cuda.set_device(devices[rank])
        dist.init_process_group(
            "nccl",
            init_method=store,
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=max(10, int(cfg.timeout_s))),
        )
        results = []
        want = expected_sum(world)
        for size in sizes_between(cfg.min_bytes, cfg.max_bytes, cfg.factor):
            n = size // 4
            buf = torch.empty(n, dtype=torch.float32, device="cuda")
            for _ in range(cfg.warmup):
                dist.all_reduce(buf)
            torch.cuda.synchronize()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(cfg.iters):
                dist.all_reduce(buf)
            torch.cuda.synchronize()
            secs = (time.perf_counter() - t0) / cfg.iters
            # Validation pass on known data.
            buf.fill_(float(rank + 1))
            dist.all_reduce(buf)
            wrong = int((buf != want).sum().item())
            t = torch.tensor([secs, float(wrong)], dtype=torch.float64, device="cuda")
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            results.append((size, float(t[0].item()), int(t[1].item())))
            del buf
        if rank == 0:
            queue.put(("ok", results))
        dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        queue.put(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))


def run_torch_all_reduce(cfg: TorchNcclConfig, *, torch_module: Any | None = None) -> NcclRun:
    """All-reduce through torch.distributed (NCCL) across this node's GPUs,
    one spawned process per GPU, rendezvous on a file in a directory only
    root can enter (:func:`private_rendezvous`).
    Children that outlive ``cfg.timeout_s`` are killed and the run is
    reported as hung."""
    import multiprocessing as mp  # noqa: PLC0415

    from slurm_hooks.detect.engines.burnin.torch_engine import cuda_torch  # noqa: PLC0415 - torch engines only

    _, devices = cuda_torch(cfg.devices, torch_module)  # the children import torch again
    world = len(devices)
    if world < 1:
        raise RuntimeError("no GPU")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with private_rendezvous() as store:
        procs = [
            ctx.Process(
                target=_torch_worker, args=(r, world, store, devices, cfg, queue), daemon=True
            )
            for r in range(world)
        ]
        for p in procs:
            p.start()
        messages, hung = _gather(procs, queue, cfg.timeout_s)
    errors = [m[1] for m in messages if m[0] == "error"]
    ok = [m[1] for m in messages if m[0] == "ok"]
    crashed = [
        f"rank {r} exited with {p.exitcode}"
        for r, p in enumerate(procs)
        if p.exitcode not in (0, None) and p.exitcode != -9
    ]
    if hung and not ok:
        errors.append(f"torch all-reduce hung: killed after {cfg.timeout_s:g}s")
    if not ok:
        return NcclRun(
            engine="torch",
            nranks=world,
            completed=False,
            errors=tuple(errors or crashed or ["no result from rank 0"]),
            killed_after=cfg.timeout_s if hung else None,
        )
    rows = rows_from_timings(ok[0], world)
    avg = round(sum(r.oop_busbw for r in rows) / len(rows), 2) if rows else None
    return NcclRun(
        engine="torch",
        rows=rows,
        nranks=world,
        avg_busbw=avg,
        out_of_bounds=0,
        completed=True,
        errors=tuple(errors),
    )


def _gather(
    procs: Sequence[Any], queue: Any, timeout_s: float
) -> tuple[list[tuple[str, Any]], bool]:
    """The ranks' messages until rank 0's result, an error or ``timeout_s``;
    and whether any child had to be killed (a hang).  Every child is gone on
    return, so the rendezvous directory can go too."""
    deadline = time.monotonic() + timeout_s
    messages: list[tuple[str, Any]] = []
    import queue as queue_mod  # noqa: PLC0415

    while time.monotonic() < deadline:
        try:
            messages.append(queue.get(timeout=0.5))
        except queue_mod.Empty:
            pass
        if any(m[0] == "ok" for m in messages) or any(m[0] == "error" for m in messages):
            break
        if not any(p.is_alive() for p in procs) and queue.empty():
            break
    hung = False
    for p in procs:
        p.join(timeout=max(0.1, min(10.0, deadline - time.monotonic())))
        if p.is_alive():
            hung = True
            p.kill()
            p.join(timeout=5)
    return messages, hung
