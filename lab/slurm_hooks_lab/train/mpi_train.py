#!/usr/bin/env python3
"""A plain MPI training loop: every step ends in a real, blocking all-reduce.

The job that most sites actually run, reduced to its skeleton: it imports
nothing of slurm-hooks, writes no progress records, and its ranks wait for
each other inside ``MPI_Allreduce`` (mpi4py over Debian's Open MPI, started by
``srun --mpi=pmix``; see mpi_train.sbatch).  When one rank stops, the others
block in the collective the way DDP's ranks block in NCCL's all-reduce: no
Python code of theirs runs until it returns.

Each step, every rank computes its own contribution to the gradient (seeded
by (seed, step, rank), so it is reproducible), the ranks sum the
contributions with ``Allreduce``, and every rank applies the same update: the
replicas stay bitwise identical.  Every ``step`` line of the metrics file
carries this rank's contribution, the reduced sum and a digest of the
parameters, so anybody can check that the ranks really reduced (the sum is
the sum of every rank's contribution) and agree (equal digests).

The checkpoint contract is train.py's (README.md beside it): SIGUSR1 asks for
a checkpoint, SIGTERM for a checkpoint and an exit (143); the handlers only
set flags, and the loop acts at the next step boundary, where the parameters
are a completed step.  Rank 0 writes ``checkpoint.json`` in the checkpoint
directory atomically; every rank resumes from it after a requeue.  A rank
blocked inside the all-reduce cannot act on a signal until the collective
returns (as with NCCL): its checkpoint is the last one written, periodic or
on a signal that arrived between collectives.

``--exit-rank R --exit-at-step K`` makes rank R exit after step K of the
job's first run (``os._exit``: no ``MPI_Finalize``), as a rank that crashed;
a requeued run goes to its end.

``--gpu-scenario`` (the lab's fake GPUs): each step's compute also drives
this rank's GPU, as a training rank's kernels do, by asking the node's
GPU as the lab's fake NVML describes it (a JSON file, ``{node}`` in the
path is this rank's node).  A GPU that fell off the bus never completes
the work, nor does one whose driver stopped answering: the rank blocks
there, asleep and using no CPU, as a CUDA synchronise in blocking-sync
mode waits for an interrupt that never comes.  Nobody stops the rank: the GPU wedged it, and the other ranks
block in the next all-reduce.  Only a signal to stop (TERM, KILL) ends
the wait, as killing a process ends its CUDA calls.

SIGUSR2 writes every thread's Python stack to ``stack.rank<R>.txt`` in the
checkpoint directory (``faulthandler``, from inside the signal handler, so it
works while the rank is blocked in C): the cheap way for a job's owner to see
which rank waits in the collective and which does not.
"""

from __future__ import annotations

import argparse
import faulthandler
import hashlib
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

CKPT_NAME = "checkpoint.json"
DIM = 16


class Flags:
    """Signal handlers only set these; the loop acts at a step boundary."""

    def __init__(self) -> None:
        self.checkpoint = False
        self.stop: signal.Signals | None = None
        signal.signal(signal.SIGUSR1, self._on_checkpoint)
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, self._on_stop)

    def _on_checkpoint(self, _signum: int, _frame: object) -> None:
        self.checkpoint = True

    def _on_stop(self, signum: int, _frame: object) -> None:
        if self.stop is None:
            self.stop = signal.Signals(signum)


class Metrics:
    """One JSON object per line, appended (a requeued job continues the file)."""

    def __init__(self, path: Path, base: dict[str, Any]) -> None:
        self._f = open(path, "a", encoding="utf-8")  # lives as long as the run
        self._base = base

    def write(self, event: str, **fields: Any) -> None:
        self._f.write(json.dumps({"event": event, "time": time.time(), **self._base, **fields}))
        self._f.write("\n")
        self._f.flush()


def digest(w: np.ndarray) -> str:
    return hashlib.sha256(w.tobytes()).hexdigest()[:16]


def contribution(seed: int, step: int, rank: int, w: np.ndarray) -> np.ndarray:
    """This rank's share of the gradient for ``step``: a pull of the
    parameters towards a target drawn from (seed, step, rank)."""
    rng = np.random.default_rng([seed, step, rank])
    return w - rng.standard_normal(w.shape)


def save(ckpt_dir: Path, step: int, w: np.ndarray) -> Path:
    """Temporary file, fsync, rename, fsync the directory: a kill at any
    moment leaves the previous checkpoint or this one, never half a file."""
    final = ckpt_dir / CKPT_NAME
    tmp = ckpt_dir / f".{CKPT_NAME}.tmp-{os.getpid()}"
    body = {"step": step, "w": [float(x) for x in w], "digest": digest(w)}
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(body, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    fd = os.open(ckpt_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return final


def load(ckpt_dir: Path) -> tuple[int, np.ndarray] | None:
    """The checkpoint, if there is a usable one (its digest matches)."""
    try:
        body = json.loads((ckpt_dir / CKPT_NAME).read_text(encoding="utf-8"))
        w = np.array(body["w"], dtype=np.float64)
        if w.shape != (DIM,) or digest(w) != body["digest"]:
            return None
        return int(body["step"]), w
    except (OSError, ValueError, KeyError, TypeError):
        return None


#: Seconds between two looks at a wedged GPU (the rank sleeps in between).
GPU_WAIT_S = 0.5


#: NVML calls that reach the driver before any GPU's own: failing, the
#: driver no longer answers, and no GPU of the node completes work.
DRIVER_CALLS = ("nvmlInit", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex")


def gpu_wedged(scenario: Path | None, index: int) -> str:
    """Why GPU ``index`` of the lab's fake NVML scenario completes no work
    ("" while it does): it fell off the bus (``lost``), or the driver stopped
    answering (an ``errors`` rule on a call every GPU needs).  An unreadable
    scenario is a GPU that still answers."""
    if scenario is None:
        return ""
    try:
        data = json.loads(scenario.read_text(encoding="utf-8"))
        gpu = data.get("gpu", {}).get(str(index), {})
        rules = [r for r in data.get("errors", []) if isinstance(r, dict)]
    except (OSError, ValueError, AttributeError):
        return ""
    if isinstance(gpu, dict) and gpu.get("lost") not in (None, False):
        return "lost"
    for rule in rules:
        if rule.get("function") in DRIVER_CALLS and rule.get("gpu") in (None, index):
            return "driver silent"
    return ""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--ckpt-dir", type=Path, required=True,
                    help="checkpoint and metrics directory, shared by all nodes")  # fmt: skip
    ap.add_argument("--max-steps", type=int, default=200)
    ap.add_argument("--step-seconds", type=float, default=0.2,
                    help="minimum compute time per step, before the all-reduce")  # fmt: skip
    ap.add_argument("--busy-share", type=float, default=0.2,
                    help="share of each step's compute spent on the CPU (the rest sleeps): a "
                    "rank that computes is busy, as a training rank is")  # fmt: skip
    ap.add_argument("--ckpt-every", type=int, default=10, help="periodic checkpoint (steps)")
    ap.add_argument("--gpu-scenario", default="",
                    help="the lab's fake NVML scenario of this rank's node ({node}: its name); "
                    "its GPU lost, the rank's GPU work never completes")  # fmt: skip
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--exit-rank", type=int, default=None,
                    help="this rank exits after --exit-at-step, as a crashed rank would: at "
                    "once, without MPI_Finalize (os._exit)")  # fmt: skip
    ap.add_argument("--exit-at-step", type=int, default=1)
    ap.add_argument("--exit-code", type=int, default=1)
    args = ap.parse_args(argv)
    if args.max_steps < 0 or args.ckpt_every < 1 or args.step_seconds < 0:
        ap.error("--max-steps and --step-seconds must be >= 0, --ckpt-every >= 1")
    if not 0.0 <= args.busy_share <= 1.0:
        ap.error("--busy-share must be between 0 and 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    flags = Flags()  # first: a signal during start-up is kept
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    restart = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    args.ckpt_dir.mkdir(parents=True, exist_ok=True)
    scenario = Path(args.gpu_scenario.replace("{node}", node)) if args.gpu_scenario else None
    gpu = int(os.environ.get("SLURM_LOCALID") or 0)
    stacks = open(args.ckpt_dir / f"stack.rank{rank}.txt", "a", encoding="utf-8")
    faulthandler.register(signal.SIGUSR2, file=stacks, all_threads=True, chain=False)
    metrics = Metrics(
        args.ckpt_dir / f"metrics.rank{rank}.jsonl",
        {"rank": rank, "world": world, "restart": restart, "node": node,
         "job": os.environ.get("SLURM_JOB_ID"), "pid": os.getpid()},
    )  # fmt: skip

    resumed = load(args.ckpt_dir)
    if resumed is None:
        step, w = 0, np.zeros(DIM)
        metrics.write("start", step=0, digest=digest(w))
    else:
        step, w = resumed
        metrics.write("resume", step=step, digest=digest(w))
    saved = step if resumed else None

    def checkpoint(reason: str) -> None:
        nonlocal saved
        if rank == 0 and saved != step:
            save(args.ckpt_dir, step, w)
            metrics.write("checkpoint", step=step, reason=reason, digest=digest(w))
        saved = step

    total = np.empty(DIM)
    while True:
        if flags.stop is not None:  # a step boundary: the parameters are a completed step
            checkpoint("term")
            rc = 128 + int(flags.stop)
            metrics.write("exit", step=step, signal=flags.stop.name, rc=rc)
            return rc
        if flags.checkpoint:
            flags.checkpoint = False
            checkpoint("signal")
        if step >= args.max_steps:
            break
        started = time.monotonic()
        mine = contribution(args.seed, step + 1, rank, w)
        busy_until = started + args.busy_share * args.step_seconds
        x = mine
        while time.monotonic() < busy_until and flags.stop is None:
            x = np.tanh(x)  # this rank's compute on the CPU (the result is not used)
        while time.monotonic() - started < args.step_seconds and flags.stop is None:
            time.sleep(min(0.05, args.step_seconds))  # the rest of this rank's compute
        if why := gpu_wedged(scenario, gpu):
            # The step's kernels went to a GPU that is gone: they never complete.
            metrics.write("gpu_wedged", step=step + 1, gpu=gpu, why=why)
            while flags.stop is None:
                time.sleep(GPU_WAIT_S)
            continue  # the stop path: no all-reduce, no checkpoint of this step
        comm.Allreduce(mine, total, op=MPI.SUM)  # blocks until every rank has arrived
        w = w - args.lr * total / world
        step += 1
        metrics.write("step", step=step, mine=float(mine.sum()), total=float(total.sum()),
                      digest=digest(w))  # fmt: skip
        if step % args.ckpt_every == 0:
            checkpoint("periodic")
        if rank == args.exit_rank and step == args.exit_at_step and restart == 0:
            # A crash, not an exit: no MPI_Finalize, no atexit handler (mpi4py's
            # would finalize and wait for the peers), no checkpoint.
            metrics.write("crash", step=step, rc=args.exit_code)
            os._exit(args.exit_code)
    checkpoint("final")
    metrics.write("done", step=step, digest=digest(w))
    return 0


if __name__ == "__main__":
    sys.exit(main())
