"""The signal contract of docs/signals.md, on the real lab.

A batch job submitted as the unprivileged lab user; its batch shell and its
srun step each trap USR1 and TERM and write down what they got.  The engine
drains the node and signals the job exactly as the hook does
(``Engine.handle`` on a drain finding, the cli backend, the default
``[policy] signal_batch``/``signal_steps``).  Then:

* the batch shell gets USR1 and only USR1; the step gets TERM and only
  TERM (``scancel --batch`` reaches the shell alone, not srun nor the
  tasks; plain ``scancel --signal`` reaches every step but the batch one);
* a job that checkpoints on USR1 and exits non-zero is requeued at once by
  the grace worker, long before the grace ends; one that exits 0 has
  finished and is not requeued.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import submit

from slurm_hooks.act.engine import Engine, spawn_worker
from slurm_hooks.act.notify import Notifier
from slurm_hooks.core.errors import JobGone
from slurm_hooks.core.model import Action, Component, Finding, Status
from slurm_hooks.decide import DecisionKind, PolicyConfig
from slurm_hooks.slurm.base import SignalTarget
from slurm_hooks.slurm.door import SlurmDoor
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import StateStore

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

XID79 = Finding("xid", Status.FAIL, "XID79", "GPU has fallen off the bus", Component("gpu", 0),
                Action.RESET_GPU)  # fmt: skip

#: {dir} is the test's shared directory, {exit} what the shell does on USR1.
JOB = """#!/bin/bash
export D={dir}
trap 'echo USR1 >> $D/batch.$SLURM_JOB_ID; {on_usr1}' USR1
trap 'echo TERM >> $D/batch.$SLURM_JOB_ID' TERM
srun -n1 bash -c '
  trap "echo USR1 >> $D/step.$SLURM_JOB_ID" USR1
  trap "echo TERM >> $D/step.$SLURM_JOB_ID" TERM
  echo up > $D/step-up.$SLURM_JOB_ID
  while :; do sleep 0.1; done' &
echo "start restart=${SLURM_RESTART_COUNT:-0}" >> $D/starts.$SLURM_JOB_ID
while :; do wait; sleep 0.1; done
"""
#: The job's checkpoint on USR1: write it, then end the job (non-zero: it
#: did not finish its work).
CHECKPOINT_AND_EXIT = "echo ckpt > $D/ckpt.$SLURM_JOB_ID; exit {rc}"


def _start(lab, job_dir: Path, on_usr1: str) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    script = job_dir / "job.sh"
    script.write_text(JOB.replace("{dir}", str(job_dir)).replace("{on_usr1}", on_usr1))
    job_id = submit(lab, script, "--requeue", "-N1", "-o", str(job_dir / "out.%j"))
    job = lab.wait_job(job_id, lambda j: j.state == "RUNNING", timeout=30)
    lab.wait_for(lambda: (job_dir / f"step-up.{job_id}").exists(), 20, what="the step's traps")
    lab.wait_for(lambda: (job_dir / f"starts.{job_id}").exists(), 20, what="the batch shell")
    return job_id, job.batch_host or job.nodes


def _engine(lab, tmp_path: Path, grace_s: float, via: str = "scancel", **kw) -> Engine:  # type: ignore[no-untyped-def]
    # The defaults of [policy] signal_batch / signal_steps: what the hook sends.
    policy = PolicyConfig(grace_seconds=grace_s, breaker_max_share=1.0, breaker_max_nodes=4)
    assert (policy.signal_batch, policy.signal_steps) == ("USR1", "TERM")
    return Engine(
        lab.client(signal_via=via), policy, StateStore(tmp_path / "state"), AuditLog(tmp_path / "audit.jsonl"),
        Notifier([]), worker_env={"SLURM_CONF": str(lab.slurm_conf)}, **kw,
    )  # fmt: skip


def _got(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _cleanup(lab, job_id: str) -> None:  # type: ignore[no-untyped-def]
    client = lab.client()
    client.cancel(job_id)
    lab.wait_for(lambda: not client.list_jobs(), 60, what="queue empty")
    lab.reset()


@pytest.mark.parametrize("via", ["scancel", "auto"])
def test_batch_shell_gets_usr1_and_steps_get_term(fresh_lab, job_dir, tmp_path, via):
    """``auto``: below 24.05 the signals go through libslurm's
    slurm_kill_job2 (no job-table read); the contract is the same."""
    lab = fresh_lab
    job_id, node = _start(lab, job_dir, on_usr1=":")
    try:
        eng = _engine(lab, tmp_path, grace_s=300, via=via, spawn=None)
        (d,) = eng.handle(node, [XID79])
        assert d.kind is DecisionKind.DRAIN
        batch, step = job_dir / f"batch.{job_id}", job_dir / f"step.{job_id}"
        lab.wait_for(lambda: _got(batch) and _got(step), 15, what="both signals")
        # Exactly one signal each, and each its own.
        assert _got(batch) == ["USR1"]
        assert _got(step) == ["TERM"]
        (sig,) = [e for e in eng.audit.entries() if e["action"] == "signal"]
        assert sig["signals"] == ["USR1->batch", "TERM->steps"]
        assert lab.client().get_job(job_id).state == "RUNNING"  # both trapped: still running
    finally:
        _cleanup(lab, job_id)


@pytest.mark.parametrize(("rc", "requeued"), [(1, True), (0, False)])
def test_job_that_checkpoints_on_usr1_and_exits(fresh_lab, job_dir, tmp_path, rc, requeued):
    lab = fresh_lab
    job_id, node = _start(lab, job_dir, on_usr1=CHECKPOINT_AND_EXIT.replace("{rc}", str(rc)))
    try:
        # The grace worker as the hook starts it; a grace far longer than the test.
        eng = _engine(lab, tmp_path, grace_s=600, spawn=spawn_worker)
        (d,) = eng.handle(node, [XID79])
        assert d.kind is DecisionKind.DRAIN
        lab.wait_for((job_dir / f"ckpt.{job_id}").exists, 15, what="the checkpoint on USR1")
        if requeued:
            job = lab.wait_job(
                job_id, lambda j: j.state == "RUNNING" and j.restart_count == 1, timeout=90
            )
            assert (job.batch_host or job.nodes) != node
            lab.wait_for(
                lambda: "restart=1" in (job_dir / f"starts.{job_id}").read_text(), 20,
                what="the restart",
            )  # fmt: skip
            outcome = "requeued"
        else:
            outcome = "finished"
        lab.wait_for(
            lambda: (eng.state.read_incident(str(d.incident)) or {}).get("jobs_done"), 90,
            what="the worker settling the job",
        )  # fmt: skip
        rec = eng.state.read_incident(str(d.incident))["jobs"][job_id]
        assert rec["outcome"] == outcome
        if not requeued:
            assert lab.client().get_job(job_id).restart_count == 0
    finally:
        _cleanup(lab, job_id)


#: The batch shell ends on its own once its step is up; the step survives the
#: TERM slurmd sends at the job's end (it traps it) until ``end`` appears, so
#: the job stays COMPLETING for as long as the test needs.
ENDING_JOB = """#!/bin/bash
export D={dir}
srun -n1 bash -c '
  trap "echo TERM >> $D/step.$SLURM_JOB_ID" TERM
  echo up > $D/step-up.$SLURM_JOB_ID
  while [ ! -e $D/end ]; do sleep 0.1; done' &
while [ ! -e $D/step-up.$SLURM_JOB_ID ]; do sleep 0.1; done
exit 1
"""


def test_signalling_a_completing_job_is_job_gone_not_a_failure(fresh_lab, job_dir):
    """A job whose batch shell exited on USR1 before the steps' TERM went
    out is COMPLETING: scancel refuses it, and its outcome is JobGone while
    the other job on the same list is signalled; nothing is raised.  (The
    narrower race CI met, scancel reading the job as RUNNING and the
    controller then answering ESLURM_ALREADY_DONE, which scancel reports by
    its exit status alone, is played in tests/test_signal_jobs.py.)"""
    lab = fresh_lab
    script = job_dir / "ending.sh"
    script.write_text(ENDING_JOB.replace("{dir}", str(job_dir)))
    ending = submit(lab, script, "-N1", "-o", str(job_dir / "out.%j"))
    running, _node = _start(lab, job_dir, on_usr1=":")
    try:
        lab.wait_job(ending, lambda j: j.state == "COMPLETING", timeout=30)
        door = SlurmDoor(lab.client())
        out = door.signal_many([ending, running], "TERM", SignalTarget.STEPS)
        assert isinstance(out[ending], JobGone)
        assert out[running] is None
        lab.wait_for(lambda: _got(job_dir / f"step.{running}") == ["TERM"], 15, what="TERM")
        with pytest.raises(JobGone):
            door.signal(ending, "TERM", SignalTarget.STEPS)
    finally:
        (job_dir / "end").touch()
        _cleanup(lab, running)
