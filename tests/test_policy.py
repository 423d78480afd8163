"""decide(), breaker and flapping: pure, table-driven."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from slurm_hooks.core.model import Action, Component, Finding, NodeState, Status
from slurm_hooks.core.reason import DrainReason, format_reason, parse_reason
from slurm_hooks.decide import (
    DecisionKind,
    FaultEvent,
    FleetView,
    NodeHistory,
    PolicyConfig,
    RepeatRule,
    Trip,
    decide,
    decide_resume,
)
from slurm_hooks.decide.breaker import evaluate, limit_for
from slurm_hooks.decide.decide import incident_id
from slurm_hooks.decide.flapping import flap_verdict

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
CFG = PolicyConfig()


def xid(n: int, action: Action, gpu: int = 3, status: Status = Status.FAIL) -> Finding:
    return Finding(
        "xid",
        status,
        f"XID{n}",
        f"NVRM: Xid (PCI:0000:3b:00): {n}",
        Component("gpu", index=gpu),
        action,
    )


def node(name="n1", reason=None, drained=False, partitions=("gpu",), when=NOW) -> NodeState:
    return NodeState(
        name,
        "idle",
        frozenset({"DRAIN"}) if drained else frozenset(),
        reason,
        "root" if reason else None,
        when if reason else None,
        partitions,
    )


def fleet(n=50, drained_ours=0, partition="gpu", when=NOW) -> FleetView:
    nodes = []
    for i in range(n):
        reason = None
        if i < drained_ours:
            reason = format_reason(DrainReason("XID79", f"{i:08x}", "x", "gpu0"))
        nodes.append(node(f"g{i}", reason, reason is not None, (partition,), when))
    return FleetView(tuple(nodes))


def past(code: str, ago_s: float, severity="log", comp="gpu3") -> FaultEvent:
    return FaultEvent(NOW - timedelta(seconds=ago_s), code, comp, severity)


def kinds(decisions):
    return [d.kind for d in decisions]


@pytest.mark.parametrize(
    ("finding", "history", "expected"),
    [
        # XID 13 once: an application fault, the node stays in service.
        (xid(13, Action.RESTART_APP), NodeHistory(), [DecisionKind.LOG]),
        # XID 13 a third time within the hour: drain.
        (
            xid(13, Action.RESTART_APP),
            NodeHistory((past("XID13", 600), past("XID13", 1200))),
            [DecisionKind.DRAIN],
        ),
        # Old repeats outside the window do not count.
        (
            xid(13, Action.RESTART_APP),
            NodeHistory((past("XID13", 7200), past("XID13", 9000))),
            [DecisionKind.LOG],
        ),
        # Repeats on another GPU do not count.
        (
            xid(13, Action.RESTART_APP),
            NodeHistory((past("XID13", 60, comp="gpu1"), past("XID13", 90, comp="gpu1"))),
            [DecisionKind.LOG],
        ),
        (xid(79, Action.RESET_GPU), NodeHistory(), [DecisionKind.DRAIN]),
        (xid(48, Action.REBOOT), NodeHistory(), [DecisionKind.DRAIN]),
        (xid(95, Action.DRAIN), NodeHistory(), [DecisionKind.DRAIN]),
        (xid(64, Action.REPLACE), NodeHistory(), [DecisionKind.REPLACE]),
        # The third hardware drain of this GPU in a week: replace.
        (
            xid(79, Action.RESET_GPU),
            NodeHistory((past("XID79", 86400, "drain"), past("XID48", 3 * 86400, "drain"))),
            [DecisionKind.REPLACE],
        ),
        (xid(43, Action.IGNORE), NodeHistory(), [DecisionKind.IGNORE]),
        (
            Finding("gpu", Status.UNKNOWN, "CHECK_UNKNOWN", "nvml missing"),
            NodeHistory(),
            [DecisionKind.LOG],
        ),
        (Finding("gpu", Status.OK, "OK", "ok"), NodeHistory(), []),
    ],
)
def test_finding_table(finding, history, expected):
    out = decide([finding], node(), history, fleet(), CFG, NOW, node="n1")
    assert kinds(out) == expected


def test_drain_decision_carries_parseable_reason_and_evacuates():
    (d,) = decide([xid(79, Action.RESET_GPU)], node(), None, fleet(), CFG, NOW)
    assert d.kind is DecisionKind.DRAIN and d.evacuate
    parsed = parse_reason(format_reason(d.reason))
    assert (parsed.code, parsed.component) == ("XID79", "gpu3")
    assert parsed.incident == incident_id("n1", "XID79", "gpu3", NOW)
    assert d.to_dict()["reason"].startswith("slurm-hooks/1 XID79 gpu3 inc=")


def test_repeat_override_for_one_code():
    cfg = PolicyConfig(repeat={"XID13": RepeatRule(count=2, window_s=60, action="drain")})
    hist = NodeHistory((past("XID13", 30),))
    assert kinds(decide([xid(13, Action.RESTART_APP)], node(), hist, None, cfg, NOW)) == [
        DecisionKind.DRAIN
    ]
    # The default rule (3) still applies to other codes.
    hist31 = NodeHistory((past("XID31", 30),))
    assert kinds(decide([xid(31, Action.RESTART_APP)], node(), hist31, None, cfg, NOW)) == [
        DecisionKind.LOG
    ]


def test_scanner_count_value_counts_as_repeats():
    f = Finding(
        "xid",
        Status.FAIL,
        "XID13",
        "x",
        Component("gpu", index=3),
        Action.RESTART_APP,
        {"count": 3},
    )
    assert kinds(decide([f], node(), None, None, CFG, NOW)) == [DecisionKind.DRAIN]


def test_a_fault_one_users_processes_repeat_is_theirs_until_another_users_see_it():
    """XID 13 that names its processes' users: three from one user's code
    stay the application's (LOG); a second user's makes it the node's."""

    def of(users: str, count: int = 1) -> Finding:
        values = {"count": count, "process_users": users}
        return Finding("xid", Status.WARN, "XID13", "x", Component("gpu", index=3),
                       Action.RESTART_APP, values)  # fmt: skip

    def seen(user: str, ago: float) -> FaultEvent:
        return FaultEvent(NOW - timedelta(seconds=ago), "XID13", "gpu3", "log", user=user)

    mine = NodeHistory((seen("mallory", 600), seen("mallory", 300)))
    (d,) = decide([of("mallory")], node(), mine, fleet(), CFG, NOW)
    assert d.kind is DecisionKind.LOG and "from the processes of 1 user(s)" in d.explanation
    assert kinds(decide([of("", count=3)], node(), None, fleet(), CFG, NOW)) == [DecisionKind.LOG]
    assert kinds(decide([of("bob")], node(), mine, fleet(), CFG, NOW)) == [DecisionKind.DRAIN]
    assert kinds(decide([of("a,b", count=3)], node(), None, fleet(), CFG, NOW)) == [
        DecisionKind.DRAIN
    ]
    # A site that counts any repeats says so.
    anyone = PolicyConfig(app_fault_repeat_users=1)
    assert kinds(decide([of("mallory")], node(), mine, fleet(), anyone, NOW)) == [
        DecisionKind.DRAIN
    ]


@pytest.mark.parametrize(
    "reason",
    [
        "NHC: check_fs_mount: /scratch not mounted",
        "slurm-operator: node is being replaced",
        "Prolog error",
        "Not responding",
        "bad dimm, ticket 4411 -- jane",
        "slurm-hooks/1 broken",  # looks like ours but does not parse: an admin's
    ],
)
def test_foreign_reason_is_never_touched(reason):
    (d,) = decide([xid(79, Action.RESET_GPU)], node(reason=reason, drained=True), None, fleet(),
                  CFG, NOW)  # fmt: skip
    assert d.kind is DecisionKind.FOREIGN_REASON
    assert not d.acts and not d.kind.drains, "their reason is never written over"
    assert "never touches" in d.explanation
    # ... but the jobs still leave the broken node, and our drain is ready
    # for the moment their reason is lifted (issue 17).
    assert d.evacuate and d.facts["deferred_drain"] is True
    assert d.reason is not None and (d.reason.code, d.reason.component) == ("XID79", "gpu3")
    assert d.facts["foreign_reason"] == reason


def test_already_drained_by_us_is_idempotent():
    ours = DrainReason("XID79", "7f3a2c1b", "GPU has fallen off the bus", "gpu3")
    state = node(reason=format_reason(ours), drained=True)
    hist = NodeHistory(open_incident="7f3a2c1b")
    (d,) = decide([xid(79, Action.RESET_GPU)], state, hist, fleet(), CFG, NOW)
    assert d.kind is DecisionKind.ALREADY_HANDLED and not d.acts
    assert d.reason == ours
    # Even a different fault does not redrain: one incident per drain.
    (d2,) = decide([xid(48, Action.REBOOT, gpu=5)], state, hist, fleet(), CFG, NOW)
    assert d2.kind is DecisionKind.ALREADY_HANDLED


@pytest.mark.parametrize("code", ["LEND", "SPARE"])
def test_fault_on_lent_or_spare_node_wins_with_a_new_incident(code):
    held = DrainReason(code, "0a0b0c0d", "lent to kubernetes inference")
    state = node(reason=format_reason(held), drained=True)
    (d,) = decide([xid(79, Action.RESET_GPU)], state, None, fleet(), CFG, NOW)
    assert d.kind is DecisionKind.DRAIN and d.acts
    assert d.reason.code == "XID79" and d.reason.incident != "0a0b0c0d"
    assert "takes precedence" in d.explanation


def test_escalation_on_our_drain_marks_for_replacement_keeping_incident():
    ours = DrainReason("XID79", "7f3a2c1b", "lost", "gpu3")
    (d,) = decide([xid(64, Action.REPLACE)], node(reason=format_reason(ours), drained=True),
                  None, fleet(), CFG, NOW)  # fmt: skip
    assert d.kind is DecisionKind.REPLACE
    assert d.reason.incident == "7f3a2c1b" and d.reason.extra == {"repl": "requested"}
    assert d.facts["already_drained"] is True


@pytest.mark.parametrize(
    ("size", "share", "max_nodes", "expected"),
    [(50, 0.10, 20, 5), (1000, 0.10, 20, 20), (4, 0.10, 20, 1), (9, 0.5, 20, 4)],
)
def test_breaker_limit(size, share, max_nodes, expected):
    cfg = PolicyConfig(breaker_max_share=share, breaker_max_nodes=max_nodes)
    assert limit_for(size, cfg) == expected


def test_breaker_allows_up_to_the_limit_then_trips():
    f = [xid(79, Action.RESET_GPU)]
    # 50 nodes, 10 %: 5 allowed.  4 already drained by us -> the 5th drains.
    fl = fleet(50, drained_ours=4)
    (d,) = decide(f, fl.nodes[10], None, fl, CFG, NOW)
    assert d.kind is DecisionKind.DRAIN
    assert (d.facts["breaker_counted"], d.facts["breaker_limit"]) == (4, 5)
    # 5 drained -> the 6th would exceed: breaker trips, the node stays up.
    fl = fleet(50, drained_ours=5)
    (d,) = decide(f, fl.nodes[10], None, fl, CFG, NOW)
    assert d.kind is DecisionKind.BREAKER_TRIPPED and not d.acts
    assert "trips" in d.explanation and d.facts["would_be"] == "drain"


def test_breaker_ignores_foreign_and_old_drains():
    fl = fleet(50, drained_ours=5, when=NOW - timedelta(hours=3))  # outside the 1 h window
    admin = node("g20", "disk swap -- bob", True, ("gpu",))
    nodes = (*fl.nodes[:20], admin, *fl.nodes[21:])
    (d,) = decide([xid(79, Action.RESET_GPU)], fl.nodes[30], None, FleetView(nodes), CFG, NOW)
    assert d.kind is DecisionKind.DRAIN


def test_breaker_does_not_count_lent_or_spare_nodes():
    # 4 nodes: the limit is 1.  Spare and lent nodes are out of Slurm on
    # purpose, so a fault on a third node may still be drained.
    spare = node("g0", format_reason(DrainReason("SPARE", "00000001", "standby")), True)
    lent = node("g1", format_reason(DrainReason("LEND", "00000002", "lent")), True)
    nodes = (spare, lent, node("g2"), node("g3"))
    (d,) = decide([xid(79, Action.RESET_GPU)], nodes[2], None, FleetView(nodes), CFG, NOW)
    assert d.kind is DecisionKind.DRAIN
    xid_drained = node("g1", format_reason(DrainReason("XID79", "00000003", "x", "gpu0")), True)
    nodes = (spare, xid_drained, node("g2"), node("g3"))
    (d,) = decide([xid(79, Action.RESET_GPU)], nodes[2], None, FleetView(nodes), CFG, NOW)
    assert d.kind is DecisionKind.BREAKER_TRIPPED


def test_breaker_latch_keeps_drains_off():
    fl = fleet(50)
    latched = FleetView(fl.nodes, {"gpu": Trip("gpu", NOW - timedelta(days=2), "g1", 5, 5)})
    (d,) = decide([xid(79, Action.RESET_GPU)], fl.nodes[1], None, latched, CFG, NOW)
    assert d.kind is DecisionKind.BREAKER_TRIPPED
    assert d.facts["breaker_latched"] is True and "breaker reset" in d.explanation


def test_breaker_checks_every_partition_of_the_node():
    fl = fleet(10, drained_ours=1, partition="small")  # limit max(1, 1) = 1 -> full
    big = fleet(100, partition="big")
    me = NodeState("g5", "idle", partitions=("big", "small"))
    nodes = (*fl.nodes[:5], me, *fl.nodes[6:], *big.nodes)
    verdict = evaluate("g5", FleetView(nodes), CFG, NOW)
    assert not verdict.allowed and verdict.partition == "small"


@pytest.mark.parametrize(
    ("resumes_ago_h", "flapping"),
    [((), False), ((1, 5), False), ((1, 5, 20), True), ((1, 5, 30), False)],
)
def test_flap_verdict(resumes_ago_h, flapping):
    resumes = [NOW - timedelta(hours=h) for h in resumes_ago_h]
    assert flap_verdict(resumes, NOW, 3, 86400).flapping is flapping


def test_flapping_node_is_held_for_a_human():
    hist = NodeHistory(resumes=tuple(NOW - timedelta(hours=h) for h in (2, 8, 14)))
    (d,) = decide([xid(79, Action.RESET_GPU)], node(), hist, fleet(), CFG, NOW)
    assert d.kind is DecisionKind.HOLD_FOR_HUMAN and d.kind.drains
    assert d.reason.code == "FLAPPING" and d.reason.extra["last"] == "XID79"
    assert "left for a human" in format_reason(d.reason)


def test_observe_only_marks_every_decision():
    out = decide([xid(79, Action.RESET_GPU), xid(13, Action.RESTART_APP, gpu=1)], node(), None,
                 fleet(), PolicyConfig(observe_only=True), NOW)  # fmt: skip
    assert {d.kind for d in out} == {DecisionKind.DRAIN, DecisionKind.LOG}
    assert all(d.observe_only and not d.acts for d in out)


def test_most_severe_finding_names_the_drain():
    out = decide([xid(48, Action.REBOOT, gpu=1), xid(64, Action.REPLACE, gpu=2)], node(), None,
                 fleet(), CFG, NOW)  # fmt: skip
    (d,) = out
    assert d.kind is DecisionKind.REPLACE and d.code == "XID64" and len(d.findings) == 2


def test_decide_is_deterministic():
    args = ([xid(79, Action.RESET_GPU)], node(), None, fleet(), CFG, NOW)
    assert decide(*args) == decide(*args)


def test_without_slurm_view_a_drain_is_provisional():
    (d,) = decide([xid(79, Action.RESET_GPU)], None, None, None, CFG, NOW, node="n1")
    assert d.kind is DecisionKind.DRAIN and "breaker_limit" not in d.facts


# -- resume -----------------------------------------------------------------


def ours_reason(code="XID79"):
    return format_reason(DrainReason(code, "7f3a2c1b", "lost", "gpu3"))


@pytest.mark.parametrize(
    ("reason", "accepted_ago_s", "kwargs", "expected"),
    [
        (ours_reason(), 60, {}, DecisionKind.RESUME),  # passed after the drain
        (ours_reason(), 7200, {}, DecisionKind.LOG),  # passed before the fault: no
        (ours_reason(), None, {}, DecisionKind.LOG),
        (ours_reason(), None, {"skip_acceptance": True}, DecisionKind.RESUME),
        ("bad dimm -- jane", 60, {}, DecisionKind.FOREIGN_REASON),
        ("NHC: gpu check failed", 60, {"skip_acceptance": True}, DecisionKind.FOREIGN_REASON),
        (ours_reason("FLAPPING"), 60, {}, DecisionKind.HOLD_FOR_HUMAN),
        (ours_reason("FLAPPING"), 60, {"human": True}, DecisionKind.RESUME),
    ],
)
def test_decide_resume(reason, accepted_ago_s, kwargs, expected):
    drained_at = NOW - timedelta(hours=1)
    state = node(reason=reason, drained=True, when=drained_at)
    passes = () if accepted_ago_s is None else (NOW - timedelta(seconds=accepted_ago_s),)
    d = decide_resume(state, NodeHistory(acceptance_passes=passes), NOW, **kwargs)
    assert d.kind is expected


def test_policy_config_from_toml_validates():
    from slurm_hooks.core.config import parse
    from slurm_hooks.core.errors import ConfigError

    cfg = parse(
        "[policy]\ngrace_seconds = 0\n[policy.repeat.XID13]\ncount = 2\nwindow_s = 600\n",
        validate=False,
    )
    pc = cfg.section("policy", PolicyConfig)
    assert pc.grace_seconds == 0.0 and pc.repeat_rule("XID13") == RepeatRule(2, 600.0, "drain")
    with pytest.raises(ConfigError, match="policy"):
        parse("[policy]\nbreaker_max_share = 2\n", validate=False).section("policy", PolicyConfig)
    with pytest.raises(ConfigError, match="grace_secs"):
        parse("[policy]\ngrace_secs = 1\n", validate=False).section("policy", PolicyConfig)


def test_a_drain_for_what_users_cause_is_lifted_by_a_passing_health_check_alone():
    """SCRATCH_FULL (what the node's users can cause) needs no acceptance
    run: a health check with every check passing resumes the node, as NHC
    does.  Not a hardware fault's drain, not after another fault was held
    under it since (an XID no later check sees again), never FLAPPING."""
    from slurm_hooks.core.history import FaultEvent

    drained_at = NOW - timedelta(hours=1)
    full = node(reason=ours_reason("SCRATCH_FULL"), drained=True, when=drained_at)
    assert decide_resume(full, NodeHistory(), NOW, cleared=True).kind is DecisionKind.RESUME
    assert decide_resume(full, NodeHistory(), NOW).kind is DecisionKind.LOG  # acceptance, still
    xid79 = node(reason=ours_reason("XID79"), drained=True, when=drained_at)
    assert decide_resume(xid79, NodeHistory(), NOW, cleared=True).kind is DecisionKind.LOG
    since = FaultEvent(NOW - timedelta(minutes=5), "XID79", "gpu3", "already_handled", None, True,
                       None)  # fmt: skip
    d = decide_resume(full, NodeHistory((since,)), NOW, cleared=True)
    assert d.kind is DecisionKind.LOG and "XID79" in d.explanation
    again = FaultEvent(NOW - timedelta(minutes=5), "SCRATCH_FULL", None, "already_handled", None,
                       True, None)  # fmt: skip
    assert decide_resume(full, NodeHistory((again,)), NOW, cleared=True).kind is DecisionKind.RESUME
    flapping = node(reason=ours_reason("FLAPPING"), drained=True, when=drained_at)
    assert (
        decide_resume(flapping, NodeHistory(), NOW, cleared=True).kind
        is DecisionKind.HOLD_FOR_HUMAN
    )
