"""What the prolog adds to a job start on a healthy node with a warm cache.
Prints figures; asserts nothing.  Needs root and Debian's Slurm (a private
2-node lab is started and stopped here).

    .venv/bin/python bench/bench_prolog.py [--runs 15]

1. The hook process alone: ``python -m slurm_hooks hook prolog`` with a job's
   environment, warm cache, as slurmd starts it (fresh interpreter each run).
2. A cold prolog (cache voided before each run): the full run with the fake
   burn-in/NCCL engines (no GPU here), for the shape of the cost.
3. Job start as a user sees it: ``srun -w n1 true`` wall time with our prolog
   (warm) against no prolog at all, in the same lab, alternating runs.
Goal: (1) and the (3) difference well under a second.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurm_hooks_lab import hooks as labhooks  # noqa: E402
from slurm_hooks_lab.lab import Lab  # noqa: E402

from slurm_hooks.agent.prolog import CACHE_FILE  # noqa: E402


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True, timeout=60)  # noqa: S603
    return time.perf_counter() - t0


def fig(name: str, xs: list[float]) -> str:
    return (
        f"{name:<42s} median {statistics.median(xs) * 1000:7.1f} ms   "
        f"min {min(xs) * 1000:7.1f}   max {max(xs) * 1000:7.1f}   (n={len(xs)})"
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="bench-prolog-")
    lab = Lab(base, 2)
    lab.up()
    try:
        hooks = labhooks.install(
            lab, gpus=4, prolog=True, prolog_settings={"gres_gpus": False}, reconfigure=False
        )
        for n in lab.node_names:
            hooks.set_engine(n, "[nccl]\nbusbw_gbps = 48\n")
        shim = hooks.shims["prolog"]
        nf = hooks.node("n1")
        hook_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "SLURM_CONF": str(lab.slurm_conf),
            "SLURMD_NODENAME": "n1",
            "SLURM_JOB_ID": "4242",
            "SLURM_JOB_USER": "root",
            "SLURM_SCRIPT_CONTEXT": "prolog_slurmd",
            "SLURM_HOOKS_CONFIG": str(nf.config),
            "SLURM_HOOKS_LOG_LEVEL": "WARNING",
        }
        hook = [sys.executable, "-m", "slurm_hooks", "hook", "prolog"]
        bare = [sys.executable, "-c", "pass"]
        timed(hook, hook_env)  # warm the cache (a full run)
        assert (nf.state_dir / CACHE_FILE).exists(), "no pass cached"
        warm = [timed(hook, hook_env) for _ in range(args.runs)]
        interp = [timed(bare, hook_env) for _ in range(args.runs)]
        cold = []
        for _ in range(max(3, args.runs // 3)):
            (nf.state_dir / CACHE_FILE).unlink(missing_ok=True)
            cold.append(timed(hook, hook_env))
        print("== 1-2. the hook process (fresh interpreter each run)")
        print(fig("python -c pass (interpreter baseline)", interp))
        print(fig("hook prolog, warm cache", warm))
        print(fig("hook prolog, cold (full run, fake engines)", cold))
        print(
            f"   warm hook beyond a bare interpreter: "
            f"{(statistics.median(warm) - statistics.median(interp)) * 1000:.1f} ms"
        )

        client_env = {**os.environ, **lab.env()}
        srun = ["srun", "-w", "n1", "-N1", "true"]
        noop = lab.hooks_dir / "prolog-noop.sh"
        noop.write_text("#!/bin/sh\nexit 0\n")
        noop.chmod(0o755)
        with_prolog, without, trivial = [], [], []
        for conf, bucket in (
            (f"Prolog={shim}\nPrologFlags=Alloc", with_prolog),
            (f"Prolog={noop}\nPrologFlags=Alloc", trivial),
            ("", without),
        ):
            lab.reconfigure(conf)
            timed(srun, client_env)  # first job after reconfigure (and warms the cache)
            for _ in range(args.runs):
                bucket.append(timed(srun, client_env))
        print("== 3. job start: srun -w n1 true (submit to exit)")
        print(fig("no prolog (baseline)", without))
        print(fig("'exit 0' prolog (Slurm's prolog machinery)", trivial))
        print(fig("our prolog, warm cache", with_prolog))
        diff = statistics.median(with_prolog) - statistics.median(without)
        ratio = statistics.median(with_prolog) / statistics.median(without)
        ours = statistics.median(with_prolog) - statistics.median(trivial)
        print(f"   prolog adds {diff * 1000:.1f} ms per job start (x{ratio:.2f} of baseline)")
        print(f"   of which our hook (vs an 'exit 0' prolog): {ours * 1000:.1f} ms")
        cached = (nf.state_dir / CACHE_FILE).read_text()
        print(f"   cache after the srun runs still from the bench's first pass: {'4242' in cached}")
        hooks.close(reconfigure=False)
    finally:
        lab.down()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
