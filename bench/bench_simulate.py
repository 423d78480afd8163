"""Benchmark: ``slurm-hooks simulate`` on the Llama 3 trace (2,048 nodes, 54 days).

Goal (issue 33): the replay of ``--trace llama3 --nodes 2048 --days 54 --seed
1`` takes at most 60 s on 2 cores and is deterministic for a seed.  Runs the
command twice under ``/usr/bin/time`` (pinned to two CPUs with ``taskset``
where it exists), compares the two JSON documents, and prints wall time, CPU
time and peak memory beside the same figures for ``slurm-hooks simulate
--help`` (the interpreter and CLI start-up: the baseline measured in the same
run) and, in process, each baseline's replay alone.  Prints figures only.

    .venv/bin/python bench/bench_simulate.py [--nodes 2048] [--days 54] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(argv: list[str]) -> tuple[dict[str, float], str]:
    """Run ``argv`` under /usr/bin/time; (figures, stdout)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        cmd = ["/usr/bin/time", "-f", "%e %U %S %M", "-o", tf.name, *argv]
        if shutil.which("taskset"):
            cmd = ["taskset", "-c", "0,1", *cmd]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        wall, user, sys_s, rss = tf.read().split()[-4:]
    return {"wall_s": float(wall), "cpu_s": float(user) + float(sys_s),
            "max_rss_mb": int(rss) / 1024}, out.stdout  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--days", type=float, default=54.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    exe = str(Path(sys.executable).with_name("slurm-hooks"))
    argv = [exe, "simulate", "--trace", "llama3", "--nodes", str(args.nodes),
            "--days", f"{args.days:g}", "--seed", str(args.seed), "--json"]  # fmt: skip
    base, _ = timed([exe, "simulate", "--help"])
    first, out1 = timed(argv)
    second, out2 = timed(argv)
    same = json.loads(out1) == json.loads(out2)
    doc = json.loads(out1)
    print(f"command: {' '.join(['slurm-hooks', *argv[1:]])}")
    print(f"cpus available: {len(os.sched_getaffinity(0))}; pinned to 0,1: "
          f"{bool(shutil.which('taskset'))}")  # fmt: skip
    print(f"{'run':<22}{'wall s':>9}{'cpu s':>9}{'max RSS MB':>12}")
    for name, f in (("--help (start-up)", base), ("replay, 1st", first), ("replay, 2nd", second)):
        print(f"{name:<22}{f['wall_s']:>9.2f}{f['cpu_s']:>9.2f}{f['max_rss_mb']:>12.0f}")
    worst = max(first["wall_s"], second["wall_s"])
    print(f"goal <= 60 s on 2 cores: {worst:.2f} s ({worst / 60:.1%} of the goal); "
          f"{worst / base['wall_s']:.1f}x the start-up")  # fmt: skip
    print(f"deterministic for seed {args.seed}: {same}")
    print(f"faults in the trace: {doc['trace']['faults']}")
    for name, b in doc["baselines"].items():
        print(f"  {name:<12} ETTR {b['ettr']:.2%}  node-hours out {b['node_hours_out']:,.0f}")

    # Each baseline alone, in process (what the start-up does not include).
    from slurm_hooks.simulate.params import SimParams
    from slurm_hooks.simulate.replay import Baseline, Replay
    from slurm_hooks.simulate.trace import generate

    p = SimParams(nodes=args.nodes, days=args.days)
    t0 = time.perf_counter()
    tr = generate("llama3", nodes=p.nodes, days=p.days, seed=args.seed)
    print(f"in process: trace generated in {time.perf_counter() - t0:.3f} s")
    for b in Baseline:
        t0 = time.perf_counter()
        Replay(tr, p, b).run()
        print(f"in process: {b:<12} replayed in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
