"""``acceptance NODE --run-local [--no-resume]`` on the real lab.

A node drained by the engine (our reason, an incident open in the state)
passes acceptance: with ``--no-resume`` the pass is recorded and the node
stays drained in Slurm; without it the node is resumed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hooks.act.engine import Engine
from slurm_hooks.core import config as config_mod
from slurm_hooks.core.model import Action, Component, Finding, Status
from slurm_hooks.core.reason import parse_reason

pytestmark = [pytest.mark.slurm]

XID79 = Finding(
    "xid", Status.FAIL, "XID79", "GPU has fallen off the bus", Component("gpu", 0), Action.REBOOT
)


def _config(tmp_path: Path) -> Path:
    gpus = tmp_path / "gpus.json"
    gpus.write_text(json.dumps({"preset": "h100-sxm5-80gb", "gpu_count": 4, "gpu": {}}))
    (tmp_path / "engine.toml").write_text("")
    (tmp_path / "kern.log").write_text("")
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f"""
[general]
state_dir = "{tmp_path / "state"}"
[policy]
breaker_max_share = 1.0
grace_seconds = 1
[checks]
nvml = "lab:fake"
nvml_scenario = "{gpus}"
[checks.xid]
source = "file"
path = "{tmp_path / "kern.log"}"
[checks.burnin]
engine = "lab:fake"
[checks.nccl]
engine = "lab:fake"
[checks.dcgm]
dcgmi = "/nonexistent/dcgmi"
""")
    return cfg


def _acceptance(lab, cfg: Path, node: str, *extra: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        **lab.env(),
        "SLURMD_NODENAME": node,
        "SLURM_HOOKS_NVML_SCENARIO": str(cfg.parent / "gpus.json"),
        "SLURM_HOOKS_ENGINE_SCENARIO": str(cfg.parent / "engine.toml"),
    }
    return subprocess.run(
        [sys.executable, "-m", "slurm_hooks", "acceptance", node, "--run-local", "-c", str(cfg),
         *extra],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_no_resume_keeps_the_node_drained(fresh_lab, tmp_path, monkeypatch):
    lab = fresh_lab
    node = lab.node_names[-1]
    cfg_path = _config(tmp_path)
    monkeypatch.setenv("SLURM_CONF", str(lab.slurm_conf))
    eng = Engine.from_config(config_mod.load(str(cfg_path), validate=False), spawn=None)
    eng.handle(node, [XID79])
    drained = lab.client().get_node(node)
    assert drained.drained and parse_reason(drained.reason).code == "XID79"

    r = _acceptance(lab, cfg_path, node, "--no-resume")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "acceptance PASSED" in r.stdout and "resume:" not in r.stdout
    assert "not resumed (--no-resume)" in r.stdout
    after = lab.client().get_node(node)
    assert after.drained and after.reason == drained.reason  # Slurm: still drained, ours
    audit = [json.loads(ln) for ln in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
    assert [e["outcome"] for e in audit if e["action"] == "acceptance"] == ["passed"]
    assert not [e for e in audit if e["action"] == "resume"]

    r = _acceptance(lab, cfg_path, node)  # without the flag the pass resumes it
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{node}: resume: resume" in r.stdout
    lab.wait_idle([node])
