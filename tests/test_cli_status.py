"""``slurm-hooks status``: CliRunner with a stand-in client, and for real on the lab."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from conftest import submit

from slurm_hooks.cli import status as status_mod
from slurm_hooks.core.errors import SlurmUnavailable
from slurm_hooks.core.model import NodeState
from slurm_hooks.core.reason import DrainReason, format_reason

NOW = datetime.now(UTC)


def ns(name, reason=None, parts=("gpu",), flags=("DRAIN",), state="idle"):
    return NodeState(
        name, state, frozenset(flags), reason, "root", NOW - timedelta(minutes=5), parts
    )


class StandIn:
    """The SlurmClient port, as far as status reads it."""

    def __init__(self, nodes=None, error=None, jobs=(), jobs_error=None):
        self.nodes, self.error = nodes or [], error
        self.jobs, self.jobs_error, self.job_lists = list(jobs), jobs_error, 0

    def list_nodes(self, names=None):
        if self.error:
            raise self.error
        return list(self.nodes)

    def list_jobs(self, states=None):
        self.job_lists += 1
        if self.jobs_error:
            raise self.jobs_error
        return [j for j in self.jobs if states is None or j.state in states]


@pytest.fixture
def use_client(monkeypatch):
    def install(client):
        monkeypatch.setattr(status_mod, "slurm_client", lambda cfg: client)

    return install


OURS = format_reason(DrainReason("XID79", "7f3a2c1b", "fallen off the bus", "gpu3"))


def test_json_and_exit_1_when_nodes_are_out(use_client, tmp_path):
    use_client(
        StandIn([ns("g1", OURS), ns("g2", "maint"), *[ns(f"g{i}", flags=()) for i in range(3, 30)]])
    )
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[general]\nstate_dir = "{tmp_path}"\n')
    r = CliRunner().invoke(status_mod.command, ["--json", "--config", str(cfg)])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.output)
    assert [(g["owner"], g["code"], g["nodes"]) for g in doc["groups"]] == [
        ("ours", "XID79", "g1"),
        ("admin", "-", "g2"),
    ]
    assert doc["breaker"] == "armed"
    assert doc["breaker_detail"]["gpu"]["counted"] == 1


def test_jobs_still_on_drained_busy_nodes_are_listed(use_client, tmp_path):
    """What a repair waits for: the jobs still running under a drain (a
    grace not over, or jobs spared by ``evacuate = "gpu"``), from one job
    list; idle drained nodes cost no list and show none."""
    from slurm_hooks.core.model import JobInfo

    jobs = [
        JobInfo("812", "alice", "RUNNING", "g1"),
        JobInfo("99", "bob", "RUNNING", "g[1-2]"),
        JobInfo("813", "carol", "COMPLETING", "g1"),
        JobInfo("900", "dave", "RUNNING", "g1"),
        JobInfo("700", "erin", "RUNNING", "g5"),  # in service: not asked about
        JobInfo("701", "erin", "PENDING", "g1"),  # not running there
    ]
    busy = dict(state="mixed")
    client = StandIn(
        [ns("g1", OURS, **busy), ns("g2", "maint", **busy), ns("g3", OURS), ns("g5", flags=())],
        jobs=jobs,
    )
    use_client(client)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[general]\nstate_dir = "{tmp_path}"\n')
    r = CliRunner().invoke(status_mod.command, ["--json", "-c", str(cfg)])
    assert r.exit_code == 1, r.output
    members = {m["name"]: m for g in json.loads(r.output)["groups"] for m in g["members"]}
    assert members["g1"]["jobs"] == ["99", "812", "813", "900"]
    assert members["g2"]["jobs"] == ["99"] and members["g3"]["jobs"] == []
    assert client.job_lists == 1
    r = CliRunner().invoke(status_mod.command, ["-c", str(cfg)])
    assert "jobs=99,812,813+1" in r.output
    client = StandIn([ns("g3", OURS)], jobs=jobs)
    use_client(client)
    CliRunner().invoke(status_mod.command, ["-c", str(cfg)])
    assert client.job_lists == 0  # nothing busy out of service: no job list

    # A job list that fails says so ("?") instead of showing the node empty.
    use_client(StandIn([ns("g1", OURS, **busy)], jobs_error=SlurmUnavailable("squeue: timeout")))
    r = CliRunner().invoke(status_mod.command, ["--json", "-c", str(cfg)])
    assert json.loads(r.output)["groups"][0]["members"][0]["jobs"] == ["?"]


def test_breaker_at_the_limit_is_armed_until_it_trips(use_client, tmp_path):
    # 10 nodes, 10 % share -> limit 1; one drained by us -> the next drain trips it.
    use_client(StandIn([ns("g1", OURS), *[ns(f"g{i}", flags=()) for i in range(2, 11)]]))
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[general]\nstate_dir = "{tmp_path}"\n')
    r = CliRunner().invoke(status_mod.command, ["--json", "-c", str(cfg)])
    doc = json.loads(r.output)
    assert doc["breaker"] == "armed" and doc["breaker_detail"]["gpu"]["at_limit"] is True
    r = CliRunner().invoke(status_mod.command, ["-c", str(cfg)])
    assert "breaker: armed\n" in r.output and "breaker at its limit in gpu" in r.output
    from slurm_hooks.decide.breaker import Trip
    from slurm_hooks.store.state import BreakerLatch

    BreakerLatch(tmp_path / "breaker.json").trip(Trip("gpu", NOW, "g1", 1, 1))
    r = CliRunner().invoke(status_mod.command, ["--json", "-c", str(cfg)])
    doc = json.loads(r.output)
    assert doc["breaker"] == "tripped"
    assert doc["breaker_detail"]["latch"]["trips"]["gpu"]["node"] == "g1"


def test_hostlist_selects_nodes_and_all_ok_exits_0(use_client, tmp_path):
    use_client(StandIn([ns("g1", "maint"), ns("g2", flags=()), ns("g3", flags=())]))
    r = CliRunner(env={"SLURM_HOOKS_CONFIG": str(tmp_path / "none.toml")}).invoke(
        status_mod.command, ["g[2-3]", "-c", os.devnull]
    )
    assert r.exit_code == 0, r.output
    assert "all nodes in service" in r.output
    assert "\x1b[" not in r.output  # not a terminal: no colour


def test_unknown_node_is_an_error(use_client, tmp_path):
    use_client(StandIn([ns("g1", "maint"), ns("g2", flags=())]))
    r = CliRunner().invoke(status_mod.command, ["nosuch", "-c", os.devnull])
    assert r.exit_code == 2 and "unknown node(s): nosuch" in r.output
    assert "in service" not in r.output
    r = CliRunner().invoke(status_mod.command, ["g[1-3]", "-c", os.devnull])
    assert r.exit_code == 2 and "unknown node(s): g3" in r.output


def test_unreachable_slurm_exits_2(use_client):
    use_client(StandIn(error=SlurmUnavailable("slurmctld did not answer after 3 tries")))
    r = CliRunner().invoke(status_mod.command, ["-c", os.devnull])
    assert r.exit_code == 2
    assert "slurmctld did not answer" in r.output


@pytest.mark.slurm
def test_status_on_the_lab(fresh_lab, tmp_path):
    lab = fresh_lab
    client = lab.client()
    n1, n2, n3 = lab.node_names[:3]
    r1 = format_reason(DrainReason("XID79", "aaaa0001", "GPU has fallen off the bus", "gpu3"))
    script = lab.shared_dir / "status-sleep.sh"
    script.write_text("#!/bin/sh\nsleep 300\n")
    script.chmod(0o755)

    r2 = format_reason(
        DrainReason(
            "XID79", "aaaa0002", "GPU has fallen off the bus", "gpu1", {"repl": "requested"}
        )
    )
    try:
        job = submit(lab, script, "-w", n1, "-o", "/dev/null")
        lab.wait_job(job, lambda j: j.state == "RUNNING")
        client.drain(n1, r1)
        client.drain(n2, r2)
        client.drain(n3, "rack 12 maintenance")
        cfg = tmp_path / "c.toml"
        cfg.write_text(f'[general]\nstate_dir = "{tmp_path}"\n')
        argv = [sys.executable, "-c", "from slurm_hooks.cli.status import command; command()"]
        env = {**os.environ, **lab.env(), "SLURM_HOOKS_CONFIG": str(cfg)}
        out = subprocess.run(
            [*argv, "--json"], env=env, check=False, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 1, out.stderr
        doc = json.loads(out.stdout)
        groups = [(g["owner"], g["code"], g["nodes"], g["text"]) for g in doc["groups"]]
        assert groups == [
            ("ours", "XID79", f"n[{n1[1:]}-{n2[1:]}]", None),
            ("admin", "-", n3, "rack 12 maintenance"),
        ]
        members = {m["name"]: m for m in doc["groups"][0]["members"]}
        assert members[n1]["component"] == "gpu3" and members[n1]["incident"] == "aaaa0001"
        assert members[n1]["jobs"] == [job] and members[n2]["jobs"] == []
        assert members[n2]["replacement_requested"] is True
        assert all(0 <= m["age_s"] < 300 for m in members.values())
        assert doc["counts"]["in_service"] == len(lab.node_names) - 3
        text = subprocess.run(
            argv, env=env, check=False, capture_output=True, text=True, timeout=60
        )
        assert text.returncode == 1
        assert "repl=requested" in text.stdout and "rack 12 maintenance" in text.stdout
        assert f"jobs={job}" in text.stdout
        assert all(len(line) <= 80 for line in text.stdout.splitlines())
    finally:
        lab.reset()
