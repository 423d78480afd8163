"""The remediation loop on the real Slurm lab (cli backend, real jobs).

A batch job that traps USR1 (its "checkpoint") runs on a node; the engine
gets an XID 79 finding for that node: the node is drained with our reason,
the job is signalled, the detached grace worker requeues it after the
grace, and it runs again on another node.  Then the same with the engine
killed between the signal and the requeue (and again right after the
requeue call, before its journal entry): the job is requeued exactly once.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from conftest import submit

from slurm_hooks.act.engine import Engine, spawn_worker
from slurm_hooks.act.notify import Notifier
from slurm_hooks.act.notify.jobcomment import JobCommentSink
from slurm_hooks.core.model import Action, Component, Finding, Status
from slurm_hooks.core.reason import parse_reason
from slurm_hooks.decide import DecisionKind, PolicyConfig
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import StateStore

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

JOB = """#!/bin/bash
trap 'echo "USR1 $SLURMD_NODENAME restart=${SLURM_RESTART_COUNT:-0}" >> {dir}/ckpt.$SLURM_JOB_ID' USR1
echo "start $SLURMD_NODENAME restart=${SLURM_RESTART_COUNT:-0}" >> {dir}/starts.$SLURM_JOB_ID
for i in $(seq 1 900); do sleep 0.2; done
"""

XID79 = Finding(
    "xid", Status.FAIL, "XID79", "GPU has fallen off the bus", Component("gpu", 0),
    Action.RESET_GPU,
)  # fmt: skip


class CrashAfterRequeue:
    """The real client, but the process "dies" right after the requeue call."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def requeue(self, job_id):
        self.inner.requeue(job_id)
        raise KeyboardInterrupt("engine killed after requeue")


def start_job(lab, job_dir: Path) -> tuple[str, str]:
    script = job_dir / "job.sh"
    script.write_text(JOB.replace("{dir}", str(job_dir)))
    job_id = submit(lab, script, "--requeue", "-N1", "-o", str(job_dir / "out.%j"),
                    "--comment", "my run,slurm-hooks:no-watch")  # fmt: skip
    job = lab.wait_job(job_id, lambda j: j.state == "RUNNING", timeout=30)
    lab.wait_for(lambda: (job_dir / f"starts.{job_id}").exists(), 15, what="job start")
    return job_id, job.batch_host or job.nodes


def engine(lab, tmp_path, client=None, **kw) -> Engine:
    client = client or lab.client()
    return Engine(
        client,
        PolicyConfig(grace_seconds=3, breaker_max_share=1.0, breaker_max_nodes=4),
        StateStore(tmp_path / "state"),
        AuditLog(tmp_path / "audit.jsonl"),
        Notifier([JobCommentSink(client)]),
        worker_env={"SLURM_CONF": str(lab.slurm_conf)},
        **kw,
    )


def cleanup(lab, job_id: str) -> None:
    client = lab.client()
    client.cancel(job_id)
    lab.wait_for(
        lambda: not client.list_jobs(), 60, what="queue empty"
    )  # leave the shared lab as we found it
    lab.reset()


def test_drain_signal_grace_requeue_elsewhere(fresh_lab, job_dir, tmp_path):
    lab = fresh_lab
    job_id, node = start_job(lab, job_dir)
    try:
        eng = engine(lab, tmp_path, spawn=lambda p: spawn_worker(p))
        (d,) = eng.handle(node, [XID79])
        assert d.kind is DecisionKind.DRAIN
        # The hook does not wait out the grace itself: when it returns, the job
        # has not been requeued yet; the detached worker does that later.
        assert lab.client().get_job(job_id).restart_count == 0
        state = lab.client().get_node(node)
        assert state.drained and parse_reason(state.reason).incident == d.incident
        ckpt = job_dir / f"ckpt.{job_id}"
        lab.wait_for(ckpt.exists, 10, what="USR1 trap in the job")
        assert f"USR1 {node} restart=0" in ckpt.read_text()
        # The detached worker requeues after the grace; the job restarts elsewhere.
        job = lab.wait_job(
            job_id, lambda j: j.state == "RUNNING" and j.restart_count == 1, timeout=60
        )
        assert (job.batch_host or job.nodes) != node
        lab.wait_for(
            lambda: "restart=1" in (job_dir / f"starts.{job_id}").read_text(), 15, what="restart"
        )
        # Our note, after the owner's word to us (kept: the job stays unwatched).
        assert (job.comment or "").startswith("slurm-hooks:no-watch slurm-hooks: job ")
        assert node in job.comment
        doc = eng.state.read_incident(d.incident)
        assert doc["jobs"][job_id]["outcome"] == "requeued"
        assert doc["jobs"][job_id]["user"] == "sltest"
        waited = next(e["waited_s"] for e in eng.audit.entries() if e["action"] == "requeue")
        assert 3 <= waited < 30
        # Acceptance passes on the node: it is resumed (our reason, after the fault).
        r = eng.record_acceptance(node, True, detail="lab")
        assert r is not None and r.kind is DecisionKind.RESUME
        lab.wait_idle([node])
    finally:
        cleanup(lab, job_id)


def test_engine_killed_between_signal_and_requeue(fresh_lab, job_dir, tmp_path):
    lab = fresh_lab
    job_id, node = start_job(lab, job_dir)
    try:
        pids: list[int] = []

        def spawn(path):
            pid = spawn_worker(path)
            pids.append(pid)
            return pid

        eng = engine(lab, tmp_path, spawn=spawn)
        (d,) = eng.handle(node, [XID79])
        lab.wait_for((job_dir / f"ckpt.{job_id}").exists, 10, what="USR1 trap")
        os.kill(pids[0], signal.SIGKILL)  # the grace worker dies mid-grace
        time.sleep(4)
        assert lab.client().get_job(job_id).restart_count == 0  # nobody requeued

        # A new engine that itself dies right after asking Slurm to requeue.
        crashing = engine(lab, tmp_path, client=CrashAfterRequeue(lab.client()), spawn=None)
        with pytest.raises(KeyboardInterrupt):
            crashing.resume_pending()
        doc = StateStore(tmp_path / "state").read_incident(d.incident)
        assert doc["jobs"][job_id]["requeue_intent_at"] and not doc["jobs"][job_id]["outcome"]

        # The next start rolls forward: Slurm says it was requeued; not again.
        again = engine(lab, tmp_path, spawn=None)
        assert again.resume_pending() == [d.incident]
        assert again.resume_pending() == []
        doc = again.state.read_incident(d.incident)
        assert doc["jobs_done"] and doc["jobs"][job_id]["outcome"] == "requeued"
        assert "not requeued again" in doc["jobs"][job_id]["detail"]
        job = lab.wait_job(
            job_id, lambda j: j.state == "RUNNING" and j.restart_count >= 1, timeout=60
        )
        time.sleep(2)
        assert lab.client().get_job(job_id).restart_count == 1
        assert (job.batch_host or job.nodes) != node
        starts = (job_dir / f"starts.{job_id}").read_text().splitlines()
        assert [s.split()[-1] for s in starts] == ["restart=0", "restart=1"]
    finally:
        cleanup(lab, job_id)


def test_foreign_drain_is_left_alone_on_real_slurm(fresh_lab, tmp_path):
    lab = fresh_lab
    client = lab.client()
    node = lab.node_names[-1]
    client.drain(node, "NHC: check_hw_ib failed")
    try:
        (d,) = engine(lab, tmp_path, spawn=None).handle(node, [XID79])
        assert d.kind is DecisionKind.FOREIGN_REASON
        assert client.get_node(node).reason == "NHC: check_hw_ib failed"
    finally:
        lab.reset()
