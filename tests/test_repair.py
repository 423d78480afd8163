"""The repair loop (act/repair.py, decide/repair.py, act/spares.py, core/topology.py)
against an in-memory Slurm: the ladder, the reboot cap, exactly-once after a crash
at each step, observe-only, spares by topology.  The lab runs the same loop on
real Slurm in test_repair_lab.py."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from test_actions import T0, Clock, Crash, FakeSlurm, Recorder

from slurm_hooks.act import repair
from slurm_hooks.act.engine import Engine
from slurm_hooks.act.notify import Notifier
from slurm_hooks.core.model import Action, Component, Finding, JobInfo, NodeState, Status
from slurm_hooks.core.reason import DrainReason, format_reason, parse_reason
from slurm_hooks.core.topology import (
    parse_topology_conf,
    pick_spare,
    topology_from_yaml_data,
)
from slurm_hooks.decide import PolicyConfig
from slurm_hooks.decide.repair import (
    Attempt,
    RepairConfig,
    RepairStep,
    plan_repair,
    reboot_allowed,
)
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import StateStore

# -- pure: the ladder -------------------------------------------------------------


CFG = RepairConfig(enabled=True)


@pytest.mark.parametrize(
    ("action", "step"),
    [
        (Action.RESET_GPU, RepairStep.RESET),
        (Action.REBOOT, RepairStep.REBOOT),
        (Action.REPLACE, RepairStep.REPLACE),
        (Action.DRAIN, RepairStep.NONE),
        (None, RepairStep.NONE),
    ],
)
def test_first_rung_is_the_catalogues(action, step):
    assert plan_repair(action, "X", "gpu1", None, [], CFG, T0).step is step


def test_ladder_climbs_per_gpu_serial_within_the_window():
    reboot = Attempt(T0 - timedelta(hours=1), RepairStep.REBOOT, "XID79", "gpu3", "S123")
    reset = Attempt(T0 - timedelta(hours=1), RepairStep.RESET, "XID48", "gpu3", "S123")
    # The same GPU (by serial, even in another slot): reboot -> replace.
    assert plan_repair(Action.REBOOT, "XID79", "gpu5", "S123", [reboot], CFG, T0).step is (
        RepairStep.REPLACE
    )
    # A reset-class fault after a reset: reboot, not a second reset.
    assert plan_repair(Action.RESET_GPU, "XID48", "gpu3", "S123", [reset], CFG, T0).step is (
        RepairStep.REBOOT
    )
    # Another GPU: its own ladder.
    assert plan_repair(Action.REBOOT, "XID79", "gpu1", "S999", [reboot], CFG, T0).step is (
        RepairStep.REBOOT
    )
    # Outside the window: forgotten.
    old = dataclasses.replace(reboot, at=T0 - timedelta(days=8))
    assert plan_repair(Action.REBOOT, "XID79", "gpu3", "S123", [old], CFG, T0).step is (
        RepairStep.REBOOT
    )


def _rebooting(name, part="gpu"):
    r = DrainReason("XID79", "abcd0001", "x", "gpu0", {"step": "reboot"})
    return NodeState(name, "down", frozenset({"DRAIN"}), format_reason(r), partitions=(part,))


def test_reboot_cap_counts_our_step_reboot_reasons_per_partition():
    fleet = [_rebooting("a"), NodeState("b", "idle", partitions=("gpu",)),
             NodeState("c", "idle", partitions=("other",))]  # fmt: skip
    cfg = RepairConfig(enabled=True, max_concurrent_reboots=1)
    assert not reboot_allowed("b", fleet, cfg).allowed
    assert reboot_allowed("c", fleet, cfg).allowed
    assert reboot_allowed("b", fleet, dataclasses.replace(cfg, max_concurrent_reboots=2)).allowed
    # A foreign reason that mentions step=reboot does not count.
    foreign = NodeState("a", "down", frozenset({"DRAIN"}), "admin step=reboot", partitions=("gpu",))
    assert reboot_allowed("b", [foreign, fleet[1]], cfg).allowed


# -- pure: topology ------------------------------------------------------------------

TOPO_CONF = """# two leaf switches under a spine
SwitchName=s1 Nodes=n[1-3]   LinkSpeed=100
SwitchName=s2 Nodes=n[4-6]
SwitchName=spine Switches=s[1-2]
"""


def test_topology_conf_leaves_and_spare_choice():
    topo = parse_topology_conf(TOPO_CONF)
    assert topo.kind == "tree" and topo.group_of("n2") == "s1" and topo.group_of("n5") == "s2"
    assert "spine" not in topo.groups
    # The job ran on n1+n2 and lost n1: the spare on s1 wins over the one on s2.
    assert pick_spare(["n1", "n2"], "n1", ["n6", "n3"], topo) == "n3"
    assert pick_spare(["n4", "n5"], "n4", ["n3", "n6"], topo) == "n6"
    # No spare in the block: any spare; none at all: None.
    assert pick_spare(["n1", "n2"], "n1", ["n6"], topo) == "n6"
    assert pick_spare(["n1"], "n1", [], topo) is None


def test_topology_block_forms():
    topo = parse_topology_conf(
        "BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n[3-4]\nBlockSizes=2\n"
    )
    assert topo.kind == "block" and topo.group_of("n4") == "b2"
    data = [
        {"topology": "t0", "tree": {"switches": [{"switch": "s", "nodes": "n[1-4]"}]}},
        {"topology": "t1", "cluster_default": True,
         "block": {"block_sizes": [2], "blocks": [{"block": "bA", "nodes": "n[1-2]"},
                                                  {"block": "bB", "nodes": "n[3-4]"}]}},
    ]  # fmt: skip
    y = topology_from_yaml_data(data)
    assert y.kind == "block" and y.group_of("n3") == "bB"


def test_topology_conf_rejects_garbage():
    from slurm_hooks.core.errors import ConfigError

    with pytest.raises(ConfigError):
        parse_topology_conf("Nodes=n1\n")


# -- the engine with the repair loop --------------------------------------------------


class RebootingSlurm(FakeSlurm):
    """FakeSlurm that can reboot: REBOOT_REQUESTED until ``come_back``."""

    def reboot(self, name, reason, nextstate="DOWN"):
        n = self.nodes[name]
        self.nodes[name] = dataclasses.replace(
            n, flags=n.flags | {"DRAIN", "REBOOT_REQUESTED"}, reason=reason
        )
        self._log("reboot", name, reason, nextstate)

    def come_back(self, name):
        """What 22.05 does with nextstate=DOWN (measured in the lab)."""
        n = self.nodes[name]
        self.nodes[name] = dataclasses.replace(
            n, state="down", flags=frozenset(), reason=f"{n.reason} : reboot issued : reboot complete",
            reason_time=T0 + timedelta(minutes=5),
        )  # fmt: skip


def xid(code="XID79", action=Action.REBOOT, gpu=0):
    return Finding("xid", Status.FAIL, code, "fault", Component("gpu", gpu), action)


class FakeNvml:
    def __init__(self):
        self.resets = []

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetSerial(self, h):
        return f"SER{h}"

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}"

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return []

    def reset_gpu(self, i):
        self.resets.append(i)


@pytest.fixture
def rig(tmp_path):
    slurm = RebootingSlurm(4)
    clock = Clock()
    rec = Recorder()
    state = StateStore(tmp_path / "state")

    def make(observe_only=False, **cfg):
        return Engine(
            slurm, PolicyConfig(grace_seconds=0, breaker_min_nodes=8), state,
            AuditLog(tmp_path / "audit.jsonl"),
            Notifier([rec]), clock=clock, spawn=None, observe_only=observe_only,
            repair=RepairConfig(enabled=True, **cfg),
        )  # fmt: skip

    return slurm, clock, rec, make, state


def _incident(state, node):
    inc = state.open_incident(node) or state.incidents(node)[-1]["incident"]
    return inc if isinstance(inc, str) else inc


def tickets(rec):
    return [a for a in rec.alerts if a.kind == "hardware_ticket"]


def test_reboot_then_acceptance_then_resume_and_replace_on_return(rig):
    slurm, clock, rec, make, state = rig
    eng = make()
    eng.handle("n1", [xid()])
    inc = _incident(state, "n1")
    assert repair.advance(eng.context, inc, accept=lambda n: (True, "ok")) == "rebooting"
    assert slurm.count("reboot") == 1
    (_, _, reason, nextstate) = next(c for c in slurm.calls if c[0] == "reboot")
    assert parse_reason(reason).extra["step"] == "reboot" and nextstate == "DOWN"
    # Still rebooting: nothing more, whoever asks.
    assert repair.advance(eng.context, inc, accept=lambda n: (True, "ok")) == "rebooting"
    assert slurm.count("reboot") == 1
    slurm.come_back("n1")
    clock.now = T0 + timedelta(minutes=6)
    assert repair.advance(eng.context, inc, accept=lambda n: (True, "passed 3 checks")) == "resumed"
    assert slurm.nodes["n1"].reason is None and slurm.count("resume") == 1
    # The same XID on the same GPU within the window: no second reboot, a ticket.
    clock.now = T0 + timedelta(hours=1)
    eng.handle("n1", [xid()])
    inc2 = _incident(state, "n1")
    assert inc2 != inc
    assert repair.advance(eng.context, inc2, accept=lambda n: (True, "ok")) == "replace"
    assert slurm.count("reboot") == 1
    assert parse_reason(slurm.nodes["n1"].reason).code == "REPLACE"
    assert parse_reason(slurm.nodes["n1"].reason).extra["step"] == "replace"
    # ... and says so to the bridge, which asks for a machine only then.
    assert parse_reason(slurm.nodes["n1"].reason).extra["repl"] == "requested"
    assert len(tickets(rec)) == 1
    t = tickets(rec)[0]
    assert t.fields["ladder"] == ["reboot", "replace"] and t.fields["gpu_slot"] == "gpu0"
    assert [f["code"] for f in t.fields["faults"]].count("XID79") == 2
    # Asked again: the ticket is not sent twice.
    repair.advance(eng.context, inc2, accept=lambda n: (True, "ok"))
    assert len(tickets(rec)) == 1


def test_failed_acceptance_after_reboot_escalates_to_replace(rig):
    slurm, clock, rec, make, state = rig
    eng = make()
    eng.handle("n1", [xid()])
    inc = _incident(state, "n1")
    repair.advance(eng.context, inc, accept=lambda n: (True, "ok"))
    slurm.come_back("n1")
    assert repair.advance(eng.context, inc, accept=lambda n: (False, "burnin FAIL")) == "replace"
    assert slurm.count("resume") == 0 and len(tickets(rec)) == 1


def test_reset_class_fault_on_idle_node_resets_then_resumes(rig):
    slurm, clock, rec, make, state = rig
    eng = make()
    eng.handle("n2", [xid("XID48", Action.RESET_GPU, gpu=1)])
    inc = _incident(state, "n2")
    nvml = FakeNvml()
    assert repair.advance(eng.context, inc, accept=lambda n: (True, "ok"), nvml=nvml) == "resumed"
    assert nvml.resets == [1] and slurm.count("reboot") == 0
    assert slurm.nodes["n2"].reason is None
    hist = repair.attempts(eng.context, "n2")
    assert [a.step for a in hist] == [RepairStep.RESET] and hist[0].serial == "SER1"


def test_kill_during_reboot_call_reboots_once(rig):
    slurm, clock, rec, make, state = rig
    eng = make()
    eng.handle("n1", [xid()])
    inc = _incident(state, "n1")
    slurm.crash_after = "reboot"  # the call landed, the process died before the journal
    with pytest.raises(Crash):
        repair.advance(eng.context, inc, accept=lambda n: (True, "ok"))
    assert state.read_incident(inc)["repair"]["status"] == "reboot_intent"
    assert repair.advance(make().context, inc, accept=lambda n: (True, "ok")) == "rebooting"
    assert slurm.count("reboot") == 1


def test_kill_before_reboot_call_reboots_on_restart(rig):
    slurm, clock, rec, make, state = rig
    eng = make()
    eng.handle("n1", [xid()])
    inc = _incident(state, "n1")
    slurm.crash_after = "update_reason"  # step=reboot written, died before scontrol reboot
    with pytest.raises(Crash):
        repair.advance(eng.context, inc, accept=lambda n: (True, "ok"))
    assert slurm.count("reboot") == 0
    assert repair.advance(make().context, inc, accept=lambda n: (True, "ok")) == "rebooting"
    assert slurm.count("reboot") == 1


def test_kill_during_reset_never_resets_twice(rig):
    slurm, clock, rec, make, state = rig
    eng = make()
    eng.handle("n2", [xid("XID48", Action.RESET_GPU, gpu=1)])
    inc = _incident(state, "n2")

    class Dies(FakeNvml):
        def reset_gpu(self, i):
            super().reset_gpu(i)
            raise Crash("reset")

    nvml = Dies()
    with pytest.raises(Crash):
        repair.advance(eng.context, inc, accept=lambda n: (True, "ok"), nvml=nvml)
    assert (
        repair.advance(make().context, inc, accept=lambda n: (True, "ok"), nvml=nvml) == "resumed"
    )
    assert nvml.resets == [1]


def test_kill_during_ticket_resends_with_the_same_id(rig):
    slurm, clock, rec, make, state = rig
    eng = make()
    eng.handle("n1", [xid("XID79", Action.REPLACE)])
    inc = _incident(state, "n1")
    rec.fail = True  # the POST failed (or the run died in it): kept as intent
    assert repair.advance(eng.context, inc) == "ticket_intent"
    rec.fail = False
    assert repair.advance(make().context, inc) == "replace"
    ids = {a.fields["ticket_id"] for a in tickets(rec)}
    assert ids == {f"n1-{inc}"}
    assert repair.advance(make().context, inc) == "replace"
    assert len(tickets(rec)) == 2  # the failed try and the delivered one, one id


def test_reboot_cap_holds_with_several_nodes(rig):
    slurm, clock, rec, make, state = rig
    eng = make(max_concurrent_reboots=1)
    incs = []
    for n in ("n1", "n2", "n3"):
        eng.handle(n, [xid()])
        incs.append(_incident(state, n))
    got = [repair.advance(eng.context, i, accept=lambda n: (True, "ok")) for i in incs]
    assert got == ["rebooting", "deferred", "deferred"] and slurm.count("reboot") == 1
    slurm.come_back("n1")
    clock.now = T0 + timedelta(minutes=6)
    assert repair.advance(eng.context, incs[0], accept=lambda n: (True, "ok")) == "resumed"
    assert slurm.nodes["n1"].reason is None
    got = [repair.advance(eng.context, i, accept=lambda n: (True, "ok")) for i in incs[1:]]
    assert got == ["rebooting", "deferred"] and slurm.count("reboot") == 2


def test_observe_only_plans_and_touches_nothing(rig):
    slurm, clock, rec, make, state = rig
    slurm.drain("n1", format_reason(DrainReason("XID79", "feed0001", "x", "gpu0")))
    state.write_incident({"incident": "feed0001", "node": "n1", "code": "XID79",
                          "component": "gpu0", "action": "reboot", "jobs_done": True,
                          "status": "jobs_done", "reason": slurm.nodes["n1"].reason})  # fmt: skip
    calls = len(slurm.calls)
    assert repair.advance(make(observe_only=True).context, "feed0001") == "observed"
    assert not [c for c in slurm.calls[calls:] if c[0] not in ("get_node", "list_nodes")]


def test_repair_off_by_default(rig, tmp_path):
    slurm, clock, rec, make, state = rig
    eng = Engine(slurm, PolicyConfig(grace_seconds=0), state, AuditLog(tmp_path / "a.jsonl"),
                 clock=clock, spawn=None)  # fmt: skip
    eng.handle("n1", [xid()])
    inc = _incident(state, "n1")
    assert repair.advance(eng.context, inc) is None and slurm.count("reboot") == 0


def test_spare_from_the_jobs_block_is_resumed(rig, tmp_path, monkeypatch):
    slurm, clock, rec, make, state = rig
    slurm.nodes.update({f"n{i}": NodeState(f"n{i}", "idle", partitions=("gpu",)) for i in range(7)})
    conf = tmp_path / "etc"
    conf.mkdir()
    (conf / "slurm.conf").write_text("# test\n")
    (conf / "topology.conf").write_text(TOPO_CONF)
    monkeypatch.setenv("SLURM_CONF", str(conf / "slurm.conf"))
    spare = format_reason(DrainReason("SPARE", "spare001", "standby"))
    for n in ("n3", "n6"):
        slurm.drain(n, spare)
    slurm.jobs["7"] = JobInfo("7", "alice", "RUNNING", "n1", "n1", True, name="train")
    eng = make(resume_spares=True)
    orig = slurm.jobs_on_node
    slurm.jobs_on_node = lambda name: [dataclasses.replace(j, nodes="n[1-2]") for j in orig(name)]
    slurm.get_job = lambda jid: dataclasses.replace(FakeSlurm.get_job(slurm, jid), nodes="n[1-2]")
    eng.handle("n1", [xid()])
    assert slurm.nodes["n3"].reason is None  # block 1's spare
    assert slurm.nodes["n6"].reason == spare  # block 2's stays
    inc = _incident(state, "n1")
    assert state.read_incident(inc)["spares"] == {"7": "n3"}
    eng.resume_pending("n1")
    assert slurm.count("resume") == 1


# -- xid explain tells what the config will do ----------------------------------------


def test_xid_explain_follows_the_repair_config():
    from slurm_hooks.cli.xid_explain import we_do
    from slurm_hooks.detect.xid.catalogue import load_catalogue

    cat = load_catalogue()
    b79, b48 = cat.bucket_for(79), cat.bucket_for(48)
    assert "never reboots" in we_do(b79, "XID79")
    on = RepairConfig(enabled=True)
    assert "scontrol reboot ASAP nextstate=DOWN" in we_do(b79, "XID79", on)
    assert "resumes the node only if it passes" in we_do(b79, "XID79", on)
    assert "nvidia-smi -r" in we_do(b48, "XID48", on)
    observed = we_do(b79, "XID79", on, observe_only=True)
    assert "observe-only" in observed and "reboot ASAP" not in observed
