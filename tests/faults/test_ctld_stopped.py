"""slurmctld SIGSTOPped at each step of an incident, then SIGCONT (real lab).

Each trial: a ``--requeue`` job pinned to a node counts its USR1; an XID 79
line lands in the node's kernel log; a REAL entry point (watcher, health
check, epilog, grace worker: tests/faults/child.py) handles it, and at one
step the child SIGSTOPs slurmctld, so that step and everything after it
meet a controller that does not answer (Slurm timeout 2 s).  The child
gives up (a clear error, exit status) and slurmctld is continued.  Then the
entry point runs ONCE more - its next interval - and the detached grace
worker it starts is left to finish.

Expected: the node drained with our reason for one incident, the job
requeued exactly once, USR1 at most once (a signal whose call timed out
may still be delivered when slurmctld reads its queued request: never sent
a second time), the node_drained and job_requeued alerts received.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest

from faults.conftest import MATRIX
from faults.test_kill_matrix import entry, start_job, watch_args
from slurm_hooks.core.reason import try_parse_reason
from slurm_hooks.store.state import StateStore, incident_pending

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STEPS = [
    ("healthcheck", "decide"),
    ("healthcheck", "drain:after"),
    ("watch", "signal:before"),
    ("epilog", "alert:before"),
    ("worker", "requeue:before"),
]


def ctld_pid(lab) -> int:  # type: ignore[no-untyped-def]
    return int((lab.base_dir / "run" / "slurmctld.pid").read_text().split()[0])


@pytest.fixture
def short_timeout(hooks):  # type: ignore[no-untyped-def]
    """Slurm calls give up after 2 s in this test's runs."""
    saved = {n: nf.config.read_text() for n, nf in hooks.files.items()}
    for n, nf in hooks.files.items():
        nf.config.write_text(saved[n].replace("slurm_timeout = 10.0", "slurm_timeout = 2.0"))
    yield
    for n, nf in hooks.files.items():
        nf.config.write_text(saved[n])


@pytest.mark.parametrize(("process", "step"), STEPS, ids=[f"{p}-{s}" for p, s in STEPS])
def test_ctld_stopped_at_step_fault_acted_on_after(
    lab, hooks, short_timeout, faults_dir, recorder, process, step
):  # type: ignore[no-untyped-def]
    lab.reset()
    hooks.reset_state()
    recorder.clear()
    node = lab.node_names[STEPS.index((process, step)) % len(lab.node_names)]
    state = StateStore(hooks.node(node).state_dir)
    job_id = start_job(lab, faults_dir, node)
    pid = ctld_pid(lab)
    env = {"FAULTS_CTLD_PID": str(pid)}
    nxt = "healthcheck" if process == "worker" else process
    try:
        hooks.inject_xid(node, 79)
        t0 = time.monotonic()
        try:
            if process == "worker":
                entry(hooks, node, "noworker", "healthcheck")
                (doc,) = state.incidents()
                rc = entry(hooks, node, "stop:" + step, "worker",
                           str(state.incident_path(doc["incident"])), extra_env=env, strict=False)  # fmt: skip
            else:
                rc = entry(hooks, node, "stop:" + step, process, *watch_args(process, node),
                           extra_env=env)  # fmt: skip
        finally:
            os.kill(pid, signal.SIGCONT)
        stalled_s = time.monotonic() - t0
        lab.wait_for(lambda: lab.client().get_node(node) is not None, 30, what="slurmctld back")
        # One interval: the entry point once more, then only its grace worker.
        entry(hooks, node, "none", nxt, *watch_args(nxt, node))

        def settled() -> bool:
            docs = state.incidents()
            return bool(docs) and not any(incident_pending(d) for d in docs)

        lab.wait_for(settled, 30, what=f"incident settled without another run: {state.incidents()}")
        client = lab.client()
        (doc,) = state.incidents()
        current = client.get_node(node)
        ours = try_parse_reason(current.reason)
        assert current.drained and ours is not None and ours.incident == doc["incident"]
        job = client.get_job(job_id)
        usr1_file = faults_dir / f"usr1.{job_id}"
        usr1 = len(usr1_file.read_text().splitlines()) if usr1_file.exists() else 0
        kinds = Counter(a.get("kind") for a in recorder.alerts() if a.get("node") == node)
        MATRIX.append(("SIGSTOP ctld", process, step,
                       f"child rc={rc} after {stalled_s:.0f}s; after SIGCONT + 1 run: "
                       f"Restarts={job.restart_count}, USR1={usr1}, "
                       f"node_drained={kinds['node_drained']}, job_requeued={kinds['job_requeued']}"))  # fmt: skip
        assert job.restart_count == 1, f"requeued {job.restart_count} times"
        assert usr1 == 1, f"checkpoint signal delivered {usr1} times (exactly once expected)"
        assert kinds["node_drained"] >= 1 and kinds["job_requeued"] >= 1, kinds
    finally:
        os.kill(pid, signal.SIGCONT)
        lab.client().cancel(job_id)
