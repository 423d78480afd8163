#!/usr/bin/env python3
"""Progress records and the hang judge: what they cost and how often they cry wolf.

* the job-side cost of one ``Progress.step()`` (one O_APPEND write) on tmpfs
  and on the given directory;
* false positives of the hang and straggler judges over a long healthy run
  (simulated clock, jittery step times, occasional slow steps, several ranks);
* detection latency versus the collective timeout it replaces: the hang is
  judged ``hang_s`` after the last step (plus up to one watcher interval), so
  against NCCL's 600 s default the ratio is (hang_s + interval_s) / 600.  The
  end-to-end figure on real Slurm (stop -> drained -> requeued -> running
  again) is measured by tests/test_progress_lab.py's SIGSTOP scenario.

    python bench/bench_hang.py [--steps 20000] [--ranks 8] [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time

from slurm_hooks.detect.progress.judge import Verdict, judge_hang, judge_stragglers
from slurm_hooks.detect.progress.records import RankView
from slurm_hooks.detect.progress.settings import ProgressConfig
from slurm_hooks.jobside.progress import Progress

NCCL_TIMEOUT_S = 600.0


def writer_cost(directory: str, n: int) -> float:
    with tempfile.TemporaryDirectory(dir=directory) as d:
        p = Progress(d, "1", 0, node="bench")
        t0 = time.perf_counter()
        for s in range(1, n + 1):
            p.step(s, busy=0.1)
        dt = time.perf_counter() - t0
        p.close()
    return dt / n


def false_positives(steps: int, ranks: int, seed: int, cfg: ProgressConfig) -> tuple[int, int, int]:
    """(hang verdicts, straggler verdicts, judge calls) over a healthy run
    with step times 1 s +-30 %, one step in 500 taking 30x longer (a
    checkpoint, an eval), judged every interval_s."""
    rng = random.Random(seed)
    t = 1000.0
    busy: dict[int, list[tuple[int, float]]] = {r: [] for r in range(ranks)}
    hangs = slows = calls = 0
    next_judge = t
    for step in range(1, steps + 1):
        per = [rng.uniform(0.7, 1.3) * (30 if rng.random() < 1 / 500 else 1) for _ in range(ranks)]
        slowest = max(per)
        for r in range(ranks):
            busy[r].append((step, per[r]))
            del busy[r][:-200]
        end = t + slowest
        while next_judge < end:
            views = {
                r: RankView(
                    r, f"n{r}", 100 + r, 0, 1000.0, step - 1, t, 1001.0, tuple(busy[r][:-1])
                )  # fmt: skip
                for r in range(ranks)
            }
            calls += 1
            if judge_hang("1", views, {}, next_judge, cfg.hang).verdict in (
                Verdict.HANG, Verdict.STALLED):  # fmt: skip
                hangs += 1
            slows += len(judge_stragglers("1", views, cfg.slow))
            next_judge += cfg.interval_s
        t = end
    return hangs, slows, calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    cfg = ProgressConfig()
    for d in dict.fromkeys([args.dir, tempfile.gettempdir()]):
        print(f"writer: {writer_cost(d, 20000) * 1e6:.1f} us per step in {d}")
    hangs, slows, calls = false_positives(args.steps, args.ranks, args.seed, cfg)
    print(f"healthy run: {args.steps} steps x {args.ranks} ranks, {calls} judge calls: "
          f"{hangs} hang false positive(s), {slows} straggler false positive(s)")  # fmt: skip
    worst = cfg.hang_s + cfg.interval_s
    print(f"detection after a rank stops: <= {worst:g}s (hang_s {cfg.hang_s:g} + interval "
          f"{cfg.interval_s:g}) vs NCCL's {NCCL_TIMEOUT_S:g}s collective timeout: "
          f"ratio {worst / NCCL_TIMEOUT_S:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
