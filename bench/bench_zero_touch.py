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

With ``--lab N`` it also runs N end-to-end trials on a lab it starts itself
(real slurmctld/slurmd, our watchers at the product's ``[progress]``
defaults, a 10 s checkpoint grace): a plain 2-node job that never imports
slurm-hooks and writes no records (each rank computes in a loop), rank 1
SIGSTOPped on a node whose GPU NVML reports lost -> seconds to that node
drained with HANG and to the job RUNNING again, against NCCL's 600 s.

    python bench/bench_zero_touch.py [--pids 64 256 512] [--passes 50] [--lab 3]
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


PLAIN_JOB = """#!/bin/bash
#SBATCH -N2
#SBATCH --ntasks-per-node=1
#SBATCH --requeue
srun {py} -c '
import os, time
out = "{out}/r%s-%s" % (os.environ["SLURM_PROCID"], os.environ.get("SLURM_RESTART_COUNT", "0"))
with open(out, "w") as f:
    f.write(os.environ["SLURMD_NODENAME"] + " " + str(os.getpid()))
while True:
    end = time.time() + 0.2
    while time.time() < end:
        pass
    time.sleep(0.05)
'
"""
NCCL_TIMEOUT_S = 600.0


def _running_again(lab: Any, job: str) -> bool:
    info = lab.client().get_job(job)
    return bool(info.restart_count >= 1 and info.state == "RUNNING")


def lab_trials(n: int) -> list[tuple[float, float]]:
    """(seconds to drained, to RUNNING again) per trial."""
    import os
    import shutil
    import signal
    import tempfile
    from pathlib import Path

    from slurm_hooks_lab.hooks import install, wait_drained
    from slurm_hooks_lab.lab import Lab, missing_prerequisites

    from slurm_hooks.detect.probes.commands import run as cmd

    problems = missing_prerequisites()
    if problems:
        print("end to end: no lab here: " + "; ".join(problems))
        return []
    base = Path(tempfile.mkdtemp(prefix="slurm-hooks-bench-zero-touch-"))
    lab = Lab(str(base), 3)  # one spare: the requeued job runs without the culprit
    out: list[tuple[float, float]] = []
    try:
        lab.up()
        for k in range(n):
            work = lab.shared_dir / f"zero-touch-{k}"
            shutil.rmtree(work, ignore_errors=True)
            (work / "progress").mkdir(parents=True)
            for d in (work, work / "progress"):
                os.chmod(d, 0o1777)
            hooks = install(lab, grace_s=10.0, progress={"dir": str(work / "progress")},
                            watch={"nvml_interval_s": 3600.0})  # fmt: skip
            try:
                for node in lab.node_names:
                    hooks.start_watcher(node)
                s = work / "job.sh"
                s.write_text(PLAIN_JOB.format(py=sys.executable, out=work))
                job = cmd(["sbatch", "--parsable", f"--output={work}/out", f"--chdir={work}",
                           str(s)], timeout=30, env=lab.env()).stdout.strip()  # fmt: skip
                try:
                    mark = work / "r1-0"
                    lab.wait_for(lambda m=mark: m.exists() and m.read_text(), 60, what="rank 1")
                    time.sleep(8.0)  # the ranks work a while
                    node, pid = mark.read_text().split()
                    hooks.lose_gpu(node, 0)
                    t0 = time.monotonic()
                    os.kill(int(pid), signal.SIGSTOP)
                    reason = wait_drained(lab, node, timeout=90)
                    drained = time.monotonic() - t0
                    lab.wait_for(lambda j=job: _running_again(lab, j), 300, what="running")
                    out.append((drained, time.monotonic() - t0))
                    print(f"  trial {k}: drained {drained:.1f}s, running again "
                          f"{out[-1][1]:.1f}s ({reason[:100]})")  # fmt: skip
                finally:
                    cmd(["scancel", job], timeout=30, env=lab.env(), check=False)
            finally:
                hooks.close(reconfigure=False)
                lab.reset()
                hooks.reset_state()
    finally:
        lab.down()
        shutil.rmtree(base, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pids", type=int, nargs="+", default=[64, 256, 512])
    ap.add_argument("--passes", type=int, default=50)
    ap.add_argument("--lab", type=int, default=0, help="end-to-end trials on a lab (0: none)")
    a = ap.parse_args()
    print(f"{'processes':>9} {'pass cpu ms':>11} {'wall ms':>8} {'baseline ms':>11} "
          f"{'us/process':>10} {'cpu % at 5 s':>12}")  # fmt: skip
    for n in a.pids:
        base_cpu, _ = run(n, a.passes, zero_touch=False)
        cpu, wall = run(n, a.passes, zero_touch=True)
        per = (cpu - base_cpu) * 1e3 / n if n else 0.0
        print(f"{n:>9} {cpu:>11.2f} {wall:>8.2f} {base_cpu:>11.2f} {per:>10.1f} "
              f"{100 * cpu / 1e3 / 5.0:>11.3f}%")  # fmt: skip
    if a.lab:
        trials = lab_trials(a.lab)
        if trials:
            drained = statistics.median(t[0] for t in trials)
            running = statistics.median(t[1] for t in trials)
            print(f"plain job, trusted evidence, defaults (median of {len(trials)}): drained "
                  f"{drained:.1f}s, running again {running:.1f}s; NCCL's timeout "
                  f"{NCCL_TIMEOUT_S:g}s, ratio {running / NCCL_TIMEOUT_S:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
