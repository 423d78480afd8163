"""Detect-to-drain latency on a real Slurm lab: watcher vs HealthCheckProgram.

For each trial an XID 79 line is appended to a node's kernel log (the lab's
per-node file) and ``sinfo -R`` is polled every 10 ms until the node shows a
reason; the time from the write to that answer is the figure.  Between
trials the node is resumed and its slurm-hooks state wiped, so every trial
starts from the same healthy node.

* watcher: ``python -m slurm_hooks.agent.watch`` running for the node (goal < 0.5 s);
* healthcheck: no watcher; slurmd runs our shim as HealthCheckProgram every
  ``--interval`` seconds (the median is about half the interval plus the
  hook's own run time).

Brings up its own lab in a fresh temp directory and takes it down after.
Needs root and Debian's slurm packages (like the lab tests).

    .venv/bin/python bench/bench_detect_to_drain.py [--trials 7] [--interval 2]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time

from slurm_hooks_lab.hooks import LabHooks, install, wait_drained
from slurm_hooks_lab.lab import Lab, missing_prerequisites

NODE = "n2"


def reset_node(lab: Lab, hooks: LabHooks, node: str) -> None:
    """Resume the node and forget its incident, history and XID history, as
    if the GPU had been replaced.  The kernel-log cursor is kept (a watcher
    holds it)."""
    client = lab.client()
    client.resume(node)
    lab.wait_idle([node], timeout=30)
    state = hooks.node(node).state_dir
    for sub in ("nodes", "incidents"):
        shutil.rmtree(state / sub, ignore_errors=True)
    (state / "xid" / "history.json").unlink(missing_ok=True)


def trial(lab: Lab, hooks: LabHooks, node: str, timeout: float) -> float:
    t0 = time.perf_counter()
    hooks.inject_xid(node, 79, gpu=1)
    wait_drained(lab, node, timeout=timeout, interval=0.01)
    return time.perf_counter() - t0


def run_watcher(lab: Lab, hooks: LabHooks, trials: int) -> list[float]:
    hooks.start_watcher(NODE)
    try:
        out = []
        for _ in range(trials):
            time.sleep(random.uniform(0.2, 0.6))  # the watcher is idle, between polls
            out.append(trial(lab, hooks, NODE, timeout=10))
            reset_node(lab, hooks, NODE)
        return out
    finally:
        hooks.stop_watcher(NODE)


def run_healthcheck(lab: Lab, hooks: LabHooks, trials: int, interval: int) -> list[float]:
    out = []
    for _ in range(trials):
        time.sleep(random.uniform(0, interval))  # land anywhere in the health check cycle
        out.append(trial(lab, hooks, NODE, timeout=interval * 3 + 30))
        reset_node(lab, hooks, NODE)
    return out


def fmt(xs: list[float]) -> str:
    return f"median {statistics.median(xs):7.3f} s  (min {min(xs):.3f}, max {max(xs):.3f}, n={len(xs)})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=7)
    p.add_argument("--interval", type=int, default=2, help="HealthCheckInterval (s)")
    p.add_argument("--nodes", type=int, default=2)
    args = p.parse_args(argv)
    problems = missing_prerequisites()
    if problems:
        print("cannot run the lab here: " + "; ".join(problems), file=sys.stderr)
        return 2
    base = tempfile.mkdtemp(prefix="slurm-hooks-bench-d2d-")
    lab = Lab(base, args.nodes)
    try:
        up = lab.up()
        print(f"lab up in {up:.2f}s ({args.nodes} nodes, {base})")
        hooks = install(lab, grace_s=5)
        watch = run_watcher(lab, hooks, args.trials)
        hooks.close()
        hooks = install(lab, grace_s=5, healthcheck_interval=args.interval)
        health = run_healthcheck(lab, hooks, args.trials, args.interval)
        hooks.close()
    finally:
        lab.down()
        shutil.rmtree(base, ignore_errors=True)
    print()
    print("XID 79 line written -> node drained in sinfo (polled every 10 ms)")
    print(f"  watcher (file follower, 50 ms)    {fmt(watch)}")
    print(f"  HealthCheckProgram (interval {args.interval} s) {fmt(health)}")
    ratio = statistics.median(health) / statistics.median(watch)
    print(f"  watcher is {ratio:.1f}x faster (median); goal for the watcher: < 0.5 s")
    print("  per trial, watcher:     " + " ".join(f"{x:.3f}" for x in watch))
    print("  per trial, healthcheck: " + " ".join(f"{x:.3f}" for x in health))
    return 0


if __name__ == "__main__":
    sys.exit(main())
