"""Self-healing end to end on the real Slurm lab.

Real slurmctld/slurmd, real jobs of a non-root user, our real hooks and
watcher (``slurm_hooks_lab.hooks``); the fakes are the outermost boundary
only: each node's GPUs are a fake-NVML scenario and its kernel log a plain
file that a test appends real-format XID lines to.  The owner's webhook is a
loopback HTTP server that keeps every POST.

Most tests go through the watcher (``python -m slurm_hooks.agent.watch``: it acts
within a fraction of a second); one goes through HealthCheckProgram, run by
slurmd itself, to prove the shim and hook wiring.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import submit
from slurm_hooks_lab.hooks import WebhookRecorder, install, wait_drained
from slurm_hooks_lab.lab import TEST_USER, ensure_user

from slurm_hooks.core.hostlist import expand
from slurm_hooks.core.reason import parse_reason

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

GRACE_S = 4.0

JOB = """#!/bin/bash
trap 'echo "USR1 $(hostname) restart=${SLURM_RESTART_COUNT:-0}" >> {dir}/ckpt.$SLURM_JOB_ID' USR1
echo "start $SLURM_JOB_NODELIST restart=${SLURM_RESTART_COUNT:-0}" >> {dir}/starts.$SLURM_JOB_ID
for i in $(seq 1 900); do sleep 0.2; done
"""


@pytest.fixture
def rig(fresh_lab):
    """The lab with our hooks installed (watcher path: no HealthCheckProgram),
    the owner's webhook, and a clean slate afterwards."""
    lab = fresh_lab
    with WebhookRecorder() as hook:
        hooks = install(lab, webhook_url=hook.url, grace_s=GRACE_S)
        try:
            yield lab, hooks, hook
        finally:
            hooks.finish(reconfigure=False)


def start_job(lab, job_dir: Path, *args: str) -> tuple[str, list[str]]:
    script = job_dir / "job.sh"
    script.write_text(JOB.replace("{dir}", str(job_dir)))
    job_id = submit(lab, script, "--requeue", *args, "-o", str(job_dir / "out.%j"))
    job = lab.wait_job(job_id, lambda j: j.state == "RUNNING", timeout=30)
    lab.wait_for((job_dir / f"starts.{job_id}").exists, 15, what="job start")
    return job_id, expand(job.nodes)


def audit_has(hooks, node: str, **want) -> dict | None:
    for e in hooks.audit(node):
        if all(e.get(k) == v for k, v in want.items()):
            return e
    return None


def wait_audit(lab, hooks, node: str, timeout: float = 10, **want) -> dict:
    return lab.wait_for(lambda: audit_has(hooks, node, **want), timeout, what=f"audit {want}")


def reason_of(lab, node: str) -> str | None:
    return lab.client().get_node(node).reason


def test_xid79_drains_signals_requeues_elsewhere_and_tells_owner(rig, job_dir):
    lab, hooks, webhook = rig
    job_id, nodes = start_job(lab, job_dir, "-N2")
    assert len(nodes) == 2
    bad = nodes[1]  # not the batch host: any node of the job takes the whole job down
    hooks.start_watcher(bad)

    t0 = time.monotonic()
    hooks.inject_xid(bad, 79, gpu=2)
    reason = wait_drained(lab, bad)
    detect_to_drain = time.monotonic() - t0
    ours = parse_reason(reason)
    assert (ours.code, ours.component) == ("XID79", "gpu2")
    assert detect_to_drain < 5, "the watcher acts without waiting for a health check"

    ckpt = job_dir / f"ckpt.{job_id}"
    lab.wait_for(ckpt.exists, 10, what="USR1 in the batch script")
    assert "restart=0" in ckpt.read_text()

    job = lab.wait_job(job_id, lambda j: j.state == "RUNNING" and j.restart_count == 1, timeout=60)
    again = expand(job.nodes)
    assert bad not in again and len(again) == 2
    lab.wait_for(lambda: "restart=1" in (job_dir / f"starts.{job_id}").read_text(), 15,
                 what="job restarted")  # fmt: skip

    requeue = audit_has(hooks, bad, action="requeue", job=job_id)
    assert requeue is not None and requeue["incident"] == ours.incident
    assert requeue["actor"] == "slurm-hooks/worker", "the detached grace worker requeued it"
    assert GRACE_S <= requeue["waited_s"] < GRACE_S + 20, "requeued after the grace, not before"
    assert audit_has(hooks, bad, action="signal", job=job_id, user="sltest")
    assert audit_has(hooks, bad, action="drain", incident=ours.incident, actor="slurm-hooks/watch")

    lab.wait_for(lambda: webhook.alerts("job_requeued"), 10, what="job alert")
    drained = webhook.alerts("node_drained")
    assert [(a["node"], a["code"], a["incident"]) for a in drained] == [
        (bad, "XID79", ours.incident)
    ]
    (owner,) = webhook.alerts("job_requeued")
    assert owner["user"] == "sltest" and owner["job_id"] == job_id and owner["node"] == bad
    hooks.stop_watcher(bad)


@contextlib.contextmanager
def processes_of(*users: str) -> Iterator[list[int]]:
    """One process of each user (what the driver's XID line names)."""
    procs = []
    try:
        for user in users:
            ensure_user(user)
            procs.append(subprocess.Popen(["sleep", "300"], user=user))  # noqa: S607
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_xid13_once_is_the_application_repeated_is_the_gpu(rig):
    """Three processes of two users hit XID 13 on one GPU: the GPU (one
    user's repeats stay theirs: tests/test_trust_lab.py)."""
    lab, hooks, _ = rig
    node = "n3"
    hooks.start_watcher(node)
    with processes_of(TEST_USER, "sltest2", TEST_USER) as pids:
        hooks.inject_xid(node, 13, gpu=1, pid=pids[0], name="python3")
        wait_audit(lab, hooks, node, action="decision", code="XID13")
        assert not lab.client().get_node(node).drained
        hooks.inject_xid(node, 13, gpu=1, pid=pids[1], name="python3")
        hooks.inject_xid(node, 13, gpu=1, pid=pids[2], name="python3")
        ours = parse_reason(wait_drained(lab, node))
    assert (ours.code, ours.component) == ("XID13", "gpu1")
    decisions = [e["decision"] for e in hooks.audit(node) if e["action"] == "decision"]
    assert decisions[0] == "log" and decisions[-1] == "drain"
    hooks.stop_watcher(node)


def test_admin_drained_node_keeps_its_reason(rig):
    lab, hooks, webhook = rig
    node = "n4"
    admin = "fan replacement ticket 4711 - ops"
    lab.client().drain(node, admin)
    hooks.start_watcher(node)
    hooks.inject_xid(node, 79, gpu=0)
    d = wait_audit(lab, hooks, node, action="decision", code="XID79")
    assert d["decision"] == "foreign_reason"
    assert reason_of(lab, node) == admin
    assert webhook.alerts("node_drained") == []
    hooks.stop_watcher(node)


def test_breaker_stops_drains_at_the_cap_and_says_so(rig):
    """4 nodes, breaker_max_share 0.5: automation may drain 2."""
    lab, hooks, webhook = rig
    for node in ("n1", "n2", "n3"):
        hooks.start_watcher(node)
    for node in ("n1", "n2"):
        hooks.inject_xid(node, 79, gpu=0)
        assert parse_reason(wait_drained(lab, node)).code == "XID79"
    hooks.inject_xid("n3", 79, gpu=0)
    (alert,) = lab.wait_for(lambda: webhook.alerts("breaker_tripped"), 10, what="breaker alert")
    assert alert["node"] == "n3" and "tripped" in alert["text"]
    assert alert["counted"] == 2 and alert["limit"] == 2
    assert not lab.client().get_node("n3").drained
    assert audit_has(hooks, "n3", action="breaker_trip")
    # A drain is a breaker claim first (docs/breaker.md): its alert follows the
    # confirmation, about a second after the reason shows in Slurm.
    lab.wait_for(lambda: len(webhook.alerts("node_drained")) == 2, 10, what="drain alerts")
    assert sorted(a["node"] for a in webhook.alerts("node_drained")) == ["n1", "n2"]


def test_worker_killed_mid_grace_then_watch_once_requeues_exactly_once(rig, job_dir):
    lab, hooks, _ = rig
    job_id, (node,) = start_job(lab, job_dir, "-N1")
    hooks.start_watcher(node)
    hooks.inject_xid(node, 79, gpu=3)
    ours = parse_reason(wait_drained(lab, node))
    lab.wait_for((job_dir / f"ckpt.{job_id}").exists, 10, what="USR1 in the batch script")
    inc = lab.wait_for(
        lambda: next((d for d in hooks.incidents(node) if d.get("worker_pid")), None), 10,
        what="grace worker started",
    )  # fmt: skip
    assert inc["incident"] == ours.incident
    hooks.stop_watcher(node)  # no one left to notice ...
    pid = int(inc["worker_pid"])
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        assert b"slurm_hooks.agent.worker" in fh.read()  # ours, not a recycled pid
    os.kill(pid, signal.SIGKILL)  # ... the engine dies between signal and requeue

    time.sleep(GRACE_S + 1)
    assert lab.client().get_job(job_id).restart_count == 0, "nobody requeued it"
    res = hooks.watch_once(node)
    assert res.rc == 0, res.stderr
    job = lab.wait_job(job_id, lambda j: j.state == "RUNNING" and j.restart_count >= 1, timeout=60)
    assert node not in expand(job.nodes)
    assert hooks.watch_once(node).rc == 0  # and again: nothing left to do
    time.sleep(1)
    assert lab.client().get_job(job_id).restart_count == 1
    (doc,) = hooks.incidents(node)
    assert doc["jobs_done"] and doc["jobs"][job_id]["outcome"] == "requeued"
    requeues = [e for e in hooks.audit(node) if e["action"] == "requeue"]
    assert len(requeues) == 1 and requeues[0]["actor"] == "slurm-hooks/watch"
    starts = (job_dir / f"starts.{job_id}").read_text().splitlines()
    assert [s.split()[-1] for s in starts] == ["restart=0", "restart=1"]


def test_healthcheck_program_run_by_slurmd_drains(fresh_lab, job_dir):
    """No watcher: slurmd runs our shim as HealthCheckProgram every 2 s (with
    only SLURMD_NODENAME set), the hook finds the XID and drains."""
    lab = fresh_lab
    hooks = install(lab, grace_s=GRACE_S, healthcheck_interval=2, epilog=True, prolog=None)
    try:
        # Healthy nodes stay in service through health checks and a job's epilog.
        script = job_dir / "short.sh"
        script.write_text("#!/bin/bash\nhostname\n")
        job_id = submit(lab, script, "-N1", "-o", str(job_dir / "out.%j"))
        lab.wait_job(job_id, lambda j: j.state == "COMPLETED", timeout=30)
        ran = lab.wait_for(lambda: [n for n in hooks.files if hooks.audit(n) or
                                    (hooks.node(n).state_dir / "xid").is_dir()], 10,
                           what="a health check run")  # fmt: skip
        assert ran
        assert not [n for n in lab.nodes_state() if n.drained]

        node = "n2"
        hooks.inject_xid(node, 79, gpu=1)
        ours = parse_reason(wait_drained(lab, node, timeout=30))
        assert (ours.code, ours.component) == ("XID79", "gpu1")
        # the audit record follows the breaker's claim, confirmed after the drain shows
        wait_audit(lab, hooks, node, action="drain", actor="slurm-hooks/healthcheck")
    finally:
        hooks.finish()


def test_watcher_polls_nvml_and_drains_a_lost_gpu(fresh_lab):
    """No XID line this time: the GPU just stops answering NVML."""
    lab = fresh_lab
    # A short NVML interval for the test (production default: 10 s).
    hooks = install(lab, grace_s=GRACE_S, watch={"nvml_interval_s": 0.5})
    try:
        node = "n1"
        hooks.start_watcher(node)
        hooks.lose_gpu(node, 2)
        ours = parse_reason(wait_drained(lab, node, timeout=15))
        assert (ours.code, ours.component) == ("GPU_LOST", "gpu2")
        time.sleep(1.5)  # more polls see the same lost GPU: handled once
        drains = [e for e in hooks.audit(node) if e["action"] == "drain"]
        assert len(drains) == 1
    finally:
        hooks.finish()
