"""On a real Slurm: a job submitted by the unprivileged lab user with a name,
comment, work dir and output path that imitate Slurm's fields is read by the
client exactly as Slurm's JSON (``squeue --json``) describes it."""

from __future__ import annotations

import json
import os

import pytest
from slurm_hooks_lab.lab import TEST_USER

from slurm_hooks.detect.probes.commands import run
from slurm_hooks.slurm import parse

pytestmark = pytest.mark.slurm

HOSTILE = "x Restarts=5 JobState=COMPLETED UserId=root(0) Requeue=0 NodeList=n9 BatchHost=n9"


def _truth(lab, job_id: str) -> dict:
    out = run(["squeue", "--json"], timeout=30, env=lab.env()).stdout
    (job,) = [j for j in json.loads(out)["jobs"] if str(j["job_id"]) == job_id]
    return {k: _plain(v) for k, v in job.items()}


def _plain(value):  # type: ignore[no-untyped-def]
    """squeue --json from 23.02 on: ``["RUNNING"]`` for a state and
    ``{"set": true, "number": 1}`` for a number (22.05: plain values)."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        return value[0]
    if isinstance(value, dict) and "number" in value and "set" in value:
        return value["number"] if value["set"] else None
    return value


def test_hostile_job_fields_do_not_shadow_real_ones(lab, job_dir, sbatch):
    workdir = job_dir / "w Restarts=9 UserId=root(0) JobState=FAILED"
    workdir.mkdir()
    os.chmod(workdir, 0o1777)
    script = workdir / "job.sh"
    script.write_text("#!/bin/sh\nsleep 120\n")
    script.chmod(0o755)
    job_id = sbatch(
        script,
        "--requeue",
        "-J",
        HOSTILE,
        "--comment",
        HOSTILE + " AdminComment=forged",
        "-o",
        str(workdir / "out Requeue=0 NodeList=n9"),
    )
    try:
        job = lab.wait_job(job_id, lambda j: j.state == "RUNNING", timeout=60)
        truth = _truth(lab, job_id)
        assert job.user == truth["user_name"] == TEST_USER
        assert job.state == truth["job_state"] == "RUNNING"
        assert job.restart_count == truth["restart_cnt"] == 0
        assert job.requeue is True and truth["requeue"] is True
        assert job.nodes == truth["nodes"] and job.nodes != "n9"
        assert job.batch_host == truth["batch_host"]
        assert job.partition == truth["partition"]
        assert job.num_nodes == truth["node_count"] == 1
        assert job.name == truth["name"] == HOSTILE
        assert job.comment == truth["comment"]
        assert job.admin_comment is None
    finally:
        run(["scancel", job_id], timeout=30, env=lab.env(), check=False)


def test_a_whole_fake_record_in_a_name_is_refused(lab, job_dir, sbatch):
    script = job_dir / "job.sh"
    script.write_text("#!/bin/sh\nsleep 120\n")
    script.chmod(0o755)
    fake = (
        "x UserId=root(0) GroupId=root(0) JobState=COMPLETED Requeue=0 Restarts=5"
        " NodeList=n9 Command=/bin/true"
    )
    job_id = sbatch(script, "-J", fake)
    try:
        client = lab.client(retries=0, timeout=5)
        with pytest.raises(parse.ShadowedRecord):
            client.get_job(job_id)
    finally:
        run(["scancel", job_id], timeout=30, env=lab.env(), check=False)
