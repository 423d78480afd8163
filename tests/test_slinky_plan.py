"""The Slinky planner (bridge/slinky_plan.py), pure: the live mapping, the
order of the steps, and what it leaves alone."""

from __future__ import annotations

import pytest

from slurm_hooks.bridge import slinky_plan as sp
from slurm_hooks.bridge.settings import BridgeConfig
from slurm_hooks.core.model import NodeState
from slurm_hooks.core.reason import DrainReason, format_reason

CFG = BridgeConfig(node_mapping="slinky", max_cordoned_fraction=0.5, leader_election=False)
K = sp.SlinkyKeys(CFG.annotation_prefix)
REASON = format_reason(DrainReason("XID79", "aa000001", "GPU has fallen off the bus", "gpu3"))


def pod(name, host, node, uid, *, ready=True, ann=None, mode="StatefulSet"):
    return {
        "metadata": {
            "name": name,
            "namespace": "slurm",
            "uid": uid,
            "labels": {
                "app.kubernetes.io/name": "slurmd",
                sp.SCALING_MODE_LABEL: mode,
                sp.POD_HOSTNAME_LABEL: host,
            },
            "annotations": ann or {},
        },
        "spec": {"nodeName": node, "hostname": host},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def machine(name, ann=None, unschedulable=False):
    return {
        "metadata": {"name": name, "resourceVersion": "1", "annotations": ann or {}},
        "spec": {"unschedulable": True} if unschedulable else {},
    }


def node(name, state="idle", flags=(), reason=None):
    return NodeState(name, state, frozenset(flags), reason)


def pods_of(*objs):
    return sp.slurmd_pods(objs, CFG.slurmd_pod_selector)


def test_mapping_follows_the_pod_and_slinkys_name_rules():
    pods = pods_of(pod("gpu-0", "n1", "m1", "u1"), pod("gpu-1", "n2", "m7", "u2"))
    mapped = sp.map_slinky(["n1", "n2", "n3"], [machine("m1"), machine("m7")], pods)
    assert {k: v["metadata"]["name"] for k, v in mapped.items()} == {"n1": "m1", "n2": "m7"}
    # StatefulSet mode without a hostname: the pod name; hostNetwork: the machine.
    bare = pod("gpu-5", "", "m5", "u5")
    bare["spec"].pop("hostname")
    bare["metadata"]["labels"].pop(sp.POD_HOSTNAME_LABEL)
    assert sp.slurm_node_of(bare) == "gpu-5"
    bare["spec"]["hostNetwork"] = True
    assert sp.slurm_node_of(bare) == "m5"


def test_fresh_fault_holds_the_machine_with_slinkys_reason_then_moves_when_idle():
    pods = pods_of(pod("gpu-0", "n1", "m1", "u1"))
    states = [node("n1", flags={"DRAIN"}, reason=REASON)]
    first = sp.plan(states, [machine("m1"), machine("m5")], pods, CFG)
    (hold,) = first.steps
    assert isinstance(hold, sp.Hold) and hold.cordon.node == "m1" and hold.pod == "slurm/gpu-0"
    body = sp.hold_patch(machine("m1"), hold, CFG, __import__("datetime").datetime(2025, 1, 1))
    ann = body["metadata"]["annotations"]
    assert ann[sp.NODE_CORDON_REASON] == REASON and body["spec"]["unschedulable"] is True
    assert ann[K.slurm_node] == "n1"
    held = machine("m1", {k: v for k, v in ann.items() if v is not None}, unschedulable=True)
    busy = sp.plan([node("n1", "allocated", {"DRAIN"}, REASON)], [held], pods, CFG)
    assert busy.steps == () and "jobs still running" in busy.deferred[0].why
    idle = sp.plan(states, [held], pods, CFG)
    assert [type(s).__name__ for s in idle.steps] == ["MarkPod", "Reserve", "MovePod"]
    reserve, move = idle.steps[1:]
    assert reserve.slurm_node == "n1" and reserve.name == sp.hold_name("n1", hold.cordon.incident)
    assert move.uid == "u1"


def test_what_users_cause_holds_no_machine_and_moves_no_pod():
    """A drain for what the node's users can cause (a full scratch): Slurm's
    drain keeps new jobs off; the bridge holds no machine, moves no slurmd
    pod to a spare and asks no job query for it."""
    pods = pods_of(pod("gpu-0", "n1", "m1", "u1"))
    full = format_reason(DrainReason("SCRATCH_FULL", "aa000002", "scratch full", None))
    states = [node("n1", flags={"DRAIN"}, reason=full)]
    out = sp.plan(states, [machine("m1"), machine("m5")], pods, CFG)
    assert (out.steps, out.acted) == ((), 0)
    assert sp.job_queries(states, [machine("m1")], pods, CFG) == []


def test_the_reservation_is_made_once_before_the_move_and_dropped_with_the_reassert():
    """The reservation keeps jobs off through the operator's migration IDLE;
    journalled (made or refused), it is not asked for again, and only a made
    one is dropped, when our reason is back (or when the incident ends
    before the move)."""
    pods = pods_of(pod("gpu-0", "n1", "m1", "u1"))
    states = [node("n1", flags={"DRAIN"}, reason=REASON)]
    base = {K.incident: "aa000001", K.slurm_node: "n1", K.reason: REASON, K.cordoned: "true"}
    for key in (K.reserved, K.reserve_failed):
        f = machine("m1", {**base, key: "aa000001"}, unschedulable=True)
        steps = sp.plan(states, [f], pods, CFG).steps
        assert [type(s).__name__ for s in steps] == ["MarkPod", "MovePod"], key
    # An earlier incident's reservation key does not count for this one.
    f = machine("m1", {**base, K.reserved: "ffff0000"}, unschedulable=True)
    assert "Reserve" in [type(s).__name__ for s in sp.plan(states, [f], pods, CFG).steps]
    # Ended before the move (an admin resumed it): the reservation goes too.
    f = machine("m1", {**base, K.reserved: "aa000001"}, unschedulable=True)
    (abandon,) = sp.plan([node("n1")], [f], pods, CFG).steps
    assert isinstance(abandon, sp.Abandon) and abandon.unreserve == sp.hold_name("n1", "aa000001")
    f = machine("m1", {**base, K.reserve_failed: "aa000001"}, unschedulable=True)
    (abandon,) = sp.plan([node("n1")], [f], pods, CFG).steps
    assert abandon.unreserve is None
    # After the move: the reassert drops a made one, and only a made one.
    moved = {**base, K.moved_uid: "u1"}
    marked = pod(
        "gpu-0", "n1", "m5", "u9",
        ann={sp.POD_CORDON: "true", f"{CFG.annotation_prefix}/incident": "aa000001"},
    )  # fmt: skip
    for extra, want in (
        ({K.reserved: "aa000001"}, sp.hold_name("n1", "aa000001")),
        ({K.reserve_failed: "aa000001"}, None),
        ({}, None),
    ):
        f = machine("m1", {**moved, **extra}, unschedulable=True)
        steps = sp.plan([node("n1", "idle")], [f, machine("m5")], pods_of(marked), CFG).steps
        (reassert,) = [s for s in steps if isinstance(s, sp.Reassert)]
        assert reassert.unreserve == want, extra
    # A new incident on the machine clears the last one's reservation keys.
    old = machine("m1", {**moved, K.reserved: "aa000001", K.reserve_failed: "aa000001"})
    (hold,) = sp.plan(states, [machine("m1")], pods, CFG).steps
    body = sp.hold_patch(old, hold, CFG,
                         __import__("datetime").datetime(2025, 1, 1))  # fmt: skip
    ann = body["metadata"]["annotations"]
    assert ann[K.reserved] is None and ann[K.reserve_failed] is None


def test_hold_names_are_reservation_names():
    from slurm_hooks.core.errors import ConfigError
    from slurm_hooks.slurm.reservation import check_name, create_argv

    assert check_name(sp.hold_name("gpu-017.rack2", "aa000001")) == (
        "slurm-hooks-move-gpu-017.rack2-aa000001"
    )
    for bad in ("", "a b", "n1,n2", "x=y", "-lead", "n[1-2]", "a;b"):
        with pytest.raises(ConfigError):
            create_argv(bad, "n1", 5)
        with pytest.raises(ConfigError):
            create_argv("ok", bad, 5)


def test_after_the_move_mark_then_reassert_then_unmark_before_any_resume():
    ann = {K.incident: "aa000001", K.slurm_node: "n1", K.reason: REASON, K.moved_uid: "u1"}
    f = machine("m1", ann, unschedulable=True)
    new = pod("gpu-0", "n1", "m5", "u9", ready=False)
    down = node("n1", "down", {"NOT_RESPONDING"}, "slurm-operator: Pod is terminating")
    waiting = sp.plan([down], [f, machine("m5")], pods_of(new), CFG, accepting=True)
    assert [type(s).__name__ for s in waiting.steps] == ["MarkPod"]
    marked = pod(
        "gpu-0",
        "n1",
        "m5",
        "u9",
        ann={sp.POD_CORDON: "true", f"{CFG.annotation_prefix}/incident": "aa000001"},
    )
    idle = node("n1", "idle")  # the operator's migration IDLE
    steps = sp.plan([idle], [f, machine("m5")], pods_of(marked), CFG, accepting=True).steps
    assert [(type(s).__name__, getattr(s, "mark", None)) for s in steps] == [
        ("Reassert", None),
        ("MarkPod", False),
        ("Accept", None),
        ("Release", None),
    ]
    assert steps[0].reason == REASON and steps[2].machine == "m5"


def test_an_operator_drain_we_did_not_cause_is_left_alone():
    pods = pods_of(pod("gpu-3", "n4", "m4", "u4"))
    states = [node("n4", flags={"DRAIN"}, reason="slurm-operator: Node (m4) was cordoned")]
    out = sp.plan(states, [machine("m4", unschedulable=True)], pods, CFG)
    assert out.steps == () and out.deferred == ()


def test_an_admin_reason_after_the_move_is_never_replaced():
    ann = {K.incident: "aa000001", K.slurm_node: "n1", K.reason: REASON, K.moved_uid: "u1"}
    f = machine("m1", ann, unschedulable=True)
    admin = node("n1", "idle", {"DRAIN"}, "bad dimm, ticket 42")
    out = sp.plan([admin], [f], pods_of(pod("gpu-0", "n1", "m5", "u9")), CFG, accepting=True)
    assert out.steps == () and "foreign reason" in out.deferred[0].why


def test_a_finished_incident_plans_nothing_and_the_pod_never_returns_to_the_faulty_machine():
    ann = {
        K.incident: "aa000001",
        K.slurm_node: "n1",
        K.reason: REASON,
        K.moved_uid: "u1",
        K.done: "aa000001",
    }
    f = machine("m1", ann, unschedulable=True)
    out = sp.plan([node("n1")], [f, machine("m5")], pods_of(pod("gpu-0", "n1", "m5", "u9")), CFG)
    assert out.steps == ()
    ann.pop(K.done)
    back = sp.plan([node("n1")], [f], pods_of(pod("gpu-0", "n1", "m1", "u9")), CFG)
    assert back.steps == () and "faulty machine" in back.deferred[0].why


def test_the_door_adopts_only_the_operator_reason_the_bridge_names():
    """SlurmDoor.drain(foreign_prefixes=...): the reassert of step 9 replaces
    a ``slurm-operator:`` reason; an admin's reason still refuses."""
    import pytest
    from test_slurm_door import Memory

    from slurm_hooks.core.errors import ForeignReasonError
    from slurm_hooks.slurm.door import SlurmDoor

    op = node("n1", "down", (), "slurm-operator: Pod is terminating")
    mem = Memory(op, node("n2", "idle", {"DRAIN"}, "bad dimm, ticket 42"))
    door = SlurmDoor(mem)
    with pytest.raises(ForeignReasonError):
        door.drain("n1", REASON)  # without the prefix named: foreign as ever
    door.drain("n1", REASON, foreign_prefixes=(sp.OPERATOR_PREFIX,))
    assert mem.writes == [("drain", "n1", REASON)]
    with pytest.raises(ForeignReasonError):
        door.drain("n2", REASON, foreign_prefixes=(sp.OPERATOR_PREFIX,))
    assert len(mem.writes) == 1


def test_a_tenants_pod_claiming_a_slurm_nodes_hostname_holds_no_machine():
    """A pod's labels and hostname are whoever created it's to choose: a
    second live pod claiming n1 (a tenant's, on their victim machine) makes
    n1's machine unknown, so neither machine is held, marked or replaced;
    and the bridge never lists pods outside the NodeSets' namespace."""
    fake = pod("aaa", "n1", "victim", "u9")
    fake["metadata"]["namespace"] = "tenant"
    pods = pods_of(fake, pod("gpu-0", "n1", "m1", "u1"))
    states = [node("n1", flags={"DRAIN"}, reason=REASON)]
    assert sp.map_slinky(["n1"], [machine("m1"), machine("victim")], pods) == {}
    assert sp.plan(states, [machine("m1"), machine("victim")], pods, CFG).steps == ()
    for empty in ("", "Not_A_Namespace"):
        with pytest.raises(ValueError, match="slinky_namespace"):
            BridgeConfig(node_mapping="slinky", slinky_namespace=empty).validate()
    BridgeConfig(node_mapping="same", slinky_namespace="").validate()  # unused there
