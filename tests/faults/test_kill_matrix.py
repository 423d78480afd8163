"""kill -9 at each step of an incident in each real process, then roll forward (real lab).

Each trial: a ``--requeue`` job pinned to a node (``-w``: once requeued it
stays pending on the drained node, so it can never be caught by the next
trial) counts its USR1 (the checkpoint signal); an XID 79 line lands in the
node's kernel log; a REAL entry point handles it - the watcher
(``python -m slurm_hooks.agent.watch --once``), the HealthCheckProgram hook
(``python -m slurm_hooks hook healthcheck``), the epilog hook, or the
detached grace worker - in a child process (tests/faults/child.py) that
kills itself with SIGKILL at one step.  Then the same entry point runs
again, as its next interval would (for the worker: the next health check),
until the incident settles; the grace workers are the real detached ones.

Expected in every trial:

* 0 incidents lost: the node drained with our reason naming the one incident;
* requeued exactly once (Slurm's restart count is 1);
* 0 double signals: USR1 delivered exactly once (a kill between the
  signal's intent and its record is never re-sent: at most once, and the
  kill points here all lie outside that window or after the send);
* 0 lost alerts: node_drained and job_requeued each received, under one
  ``alert_id``; a kill right after the webhook answered (``*alert:after``)
  may deliver that alert a second time with the same ``alert_id`` (the
  receiver drops the copy: see act/alerts.py), never a different one.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from slurm_hooks_lab.lab import TEST_USER

from faults.conftest import JOB, MATRIX
from slurm_hooks.core.reason import try_parse_reason
from slurm_hooks.store.state import StateStore, incident_pending

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

CHILD = str(Path(__file__).with_name("child.py"))
#: The steps of an incident in the process that detects and acts.
ACT_STEPS = (
    "decide",
    "drain:before",
    "drain:after",
    "signal:before",
    "signal:after",
    "alert:before",
    "alert:after",
    "spawn:before",
    "spawn:after",
)
#: The steps of the grace worker.
WORKER_STEPS = (
    "finish:before",
    "requeue:before",
    "requeue:after",
    "jobalert:before",
    "jobalert:after",
)
#: (process, step): which process dies, and where.  32 kills.
STEPS = [
    *((p, s) for p in ("watch", "healthcheck", "epilog") for s in ACT_STEPS),
    *(("worker", s) for s in WORKER_STEPS),
]


def entry(
    hooks, node: str, step: str, process: str, *args: str, extra_env=None, strict=True
) -> int:  # type: ignore[no-untyped-def]
    """Run a real entry point for ``node`` with ``step`` armed; its exit
    status.  ``strict``: a logged traceback fails the test (a grace worker
    that meets a stalled slurmctld dies with one, by design)."""
    env = {**hooks.watcher_env(node), **(extra_env or {})}
    proc = subprocess.run(  # noqa: S603 - fixed argv
        [sys.executable, CHILD, "entry", step, process, *args],
        env=env,
        capture_output=True,
        timeout=90,
        check=False,
        cwd="/",
    )
    if proc.returncode < 0 and proc.returncode != -signal.SIGKILL:
        raise AssertionError(
            f"{process} {step} rc={proc.returncode}: {proc.stderr.decode()[-3000:]}"
        )
    if strict and "Traceback" in proc.stderr.decode() and proc.returncode != -signal.SIGKILL:
        raise AssertionError(f"{process} {step} crashed: {proc.stderr.decode()[-3000:]}")
    return proc.returncode


def watch_args(process: str, node: str) -> tuple[str, ...]:
    return ("--node", node) if process == "watch" else ()


def start_job(lab, jobdir: Path, node: str) -> str:  # type: ignore[no-untyped-def]
    script = jobdir / "job.sh"
    script.write_text(JOB.replace("{dir}", str(jobdir)))
    res = subprocess.run(  # noqa: S603
        ["runuser", "-u", TEST_USER, "--", "sbatch", "--parsable", "--requeue", "-N1",
         "-w", node, "-o", str(jobdir / "out.%j"), str(script)],
        env={**lab.env(), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}, cwd=str(jobdir),
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    job_id = res.stdout.strip().split(";")[0]
    lab.wait_job(job_id, lambda j: j.state == "RUNNING", timeout=30)
    lab.wait_for(lambda: (jobdir / f"starts.{job_id}").exists(), 15, what="job start")
    return job_id


@pytest.mark.parametrize(("process", "step"), STEPS, ids=[f"{p}-{s}" for p, s in STEPS])
def test_kill_at_step_is_rolled_forward_exactly_once(
    lab, hooks, faults_dir, recorder, process, step
):  # type: ignore[no-untyped-def]
    lab.reset()
    hooks.reset_state()
    recorder.clear()
    node = lab.node_names[STEPS.index((process, step)) % len(lab.node_names)]
    state = StateStore(hooks.node(node).state_dir)
    job_id = start_job(lab, faults_dir, node)
    client = lab.client()
    nxt = "healthcheck" if process == "worker" else process
    try:
        hooks.inject_xid(node, 79)
        if process == "worker":
            # A hook acts but starts no worker; the worker is then run (and killed) by hand.
            entry(hooks, node, "noworker", "healthcheck")
            (doc,) = state.incidents()
            rc = entry(hooks, node, step, "worker", str(state.incident_path(doc["incident"])))
        else:
            rc = entry(hooks, node, step, process, *watch_args(process, node))
        assert rc == -signal.SIGKILL, f"the kill at {step} did not fire (rc={rc})"

        def settled() -> bool:
            docs = state.incidents()
            return bool(docs) and not any(incident_pending(d) for d in docs)

        runs = 0
        deadline = time.monotonic() + 60
        while not settled() and time.monotonic() < deadline:
            entry(hooks, node, "none", nxt, *watch_args(nxt, node))  # its next interval
            runs += 1
            if not settled():
                time.sleep(1.0)
        assert settled(), f"incident not settled after {runs} runs: {state.incidents()}"
        docs = state.incidents()
        assert len(docs) == 1, f"one incident, got {[d['incident'] for d in docs]}"
        inc = docs[0]["incident"]
        current = client.get_node(node)
        ours = try_parse_reason(current.reason)
        assert current.drained and ours is not None and ours.incident == inc, current.reason
        job = client.get_job(job_id)
        usr1_file = faults_dir / f"usr1.{job_id}"
        usr1 = len(usr1_file.read_text().splitlines()) if usr1_file.exists() else 0
        mine = [a for a in recorder.alerts() if a.get("node") == node]
        kinds = Counter(a.get("kind") for a in mine)
        ids: dict[str, set[str]] = defaultdict(set)
        for a in mine:
            ids[str(a.get("kind"))].add(str(a.get("alert_id")))
        outcome = (
            f"Restarts={job.restart_count}, USR1={usr1}, node_drained={kinds['node_drained']}, "
            f"job_requeued={kinds['job_requeued']}, next runs={runs}"
        )
        MATRIX.append(("kill -9", process, step, outcome))
        assert job.restart_count == 1, f"requeued {job.restart_count} times"
        assert usr1 == 1, f"checkpoint signal delivered {usr1} times"
        copies = 2 if step.endswith("alert:after") else 1
        for kind in ("node_drained", "job_requeued"):
            assert 1 <= kinds[kind] <= copies, (kind, kinds)
            assert len(ids[kind]) == 1, (kind, ids)  # copies carry the same alert_id
    finally:
        client.cancel(job_id)
