"""Spares under power saving and the topology file's location (act/spares.py,
core/topology.py): a powered-down SPARE is a spare (warm ones first within a
topology group), and topology.conf is looked for beside the slurm.conf that
slurmctld runs with, not the one this process's SLURM_CONF names."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
from test_actions import FakeSlurm
from test_repair import TOPO_CONF, RebootingSlurm, _incident, xid

from slurm_hooks.act import spares
from slurm_hooks.act.engine import Engine
from slurm_hooks.act.notify import Notifier
from slurm_hooks.core.model import JobInfo, NodeState
from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.core.topology import FLAT, parse_topology_conf, pick_spare
from slurm_hooks.decide import PolicyConfig
from slurm_hooks.decide.repair import RepairConfig
from slurm_hooks.slurm import parse
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import StateStore

SPARE = format_reason(DrainReason("SPARE", "spare001", "standby"))


# -- pure: the choice --------------------------------------------------------------


def test_warm_spare_first_within_a_group_placement_first_across_groups():
    topo = parse_topology_conf("SwitchName=s1 Nodes=n[1-4]\nSwitchName=s2 Nodes=n[5-8]\n")
    # n3 (s1) is powered down, n4 (s1) warm: the warm one.
    assert pick_spare(["n1", "n2"], "n1", ["n3", "n4", "n5"], topo, cold={"n3"}) == "n4"
    # Only a cold spare on the job's switch, a warm one elsewhere: the switch wins.
    assert pick_spare(["n1", "n2"], "n1", ["n3", "n5"], topo, cold={"n3"}) == "n3"
    # No topology: warm before cold, then by name.
    assert pick_spare(["n1"], "n1", ["n2", "n5"], FLAT, cold={"n2"}) == "n5"
    assert pick_spare(["n1"], "n1", ["n2"], FLAT, cold={"n2"}) == "n2"


def test_sinfo_and_scontrol_power_states_parse_as_cold():
    for text in ("IDLE+DRAIN+POWERED_DOWN", "drained~", "idle%", "IDLE+POWERING_DOWN"):
        state, flags = parse.parse_state(text)
        node = NodeState("n1", state, flags, SPARE)
        assert spares.cold(node), text
    assert not spares.cold(NodeState("n1", *parse.parse_state("IDLE+DRAIN"), SPARE))


# -- the engine: a powered-down spare is resumed ------------------------------------


@pytest.fixture
def rig(tmp_path, monkeypatch):
    slurm = RebootingSlurm(7)
    conf = tmp_path / "etc"
    conf.mkdir()
    (conf / "slurm.conf").write_text("# test\n")
    (conf / "topology.conf").write_text(TOPO_CONF)
    monkeypatch.setenv("SLURM_CONF", str(conf / "slurm.conf"))
    state = StateStore(tmp_path / "state")
    eng = Engine(
        slurm, PolicyConfig(grace_seconds=0, breaker_min_nodes=8), state,
        AuditLog(tmp_path / "audit.jsonl"), Notifier([]), spawn=None,
        repair=RepairConfig(enabled=True, resume_spares=True),
    )  # fmt: skip
    slurm.jobs["7"] = JobInfo("7", "alice", "RUNNING", "n1", "n1", True, name="train")
    orig = slurm.jobs_on_node
    slurm.jobs_on_node = lambda name: [dataclasses.replace(j, nodes="n[1-2]") for j in orig(name)]
    slurm.get_job = lambda jid: dataclasses.replace(FakeSlurm.get_job(slurm, jid), nodes="n[1-2]")
    return slurm, eng, state


def _powered_down_spare(slurm, name):
    slurm.nodes[name] = NodeState(name, "idle", frozenset({"DRAIN", "POWERED_DOWN"}), SPARE,
                                  partitions=("gpu",))  # fmt: skip


def test_powered_down_spare_on_the_jobs_switch_is_resumed_once(rig):
    slurm, eng, state = rig
    _powered_down_spare(slurm, "n3")  # s1, the job's switch, powered down
    slurm.drain("n6", SPARE)  # s2, warm
    assert sorted(spares.spare_names(eng.context)) == ["n3", "n6"]
    eng.handle("n1", [xid()])
    # Resumed through the door (State=RESUME lifts our drain; Slurm powers it
    # up when the job lands there): the switch wins over warmth.
    assert ("resume", "n3") in slurm.calls and slurm.nodes["n3"].reason is None
    assert slurm.nodes["n6"].reason == SPARE
    inc = _incident(state, "n1")
    assert state.read_incident(inc)["spares"] == {"7": "n3"}
    eng.resume_pending("n1")
    assert slurm.count("resume") == 1


def test_warm_spare_preferred_on_the_same_switch(rig):
    slurm, eng, state = rig
    _powered_down_spare(slurm, "n2")
    slurm.drain("n3", SPARE)
    eng.handle("n1", [xid()])
    assert slurm.nodes["n3"].reason is None and slurm.nodes["n2"].reason == SPARE


def test_powered_down_node_without_our_reason_is_not_a_spare(rig):
    slurm, eng, state = rig
    slurm.nodes["n3"] = NodeState("n3", "idle", frozenset({"POWERED_DOWN"}), partitions=("gpu",))
    assert spares.spare_names(eng.context) == []


# -- where topology.conf is looked for -------------------------------------------


def test_conf_dir_prefers_the_running_config(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    assert spares.conf_dir({"SLURM_CONF": "/opt/slurm/etc/slurm.conf"}) == Path("/opt/slurm/etc")
    assert spares.conf_dir({"SLURM_CONF": "(null)"}) == Path("/etc/slurm")
    monkeypatch.delenv("SLURM_CONF")
    assert spares.conf_dir({}) == Path("/etc/slurm")
    # scontrol show config's line, through the real parser.
    text = "Configuration data as of x\nSLURM_CONF              = /srv/slurm/slurm.conf\n"
    assert spares.conf_dir(parse.parse_show_config(text)) == Path("/srv/slurm")


class _Config:
    def __init__(self, config):
        self.config = config

    def show_config(self):
        return self.config


class _Eng:
    def __init__(self, config):
        self.slurm = _Config(config)


def test_topology_read_beside_the_running_slurm_conf(monkeypatch, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "topology.conf").write_text(TOPO_CONF)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "fallback" / "slurm.conf"))
    eng = _Eng({"SLURM_CONF": str(real / "slurm.conf"), "TopologyPlugin": "topology/tree"})
    topo = spares.load_topology(eng)  # type: ignore[arg-type]
    assert topo.group_of("n2") == "s1"


def test_topology_configured_but_no_file_warns(monkeypatch, tmp_path, caplog):
    monkeypatch.delenv("SLURM_CONF", raising=False)
    eng = _Eng({"SLURM_CONF": str(tmp_path / "slurm.conf"), "TopologyPlugin": "topology/tree"})
    with caplog.at_level(logging.WARNING, logger="slurm_hooks.act.spares"):
        assert spares.load_topology(eng) is FLAT  # type: ignore[arg-type]
    assert "TopologyPlugin=topology/tree but no topology" in caplog.text
    caplog.clear()
    for plugin in ("topology/flat", "topology/none", "(null)", "topology/default"):
        eng = _Eng({"SLURM_CONF": str(tmp_path / "slurm.conf"), "TopologyPlugin": plugin})
        with caplog.at_level(logging.WARNING, logger="slurm_hooks.act.spares"):
            assert spares.load_topology(eng) is FLAT  # type: ignore[arg-type]
    assert not caplog.text
