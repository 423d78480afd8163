"""The breaker's claim/settle/rank protocol (act/claim.py, decide.breaker.rank_claim)
and held faults (act/held.py, core/held.py), without Slurm.

The lab proves it under real concurrency (tests/test_breaker_mass_lab.py);
here: the order, its edge cases, the crash windows and the held records.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from test_actions import T0, Clock, FakeSlurm, Recorder, xid79

from slurm_hooks.act import claim
from slurm_hooks.act.engine import Engine
from slurm_hooks.act.notify.base import Notifier
from slurm_hooks.core.held import HeldMark, comment_is_ours, format_mark, parse_mark
from slurm_hooks.core.history import Trip
from slurm_hooks.core.incident import IncidentStatus
from slurm_hooks.core.model import JobInfo, NodeState
from slurm_hooks.decide import DecisionKind, PolicyConfig
from slurm_hooks.decide.breaker import rank_claim
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import StateStore

CFG = PolicyConfig(breaker_max_share=1.0, breaker_max_nodes=2)


def ours(name, t, *, inc=None, extra="", parts=("gpu",)):
    reason = (
        f"slurm-hooks/1 XID79 gpu0 inc={inc or name + 'x'}{extra} :: GPU has fallen off the bus"
    )
    return NodeState(name, "idle", frozenset({"DRAIN"}), reason, "root", t, partitions=parts)


def test_rank_orders_by_reason_time_then_name_and_confirms_within_the_cap():
    t = T0
    fleet = [ours("n9", t), ours("n1", t), ours("n5", t + timedelta(seconds=1)),
             NodeState("n2", "idle", partitions=("gpu",))]  # fmt: skip
    v = {n.name: rank_claim(n.name, n.reason, fleet, CFG, t + timedelta(seconds=5))
         for n in fleet[:3]}  # fmt: skip
    assert (v["n1"].rank, v["n9"].rank, v["n5"].rank) == (1, 2, 3)
    assert v["n1"].confirmed and v["n9"].confirmed and not v["n5"].confirmed
    assert v["n5"].ahead == ("n1", "n9")


def test_a_rewritten_reason_of_an_earlier_drain_counts_ahead():
    # Slurm re-stamps a reason rewrite (repl=requested): it must not free a slot.
    t = T0
    fleet = [ours("n1", t), ours("n2", t + timedelta(seconds=3), extra=" repl=requested"),
             ours("n3", t + timedelta(seconds=1))]  # fmt: skip
    v = rank_claim("n3", fleet[2].reason, fleet, CFG, t + timedelta(seconds=5))
    assert v.rank == 3 and not v.confirmed


def test_a_claim_no_longer_on_the_node_is_lost():
    n = ours("n1", T0)
    admin = dataclasses.replace(n, reason="admin: bad fan")
    assert rank_claim("n1", n.reason, [admin], CFG, T0).lost
    resumed = dataclasses.replace(n, flags=frozenset())
    assert rank_claim("n1", n.reason, [resumed], CFG, T0).lost


def test_every_partition_of_the_node_must_have_room():
    t = T0
    fleet = [ours("a1", t, parts=("a",)), ours("a2", t, parts=("a",)),
             ours("x", t + timedelta(seconds=1), parts=("a", "b"))]  # fmt: skip
    v = rank_claim("x", fleet[2].reason, fleet, CFG, t + timedelta(seconds=2))
    assert not v.confirmed and v.partition == "a"


def test_lent_and_spare_nodes_do_not_count():
    lent = NodeState("n1", "idle", frozenset({"DRAIN"}), "slurm-hooks/1 LEND inc=l1 :: lent",
                     "root", T0, partitions=("gpu",))  # fmt: skip
    fleet = [lent, ours("n2", T0), ours("n3", T0)]
    assert rank_claim("n3", fleet[2].reason, fleet, CFG, T0).confirmed


def marked(node, key_at):
    """A node whose claim backed off: in service, our held mark in its Comment."""
    mark = format_mark(HeldMark("XID79", "gpu0", node + "x", T0, key_at))
    return NodeState(node, "idle", partitions=("gpu",), comment=mark)


def test_a_latch_placed_before_the_claim_refuses_it():
    t = T0 + timedelta(seconds=10)
    claim_ = ours("n5", t)
    for key_at in (T0, t, None):  # earlier, the same second (n4 < n5), no key at all
        v = rank_claim("n5", claim_.reason, [claim_, marked("n4", key_at)], CFG, t)
        assert not v.confirmed and v.latched and v.rank == 1, key_at
        assert "n4" in v.latched_by and "latched" in v.explain()


def test_a_latch_placed_after_the_claim_does_not_refuse_it():
    """The burst: n1 is ranked late, after n9 (past the cap, same second,
    later by name) backed off and marked: n1 is still one of the first."""
    claim_ = ours("n1", T0)
    for later in (marked("n9", T0), marked("n0", T0 + timedelta(seconds=1))):
        v = rank_claim("n1", claim_.reason, [claim_, later], CFG, T0)
        assert v.confirmed and not v.latched and v.key_at == T0


def test_the_latch_files_trip_is_placed_by_its_key_too():
    claim_ = ours("n5", T0 + timedelta(seconds=5))
    fleet = [claim_]

    def trip(at, node="n4", part="gpu"):
        return {part: Trip(part, T0, node, 2, 2, at)}

    assert not rank_claim("n5", claim_.reason, fleet, CFG, T0, trip(T0)).confirmed
    assert not rank_claim("n5", claim_.reason, fleet, CFG, T0, trip(None)).confirmed
    assert not rank_claim("n5", claim_.reason, fleet, CFG, T0, trip(T0, part="*")).confirmed
    late = trip(T0 + timedelta(seconds=6))
    assert rank_claim("n5", claim_.reason, fleet, CFG, T0, late).confirmed
    other = trip(T0, part="cpu")
    assert rank_claim("n5", claim_.reason, fleet, CFG, T0, other).confirmed


class Ticking:
    """A server clock that moves one second every ``every`` reads."""

    def __init__(self, every=3):
        self.reads, self.every = 0, every

    def server_time(self):
        self.reads += 1
        return T0 + timedelta(seconds=self.reads // self.every)


def test_settle_waits_for_slurmctlds_clock_to_pass_its_second():
    clock = Ticking(every=3)
    reads = claim.settle(clock, sleep=lambda s: None)  # type: ignore[arg-type]
    assert reads == 3 and clock.reads == 3


def test_settle_gives_up_when_the_clock_does_not_move():
    class Stuck:
        def server_time(self):
            return T0

    ticks = iter(range(1000))
    with pytest.raises(claim.SettleTimeout):
        claim.settle(Stuck(), sleep=lambda s: None, monotonic=lambda: next(ticks), timeout_s=5)  # type: ignore[arg-type]


def test_held_mark_round_trip_and_ownership():
    m = HeldMark("XID79", "gpu0", "n1-abc", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    text = format_mark(m)
    assert text == "slurm-hooks/1 HELD XID79 gpu0 inc=n1-abc since=2026-01-02T03:04:05Z"
    assert parse_mark(text) == m
    keyed = dataclasses.replace(m, key_at=datetime(2026, 1, 2, 3, 4, 1, tzinfo=UTC))
    text = format_mark(keyed)
    assert " inc=n1-abc key=1767323041 since=" in text and parse_mark(text) == keyed
    assert parse_mark("HELD XID79 by admin") is None
    assert comment_is_ours(None) and comment_is_ours(text)
    assert not comment_is_ours("rack 4, PSU swapped")


class CommentingSlurm(FakeSlurm):
    """FakeSlurm plus node comments (the held marks)."""

    def set_node_comment(self, name, comment):
        self.nodes[name] = dataclasses.replace(self.nodes[name], comment=comment or None)
        self._log("comment_node", name, comment)


def engines(tmp_path, slurm, policy):
    clock = Clock()

    def make(node):
        return Engine(
            slurm, policy, StateStore(tmp_path / node / "state"),
            AuditLog(tmp_path / node / "audit.jsonl"), Notifier([Recorder()]), clock=clock,
            spawn=None,
        )  # fmt: skip

    return make, clock


def three_claims(tmp_path, finding):
    """Cap 2; n1, n2 and n3 each claim a drain for ``finding`` in the same
    second (the fake stamps every drain at T0) and stop before ranking it;
    job 9 of alice runs on n5.  Returns (slurm, engines by node, clock)."""
    slurm = CommentingSlurm(10)
    slurm.jobs["9"] = JobInfo("9", "alice", "RUNNING", "n5", "n5", True)
    policy = PolicyConfig(grace_seconds=0, breaker_max_share=1.0, breaker_max_nodes=2)
    make, clock = engines(tmp_path, slurm, policy)
    engs = {n: make(n) for n in ("n1", "n2", "n3", "n5")}
    real_confirm = Engine._confirm_claim
    Engine._confirm_claim = lambda self, incident, fleet=None: False  # type: ignore[method-assign]
    try:
        for n in ("n1", "n2", "n3"):
            engs[n].handle(n, [finding])
    finally:
        Engine._confirm_claim = real_confirm  # type: ignore[method-assign]
    return slurm, engs, clock


def test_a_claim_past_the_cap_is_taken_back_before_any_signal(tmp_path):
    """Three claims land in the same second (the fake stamps every drain at
    T0) before anyone ranks; cap 2: the third by name backs off, its job is
    never signalled, its fault is held in Slurm's comment and locally."""
    slurm = CommentingSlurm(10)
    slurm.jobs["7"] = JobInfo("7", "alice", "RUNNING", "n3", "n3", True)
    policy = PolicyConfig(grace_seconds=0, breaker_max_share=1.0, breaker_max_nodes=2)
    make, _ = engines(tmp_path, slurm, policy)
    # Claim all three first (the window every concurrent node is in), then rank.
    engs = {n: make(n) for n in ("n1", "n2", "n3")}
    real_confirm = Engine._confirm_claim

    def hold_back(self, incident, fleet=None):
        return False  # the run "dies" after its claim, before ranking

    # Each decided on the same snapshot (no drain yet): the window itself.
    snapshot = list(slurm.nodes.values())
    live = slurm.list_nodes
    slurm.list_nodes = lambda names=None: list(snapshot)  # type: ignore[method-assign]
    Engine._confirm_claim = hold_back  # type: ignore[method-assign]
    try:
        for n, e in engs.items():
            e.handle(n, [xid79(0)])
    finally:
        Engine._confirm_claim = real_confirm  # type: ignore[method-assign]
        slurm.list_nodes = live  # type: ignore[method-assign]
    assert all(slurm.nodes[n].drained for n in engs)
    assert slurm.count("signal") == 0
    # The next run of each (roll-forward) ranks its claim.
    for n, e in engs.items():
        e.handle(n, [])
    assert [n for n in engs if slurm.nodes[n].drained] == ["n1", "n2"]
    assert all(c[1] != "7" for c in slurm.calls if c[0] == "signal")
    mark = parse_mark(slurm.nodes["n3"].comment)
    assert mark is not None and mark.code == "XID79"
    held = engs["n3"].state.held("n3")
    assert set(held) == {"XID79"} and held["XID79"]["marked"]
    inc = engs["n3"].state.incidents("n3")[0]
    assert inc["status"] == IncidentStatus.HELD and inc["jobs"] == {}
    assert engs["n3"].latch.read()  # latched


def test_claims_ranked_out_of_order_drain_exactly_the_cap_and_the_latch_holds(tmp_path):
    """Three claims in one second, cap 2, ranked in the worst order: the
    last by name first (it backs off and marks), then the two ahead of it,
    which still confirm.  After both are repaired the partition has room,
    but a later fault on n5 is latched by n3's mark and held, never
    signalled; each node decided on its own state (no table before the
    claim)."""
    slurm, engs, clock = three_claims(tmp_path, xid79(0))
    assert slurm.count("list_nodes") == 0  # decided on the node alone
    for n in ("n3", "n1", "n2"):
        engs[n].handle(n, [])
    assert [n for n in ("n1", "n2", "n3") if slurm.nodes[n].drained] == ["n1", "n2"]
    mark = parse_mark(slurm.nodes["n3"].comment)
    assert mark is not None and mark.key_at == T0
    for n in ("n1", "n2"):
        slurm.resume(n)
    clock.now += timedelta(seconds=30)
    (d,) = engs["n5"].handle("n5", [xid79(0)])
    assert d.kind is DecisionKind.BREAKER_TRIPPED and "latched" in d.explanation
    assert not slurm.nodes["n5"].drained and parse_mark(slurm.nodes["n5"].comment)
    assert all(c[1] != "9" for c in slurm.calls if c[0] == "signal")
    # held here: its repeats cost nothing (the latch is kept locally too)
    before = len(slurm.calls)
    engs["n5"].handle("n5", [xid79(0)])
    assert len(slurm.calls) == before


def test_held_fault_repeats_cost_no_slurm_call_and_alert_rate_limited(tmp_path):
    slurm = CommentingSlurm(10)
    policy = PolicyConfig(grace_seconds=0, breaker_max_share=1.0, breaker_max_nodes=1)
    make, clock = engines(tmp_path, slurm, policy)
    assert make("n1").handle("n1", [xid79(0)])[0].kind is DecisionKind.DRAIN
    e2 = make("n2")
    (d,) = e2.handle("n2", [xid79(0)])
    assert d.kind is DecisionKind.BREAKER_TRIPPED and parse_mark(slurm.nodes["n2"].comment)
    alerts = e2.notifier.sinks[0].alerts  # type: ignore[attr-defined]
    assert [a.kind for a in alerts].count("fault_held") == 1
    before = len(slurm.calls)
    for _ in range(5):
        clock.now += timedelta(seconds=10)
        (d,) = e2.handle("n2", [xid79(0)])
        assert d.kind is DecisionKind.BREAKER_TRIPPED and d.facts.get("held")
    assert len(slurm.calls) == before  # zero Slurm calls while the latch holds
    assert [a.kind for a in alerts].count("fault_held") == 1  # rate-limited
    clock.now += timedelta(hours=2)  # past VERIFY_S and ALERT_EVERY_S: the full way
    e2.handle("n2", [xid79(0)])
    assert len(slurm.calls) > before
    assert [a.kind for a in alerts].count("fault_held") == 2


@pytest.mark.parametrize("seen_by", ["fault", "tick"])
def test_reset_elsewhere_is_seen_and_the_held_node_re_arms_its_own_latch(tmp_path, seen_by):
    """An admin host resets and claims the held fault itself.  The node's
    own hook, past VERIFY_S (its fault seen again, or a plain tick), sees
    our drain: it forgets the held fault and re-arms its own latch, else
    that latch would refuse its next fault for good."""
    slurm = CommentingSlurm(10)
    policy = PolicyConfig(grace_seconds=0, breaker_max_share=1.0, breaker_max_nodes=1)
    make, clock = engines(tmp_path, slurm, policy)
    make("n1").handle("n1", [xid79(0)])
    e2 = make("n2")
    e2.handle("n2", [xid79(0)])
    assert e2.latch.read()
    slurm.resume("n1")  # repaired
    admin = make("admin")
    admin.breaker_reset()
    assert admin.retry_held() == {"n2": "drained"} and slurm.nodes["n2"].drained
    assert slurm.nodes["n2"].comment is None
    clock.now += timedelta(seconds=400)
    out = e2.handle("n2", [xid79(0)] if seen_by == "fault" else [])
    if seen_by == "fault":
        assert [d.kind for d in out] == [DecisionKind.ALREADY_HANDLED]
    assert e2.state.held("n2") == {} and e2.latch.read() == {}
    slurm.resume("n2")  # repaired; a later fault drains again
    clock.now += timedelta(seconds=400)
    (d,) = e2.handle("n2", [xid79(1)])
    assert d.kind is DecisionKind.DRAIN and slurm.nodes["n2"].drained


def test_a_foreign_comment_is_never_overwritten(tmp_path):
    slurm = CommentingSlurm(10)
    slurm.nodes["n2"] = dataclasses.replace(slurm.nodes["n2"], comment="rack 4: PSU swapped")
    policy = PolicyConfig(grace_seconds=0, breaker_max_share=1.0, breaker_max_nodes=1)
    make, _ = engines(tmp_path, slurm, policy)
    make("n1").handle("n1", [xid79(0)])
    e2 = make("n2")
    (d,) = e2.handle("n2", [xid79(0)])
    assert d.kind is DecisionKind.BREAKER_TRIPPED
    assert slurm.nodes["n2"].comment == "rack 4: PSU swapped"
    assert e2.state.held("n2")["XID79"]["marked"] is False  # held locally still


def test_policy_explain_writes_nothing(tmp_path):
    slurm = CommentingSlurm(10)
    policy = PolicyConfig(grace_seconds=0, breaker_max_share=1.0, breaker_max_nodes=1)
    make, _ = engines(tmp_path, slurm, policy)
    make("n1").handle("n1", [xid79(0)])
    e2 = make("n2")
    e2.handle("n2", [xid79(0)])
    node_file = e2.state.node_path("n2")
    before = node_file.read_bytes()
    slurm.set_node_comment("n2", "")  # a reset elsewhere: explain must not act on it
    calls = len(slurm.calls)
    e2.evaluate("n2", [xid79(0)])
    assert node_file.read_bytes() == before
    assert not [c for c in slurm.calls[calls:] if c[0] in ("drain", "resume", "comment_node")]


def test_a_held_xid_logged_once_keeps_alerting_and_notices_a_reset(tmp_path):
    """An XID is logged once: later runs have no finding, the held fault
    still alerts (rate-limited, no Slurm call) and every VERIFY_S one look
    at Slurm notices that a reset elsewhere drained the node."""
    slurm = CommentingSlurm(10)
    policy = PolicyConfig(grace_seconds=0, breaker_max_share=1.0, breaker_max_nodes=1)
    make, clock = engines(tmp_path, slurm, policy)
    make("n1").handle("n1", [xid79(0)])
    e2 = make("n2")
    e2.handle("n2", [xid79(0)])
    alerts = e2.notifier.sinks[0].alerts  # type: ignore[attr-defined]
    calls = len(slurm.calls)
    clock.now += timedelta(seconds=30)
    assert e2.handle("n2", []) == [] and len(slurm.calls) == calls
    clock.now += timedelta(hours=1)
    e2.handle("n2", [])  # past ALERT_EVERY_S and VERIFY_S: alerted again, one read
    assert [a.kind for a in alerts].count("fault_held") == 2
    assert [c[0] for c in slurm.calls[calls:]] == ["get_node"]
    slurm.resume("n1")
    admin = make("admin")
    admin.breaker_reset()
    assert admin.retry_held() == {"n2": "drained"}
    clock.now += timedelta(seconds=400)
    e2.handle("n2", [])
    assert e2.state.held("n2") == {}


# -- what users cause: never uses up, nor trips, the cap real faults drain under ------------


def full(name, t, parts=("gpu",)):
    """Our drain for a full scratch (what the node's users cause)."""
    reason = f"slurm-hooks/1 SCRATCH_FULL inc={name}s :: scratch /scratch: 0.1 GiB free"
    return NodeState(name, "idle", frozenset({"DRAIN"}), reason, "root", t, partitions=parts)


def test_drains_for_what_users_cause_do_not_count_against_a_real_faults_claim():
    """A user filled the scratch of three nodes (cap 2): a real fault's claim
    still ranks first; a full scratch's own claim counts every drain of ours."""
    later = T0 + timedelta(seconds=1)
    fleet = [full("n1", T0), full("n2", T0), full("n3", T0), ours("n4", later)]
    v = rank_claim("n4", fleet[3].reason, fleet, CFG, T0 + timedelta(seconds=5))
    assert (v.confirmed, v.rank) == (True, 1)
    fleet = [ours("n1", T0), ours("n2", T0), full("n3", later)]
    v = rank_claim("n3", fleet[2].reason, fleet, CFG, T0 + timedelta(seconds=5))
    assert (v.confirmed, v.rank) == (False, 3)


def scratch_full():
    from slurm_hooks.core.model import Action, Component, Finding, Status

    return Finding("scratch", Status.FAIL, "SCRATCH_FULL", "scratch /scratch: 0.1 GiB free",
                   Component("mount", name="/scratch"), Action.DRAIN)  # fmt: skip


def test_a_scratch_claim_past_the_cap_is_taken_back_but_latches_nothing(tmp_path):
    """Three full scratches claimed in one second, cap 2: the third by name
    is taken back, but holds nothing and latches nothing (no mark, no trip):
    a real XID 79 on n5 then drains at once, jobs moved."""
    slurm, engs, clock = three_claims(tmp_path, scratch_full())
    for n in ("n1", "n2", "n3"):
        engs[n].handle(n, [])
    assert [n for n in ("n1", "n2", "n3") if slurm.nodes[n].drained] == ["n1", "n2"]
    assert parse_mark(slurm.nodes["n3"].comment) is None and not engs["n3"].latch.read()
    assert engs["n3"].state.held("n3") == {}
    assert engs["n3"].state.incidents("n3")[0]["status"] == IncidentStatus.ABANDONED
    clock.now += timedelta(seconds=30)
    (d,) = engs["n5"].handle("n5", [xid79(0)])
    assert d.kind is DecisionKind.DRAIN and slurm.nodes["n5"].drained
    assert any(c[0] == "signal" and c[1] == "9" for c in slurm.calls)
