#!/usr/bin/env python3
"""The false-alarm replay (issue #30): how often hang detection cries wolf on
healthy training jobs, and how soon it speaks on hung ones, at the given
``[progress]`` settings (the product's defaults unless ``--set``).

Healthy jobs (``slurm_hooks/simulate/workload.py``: checkpoint pauses of
minutes, evaluations, long first steps, recompiles, data-loader stalls,
restarts, gradient-accumulation steps, ranks of different speed; generated,
seeded: no recorded traces ship with the project) go through the product's
hang and straggler judges and the policy as the watcher's progress pass runs
them (``slurm_hooks/simulate/hang_replay.py``); anything the product would
do about a healthy job is a false alarm.  Then the hang cases (a rank
stopped, exited, wedged with trusted evidence, a silent stall): seconds from
the stall to the alarm, against NCCL's 600 s collective timeout.  Prints
figures only; ``--sweep hang_s=120,600,900`` repeats both for each value.

    .venv/bin/python bench/bench_hang_replay.py [--job-hours 10000] [--seed 1]
        [--trials 50] [--set hang_s=900] [--sweep hang_s=120,300,600,900]
        [--several-nodes]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

from slurm_hooks.detect.progress.settings import ProgressConfig
from slurm_hooks.simulate.hang_replay import Setup, replay_hangs, replay_healthy

NCCL_TIMEOUT_S = 600.0
SHOWN = ("hang_s", "stopped_s", "exited_s", "trusted_confirm_s", "first_step_allowance_s",
         "interval_s", "no_culprit_report_s", "slow_percent", "slow_windows", "window_steps")  # fmt: skip


def _with(cfg: ProgressConfig, name: str, raw: str) -> ProgressConfig:
    fields = {f.name: f for f in dataclasses.fields(cfg)}
    if name not in fields:
        raise SystemExit(f"unknown [progress] key {name!r}")
    current: Any = getattr(cfg, name)
    return dataclasses.replace(cfg, **{name: type(current)(raw)})


def one(cfg: ProgressConfig, job_hours: float, seed: int, trials: int, one_node: bool) -> None:
    print("settings: " + ", ".join(f"{k} {getattr(cfg, k):g}" for k in SHOWN))
    print("jobs: " + ("one node each" if one_node else "one node's share of a job on several"))
    t0 = time.perf_counter()
    r = replay_healthy(job_hours, seed, Setup(cfg, one_node=one_node))
    wall = time.perf_counter() - t0
    print(f"  healthy: {r.job_hours:,.0f} job-hours, {r.jobs} jobs, {r.runs} runs, "
          f"{r.passes:,} passes ({wall:.1f} s); Slurm asked about a job's step "
          f"{r.step_reads} time(s)")  # fmt: skip
    print(f"  false alarms: {len(r.alarms)} = {r.per_10k_job_hours:.1f} per 10,000 job-hours "
          f"(goal 0)")  # fmt: skip
    if r.alarms:
        print("    by kind:  " + ", ".join(f"{k} {n}" for k, n in r.by("kind").most_common()))
        print("    by phase: " + ", ".join(f"{k} {n}" for k, n in r.by("phase").most_common()))
        print(f"    e.g. {r.alarms[0].explanation}")
    gaps = sorted(r.longest_gap_s.items(), key=lambda kv: -kv[1])
    print("  longest healthy gap before a record: "
          + ", ".join(f"{k} {v:.0f}s" for k, v in gaps))  # fmt: skip
    if r.longest_stall_s:
        print("  longest healthy stall judged a hang, per culprit cause: "
              + ", ".join(f"{k} {v:.0f}s" for k, v in
                          sorted(r.longest_stall_s.items(), key=lambda kv: -kv[1])))  # fmt: skip
    t0 = time.perf_counter()
    figures = replay_hangs(trials, seed, Setup(cfg))
    print(f"  hang cases ({trials} trials each, {time.perf_counter() - t0:.1f} s); seconds from "
          f"the stall to the alarm, vs NCCL's {NCCL_TIMEOUT_S:g} s collective timeout:")  # fmt: skip
    # The goal per case (issue #30): stopped and wedged no later than their
    # own waits, exited and silent within hang_s, a pass and the no-culprit delay.
    late = cfg.hang_s + cfg.interval_s + cfg.no_culprit_report_s
    goal = {"stopped": cfg.stopped_s + cfg.interval_s, "wedged": cfg.trusted_confirm_s
            + cfg.interval_s, "exited": late, "silent": late}  # fmt: skip
    for f in figures:
        if f.median_s is None or f.max_s is None:
            print(f"    {f.case:<8} detected 0/{f.trials}")
            continue
        print(f"    {f.case:<8} detected {f.detected}/{f.trials}, right verdict "
              f"{f.right}/{f.trials}: median {f.median_s:.0f} s, max {f.max_s:.0f} s "
              f"(goal <= {goal[str(f.case)]:.0f} s); "
              f"ratio {f.median_s / NCCL_TIMEOUT_S:.2f}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job-hours", type=float, default=10_000.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--trials", type=int, default=50, help="trials per hang case")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a [progress] key for every run (repeatable)")  # fmt: skip
    ap.add_argument("--sweep", metavar="KEY=V1,V2,...", help="one run per value")
    ap.add_argument("--several-nodes", action="store_true",
                    help="the replayed ranks are one node's share of a job on several nodes")  # fmt: skip
    args = ap.parse_args()
    cfg = ProgressConfig()
    for item in args.set:
        key, _, raw = item.partition("=")
        cfg = _with(cfg, key, raw)
    print(f"seed {args.seed}; the product's [progress] defaults unless set")
    if not args.sweep:
        one(cfg, args.job_hours, args.seed, args.trials, not args.several_nodes)
        return
    key, _, raws = args.sweep.partition("=")
    for raw in raws.split(","):
        one(_with(cfg, key, raw), args.job_hours, args.seed, args.trials, not args.several_nodes)


if __name__ == "__main__":
    main()
