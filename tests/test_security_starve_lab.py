"""On a real Slurm: an unprivileged user cannot starve or crash the fault path (issue #27).

The lab user ``sltest`` runs a job on a node and, as any user can, fills the
progress directory: 2,000 directories of stalled jobs that do not run there
(each naming the node), and in its own job's directory stalled records, a
flight-recorder dump of 100,000 nested JSON arrays, a pickle dict whose
integer keys all hash alike, a pickle claiming a 2 GiB bytes value and memo
slot 2**25, a RAS output and a record file nested as deep
(``slurm_hooks_lab.hostile``).  Then a real XID 79 is injected on the node.

Asserted: the XID drains the node (what ``sinfo`` says); the watcher never
exited and its progress thread never crashed; every hostile file is reported
as rejected (``/metrics`` and the log); the passes' Slurm reads stay a few
per pass, not one per directory; no other node is drained.

``drain_hang`` is at its default (on): the attacker's records are user-side
evidence, which the policy never lets drain a node (tests/test_trust_lab.py
plays those attacks one by one), so the only drain is the XID's.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
import urllib.request

import pytest
from slurm_hooks_lab.hooks import install, wait_drained
from slurm_hooks_lab.hostile import plant
from slurm_hooks_lab.lab import TEST_USER

from slurm_hooks.core.reason import parse_reason
from slurm_hooks.detect.probes.commands import run

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STALLED = 2000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def metrics(port: int) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()  # noqa: S310 - loopback
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if line.startswith("slurm_hooks_progress_") and "_created" not in line:
            name, value = line.rsplit(" ", 1)
            out[name.removeprefix("slurm_hooks_progress_").removesuffix("_total")] = float(value)
    return out


@pytest.fixture
def rig(fresh_lab, job_dir):
    lab = fresh_lab
    pdir = job_dir / "progress"
    pdir.mkdir(mode=0o1777)
    pdir.chmod(0o1777)
    progress = {"dir": str(pdir), "interval_s": 0.5, "hang_s": 4.0,
                "first_step_allowance_s": 1.0,
                "flight_recorder_path": f"{pdir}/{{job}}/fr_*",
                "ras_path": f"{pdir}/{{job}}/ras*.txt"}  # fmt: skip
    hooks = install(lab, grace_s=1.0, progress=progress)
    procs = {}
    try:
        # Our own start (hooks.start_watcher serves no /metrics): the
        # watcher's counters are what is asserted.
        for node in lab.node_names[:2]:
            port = free_port()
            log = hooks.node(node).dir / "watch.log"
            with open(log, "ab") as out:
                procs[node] = (subprocess.Popen(  # noqa: S603 - fixed argv
                    hooks.watch_argv(node, "--metrics-port", str(port)), stdin=subprocess.DEVNULL,
                    stdout=out, stderr=out, env=hooks.watcher_env(node), cwd="/",
                    start_new_session=True), port, log)  # fmt: skip
        for node, (_, port, _) in procs.items():
            lab.wait_for(lambda p=port: metrics(p), 30, what=f"{node}'s /metrics")  # type: ignore[misc]
        yield lab, hooks, pdir, procs
    finally:
        for proc, _, _ in procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for node, (proc, _, log) in procs.items():
            # The watcher's own bound: the step it is in, then lock_timeout_s
            # (20 s) for the progress thread's pass.  One took over 15 s once
            # in a CI root (24.11, its log not kept): say what it was doing.
            try:
                proc.wait(45)
            except subprocess.TimeoutExpired:
                print(f"{node}'s watcher still running 45 s after SIGTERM:",
                      log.read_text(errors="replace")[-4000:])  # fmt: skip
                proc.kill()
                proc.wait(15)
                raise
        hooks.finish(reconfigure=False)


def test_stalled_directories_and_bombs_neither_starve_nor_crash_the_watcher(rig, job_dir, sbatch):
    lab, hooks, pdir, procs = rig
    node, other = lab.node_names[:2]
    script = job_dir / "victimless.sh"
    script.write_text("#!/bin/sh\nexec sleep 300\n")
    script.chmod(0o755)
    job = sbatch(script, "-w", node, "--no-requeue", "-o", "/dev/null")
    try:
        lab.wait_job(job, lambda j: j.state == "RUNNING", timeout=60)
        plant(TEST_USER, pdir, node, stalled=STALLED, job=job, hash_keys=40_000, env=lab.env())
        proc, port, log = procs[node]
        try:
            lab.wait_for(lambda: metrics(port).get("rejected_files", 0) >= 4, 60,
                         what="the hostile files read and rejected")  # fmt: skip
        except Exception:
            print(metrics(port), log.read_text(errors="replace")[-4000:])
            raise
        before = metrics(port)
        hooks.inject_xid(node, 79, gpu=1)
        reason = parse_reason(wait_drained(lab, node, timeout=30))
        assert reason.code == "XID79"
        time.sleep(2.0)  # a few more passes under attack
        after = metrics(port)
        for n, (p, _, _) in procs.items():
            assert p.poll() is None, f"the watcher of {n} exited"
        assert after["crashes"] == 0
        # What the user wrote is rejected, and said to be.
        text = log.read_text(errors="replace")
        for name in ("fr_0.json", "fr_1", "fr_2", "ras.txt"):
            assert re.search(rf"{job}/{re.escape(name)} rejected: ", text), name
        assert "Traceback" not in text
        # Bounded Slurm reads: a few per pass, never one per directory.
        passes = after["passes"] - before["passes"]
        reads = after["slurm_reads"] - before["slurm_reads"]
        assert passes >= 2 and reads <= 3 * passes, (passes, reads)
        assert after["skipped_dirs"] - before["skipped_dirs"] >= STALLED * passes
        assert after["slurm_reads"] < STALLED
        # A reason counts only on a node out of service (24.11 keeps a resumed
        # node's old reason): the other node is in service.
        node = lab.client().get_node(other)
        assert not (node.drained or node.down), node
    finally:
        run(["scancel", job], timeout=30, env=lab.env(), check=False)
