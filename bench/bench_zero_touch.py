#!/usr/bin/env python3
"""Zero-touch signals: what one watcher pass costs the node per job process.

A job that writes no progress records is watched through its processes
(docs/progress.md): each pass parses one ``scontrol listpids`` listing and
samples every listed process from ``/proc`` (a ``stat`` and two small reads:
state, CPU time, context switches), then folds the samples into the judge's
rank views.  This starts N real (sleeping) processes, feeds the pass a
listing of them as ranks of jobs of 8 tasks, and times whole passes with the
progress pass's own CPU meter (``PassStats.cpu_s``: the thread's CPU time)
and the wall clock, against the same pass over the same jobs with
``zero_touch = false`` measured in the same run (the baseline).  The
``scontrol`` call itself is not timed here (slurmstepd answers it; the lab
measures it end to end).

    python bench/bench_zero_touch.py [--pids 64 256 512] [--passes 50]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any

from slurm_hooks.agent.progress_pass import ProgressPass
from slurm_hooks.core.model import JobInfo
from slurm_hooks.detect.progress import tasks
from slurm_hooks.detect.progress.settings import ProgressConfig

TASKS_PER_JOB = 8


class _Engine:
    actor = "bench"

    def __init__(self, jobs: dict[str, JobInfo]):
        self.slurm = SimpleNamespace(
            get_job=lambda j: jobs[j],
            jobs_on_node=lambda n: list(jobs.values()),
            get_node=lambda n: SimpleNamespace(name=n, state="mixed", flags=frozenset(),
                                               reason=None),
        )  # fmt: skip
        self.audit = SimpleNamespace(record=lambda *a, **k: None)

    def handle(self, node: str, findings: Any) -> list[Any]:
        return []

    def notify(self, alert: Any) -> None:
        pass


def listing(pids: list[int]) -> str:
    lines = ["PID      JOBID    STEPID   LOCALID GLOBALID"]
    for i, pid in enumerate(pids):
        job, rank = 1000 + i // TASKS_PER_JOB, i % TASKS_PER_JOB
        lines.append(f"{pid} {job} 0 {rank} {rank}")
    return "\n".join(lines) + "\n"


def run(n: int, passes: int, zero_touch: bool) -> tuple[float, float]:
    """(median CPU ms, median wall ms) of one pass over ``n`` processes."""
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
                for _ in range(n)]  # fmt: skip
    try:
        text = listing([c.pid for c in children])
        jobs = {str(1000 + i): JobInfo(str(1000 + i), "root", "RUNNING", "bench")
                for i in range((n + TASKS_PER_JOB - 1) // TASKS_PER_JOB)}  # fmt: skip
        cfg = ProgressConfig(dir="/nonexistent", zero_touch=zero_touch, max_pids=max(n, 1))
        clock = [time.time()]
        p = ProgressPass(cfg, "bench", _Engine(jobs), clock=lambda: clock[0])
        p.signals.node_tasks = lambda node, limit: tasks.parse_node_listpids(text, limit)
        cpu, wall = [], []
        for _ in range(passes):
            clock[0] += 5.0
            t0 = time.perf_counter()
            p.run()
            wall.append(time.perf_counter() - t0)
            cpu.append(p.last.cpu_s)
        if zero_touch:
            assert p.last.sampled_pids == n, p.last
        return statistics.median(cpu) * 1e3, statistics.median(wall) * 1e3
    finally:
        for c in children:
            c.kill()
            c.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pids", type=int, nargs="+", default=[64, 256, 512])
    ap.add_argument("--passes", type=int, default=50)
    a = ap.parse_args()
    print(f"{'processes':>9} {'pass cpu ms':>11} {'wall ms':>8} {'baseline ms':>11} "
          f"{'us/process':>10} {'cpu % at 5 s':>12}")  # fmt: skip
    for n in a.pids:
        base_cpu, _ = run(n, a.passes, zero_touch=False)
        cpu, wall = run(n, a.passes, zero_touch=True)
        per = (cpu - base_cpu) * 1e3 / n if n else 0.0
        print(f"{n:>9} {cpu:>11.2f} {wall:>8.2f} {base_cpu:>11.2f} {per:>10.1f} "
              f"{100 * cpu / 1e3 / 5.0:>11.3f}%")  # fmt: skip


if __name__ == "__main__":
    main()
