"""``policy explain``, ``breaker`` and ``resume`` commands (CliRunner)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurm_hooks.cli.breaker import command as breaker_cmd
from slurm_hooks.cli.policy import command as policy_cmd
from slurm_hooks.cli.resume import command as resume_cmd
from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.store.state import StateStore


@pytest.fixture(autouse=True)
def sections(monkeypatch):
    """The SECTIONS lines this stage asks the integrator to add."""
    from slurm_hooks.core import config

    monkeypatch.setitem(config.SECTIONS, "policy", "slurm_hooks.decide.config:PolicyConfig")
    monkeypatch.setitem(config.SECTIONS, "notify", "slurm_hooks.act.notify.config:NotifyConfig")


@pytest.fixture
def cfg(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(f'[general]\nstate_dir = "{tmp_path / "state"}"\n[policy]\ngrace_seconds = 0\n')
    return str(path)


def test_explain_xid79_drains(cfg):
    res = CliRunner().invoke(policy_cmd, ["explain", "--xid", "79", "--gpu", "3", "--node", "n1",
                                          "-c", cfg])  # fmt: skip
    assert res.exit_code == 1, res.output
    assert "n1: DRAIN XID79" in res.output
    assert "reason: slurm-hooks/1 XID79 gpu3 inc=" in res.output


def test_explain_xid13_once_keeps_node(cfg):
    res = CliRunner().invoke(policy_cmd, ["explain", "--xid", "13", "--node", "n1", "-c", cfg,
                                          "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    (d,) = json.loads(res.output)
    assert d["kind"] == "log" and "application-level" in d["explanation"]


def test_explain_findings_file(cfg, tmp_path):
    f = tmp_path / "f.json"
    f.write_text(json.dumps({"findings": [
        {"check": "ecc", "status": "FAIL", "code": "ROW_REMAP_FAIL", "message": "remap failed",
         "component": {"kind": "gpu", "index": 2}, "action": "replace"},
    ]}))  # fmt: skip
    res = CliRunner().invoke(policy_cmd, ["explain", "--findings", str(f), "--node", "n1",
                                          "-c", cfg])  # fmt: skip
    assert res.exit_code == 1 and "REPLACE ROW_REMAP_FAIL" in res.output
    assert "repl=requested" in res.output


def test_explain_usage_errors(cfg, tmp_path):
    assert CliRunner().invoke(policy_cmd, ["explain", "-c", cfg]).exit_code == 2
    bad = tmp_path / "bad.json"
    bad.write_text('[{"status": "FAIL"}]')
    res = CliRunner().invoke(policy_cmd, ["explain", "--findings", str(bad), "-c", cfg])
    assert res.exit_code == 2 and "finding 0" in res.output


@pytest.mark.slurm
def test_breaker_status_and_reset_on_lab(fresh_lab, cfg, monkeypatch, tmp_path):
    from datetime import UTC, datetime

    from slurm_hooks.decide.breaker import Trip
    from slurm_hooks.store.state import BreakerLatch

    monkeypatch.setenv("SLURM_CONF", str(fresh_lab.slurm_conf))
    res = CliRunner().invoke(breaker_cmd, ["status", "-c", cfg, "--json"])
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.output)["partitions"]
    assert row["tripped"] is False and row["size"] == len(fresh_lab.node_names)
    BreakerLatch(tmp_path / "state" / "breaker.json").trip(
        Trip(row["partition"], datetime.now(UTC), "n1", 1, 1)
    )
    res = CliRunner().invoke(breaker_cmd, ["status", "-c", cfg])
    assert res.exit_code == 1 and ": tripped since" in res.output
    res = CliRunner().invoke(breaker_cmd, ["reset", "-c", cfg])
    assert res.exit_code == 0 and row["partition"] in res.output
    assert CliRunner().invoke(breaker_cmd, ["status", "-c", cfg]).exit_code == 0


@pytest.mark.slurm
def test_resume_cli_on_lab(fresh_lab, cfg, monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_CONF", str(fresh_lab.slurm_conf))
    client = fresh_lab.client()
    n_admin, n_ours = fresh_lab.node_names[-2:]
    try:
        client.drain(n_admin, "disk swap -- ops")
        res = CliRunner().invoke(resume_cmd, [n_admin, "-c", cfg, "--force-acceptance-skip"])
        assert res.exit_code == 2 and "never resumes" in res.output
        assert client.get_node(n_admin).reason == "disk swap -- ops"

        client.drain(n_ours, format_reason(DrainReason("XID79", "0badc0de", "lost", "gpu0")))
        res = CliRunner().invoke(resume_cmd, [n_ours, "-c", cfg])
        assert res.exit_code == 1 and "acceptance" in res.output
        assert client.get_node(n_ours).drained
        from datetime import UTC, datetime

        StateStore(tmp_path / "state").record_acceptance(n_ours, datetime.now(UTC))
        res = CliRunner().invoke(resume_cmd, [n_ours, "-c", cfg])
        assert res.exit_code == 0, res.output
        fresh_lab.wait_idle([n_ours])
        audit = [
            json.loads(x) for x in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()
        ]
        assert any(e["action"] == "resume" and e["actor"].startswith("cli:") for e in audit)
    finally:
        fresh_lab.reset()
