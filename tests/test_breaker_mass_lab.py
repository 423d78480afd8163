"""A correlated failure on the real lab: the breaker holds exactly at its cap.

The issue's case: 256 nodes, 64 XID 79 at once, the default breaker (10% of
the partition, at most 20 nodes: cap 20), no shared latch file (each node its
own state dir and latch): the real healthcheck hook runs on the 64 nodes at
the same moment (each in its slurmd's namespace, as slurmd runs it).  Every
time: exactly 20 drained, 44 held (marked in Slurm, listed by ``status``,
latched), the jobs of the held nodes never signalled.  Then the 20 are
repaired and ``breaker reset`` re-examines the 44 at once: 20 more drained,
24 held again.  Run several times.  Drained vs cap by fault spacing, per
path, with slurmctld's RPCs: bench/bench_mass_failure.py.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from conftest import own_lab, submit
from slurm_hooks_lab.hooks import install

from slurm_hooks.core.held import parse_mark
from slurm_hooks.core.ownership import our_reason
from slurm_hooks.decide import PolicyConfig
from slurm_hooks.decide.breaker import limit_for
from slurm_hooks.detect.probes.commands import run

# one_slurm: on the host's Slurm only, not in every release's root.  Its
# subject is the breaker at fleet size (cap, holds, the batch reset), ours on
# every release; the Slurm calls it makes (drain, resume, comment through
# the door) are the lab tests' in every root.  It cost 3 min per release and
# loaded the cores of the runs beside it (docs/testing.md).
pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.one_slurm]

NODES, FAULTS, CAP, ROUNDS = 256, 64, 20, 3

JOB = """#!/bin/bash
trap 'echo "USR1 $SLURMD_NODENAME" >> {dir}/ckpt.$SLURM_JOB_ID' USR1
echo "start $SLURMD_NODENAME" >> {dir}/starts.$SLURM_JOB_ID
for i in $(seq 1 1500); do sleep 0.2; done
"""


@pytest.fixture(scope="module")
def big_lab():
    with own_lab("slurm-hooks-mass-", NODES, timeout=180) as lab:
        yield lab


def cli(hooks, node: str, *args: str, timeout: float = 120) -> tuple[int, str]:
    env = {**os.environ, "SLURM_CONF": str(hooks.lab.slurm_conf),
           "SLURM_HOOKS_CONFIG": str(hooks.node(node).config)}  # fmt: skip
    res = run([".venv/bin/python", "-m", "slurm_hooks", *args], timeout=timeout, check=False,
              env=env, cwd=str(Path(__file__).resolve().parents[1]))  # fmt: skip
    return res.rc, res.stdout + res.stderr


def start_jobs(lab, job_dir: Path, nodes: list[str]) -> dict[str, str]:
    script = job_dir / "job.sh"
    script.write_text(JOB.replace("{dir}", str(job_dir)))
    jobs = {n: submit(lab, script, "-N1", "-w", n, "-o", "/dev/null") for n in nodes}
    for n, j in jobs.items():
        lab.wait_job(j, lambda x: x.state == "RUNNING", timeout=60)
        lab.wait_for((job_dir / f"starts.{j}").exists, 30, what=f"job on {n}")
    return jobs


def faults_at_once(hooks, nodes: list[str]) -> dict[str, int]:
    for n in nodes:
        hooks.inject_xid(n, 79, gpu=0)
    barrier = threading.Barrier(len(nodes))
    rcs: dict[str, int] = {}

    def go(n: str) -> None:
        barrier.wait()
        rcs[n] = hooks.lab.run_on_node(n, [str(hooks.shims["healthcheck"])], timeout=120).rc

    threads = [threading.Thread(target=go, args=(n,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return rcs


def split(lab, nodes: list[str]) -> tuple[list[str], list[str]]:
    table = {n.name: n for n in lab.client().list_nodes()}
    drained = [n for n in nodes if table[n].drained and our_reason(table[n])]
    held = [n for n in nodes if parse_mark(table[n].comment)]
    return drained, held


def test_simultaneous_faults_drain_exactly_the_cap_hold_the_rest_and_reset_drains_up_to_it(
    big_lab,
):
    lab = big_lab
    # The default breaker (10%, at most 20 nodes): 20 of 256.
    assert limit_for(NODES, PolicyConfig()) == CAP
    hooks = install(lab, grace_s=120, policy={
        # No shared latch file: each node's own (state dir); Slurm is the only shared view.
        "breaker_state_file": None,
    })  # fmt: skip
    faulty = lab.node_names[:FAULTS]
    try:
        for rnd in range(ROUNDS):
            job_dir = lab.shared_dir / f"mass-{rnd}"
            job_dir.mkdir(parents=True, exist_ok=True)
            os.chmod(job_dir, 0o1777)
            jobs = start_jobs(lab, job_dir, faulty)
            faults_at_once(hooks, faulty)
            drained, held = split(lab, faulty)
            assert len(drained) == CAP, f"round {rnd}: drained {drained}"
            assert len(held) == FAULTS - CAP and not set(drained) & set(held)
            # The drained nodes' jobs were signalled; the held nodes' never.
            for n in drained:
                lab.wait_for((job_dir / f"ckpt.{jobs[n]}").exists, 15, what=f"USR1 on {n}")
            for n in held:
                assert not (job_dir / f"ckpt.{jobs[n]}").exists(), f"{n} backed off but signalled"
                assert lab.client().get_job(jobs[n]).state == "RUNNING"
                assert not any(e["action"] == "signal" for e in hooks.audit(n))
                # Latched in its own file, also a node latched by another's mark
                # (its repeats are absorbed at no Slurm cost), and the mark in
                # Slurm places the latch after every drained node's claim.
                latch_file = hooks.node(n).state_dir / "breaker.json"
                assert json.loads(latch_file.read_text())["trips"], f"{n}: not tripped"
                mark = parse_mark(lab.client().get_node(n).comment)
                assert mark is not None and mark.key_at is not None, n
            # status lists every held fault, fleet-wide from Slurm.
            rc, out = cli(hooks, faulty[0], "status", "--json")
            assert rc == 1
            rows = json.loads(out[out.index("{") :])["held"]
            assert sorted(r["node"] for r in rows) == sorted(held)
            assert {(r["fault"], r["status"]) for r in rows} == {("XID79", "held by breaker")}
            if rnd == 0:
                # The 20 are repaired; a human resets: the held are re-examined at once.
                for n in drained:
                    lab.client().resume(n)
                rc, out = cli(hooks, lab.node_names[-1], "breaker", "reset", timeout=600)
                assert rc == 0, out
                again, still = split(lab, faulty)
                assert len(again) == CAP and len(still) == FAULTS - 2 * CAP, out
                assert set(again) <= set(held)
                for n in still:
                    assert not (job_dir / f"ckpt.{jobs[n]}").exists()
            for j in jobs.values():
                lab.client().cancel(j)
            lab.wait_for(lambda: not lab.client().list_jobs(), 60, what="queue empty")
            lab.reset()
            hooks.reset_state()
    finally:
        hooks.close(reconfigure=False)
