"""The GPU-scoped evacuation on real Slurm (``[policy] evacuate = "gpu"``).

Two users' jobs share node n1 of a lab whose nodes have ``Gres=gpu:4``:
sltest2's on GPU 0, sltest's on GPU 1.  A fault on GPU 1 drains n1 and
moves sltest's job only: it is signalled and requeued, while sltest2's
job is never signalled and runs on under the drain (``sinfo`` says
draining, not drained).  The repair waits for it: no repair worker starts
until sltest2 ends the job, and the first run after that starts one.
The GPUs each job holds are read from Slurm (``scontrol -d show job``),
so the same test measures that detail on 22.05, 24.11 and 26.05.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import own_lab, submit
from slurm_hooks_lab.lab import TEST_USER, Lab
from test_trust_lab import script

from slurm_hooks.act import gpu_scope
from slurm_hooks.act.engine import Engine
from slurm_hooks.act.notify import Notifier
from slurm_hooks.core.model import Action, Component, Finding, Status
from slurm_hooks.core.reason import parse_reason
from slurm_hooks.decide import DecisionKind, PolicyConfig
from slurm_hooks.decide.repair import RepairConfig
from slurm_hooks.slurm.gres import gpus_on
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import StateStore

pytestmark = [pytest.mark.slurm]

OTHER_USER = "sltest2"


@pytest.fixture(scope="module")
def gpu_lab() -> Iterator[Lab]:
    with own_lab("slurm-hooks-test-gpuscope-", 2, users=(TEST_USER, OTHER_USER), gpus=4) as lab:
        yield lab


def job(lab: Lab, work: Path, name: str, user: str) -> tuple[str, Path]:
    """A job of ``user`` on n1 with one GPU that logs every signal it gets."""
    log = work / f"{name}.log"
    body = (f"trap 'echo USR1 >> {log}' USR1\ntrap 'echo TERM >> {log}; exit 0' TERM\n"
            f"echo start >> {log}\nfor i in $(seq 900); do sleep 0.2; done\n")  # fmt: skip
    job_id = submit(lab, script(work / f"{name}.sh", body), "-w", "n1", "-n1", "--gres=gpu:1",
                    "--requeue", "-o", "/dev/null", user=user)  # fmt: skip
    lab.wait_job(job_id, lambda j: j.state == "RUNNING", timeout=60)
    lab.wait_for(log.exists, 30, what=f"{name}'s script to start")
    return job_id, log


def test_a_fault_on_one_gpu_moves_only_that_gpus_job_and_the_repair_waits_for_the_rest(
    gpu_lab, tmp_path
):
    lab = gpu_lab
    work = lab.shared_dir / "gpu-scope"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    os.chmod(work, 0o1777)
    theirs, their_log = job(lab, work, "theirs", OTHER_USER)
    mine, my_log = job(lab, work, "mine", TEST_USER)
    client = lab.client()
    # What Slurm says each job holds on n1 (the same on every release).
    assert gpus_on(client.job_gpu_detail(theirs), "n1") == {0}
    assert gpus_on(client.job_gpu_detail(mine), "n1") == {1}

    spawned: list[Path] = []
    later = timedelta(0)  # the engine's clock, moved on past gpu_scope.CHECK_S below
    eng = Engine(
        client, PolicyConfig(grace_seconds=2, evacuate="gpu"), StateStore(tmp_path / "state"),
        AuditLog(tmp_path / "audit.jsonl"), Notifier([]),
        spawn=lambda path: spawned.append(path) or 2_000_000_000,  # no such pid
        repair=RepairConfig(enabled=True), clock=lambda: datetime.now(UTC) + later,
    )  # fmt: skip
    fault = Finding("xid", Status.FAIL, "XID79", "GPU has fallen off the bus",
                    Component("gpu", 1), Action.RESET_GPU)  # fmt: skip
    try:
        (d,) = eng.handle("n1", [fault])
        assert d.kind is DecisionKind.DRAIN
        n1 = client.get_node("n1")
        assert n1.drained and parse_reason(n1.reason).component == "gpu1", n1
        lab.wait_for(lambda: "USR1" in my_log.read_text(), 30, what="my job's checkpoint signal")
        time.sleep(2.5)  # the grace
        outcomes = {o.job_id: str(o.outcome) for o in eng.finish_incident(d.incident)}
        assert outcomes == {mine: "requeued"}
        assert client.get_job(mine).restart_count == 1
        # Theirs: never signalled, still running on n1, which Slurm calls draining.
        assert their_log.read_text().split() == ["start"]
        info = client.get_job(theirs)
        assert (info.state, info.restart_count, info.nodes) == ("RUNNING", 0, "n1")
        state = subprocess.run(["sinfo", "-h", "-n", "n1", "-o", "%T"], env=lab.env(),
                               capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        assert state == "draining", state
        # The repair waits while their job runs, however often the node's hook looks.
        for _ in range(2):
            assert eng.handle("n1", []) == []
        assert len(spawned) == 1  # the grace worker, at the drain: no repair worker
        subprocess.run(["/usr/sbin/runuser", "-u", OTHER_USER, "--", "scancel", theirs],
                       env=lab.env(), check=True, capture_output=True)  # fmt: skip
        lab.wait_job(theirs, lambda j: j.state not in ("RUNNING", "COMPLETING"), timeout=60)
        later = timedelta(seconds=gpu_scope.CHECK_S)  # the next look at it
        eng.handle("n1", [])
        assert len(spawned) == 2  # the repair worker
        doc = StateStore(tmp_path / "state").read_incident(d.incident)
        assert list(doc["spared"]) == [theirs] and doc["spared"][theirs]["ended_at"]
        assert doc["spared"][theirs]["user"] == OTHER_USER
    finally:
        subprocess.run(["scancel", mine, theirs], env=lab.env(), capture_output=True, check=False)


def test_a_later_fault_on_the_spared_jobs_gpu_moves_it(gpu_lab, tmp_path):
    lab = gpu_lab
    work = lab.shared_dir / "gpu-scope-struck"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    os.chmod(work, 0o1777)
    lab.wait_for(lambda: not lab.client().jobs_on_node("n1"), 60, what="n1 to be empty")
    subprocess.run(["scontrol", "update", "NodeName=n1", "State=RESUME"], env=lab.env(),
                   capture_output=True, check=False)  # the first test's drain  # fmt: skip
    theirs, their_log = job(lab, work, "theirs", OTHER_USER)
    mine, _ = job(lab, work, "mine", TEST_USER)
    client = lab.client()
    eng = Engine(
        client, PolicyConfig(grace_seconds=1, evacuate="gpu"), StateStore(tmp_path / "state"),
        AuditLog(tmp_path / "audit.jsonl"), Notifier([]), spawn=None,
    )  # fmt: skip

    def xid(gpu: int) -> Finding:
        return Finding("xid", Status.FAIL, "XID79", "GPU has fallen off the bus",
                       Component("gpu", gpu), Action.RESET_GPU)  # fmt: skip

    try:
        (d,) = eng.handle("n1", [xid(1)])
        time.sleep(1.5)
        assert {o.job_id for o in eng.finish_incident(d.incident)} == {mine}
        assert their_log.read_text().split() == ["start"]
        # Now GPU 0, under their job, faults too: it is moved like mine was.
        (again,) = eng.handle("n1", [xid(0)])
        assert again.kind is DecisionKind.ALREADY_HANDLED
        lab.wait_for(lambda: "USR1" in their_log.read_text(), 30, what="their checkpoint signal")
        time.sleep(1.5)
        outcomes = {o.job_id: str(o.outcome) for o in eng.finish_incident(d.incident)}
        assert outcomes == {theirs: "requeued"}
        assert client.get_job(theirs).restart_count == 1
    finally:
        subprocess.run(["scancel", mine, theirs], env=lab.env(), capture_output=True, check=False)
