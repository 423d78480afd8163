#!/usr/bin/env python3
"""A training job that survives slurm-hooks: checkpoint on a signal, resume exactly.

Copy this file as the skeleton of your own job.  What it shows is the
contract between a training program and slurm-hooks (see README.md beside it):

* The checkpoint signal (SIGUSR1 by default) only sets a flag.  The loop
  writes the checkpoint at the next step boundary, where the model, the
  optimizer and the random generators agree with each other.  A handler that
  saved from inside a step could save a half-updated model.
* SIGTERM (``scontrol requeue``, ``scancel``, the time limit) also sets a flag:
  the loop writes a checkpoint unless the latest one is already at the current
  step, and exits non-zero (128 + signal) so that Slurm's requeue proceeds and
  the job is not recorded as a success.  Slurm sends SIGKILL ``KillWait``
  seconds after SIGTERM, so this checkpoint must be fast.
* Checkpoints are written atomically (temporary file, fsync, rename, fsync of
  the directory), carry a digest of the parameters, and the last ``--keep`` are
  kept.  On start the newest checkpoint that loads and matches its digest is
  used; a truncated or corrupt one is logged and skipped, never fatal.
* Nothing is lost on resume: the data for step k is chosen by a generator
  keyed by (seed, step, shard), and the checkpoint holds the parameters, the
  optimizer state, the random state used by dropout and the step.  After a
  resume at step k the model is bitwise identical to the one an uninterrupted
  run has at step k; every step line carries a digest of the parameters so
  that anybody can check.

One JSON line per step and per event goes to the metrics file (append mode,
so a requeued job continues the same file).  Each rank writes its own.

Backends: PyTorch when it is importable (CPU is enough), else NumPy with the
same behaviour (a 2-layer MLP with dropout trained by Adam on a seeded
synthetic regression).  ``--backend`` forces one.

Several ranks (``srun`` across 2 nodes; rank from SLURM_PROCID, world size
from SLURM_NTASKS): each rank reports the loss on its own shard of the data.
A real job would run DistributedDataParallel (torch.distributed with NCCL)
and all-reduce the gradients, which keeps every replica identical, so rank 0
alone writes the checkpoint and every rank resumes from it.  This example
does not set up a process group; it stands in for the all-reduce by having
every rank compute the gradient of every shard itself (cheap for a toy model),
which gives the same result: identical replicas, one checkpoint.
``--ckpt-dir`` must therefore be shared by all nodes.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import pickle
import re
import signal
import socket
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol

FORMAT = 1
CKPT_NAME = re.compile(r"^ckpt-(\d{8})\.(npz|pt)$")


class CheckpointError(Exception):
    """A checkpoint file cannot be used (corrupt, truncated, foreign)."""


# --------------------------------------------------------------------------
# Run context: who we are, from Slurm's environment.


class Context:
    def __init__(self, env: dict[str, str]) -> None:
        self.rank = int(env.get("SLURM_PROCID") or env.get("RANK") or 0)
        self.world = int(env.get("SLURM_NTASKS") or env.get("WORLD_SIZE") or 1)
        self.restart = int(env.get("SLURM_RESTART_COUNT") or 0)
        self.node = env.get("SLURMD_NODENAME") or socket.gethostname()
        self.job = env.get("SLURM_JOB_ID")
        if not 0 <= self.rank < self.world:
            raise SystemExit(f"train.py: rank {self.rank} is outside world size {self.world}")


class Metrics:
    """One JSON object per line, appended and flushed as it happens."""

    def __init__(self, path: Path, ctx: Context) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(path, "a", encoding="utf-8")  # lives as long as the run
        self._base = {"rank": ctx.rank, "restart": ctx.restart, "node": ctx.node, "job": ctx.job}

    def write(self, event: str, **fields: Any) -> None:
        record = {"event": event, "time": time.time(), **self._base, **fields}
        self._f.write(json.dumps(record, sort_keys=False) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


# --------------------------------------------------------------------------
# Backends.  Both expose the same small interface to the loop.


class Trainer(Protocol):
    name: str
    suffix: str

    def train_step(self, step: int) -> float:
        """Run optimizer update number ``step`` (1-based); return this rank's shard loss."""
        ...

    def digest(self) -> str:
        """sha256 of the parameters' bytes: equal digests mean bitwise-equal models.
        (Hashing every step is for the demo; a real job would not.)"""
        ...

    def save(self, f: IO[bytes], meta: dict[str, Any]) -> None: ...

    def load(self, path: Path) -> dict[str, Any]:
        """Restore parameters, optimizer and RNG state; return the saved meta."""
        ...


def _check_meta(meta: Any) -> None:
    """Raise (KeyError, TypeError) unless ``meta`` has what resuming needs."""
    if not isinstance(meta, dict):
        raise TypeError(f"meta is a {type(meta).__name__}, not a dict")
    for key, typ in (("step", int), ("digest", str), ("format", int)):
        if not isinstance(meta[key], typ):
            raise TypeError(f"meta[{key!r}] is {meta[key]!r}")
    if meta["format"] != FORMAT:
        raise TypeError(f"format {meta['format']}, this program reads {FORMAT}")


def _batch_seed(seed: int, step: int, shard: int) -> int:
    """The data of a step depends only on (seed, step, shard), never on how
    many steps this process has run: that is what makes resume exact."""
    key = hashlib.sha256(f"{seed}/{step}/{shard}".encode()).digest()
    return int.from_bytes(key[:8], "little") >> 1


class NumpyTrainer:
    name = "numpy"
    suffix = "npz"
    _PARAMS = ("w1", "b1", "w2", "b2")

    def __init__(self, args: argparse.Namespace, ctx: Context) -> None:
        import numpy as np

        self.np = np
        self.args = args
        self.ctx = ctx
        f32 = np.float32
        data_rng = np.random.default_rng([args.seed, 0xDA7A])
        n, d = args.dataset_size, args.input_dim
        self.x = data_rng.standard_normal((n, d)).astype(f32)
        direction = data_rng.standard_normal(d).astype(f32) / f32(d**0.5)
        noise = data_rng.standard_normal(n).astype(f32) * f32(0.05)
        self.y = (np.sin(3 * self.x @ direction) + noise).astype(f32)[:, None]
        init_rng = np.random.default_rng([args.seed, 0x1417])
        h = args.hidden
        self.p = {
            "w1": (init_rng.standard_normal((d, h)) / d**0.5).astype(f32),
            "b1": np.zeros(h, f32),
            "w2": (init_rng.standard_normal((h, 1)) / h**0.5).astype(f32),
            "b2": np.zeros(1, f32),
        }
        self.m = {k: np.zeros_like(v) for k, v in self.p.items()}
        self.v = {k: np.zeros_like(v) for k, v in self.p.items()}
        self.t = 0
        # The one stateful generator (dropout masks).  Saved in every checkpoint.
        self.rng = np.random.default_rng([args.seed, 0xD809])

    def _shard_batch(self, step: int, shard: int) -> tuple[Any, Any]:
        rows = self.np.arange(shard, self.args.dataset_size, self.ctx.world)
        pick = self.np.random.default_rng(_batch_seed(self.args.seed, step, shard))
        idx = rows[pick.integers(0, len(rows), self.args.batch_size)]
        return self.x[idx], self.y[idx]

    def _loss_and_grads(self, x: Any, y: Any) -> tuple[float, dict[str, Any]]:
        np, p, keep = self.np, self.p, 1.0 - self.args.dropout
        a = np.tanh(x @ p["w1"] + p["b1"])
        mask = (self.rng.random(a.shape) < keep).astype(np.float32) / np.float32(keep)
        ad = a * mask
        err = ad @ p["w2"] + p["b2"] - y
        loss = float(np.mean(err * err))
        g_out = np.float32(2.0 / err.size) * err
        g_ad = g_out @ p["w2"].T
        g_pre = g_ad * mask * (1 - a * a)
        grads = {
            "w2": ad.T @ g_out,
            "b2": g_out.sum(axis=0),
            "w1": x.T @ g_pre,
            "b1": g_pre.sum(axis=0),
        }
        return loss, grads

    def train_step(self, step: int) -> float:
        np = self.np
        total = {k: np.zeros_like(v) for k, v in self.p.items()}
        my_loss = 0.0
        # Stand-in for DDP's all-reduce: the mean gradient over every shard.
        for shard in range(self.ctx.world):
            loss, grads = self._loss_and_grads(*self._shard_batch(step, shard))
            for k in total:
                total[k] += grads[k]
            if shard == self.ctx.rank:
                my_loss = loss
        self.t += 1
        lr, b1, b2, eps = np.float32(self.args.lr), np.float32(0.9), np.float32(0.999), 1e-8
        for k, param in self.p.items():
            g = total[k] / np.float32(self.ctx.world)
            self.m[k] = b1 * self.m[k] + (1 - b1) * g
            self.v[k] = b2 * self.v[k] + (1 - b2) * g * g
            m_hat = self.m[k] / (1 - b1**self.t)
            v_hat = self.v[k] / (1 - b2**self.t)
            self.p[k] = (param - lr * m_hat / (np.sqrt(v_hat) + np.float32(eps))).astype(np.float32)
        return my_loss

    def digest(self, params: dict[str, Any] | None = None) -> str:
        params = self.p if params is None else params
        h = hashlib.sha256()
        for k in self._PARAMS:
            h.update(self.np.ascontiguousarray(params[k]).tobytes())
        return h.hexdigest()

    def save(self, f: IO[bytes], meta: dict[str, Any]) -> None:
        np = self.np
        meta = {**meta, "adam_t": self.t, "rng": self.rng.bit_generator.state}
        arrays = {f"p_{k}": v for k, v in self.p.items()}
        arrays |= {f"m_{k}": v for k, v in self.m.items()}
        arrays |= {f"v_{k}": v for k, v in self.v.items()}
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        np.savez(f, **arrays)

    def load(self, path: Path) -> dict[str, Any]:
        np = self.np
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(bytes(z["meta"]).decode())
                p = {k: z[f"p_{k}"] for k in self._PARAMS}
                m = {k: z[f"m_{k}"] for k in self._PARAMS}
                v = {k: z[f"v_{k}"] for k in self._PARAMS}
            _check_meta(meta)
            if not isinstance(meta["adam_t"], int):
                raise TypeError(f"meta['adam_t'] is {meta['adam_t']!r}")
            rng = np.random.Generator(np.random.PCG64())
            rng.bit_generator.state = meta["rng"]  # validates it
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as e:
            raise CheckpointError(f"unreadable: {type(e).__name__}: {e}") from e
        for k in self._PARAMS:
            want = self.p[k].shape
            if p[k].shape != want or m[k].shape != want or v[k].shape != want:
                raise CheckpointError(f"{k} has shape {p[k].shape}, this model needs {want}")
        if self.digest(p) != meta["digest"]:
            raise CheckpointError("parameter digest does not match")
        # Everything checked: only now replace the live state.
        self.p, self.m, self.v, self.t, self.rng = p, m, v, meta["adam_t"], rng
        return meta


class TorchTrainer:
    name = "torch"
    suffix = "pt"

    def __init__(self, args: argparse.Namespace, ctx: Context) -> None:
        import torch

        self.torch = torch
        self.args = args
        self.ctx = ctx
        torch.use_deterministic_algorithms(True)
        n, d, h = args.dataset_size, args.input_dim, args.hidden
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + 0xDA7A)
        self.x = torch.randn(n, d, generator=g)
        direction = torch.randn(d, generator=g) / d**0.5
        noise = torch.randn(n, generator=g) * 0.05
        self.y = (torch.sin(3 * self.x @ direction) + noise)[:, None]
        torch.manual_seed(args.seed * 1_000_003 + 0x1417)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(d, h),
            torch.nn.Tanh(),
            torch.nn.Dropout(args.dropout),
            torch.nn.Linear(h, 1),
        )
        self.opt = torch.optim.Adam(self.model.parameters(), lr=args.lr)
        # Dropout draws from torch's default generator, seeded here and saved in checkpoints.
        torch.manual_seed(args.seed * 1_000_003 + 0xD809)

    def _shard_batch(self, step: int, shard: int) -> tuple[Any, Any]:
        torch = self.torch
        rows = torch.arange(shard, self.args.dataset_size, self.ctx.world)
        pick = torch.Generator().manual_seed(_batch_seed(self.args.seed, step, shard))
        idx = rows[torch.randint(0, len(rows), (self.args.batch_size,), generator=pick)]
        return self.x[idx], self.y[idx]

    def train_step(self, step: int) -> float:
        self.model.train()
        self.opt.zero_grad(set_to_none=True)
        my_loss = 0.0
        # Stand-in for DDP's all-reduce: accumulate the mean gradient over every shard.
        for shard in range(self.ctx.world):
            x, y = self._shard_batch(step, shard)
            loss = self.torch.nn.functional.mse_loss(self.model(x), y)
            (loss / self.ctx.world).backward()
            if shard == self.ctx.rank:
                my_loss = float(loss.detach())
        self.opt.step()
        return my_loss

    def digest(self, state: dict[str, Any] | None = None) -> str:
        state = self.model.state_dict() if state is None else state
        h = hashlib.sha256()
        for t in state.values():
            h.update(bytes(t.detach().cpu().contiguous().view(-1).view(self.torch.uint8).tolist()))
        return h.hexdigest()

    def save(self, f: IO[bytes], meta: dict[str, Any]) -> None:
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.opt.state_dict(),
            "torch_rng": self.torch.get_rng_state(),
            "meta": meta,
        }
        self.torch.save(state, f)

    def load(self, path: Path) -> dict[str, Any]:
        errors = (OSError, RuntimeError, KeyError, TypeError, EOFError, ValueError)
        try:
            state = self.torch.load(path, map_location="cpu", weights_only=True)
            meta = state["meta"]
            _check_meta(meta)
            if self.digest(state["model"]) != meta["digest"]:
                raise CheckpointError("parameter digest does not match")
        except (*errors, pickle.UnpicklingError) as e:
            raise CheckpointError(f"unreadable: {type(e).__name__}: {e}") from e
        # load_state_dict can fail half-way (a shape mismatch): keep a copy to roll back to.
        backup = copy.deepcopy((self.model.state_dict(), self.opt.state_dict()))
        try:
            self.model.load_state_dict(state["model"])
            self.opt.load_state_dict(state["optimizer"])
            self.torch.set_rng_state(state["torch_rng"])
        except errors as e:
            self.model.load_state_dict(backup[0])
            self.opt.load_state_dict(backup[1])
            raise CheckpointError(f"does not fit this model: {e}") from e
        return meta


def make_trainer(args: argparse.Namespace, ctx: Context) -> Trainer:
    if args.backend in ("auto", "torch"):
        try:
            return TorchTrainer(args, ctx)
        except ImportError:
            if args.backend == "torch":
                raise
    return NumpyTrainer(args, ctx)


# --------------------------------------------------------------------------
# Checkpoint files.


class CheckpointStore:
    def __init__(self, directory: Path, suffix: str, keep: int) -> None:
        self.dir = directory
        self.suffix = suffix
        self.keep = keep

    def path(self, step: int) -> Path:
        return self.dir / f"ckpt-{step:08d}.{self.suffix}"

    def existing(self) -> list[tuple[int, Path]]:
        """Our checkpoints, newest first."""
        found = []
        for p in self.dir.iterdir() if self.dir.is_dir() else ():
            m = CKPT_NAME.match(p.name)
            if m and m.group(2) == self.suffix:
                found.append((int(m.group(1)), p))
        return sorted(found, reverse=True)

    def write(self, step: int, writer: Callable[[IO[bytes]], None]) -> Path:
        """Temporary file, fsync, rename, fsync the directory: a crash (or
        SIGKILL at the end of the grace period) leaves either the old set of
        checkpoints or the new one, never half a file under a real name."""
        self.dir.mkdir(parents=True, exist_ok=True)
        final = self.path(step)
        tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        try:
            with open(tmp, "wb") as f:
                writer(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        dir_fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        for _, old in self.existing()[self.keep :]:
            old.unlink(missing_ok=True)
        return final

    def remove_stale_temporaries(self) -> None:
        """Left by a writer that was killed mid-write (only rank 0 writes)."""
        if self.dir.is_dir():
            for p in self.dir.glob(".ckpt-*.tmp-*"):
                p.unlink(missing_ok=True)


# --------------------------------------------------------------------------
# Signals: handlers only set flags; the loop acts at step boundaries.


class Flags:
    def __init__(self, ckpt_signal: signal.Signals) -> None:
        self.checkpoint = False
        self.stop: signal.Signals | None = None
        self.received: list[str] = []
        signal.signal(ckpt_signal, self._on_checkpoint)
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, self._on_stop)

    def _on_checkpoint(self, signum: int, _frame: object) -> None:
        self.checkpoint = True
        self.received.append(signal.Signals(signum).name)

    def _on_stop(self, signum: int, _frame: object) -> None:
        if self.stop is None:
            self.stop = signal.Signals(signum)
        self.received.append(signal.Signals(signum).name)

    def pending(self) -> bool:
        return self.checkpoint or self.stop is not None


def _pace(until: float, flags: Flags) -> None:
    """Sleep until ``until`` (monotonic), returning early when a signal is pending."""
    while not flags.pending():
        left = until - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.05))


# --------------------------------------------------------------------------
# The step's collective: every rank waits for every other before it applies
# the update, as DDP's gradient all-reduce does.  A stopped rank therefore
# blocks the others here - which is what slurm-hooks' hang detection sees
# in the progress records.  While it waits, a rank still answers the
# checkpoint signal (``on_checkpoint``: its state is the last completed step)
# and leaves on SIGTERM.


class NoCollective:
    name = "none"

    def wait(self, step: int, flags: Flags, on_checkpoint: Callable[[], None]) -> bool:
        return True


class FileCollective:
    """A barrier through files in the shared checkpoint directory (no torch)."""

    name = "file"

    def __init__(self, directory: Path, ctx: Context, poll_s: float = 0.01) -> None:
        self.dir = directory / f".barrier-r{ctx.restart}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ctx = ctx
        self.poll_s = poll_s

    def _arrive(self, step: int) -> None:
        final = self.dir / f"rank{self.ctx.rank}"
        tmp = self.dir / f".rank{self.ctx.rank}.tmp"
        tmp.write_text(str(step))
        os.replace(tmp, final)

    def _all_at(self, step: int) -> bool:
        for r in range(self.ctx.world):
            try:
                if int((self.dir / f"rank{r}").read_text() or 0) < step:
                    return False
            except (OSError, ValueError):
                return False
        return True

    def wait(self, step: int, flags: Flags, on_checkpoint: Callable[[], None]) -> bool:
        self._arrive(step)
        while not self._all_at(step):
            if flags.checkpoint:
                on_checkpoint()
            if flags.stop is not None:
                return False
            time.sleep(self.poll_s)
        return True


class GlooCollective:
    """torch.distributed (gloo, CPU) all-reduce of the step number, polled so
    that signals are still handled while a peer is missing."""

    name = "gloo"

    def __init__(self, ctx: Context, env: dict[str, str], timeout_s: float) -> None:
        import datetime

        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        addr = env.get("MASTER_ADDR") or env.get("SLURM_LAUNCH_NODE_IPADDR") or "127.0.0.1"
        port = int(env.get("MASTER_PORT") or 20000 + (int(ctx.job or 0) * 7 + ctx.restart) % 20000)
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{addr}:{port}",
            rank=ctx.rank,
            world_size=ctx.world,
            timeout=datetime.timedelta(seconds=timeout_s),
        )

    def wait(self, step: int, flags: Flags, on_checkpoint: Callable[[], None]) -> bool:
        t = self.torch.tensor([step], dtype=self.torch.int64)
        work = self.dist.all_reduce(t, async_op=True)
        while not work.is_completed():
            if flags.checkpoint:
                on_checkpoint()
            if flags.stop is not None:
                return False
            time.sleep(0.005)
        work.wait()
        return True


def make_collective(args: argparse.Namespace, ctx: Context) -> Any:
    # "auto" outside a Slurm job (no SLURM_JOB_ID: ranks started by hand, one
    # after the other) runs the ranks independently, as before.
    if ctx.world < 2 or args.collective == "none" or (args.collective == "auto" and not ctx.job):
        return NoCollective()
    if args.collective in ("auto", "gloo"):
        try:
            return GlooCollective(ctx, dict(os.environ), args.collective_timeout)
        except ImportError:
            if args.collective == "gloo":
                raise
    return FileCollective(args.ckpt_dir, ctx)


def make_progress(ctx: Context) -> Any:
    """slurm-hooks' progress records (docs/progress.md); a no-op without it."""
    try:
        from slurm_hooks.jobside.progress import Progress
    except ImportError:
        return None
    return Progress.from_env()


# --------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument(
        "--ckpt-dir",
        type=Path,
        default=Path("checkpoints"),
        help="checkpoint directory, shared by all nodes (default: ./checkpoints)",
    )
    ap.add_argument(
        "--metrics",
        default=None,
        help="metrics file; {rank} is replaced (default: CKPT_DIR/metrics.rank{rank}.jsonl)",
    )
    ap.add_argument("--max-steps", type=int, default=200)
    ap.add_argument(
        "--step-seconds",
        type=float,
        default=0.3,
        help="minimum wall time per step, to make the demo watchable (0: full speed)",
    )
    ap.add_argument(
        "--ckpt-every", type=int, default=10, help="periodic checkpoint interval (steps)"
    )
    ap.add_argument("--keep", type=int, default=3, help="checkpoints kept (default 3)")
    ap.add_argument(
        "--ckpt-signal", default="USR1", help="signal that asks for a checkpoint (default USR1)"
    )
    ap.add_argument("--backend", choices=("auto", "torch", "numpy"), default="auto")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--input-dim", type=int, default=8)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--dataset-size", type=int, default=4096)
    ap.add_argument(
        "--collective",
        choices=("auto", "gloo", "file", "none"),
        default="auto",
        help="how ranks wait for each other each step: in a Slurm job, torch.distributed gloo "
        "when torch is installed, else a file barrier in CKPT_DIR (auto); none: independent",
    )
    ap.add_argument("--collective-timeout", type=float, default=600.0,
                    help="gloo's collective timeout, seconds (NCCL's default is 600)")  # fmt: skip
    ap.add_argument("--no-progress", action="store_true",
                    help="write no slurm-hooks progress records (the job opts out)")  # fmt: skip
    ap.add_argument("--first-step-seconds", type=float, default=0.0,
                    help="fault injection: the first step takes this long (compilation, loading)")  # fmt: skip
    ap.add_argument(
        "--slow-rank",
        default=None,
        help="fault injection: RANK:FACTOR makes that rank's steps FACTOR times longer",
    )
    args = ap.parse_args(argv)
    if args.ckpt_every < 1 or args.keep < 1 or args.max_steps < 0:
        ap.error("--ckpt-every and --keep must be >= 1, --max-steps >= 0")
    if not 0.0 <= args.dropout < 1.0:
        ap.error("--dropout must be in [0, 1)")
    if args.slow_rank is not None:
        try:
            rank_s, factor_s = args.slow_rank.split(":")
            args.slow_rank = (int(rank_s), float(factor_s))
        except ValueError:
            ap.error("--slow-rank takes RANK:FACTOR, e.g. 1:1.3")
    name = args.ckpt_signal.upper()
    try:
        args.ckpt_signal = signal.Signals[name if name.startswith("SIG") else "SIG" + name]
    except KeyError:
        ap.error(f"unknown signal {args.ckpt_signal!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ctx = Context(dict(os.environ))
    flags = Flags(args.ckpt_signal)  # before anything slow: a signal during start-up is kept
    metrics_path = args.metrics or str(args.ckpt_dir / "metrics.rank{rank}.jsonl")
    metrics = Metrics(Path(metrics_path.replace("{rank}", str(ctx.rank))), ctx)
    trainer = make_trainer(args, ctx)
    store = CheckpointStore(args.ckpt_dir, trainer.suffix, args.keep)
    if ctx.rank == 0:
        store.remove_stale_temporaries()

    step = 0
    for ckpt_step, path in store.existing():
        try:
            meta = trainer.load(path)
        except CheckpointError as e:
            metrics.write("checkpoint_rejected", path=str(path), error=str(e))
            continue
        step = int(meta["step"])
        if step != ckpt_step:  # renamed by hand: trust the content, say so
            metrics.write("checkpoint_renamed", path=str(path), content_step=step)
        metrics.write(
            "resume", step=step, path=str(path), digest=trainer.digest(), backend=trainer.name
        )
        break
    else:
        metrics.write("start", step=0, digest=trainer.digest(), backend=trainer.name)
    saved_step = step if step else None

    def checkpoint(reason: str) -> None:
        nonlocal saved_step
        if ctx.rank != 0:
            return
        t0 = time.monotonic()
        digest = trainer.digest()
        meta = {
            "format": FORMAT,
            "step": step,
            "digest": digest,
            "seed": args.seed,
            "world": ctx.world,
            "restart": ctx.restart,
            "reason": reason,
        }
        path = store.write(step, lambda f: trainer.save(f, meta))
        saved_step = step
        metrics.write(
            "checkpoint",
            step=step,
            reason=reason,
            path=str(path),
            digest=digest,
            seconds=round(time.monotonic() - t0, 6),
        )

    def on_checkpoint() -> None:
        flags.checkpoint = False
        if saved_step != step:
            checkpoint("signal")
        elif ctx.rank == 0:  # nothing new since the last one: say so rather than rewrite it
            metrics.write(
                "checkpoint",
                step=step,
                reason="signal",
                path=str(store.path(step)),
                digest=trainer.digest(),
                existing=True,
            )

    factor = args.slow_rank[1] if args.slow_rank and args.slow_rank[0] == ctx.rank else 1.0
    collective = make_collective(args, ctx)
    progress = None if args.no_progress else make_progress(ctx)
    metrics.write("collective", step=step, collective=collective.name)

    while True:
        # Step boundary: the only place where state is consistent and signals are acted on.
        if flags.received:
            names, flags.received = flags.received, []
            metrics.write("signal", step=step, signals=names)
        if flags.stop is not None:
            if saved_step != step:
                checkpoint("term")
            elif ctx.rank == 0:  # already saved at this step: say so rather than rewrite it
                metrics.write(
                    "checkpoint",
                    step=step,
                    reason="term",
                    path=str(store.path(step)),
                    digest=trainer.digest(),
                    existing=True,
                )
            rc = 128 + int(flags.stop)
            metrics.write("exit", step=step, signal=flags.stop.name, rc=rc)
            metrics.close()
            return rc
        if flags.checkpoint:
            on_checkpoint()
        if step >= args.max_steps:
            break
        # The collective, then the update, then the rest of the step's work
        # (paced to --step-seconds): a rank stopped anywhere keeps the others
        # at their last completed step, so a checkpoint written while they
        # wait is exact.
        if not collective.wait(step + 1, flags, on_checkpoint):
            continue  # SIGTERM while waiting: the boundary saves and exits
        started = time.monotonic()
        loss = trainer.train_step(step + 1)
        step += 1
        metrics.write("step", step=step, loss=loss, digest=trainer.digest()[:16])
        if step % args.ckpt_every == 0:
            checkpoint("periodic")
        first = args.first_step_seconds if step == 1 else 0.0
        _pace(started + max(args.step_seconds * factor, first), flags)
        if progress is not None:  # busy: this rank's own work, before the next collective
            progress.step(step, busy=time.monotonic() - started)

    if saved_step != step:
        checkpoint("final")
    metrics.write("done", step=step, digest=trainer.digest())
    metrics.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
