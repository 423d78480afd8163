"""The health grade in the node's Extra (``[repair] health_extra``): our key
only, through the one door (SlurmDoor.set_extra, core/extra.py), written by
the repair loop at each rung; and the resume step's roll-forward
(``resume_intent``): a run killed around Slurm's resume leaves the node
resumed once and the incident closed."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

import pytest
from test_actions import T0, Crash
from test_repair import _incident, rig, xid  # noqa: F401 - rig is a fixture
from test_slurm_door import Memory

from slurm_hooks.act import repair
from slurm_hooks.core.errors import SlurmError
from slurm_hooks.core.extra import ExtraFormat, extra_format, extra_value, merge_extra
from slurm_hooks.core.model import NodeState
from slurm_hooks.decide.repair import HEALTH_KEY, HealthGrade
from slurm_hooks.slurm import parse
from slurm_hooks.slurm.door import SlurmDoor

# -- pure: merging our key ------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        (None, '{"slurm_hooks_health":"ok"}'),
        ("", '{"slurm_hooks_health":"ok"}'),
        ('{"rack":"r4"}', '{"rack":"r4","slurm_hooks_health":"ok"}'),
        ('{"rack":"r4","slurm_hooks_health":"repair"}', '{"rack":"r4","slurm_hooks_health":"ok"}'),
        ("rack=r4", "rack=r4 slurm_hooks_health=ok"),
        ("rack=r4,slurm_hooks_health=replace", "rack=r4,slurm_hooks_health=ok"),
        ("slurm_hooks_health=repair site=x", "site=x slurm_hooks_health=ok"),
    ],
)
def test_merge_touches_only_our_key(current, expected):
    merged = merge_extra(current, HEALTH_KEY, "ok")
    assert merged.value == expected and merged.changed
    assert extra_value(merged.value, HEALTH_KEY) == "ok"
    if current and current.startswith("{"):
        others = {k: v for k, v in json.loads(current).items() if k != HEALTH_KEY}
        assert {k: v for k, v in json.loads(expected).items() if k != HEALTH_KEY} == others


@pytest.mark.parametrize("current", ["broken fan, ticket 123", '["a"]', "{not json", "a=b c"])
def test_free_text_is_someone_elses(current):
    assert extra_format(current) is ExtraFormat.FOREIGN
    assert merge_extra(current, HEALTH_KEY, "ok").value is None


def test_same_value_is_no_change_and_bad_values_refused():
    assert not merge_extra('{"slurm_hooks_health":"ok"}', HEALTH_KEY, "ok").changed
    assert not merge_extra("slurm_hooks_health=ok", HEALTH_KEY, "ok").changed
    with pytest.raises(ValueError):
        merge_extra(None, HEALTH_KEY, "ok now")
    with pytest.raises(ValueError):
        merge_extra(None, "bad key", "ok")


def test_extra_parsed_from_scontrol_22_05():
    # scontrol -o show node on the 22.05.8 lab after `scontrol update Extra=...`
    line = ("NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=2 CPUTot=2 "
            "State=IDLE ThreadsPerCore=1 Partitions=debug CapWatts=n/a CurrentWatts=0 "
            "AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s "
            'Extra={"rack":"r4","slurm_hooks_health":"ok"} ')  # fmt: skip
    (node,) = parse.parse_scontrol_nodes(line)
    assert node.extra == '{"rack":"r4","slurm_hooks_health":"ok"}'
    (bare,) = parse.parse_scontrol_nodes("NodeName=n1 State=IDLE Partitions=debug")
    assert bare.extra is None
    assert parse.node_from_json({"name": "n1", "state": ["IDLE"], "extra": "a=b"}).extra == "a=b"


# -- the door ---------------------------------------------------------------------


class ExtraMemory(Memory):
    """The recording fake, able to write Extra."""

    def set_node_extra(self, name: str, extra: str) -> None:
        self.writes.append(("extra", name, extra))
        self.nodes[name] = dataclasses.replace(self.nodes[name], extra=extra)


def test_door_writes_our_key_once_and_never_over_free_text():
    mem = ExtraMemory(NodeState("n1", "idle", extra="rack=r4"), NodeState("n2", "idle",
                      extra="waiting for vendor"))  # fmt: skip
    door = SlurmDoor(mem)
    assert door.set_extra("n1", HEALTH_KEY, "repair")
    assert door.set_extra("n1", HEALTH_KEY, "repair")  # same again: no write
    assert door.set_extra("n1", HEALTH_KEY, "ok")
    assert mem.writes == [("extra", "n1", "rack=r4 slurm_hooks_health=repair"),
                          ("extra", "n1", "rack=r4 slurm_hooks_health=ok")]  # fmt: skip
    assert not door.set_extra("n2", HEALTH_KEY, "repair")
    assert mem.nodes["n2"].extra == "waiting for vendor" and len(mem.writes) == 2


def test_door_without_extra_support_writes_nothing():
    mem = Memory(NodeState("n1", "idle"))
    assert not SlurmDoor(mem).set_extra("n1", HEALTH_KEY, "ok")
    assert mem.writes == [] and mem.reads == 0


# -- the repair loop publishes its grade --------------------------------------------


def _with_extra(slurm):
    def set_node_extra(name, extra):
        slurm.nodes[name] = dataclasses.replace(slurm.nodes[name], extra=extra)
        slurm._log("extra", name, extra)

    slurm.set_node_extra = set_node_extra
    return slurm


def _grade(slurm, node):
    return extra_value(slurm.nodes[node].extra, HEALTH_KEY)


def test_repair_writes_repair_then_ok_then_replace(rig):  # noqa: F811
    slurm, clock, rec, make, state = rig
    _with_extra(slurm)
    slurm.nodes["n1"] = dataclasses.replace(slurm.nodes["n1"], extra='{"rack":"r4"}')
    eng = make(health_extra=True)
    eng.handle("n1", [xid()])
    inc = _incident(state, "n1")
    assert repair.advance(eng.context, inc, accept=lambda n: (True, "ok")) == "rebooting"
    assert _grade(slurm, "n1") == HealthGrade.REPAIR
    slurm.come_back("n1")
    clock.now = T0 + timedelta(minutes=6)
    assert repair.advance(eng.context, inc, accept=lambda n: (True, "ok")) == "resumed"
    assert _grade(slurm, "n1") == HealthGrade.OK
    assert json.loads(slurm.nodes["n1"].extra)["rack"] == "r4"
    clock.now = T0 + timedelta(hours=1)
    eng.handle("n1", [xid()])
    assert (
        repair.advance(eng.context, _incident(state, "n1"), accept=lambda n: (True, "ok"))
        == "replace"
    )
    assert _grade(slurm, "n1") == HealthGrade.REPLACE
    assert slurm.count("extra") == 3  # one write per change of grade


def test_health_extra_off_by_default_and_in_observe_only(rig):  # noqa: F811
    slurm, clock, rec, make, state = rig
    _with_extra(slurm)
    make().handle("n1", [xid()])
    repair.advance(make().context, _incident(state, "n1"), accept=lambda n: (True, "ok"))
    make().handle("n2", [xid()])
    observed = make(observe_only=True, health_extra=True)
    assert repair.advance(
        observed.context, _incident(state, "n2"), accept=lambda n: (True, "ok")
    ) == ("observed")
    assert slurm.count("extra") == 0


def test_slurm_refusing_extra_is_asked_once(rig, monkeypatch, caplog):  # noqa: F811
    slurm, clock, rec, make, state = rig
    calls = []

    def refuse(name, extra):
        calls.append(name)
        raise SlurmError("scontrol: Update of this parameter is not supported: Extra=")

    slurm.set_node_extra = refuse
    monkeypatch.setattr(repair, "_EXTRA_REFUSED", [])
    _idle_on_resume(slurm)
    eng = make(health_extra=True)
    eng.handle("n1", [xid()])
    inc = _incident(state, "n1")
    with caplog.at_level("DEBUG", logger="slurm_hooks.act.repair"):
        assert repair.advance(eng.context, inc, accept=lambda n: (True, "ok")) == "rebooting"
        slurm.come_back("n1")
        clock.now = T0 + timedelta(minutes=6)
        assert repair.advance(eng.context, inc, accept=lambda n: (True, "ok")) == "resumed"
    assert len(calls) == 1
    assert sum("Extra" in r.message for r in caplog.records if r.levelname == "DEBUG") == 1
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]


# -- resume: killed before or after Slurm's resume ----------------------------------


def _idle_on_resume(slurm):
    real = slurm.resume

    def resume(name):  # a resumed DOWN node is IDLE (the fake keeps the base state)
        slurm.nodes[name] = dataclasses.replace(slurm.nodes[name], state="idle")
        real(name)

    slurm.resume = resume


def _to_accepting(rig_):
    slurm, clock, rec, make, state = rig_
    _idle_on_resume(slurm)
    eng = make()
    eng.handle("n1", [xid()])
    inc = _incident(state, "n1")
    repair.advance(eng.context, inc, accept=lambda n: (True, "ok"))
    slurm.come_back("n1")
    clock.now = T0 + timedelta(minutes=6)
    return inc


@pytest.mark.parametrize("when", ["before", "after"])
def test_kill_around_resume_resumes_once_and_closes(rig, when):  # noqa: F811
    slurm, clock, rec, make, state = rig
    inc = _to_accepting(rig)
    if when == "after":
        slurm.crash_after = "resume"  # Slurm resumed it, the process died before the record
    else:
        real = slurm.resume

        def dies(name):
            slurm.resume = real
            raise Crash("resume")

        slurm.resume = dies
    with pytest.raises(Crash):
        repair.advance(make().context, inc, accept=lambda n: (True, "passed"))
    assert state.read_incident(inc)["repair"]["status"] == "resume_intent"
    assert repair.advance(make().context, inc, accept=lambda n: (True, "passed")) == "resumed"
    assert slurm.count("resume") == 1 and slurm.nodes["n1"].reason is None
    doc = state.read_incident(inc)
    assert doc["status"] == "closed" and doc["repair"]["status"] == "resumed"
    assert state.open_incident("n1") is None
    # Acceptance ran once: the kill came after its verdict was journalled.
    assert len(doc["repair"]["history"]) == 1
