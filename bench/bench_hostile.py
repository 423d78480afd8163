"""XID 79 -> drained, quiet and under a hostile user's attack, side by side in one run.

On a real 2-node Slurm lab with the progress pass on (``[progress]``, records
in a world-writable directory, flight-recorder and NCCL RAS globs set), the
watcher of ``n1`` is timed from an XID 79 line appended to the node's kernel
log to ``sinfo`` showing the drain, ``--trials`` times:

* quiet: no progress records at all;
* attack: the unprivileged lab user has written ``--stalled`` directories of
  stalled jobs that do not run here (two backdated records each, naming
  ``n1``), and runs a job on ``n1`` whose directory holds stalled records, a
  flight-recorder dump of 100,000 nested JSON arrays, a pickle dict with
  colliding integer keys, a pickle claiming a 2 GiB bytes value and memo
  slot 2**25, and the same nesting as a RAS output and a record file
  (``slurm_hooks_lab.hostile``).

Printed: p50/p95 of each, the attack/quiet ratio at p95 (goal <= 1.2), the
watcher's peak RSS (``VmHWM``, goal <= 100 MB), its restarts (it is started
again if it exits, like systemd's ``Restart=always``; goal 0), slurmctld's
job-read RPCs during each phase (``sdiag``) and the watcher's
``slurm_hooks_progress_*`` counters where it serves them.

``--watcher-pythonpath DIR`` runs the watcher from another checkout (e.g.
an older commit exported with ``git archive``) for a before/after figure.
Needs root and Debian's slurm packages (like the lab tests).

    .venv/bin/python bench/bench_hostile.py [--trials 5] [--stalled 10000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from slurm_hooks_lab.hooks import LabHooks, install, wait_drained
from slurm_hooks_lab.hostile import plant
from slurm_hooks_lab.lab import TEST_USER, Lab, LabError, missing_prerequisites

from slurm_hooks.core.errors import SlurmError

NODE = "n1"
RPCS = ("REQUEST_JOB_INFO_SINGLE", "REQUEST_JOB_INFO")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Watcher:
    """The node's watcher, started again whenever it exits (counted)."""

    def __init__(self, hooks: LabHooks, pythonpath: str | None):
        self.hooks = hooks
        self.port = free_port()
        self.env = hooks.watcher_env(NODE)
        if pythonpath:
            self.env["PYTHONPATH"] = pythonpath
        self.log = hooks.node(NODE).dir / "watch.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.peak_kb = 0

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(  # noqa: S603 - fixed argv
                self.hooks.watch_argv(NODE, "--metrics-port", str(self.port)),
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=self.env, cwd="/",
                start_new_session=True,
            )  # fmt: skip

    def check(self) -> None:
        assert self.proc is not None
        self.peak_kb = max(self.peak_kb, self.rss_kb("VmHWM"))
        if self.proc.poll() is not None:
            self.restarts += 1
            print(f"  watcher exited rc={self.proc.returncode}; started again", flush=True)
            self.start()

    def rss_kb(self, key: str) -> int:
        assert self.proc is not None
        try:
            with open(f"/proc/{self.proc.pid}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith(key + ":"):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def metrics(self) -> dict[str, float]:
        try:
            url = f"http://127.0.0.1:{self.port}/metrics"
            text = urllib.request.urlopen(url, timeout=5).read().decode()  # noqa: S310 - loopback
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            if line.startswith("slurm_hooks_progress_") and "_created" not in line:
                name, value = line.rsplit(" ", 1)
                out[name.removeprefix("slurm_hooks_progress_").removesuffix("_total")] = float(
                    value
                )
        return out

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def sdiag_rpcs(lab: Lab) -> dict[str, int]:
    out = subprocess.run(["sdiag"], env={**os.environ, **lab.env()}, capture_output=True, text=True, timeout=30,
                         check=False).stdout  # fmt: skip
    counts = dict.fromkeys(RPCS, 0)
    for line in out.splitlines():
        words = line.split()
        if words and words[0] in counts and "count:" in line:
            counts[words[0]] = int(line.split("count:", 1)[1].split()[0])
    return counts


def reset_node(lab: Lab, hooks: LabHooks) -> None:
    """Resume the node and forget its incident and XID history (the GPU was
    replaced) once its evacuation is over; the kernel-log cursor is kept
    (the watcher holds it)."""
    from slurm_hooks.store.state import StateStore

    store = StateStore(hooks.node(NODE).state_dir)
    lab.wait_for(lambda: not store.incidents(NODE, pending_only=True), 120,
                 what="the incident's evacuation to finish")  # fmt: skip
    with contextlib.suppress(SlurmError):  # not drained (a trial that timed out)
        lab.client().resume(NODE)
    lab.wait_idle([NODE], timeout=60)
    state = hooks.node(NODE).state_dir
    for sub in ("nodes", "incidents"):
        shutil.rmtree(state / sub, ignore_errors=True)
    (state / "xid" / "history.json").unlink(missing_ok=True)


def trial(lab: Lab, hooks: LabHooks, w: Watcher, timeout: float, settle: float) -> float:
    """Seconds from the XID line to the drain (the same settling time before
    each trial, quiet or not: the last reset's worker has finished)."""
    time.sleep(settle)
    w.check()
    if lab.client().get_node(NODE).reason:
        raise LabError(f"{NODE} has a reason before the XID: {lab.client().get_node(NODE).reason}")
    t0 = time.perf_counter()
    hooks.inject_xid(NODE, 79, gpu=1)
    try:
        reason = wait_drained(lab, NODE, timeout=timeout, interval=0.01)
    except LabError:
        print(f"  not drained within {timeout:g}s", flush=True)
        return float("inf")
    finally:
        w.check()
    took = time.perf_counter() - t0
    if "XID79" not in reason:
        raise LabError(f"{NODE} drained for something else: {reason}")
    return took


def attacker_job(lab: Lab, script: Path) -> str:
    argv = ["runuser", "-u", TEST_USER, "--", "sbatch", "--parsable", "-w", NODE,
            "--no-requeue", "-o", "/dev/null", str(script)]  # fmt: skip
    job = subprocess.run(argv, env={**os.environ, **lab.env()}, capture_output=True, text=True, check=True,
                         timeout=30, cwd=str(script.parent)).stdout.strip().split(";")[0]  # fmt: skip
    lab.wait_job(job, lambda j: j.state == "RUNNING", timeout=60)
    return job


def p95(xs: list[float]) -> float:
    if float("inf") in xs:
        return float("inf")
    return statistics.quantiles(xs, n=20, method="inclusive")[-1] if len(xs) > 1 else xs[0]


def fmt(xs: list[float]) -> str:
    return f"p50 {statistics.median(xs):.3f}s  p95 {p95(xs):.3f}s  " + " ".join(
        f"{x:.2f}" for x in xs
    )


def run(args: argparse.Namespace, lab: Lab) -> dict[str, Any]:
    pdir = lab.shared_dir / "hostile-progress"
    shutil.rmtree(pdir, ignore_errors=True)
    pdir.mkdir(parents=True)
    os.chmod(pdir, 0o1777)
    progress = {"dir": str(pdir), "interval_s": args.interval, "hang_s": 30.0,
                "drain_hang": False, "flight_recorder_path": f"{pdir}/{{job}}/fr_*",
                "ras_path": f"{pdir}/{{job}}/ras*.txt"}  # fmt: skip
    hooks = install(lab, grace_s=1.0, progress=progress, reconfigure=False)
    w = Watcher(hooks, args.watcher_pythonpath)
    w.start()
    script = lab.shared_dir / "hostile-job.sh"
    script.write_text("#!/bin/sh\nexec sleep 3000\n")
    script.chmod(0o755)
    res: dict[str, Any] = {"quiet": [], "attack": []}
    try:
        lab.wait_for(lambda: (hooks.node(NODE).state_dir / "xid").is_dir(), 60,
                     what="watcher's first pass")  # fmt: skip
        time.sleep(1.0)
        settle = 2 * args.interval + 1.0  # two passes: the attack under way
        rpc0 = sdiag_rpcs(lab)
        for i in range(args.trials):
            res["quiet"].append(trial(lab, hooks, w, args.timeout, settle))
            print(f"quiet  {i + 1}: {res['quiet'][-1]:.3f}s", flush=True)
            reset_node(lab, hooks)
        rpc1 = sdiag_rpcs(lab)
        m0 = w.metrics()
        t = time.monotonic()
        plant(TEST_USER, pdir, NODE, stalled=args.stalled, env=lab.env())
        print(f"{args.stalled} stalled directories planted by {TEST_USER} in "
              f"{time.monotonic() - t:.1f}s", flush=True)  # fmt: skip
        for i in range(args.trials):
            job = attacker_job(lab, script)
            plant(TEST_USER, pdir, NODE, job=job, hash_keys=args.hash_keys, env=lab.env())
            res["attack"].append(trial(lab, hooks, w, args.timeout, settle))
            print(f"attack {i + 1}: {res['attack'][-1]:.3f}s", flush=True)
            if res["attack"][-1] == float("inf"):
                print("  the other trials skipped: this one never drained", flush=True)
                subprocess.run(["scancel", job], env={**os.environ, **lab.env()}, check=False,
                               timeout=30)  # fmt: skip
                break
            reset_node(lab, hooks)
            subprocess.run(["scancel", job], env={**os.environ, **lab.env()}, check=False,
                           timeout=30)  # fmt: skip
        rpc2 = sdiag_rpcs(lab)
        w.check()
        res["metrics"] = {k: v - m0.get(k, 0.0) for k, v in w.metrics().items()}
        res["rpc_quiet"] = {k: rpc1[k] - rpc0[k] for k in RPCS}
        res["rpc_attack"] = {k: rpc2[k] - rpc1[k] for k in RPCS}
        res["rss_kb"] = w.rss_kb("VmRSS")
        res["peak_kb"] = w.peak_kb
        res["restarts"] = w.restarts
    finally:
        w.stop()
        hooks.close(reconfigure=False)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--stalled", type=int, default=10_000)
    p.add_argument("--hash-keys", type=int, default=40_000)
    p.add_argument("--interval", type=float, default=1.0, help="[progress] interval_s")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per trial at most")
    p.add_argument("--watcher-pythonpath", help="run the watcher's slurm_hooks from here")
    args = p.parse_args(argv)
    problems = missing_prerequisites()
    if problems:
        print("cannot run the lab here: " + "; ".join(problems), file=sys.stderr)
        return 2
    base = tempfile.mkdtemp(prefix="slurm-hooks-bench-hostile-")
    lab = Lab(base, 2)
    try:
        print(f"lab up in {lab.up():.2f}s", flush=True)
        res = run(args, lab)
    finally:
        with contextlib.suppress(Exception):
            lab.down()
        shutil.rmtree(base, ignore_errors=True)
    quiet, attack = res["quiet"], res["attack"]
    ratio = p95(attack) / p95(quiet)
    print(f"\nXID 79 -> drained, {args.trials} trials each")
    print(f"  quiet:  {fmt(quiet)}")
    print(f"  attack: {fmt(attack)}  ({args.stalled} stalled directories + hostile files)")
    print(f"  ratio at p95: {ratio:.2f}x (goal <= 1.2x)")
    print(f"watcher RSS: now {res['rss_kb'] / 1024:.0f} MB, peak {res['peak_kb'] / 1024:.0f} MB "
          f"(goal <= 100 MB); restarts: {res['restarts']} (goal 0)")  # fmt: skip
    print(f"slurmctld job reads (sdiag): quiet {res['rpc_quiet']}, attack {res['rpc_attack']}")
    if res["metrics"]:
        print("watcher's progress counters over the attack: "
              + ", ".join(f"{k}={v:g}" for k, v in sorted(res["metrics"].items())))  # fmt: skip
    ok = ratio <= 1.2 and res["peak_kb"] <= 100 * 1024 and res["restarts"] == 0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
