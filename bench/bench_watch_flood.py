"""Watcher CPU and counting under an XID flood, on a real Slurm lab.

The watcher (``python -m slurm_hooks.agent.watch``, file follower) runs for a
node that it has drained for XID 79.  Then for ``--seconds`` the node's
kernel log gets ``--rate`` lines a second, in writes every 50 ms: XID 43
lines (log-only: the application's fault) with every ``--xid79-every``-th
line an XID 79 again (the drained GPU still logging).  Printed:

* the watcher's CPU, as a share of one core, over the flood (utime + stime
  from ``/proc/PID/stat``; goal < 20 %);
* ``slurm_hooks_xid_events_total`` by XID from the watcher's ``/metrics``
  after the flood vs the lines written (goal: every event counted);
* audit lines written during the flood (goal: no line per repeat of XID 79
  on the drained node, one per period for XID 43).

Brings up its own 2-node lab in a temp directory and takes it down after.
Needs root and Debian's slurm packages (like the lab tests).

    .venv/bin/python bench/bench_watch_flood.py [--seconds 20] [--rate 200]

The issue's figure is ``--seconds 60``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from slurm_hooks_lab.hooks import install, wait_drained
from slurm_hooks_lab.lab import Lab, missing_prerequisites

NODE = "n1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (and its reaped children), in seconds."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def xid_metrics(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()  # noqa: S310 - loopback
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("slurm_hooks_xid_events_total{"):
            labels, value = line.rsplit(" ", 1)
            xid = labels.split('xid="', 1)[1].split('"', 1)[0]
            out[xid] = float(value)
    return out


def audit_lines(path) -> list[dict]:  # type: ignore[no-untyped-def,type-arg]
    try:
        with open(path, encoding="utf-8") as f:
            return [json.loads(x) for x in f if x.strip()]
    except FileNotFoundError:
        return []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--rate", type=int, default=200, help="kernel-log lines a second")
    p.add_argument("--xid79-every", type=int, default=10, help="every Nth line is XID 79 (0: none)")
    args = p.parse_args(argv)
    problems = missing_prerequisites()
    if problems:
        print("cannot run the lab here: " + "; ".join(problems), file=sys.stderr)
        return 2
    base = tempfile.mkdtemp(prefix="slurm-hooks-bench-flood-")
    lab = Lab(base, 2)
    proc = None
    try:
        print(f"lab up in {lab.up():.2f}s")
        hooks = install(lab, grace_s=5, reconfigure=False)
        nf = hooks.node(NODE)
        port = free_port()
        logf = open(nf.dir / "watch.log", "ab")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(  # noqa: S603 - fixed argv
            hooks.watch_argv(NODE, "--metrics-port", str(port)),
            stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
            env=hooks.watcher_env(NODE), cwd="/", start_new_session=True,
        )  # fmt: skip
        lab.wait_for(lambda: (nf.state_dir / "xid").is_dir(), 30, what="watcher's first pass")
        time.sleep(1.0)
        hooks.inject_xid(NODE, 79, gpu=1)
        wait_drained(lab, NODE, timeout=20)
        time.sleep(2.0)  # the drain, the (empty) evacuation and its alerts are done
        before = xid_metrics(port)
        audit0 = len(audit_lines(nf.audit_log))
        per_tick = max(1, round(args.rate * 0.05))
        written = {"43": 0, "79": 0}
        n = 0
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        next_tick = t0
        while time.monotonic() - t0 < args.seconds:
            batch = []
            for _ in range(per_tick):
                n += 1
                xid = 79 if args.xid79_every and n % args.xid79_every == 0 else 43
                batch.append(hooks.xid_line(NODE, xid, gpu=1) + "\n")
                written[str(xid)] += 1
            with open(nf.kern_log, "a", encoding="utf-8") as fh:
                fh.write("".join(batch))
            next_tick += 0.05
            time.sleep(max(0.0, next_tick - time.monotonic()))
        elapsed = time.monotonic() - t0
        cpu = cpu_seconds(proc.pid) - cpu0
        time.sleep(2.0)  # the last scan
        after = xid_metrics(port)
        flood_audit = audit_lines(nf.audit_log)[audit0:]
    finally:
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(10)
        lab.down()
        shutil.rmtree(base, ignore_errors=True)
    share = 100.0 * cpu / elapsed
    print(f"\nflood: {sum(written.values())} lines in {elapsed:.1f}s "
          f"({sum(written.values()) / elapsed:.0f}/s): XID43={written['43']} XID79={written['79']}")  # fmt: skip
    print(f"watcher CPU: {cpu:.2f}s over {elapsed:.1f}s = {share:.1f}% of a core (goal < 20%)")
    ok = share < 20.0
    for xid in ("43", "79"):
        counted = after.get(xid, 0.0) - before.get(xid, 0.0)
        print(f"slurm_hooks_xid_events_total{{xid={xid}}}: +{counted:.0f} (written {written[xid]})")
        ok = ok and int(counted) == written[xid]
    by_action: dict[str, int] = {}
    for e in flood_audit:
        key = f"{e.get('action')}:{e.get('code') or ''}"
        by_action[key] = by_action.get(key, 0) + 1
    print(f"audit lines during the flood: {len(flood_audit)} {by_action}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
