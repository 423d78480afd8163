"""Acceptance without Slurm: the pure verdict, the run with fake NVML and
fake engines, the record + resume wiring (fake engine), the CLI's local path
and its refusal to use a reservation for a drained node."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurm_hooks.agent.acceptance import (
    AcceptanceConfig,
    judge_acceptance,
    reservation_argv,
    run_acceptance,
    srun_argv,
)
from slurm_hooks.core.config import parse
from slurm_hooks.core.model import Component, Finding, Status


def f(check, status, code="OK"):
    return Finding(check, status, code, f"{check} {status}", Component("gpu", 1))


@pytest.mark.parametrize(
    ("findings", "allow_warn", "passed", "why"),
    [
        ([f("burnin", Status.OK), f("nccl", Status.OK)], False, True, "passed 2 checks"),
        ([f("burnin", Status.OK), f("nccl", Status.FAIL, "NCCL_SLOW")], False, False, "NCCL_SLOW"),
        ([f("burnin", Status.OK), f("nccl", Status.WARN, "W")], False, False, "warnings"),
        ([f("burnin", Status.OK), f("nccl", Status.WARN, "W")], True, True, "passed"),
        ([f("burnin", Status.OK)], False, False, "nccl did not run"),
        ([f("burnin", Status.UNKNOWN, "CHECK_SKIPPED"), f("nccl", Status.OK)], False, False,
         "could not run"),
        ([f("burnin", Status.OK), f("nccl", Status.OK), f("ib", Status.UNKNOWN)], False, True,
         "could not run: ib"),
    ],
)  # fmt: skip
def test_judge(findings, allow_warn, passed, why):
    ok, text = judge_acceptance(findings, ("burnin", "nccl"), allow_warn=allow_warn)
    assert ok is passed and why in text


class FakeEngine:
    def __init__(self, auto_resume=True, open_incident=False):
        from slurm_hooks.decide import PolicyConfig

        self.policy = PolicyConfig(auto_resume=auto_resume)
        self.recorded = []
        self.resumes = []
        self.open_incident = open_incident

    def record_acceptance(self, node, passed, *, detail="", resume=True):
        from slurm_hooks.decide.decision import Decision, DecisionKind

        self.recorded.append((node, passed, detail))
        if resume and passed and self.open_incident:
            return Decision(DecisionKind.RESUME, node, "XID79", "acceptance passed")
        return None

    def try_resume(self, node):
        from slurm_hooks.decide.decision import Decision, DecisionKind

        self.resumes.append(node)
        return Decision(DecisionKind.RESUME, node, "NCCL_INTERNODE_SLOW", "acceptance passed")


@pytest.fixture
def node_cfg(tmp_path, monkeypatch):
    gpus = tmp_path / "gpus.json"
    gpus.write_text(json.dumps({"preset": "h100-sxm5-80gb", "gpu_count": 4, "gpu": {}}))
    engine = tmp_path / "engine.toml"
    engine.write_text("")
    text = f"""
[general]
state_dir = "{tmp_path / "state"}"
[checks]
nvml = "lab:fake"
nvml_scenario = "{gpus}"
[checks.xid]
source = "file"
path = "{tmp_path / "kern.log"}"
[checks.burnin]
engine = "lab:fake"
scenario = "engine.toml"
[checks.nccl]
engine = "lab:fake"
scenario = "engine.toml"
[checks.dcgm]
dcgmi = "/nonexistent/dcgmi"
"""
    (tmp_path / "kern.log").write_text("")
    (tmp_path / "cfg.toml").write_text(text)
    return tmp_path


def test_pass_records_and_resumes(node_cfg):
    cfg = parse((node_cfg / "cfg.toml").read_text(), path=str(node_cfg / "cfg.toml"))
    eng = FakeEngine()
    res = run_acceptance("n1", cfg, engine=eng)
    assert res.passed and res.exit_code == 0, res.detail
    assert {"burnin", "nccl", "dcgm", "gpu_lost"} <= set(res.durations)
    assert eng.recorded == [("n1", True, res.detail)]
    # No incident open here: the resume is still tried (reason and pass are checked there).
    assert eng.resumes == ["n1"] and res.resumed
    eng2 = FakeEngine(open_incident=True)
    assert run_acceptance("n1", cfg, engine=eng2).resumed and eng2.resumes == []


def test_bad_gpu_fails_and_does_not_resume(node_cfg):
    (node_cfg / "engine.toml").write_text("[burnin.gpu.1]\ngflops = 20000\n")
    cfg = parse((node_cfg / "cfg.toml").read_text(), path=str(node_cfg / "cfg.toml"))
    eng = FakeEngine()
    res = run_acceptance("n1", cfg, engine=eng)
    assert not res.passed and res.exit_code == 1 and "gpu1" in res.detail
    assert eng.recorded[0][1] is False and eng.resumes == [] and not res.resumed


def test_real_engine_records_state_and_audit(node_cfg, monkeypatch):
    """The real Engine with a Slurm that shows the node in service: the pass
    is in the state store and the audit log; nothing to resume."""
    from slurm_hooks.act.engine import Engine
    from slurm_hooks.core.model import NodeState
    from slurm_hooks.decide import PolicyConfig
    from slurm_hooks.store.audit import AuditLog
    from slurm_hooks.store.state import StateStore

    class Slurm:
        def get_node(self, name):
            return NodeState(name, "idle")

    cfg = parse((node_cfg / "cfg.toml").read_text(), path=str(node_cfg / "cfg.toml"))
    store = StateStore(node_cfg / "state")
    audit = AuditLog(node_cfg / "audit.jsonl")
    eng = Engine(Slurm(), PolicyConfig(), store, audit, spawn=None)
    res = run_acceptance("n1", cfg, engine=eng)
    assert res.passed and res.decision == "ignore"
    assert store.history("n1").acceptance_passes
    assert [e["outcome"] for e in audit.entries() if e["action"] == "acceptance"] == ["passed"]


def test_job_form_argv():
    ac = AcceptanceConfig(reservation_minutes=30, python="/usr/bin/python3")
    assert reservation_argv(ac, "n2") == [
        "scontrol", "create", "reservation", "reservationname=slurm-hooks-acceptance-n2",
        "starttime=now", "duration=30", "flags=maint,ignore_jobs", "nodes=n2", "users=root",
    ]  # fmt: skip
    argv = srun_argv(ac, "n2", "r1", config_path="/etc/x.toml")
    assert argv[:3] == ["srun", "--reservation=r1", "-w"] and "--run-local" in argv
    assert argv[-2:] == ["--config", "/etc/x.toml"]


def test_cli_run_local(node_cfg, monkeypatch):
    from slurm_hooks.cli.acceptance import command

    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    monkeypatch.setenv("SLURM_CONF", "/nonexistent/slurm.conf")
    cfgp = str(node_cfg / "cfg.toml")
    # Wrong node: refused before anything runs.
    r = CliRunner().invoke(command, ["n7", "--run-local", "-c", cfgp])
    assert r.exit_code == 2 and "must run on n7 itself" in r.output
    r = CliRunner().invoke(command, ["n1", "--run-local", "--reservation", "x", "-c", cfgp])
    assert r.exit_code == 2


def test_cli_help_has_examples():
    from slurm_hooks.cli.acceptance import command
    from slurm_hooks.cli.preflight import command as preflight

    assert "--run-local" in CliRunner().invoke(command, ["--help"]).output
    out = CliRunner().invoke(preflight, ["--help"]).output
    assert "srun slurm-hooks preflight" in out


@pytest.fixture
def registered(monkeypatch):
    """The SECTIONS lines the integrator adds (see the report)."""
    from slurm_hooks.core import config

    monkeypatch.setitem(config.SECTIONS, "prolog", "slurm_hooks.agent.prolog:PrologConfig")
    monkeypatch.setitem(
        config.SECTIONS, "acceptance", "slurm_hooks.agent.acceptance:AcceptanceConfig"
    )
    monkeypatch.setitem(config.SECTIONS, "preflight", "slurm_hooks.agent.preflight:PreflightConfig")


def test_cli_preflight_fake(tmp_path, monkeypatch, registered):
    from slurm_hooks.cli.preflight import command

    for i in range(1, 5):
        (tmp_path / f"n{i}.toml").write_text(f"[nccl]\nbusbw_gbps = {8 if i == 4 else 48}\n")
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f'[preflight]\nengine = "lab:fake"\nscenario = "{tmp_path}/{{node}}.toml"\n')
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-4]")
    monkeypatch.delenv("SLURM_PROCID", raising=False)
    r = CliRunner().invoke(command, ["--no-drain", "--json", "-c", str(cfg)])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.output)
    assert doc["culprits"] == ["n4"] and doc["drained"] == []
    monkeypatch.setenv("SLURM_PROCID", "2")
    assert CliRunner().invoke(command, ["-c", str(cfg)]).exit_code == 0  # not rank 0


def test_node_config_alone_feeds_the_fake_engines(node_cfg, monkeypatch):
    """Acceptance with only the node's config (fakes by name, nothing in the
    environment): the fake engines read the configured NVML scenario (GPU 2
    lost here).  With burn-in on "auto" the fake is never chosen."""
    (node_cfg / "gpus.json").write_text(
        json.dumps({"preset": "h100-sxm5-80gb", "gpu_count": 4, "gpu": {"2": {"lost": True}}})
    )
    text = (node_cfg / "cfg.toml").read_text()
    cfg = parse(text, path=str(node_cfg / "cfg.toml"))
    eng = FakeEngine()
    res = run_acceptance("n1", cfg, engine=eng, resume=False)
    assert not res.passed
    burn = [f for f in res.findings if f.check == "burnin" and f.status is Status.FAIL]
    assert burn and burn[0].component.index == 2, res.detail
    assert all("no burn-in engine" not in f.message for f in res.findings)
    # "auto" with the same scenarios configured: no fake (no gpu_burn here either).
    auto = parse(
        text.replace(
            'engine = "lab:fake"', 'engine = "auto"\ngpu_burn = "/nonexistent/gpu_burn"', 1
        ),
        path=str(node_cfg / "cfg.toml"),
    )
    res = run_acceptance("n1", auto, engine=FakeEngine(), resume=False)
    burn = [f for f in res.findings if f.check == "burnin"]
    assert not any(f.status is Status.FAIL and f.component.index == 2 for f in burn), burn


def test_recent_slow_reports_are_reported_not_failed(node_cfg):
    from datetime import UTC, datetime

    from slurm_hooks.core.history import FaultEvent
    from slurm_hooks.store.state import StateStore

    cfg = parse((node_cfg / "cfg.toml").read_text(), path=str(node_cfg / "cfg.toml"))
    assert run_acceptance("n1", cfg, engine=FakeEngine()).slow_history is None
    StateStore(node_cfg / "state").record_faults(
        "n1", [FaultEvent(datetime.now(UTC), "SLOW", "job:12/rank1", "log", None)]
    )
    res = run_acceptance("n1", cfg, engine=FakeEngine())
    assert res.passed and res.resumed  # reported beside the verdict, which it does not change
    assert res.slow_history == "reported SLOW 1 time(s) recently, last for job:12/rank1"
    assert res.to_dict()["slow_history"] == res.slow_history
