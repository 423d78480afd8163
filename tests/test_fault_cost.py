"""O(1) Slurm work per fault (issue #16): what one fault path asks of Slurm.

Counted on the in-memory FakeSlurm of test_actions.py: ``list_nodes`` is a
whole node-table read, ``get_node`` a single-node read (``sinfo -n NODE``,
``REQUEST_NODE_INFO_SINGLE`` on the CLI backend).  bench/bench_fault_cost.py
measures the same on a real slurmctld.
"""

from __future__ import annotations

import dataclasses

import pytest
from test_actions import T0, Clock, FakeSlurm, Recorder, xid79

from slurm_hooks.act import claim
from slurm_hooks.act.engine import Engine
from slurm_hooks.act.notify.base import Notifier
from slurm_hooks.agent import worker
from slurm_hooks.core.errors import ForeignReasonError, NodeNotFound, ReasonChanged
from slurm_hooks.core.incident import IncidentStatus
from slurm_hooks.core.model import JobInfo
from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.decide import DecisionKind, PolicyConfig
from slurm_hooks.detect.probes.commands import CommandResult
from slurm_hooks.slurm.cli_backend import CliClient
from slurm_hooks.slurm.door import SlurmDoor
from slurm_hooks.slurm.sinfo_node import sinfo_node_argv
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import StateStore

#: 10 nodes in one partition: limit min(20, max(1, 1), 10) = 1, the breaker binds.
BINDING = PolicyConfig(grace_seconds=60)
#: Share 1 and a cap above the partition's size: every claim ranks within.
UNBOUND = PolicyConfig(grace_seconds=60, breaker_max_share=1.0, breaker_max_nodes=100)


@pytest.fixture
def fake(tmp_path):
    slurm = FakeSlurm()
    slurm.jobs["101"] = JobInfo("101", "alice", "RUNNING", "n1", "n1", True, name="train")

    def make(policy):
        return Engine(
            slurm, policy, StateStore(tmp_path / "state"), AuditLog(tmp_path / "audit.jsonl"),
            Notifier([Recorder()]), clock=Clock(), spawn=None,
        )  # fmt: skip

    return slurm, make, tmp_path


def audit(tmp_path):
    return AuditLog(tmp_path / "audit.jsonl").entries()


def test_faulty_path_reads_the_table_once_when_the_breaker_can_bind(fake):
    slurm, make, tmp_path = fake
    (d,) = make(BINDING).handle("n1", [xid79()])
    assert d.kind is DecisionKind.DRAIN
    assert slurm.nodes["n1"].drained
    # the claim's rank: the fault path's only table read
    assert slurm.count("list_nodes") == 1
    # the node decided on alone, and the door's guard before its write
    assert slurm.count("get_node") == 2
    assert [c[1] for c in slurm.calls if c[0] == "signal"] == ["101", "101"]
    claims = [e for e in audit(tmp_path) if e["action"] == "claim"]
    assert claims[-1]["outcome"] == "confirmed" and claims[-1]["rank"] == 1


def test_faulty_path_reads_the_table_once_when_the_breaker_cannot_bind(fake):
    slurm, make, tmp_path = fake
    (d,) = make(UNBOUND).handle("n1", [xid79()])
    assert d.kind is DecisionKind.DRAIN and slurm.nodes["n1"].drained
    assert slurm.count("list_nodes") == 1 and slurm.count("get_node") == 2
    doc = StateStore(tmp_path / "state").read_incident(d.incident)
    assert IncidentStatus.parse(doc["status"]) is IncidentStatus.EVACUATING


def test_persistent_fault_makes_no_slurm_call(fake):
    slurm, make, _ = fake
    eng = make(BINDING)
    eng.handle("n1", [xid79()])
    slurm.calls.clear()
    eng.handle("n1", [xid79()])
    assert slurm.calls == []


def test_a_claim_lost_before_its_rank_is_abandoned(fake):
    """Breaker off: the rank cannot refuse, but a claim an admin replaced
    right after our write is still found out and no job is signalled."""
    slurm, make, tmp_path = fake
    real_drain = slurm.drain

    def drain_then_admin(name, reason):
        real_drain(name, reason)
        slurm.nodes[name] = dataclasses.replace(slurm.nodes[name], reason="admin: PSU")

    slurm.drain = drain_then_admin
    (d,) = make(UNBOUND).handle("n1", [xid79()])
    assert slurm.count("signal") == 0
    doc = StateStore(tmp_path / "state").read_incident(d.incident)
    assert IncidentStatus.parse(doc["status"]) is IncidentStatus.ABANDONED
    assert slurm.nodes["n1"].reason == "admin: PSU"


# -- the door's guard: a snapshot is judged, the write is guarded by one fresh read --------


def test_door_refuses_when_the_reason_changed_since_the_snapshot():
    slurm = FakeSlurm()
    seen = slurm.nodes["n1"]  # no reason when the caller decided
    slurm.nodes["n1"] = dataclasses.replace(seen, flags=frozenset({"DRAIN"}), reason="admin: fan")
    with pytest.raises(ReasonChanged) as exc:
        SlurmDoor(slurm).drain("n1", format_reason(DrainReason("XID79", "i1", "x")),
                               expect=seen.reason)  # fmt: skip
    assert exc.value.found == "admin: fan"
    assert slurm.count("drain") == 0 and slurm.nodes["n1"].reason == "admin: fan"
    assert slurm.count("get_node") == 1 and slurm.count("list_nodes") == 0


def test_door_still_refuses_a_foreign_reason_the_snapshot_already_showed():
    slurm = FakeSlurm()
    slurm.nodes["n1"] = dataclasses.replace(slurm.nodes["n1"], flags=frozenset({"DRAIN"}),
                                            reason="admin: fan")  # fmt: skip
    with pytest.raises(ForeignReasonError):
        SlurmDoor(slurm).drain("n1", format_reason(DrainReason("XID79", "i1", "x")),
                               expect="admin: fan")  # fmt: skip
    assert slurm.count("drain") == 0


def after_the_decide_read(slurm, reason):
    """Patch ``slurm.get_node``: the node gets ``reason`` (drained) right
    after the read the node was decided on, before the door's guard."""
    real_get = slurm.get_node
    reads = []

    def get(name):
        reads.append(name)
        if len(reads) == 2:
            slurm.nodes[name] = dataclasses.replace(slurm.nodes[name], flags=frozenset({"DRAIN"}),
                                                    reason=reason)  # fmt: skip
        return real_get(name)

    slurm.get_node = get


def test_engine_refuses_a_foreign_reason_written_after_its_snapshot(fake):
    slurm, make, tmp_path = fake
    after_the_decide_read(slurm, "maintenance -- ops")
    (d,) = make(BINDING).handle("n1", [xid79()])
    assert slurm.nodes["n1"].reason == "maintenance -- ops" and slurm.count("drain") == 0
    doc = StateStore(tmp_path / "state").read_incident(d.incident)
    assert IncidentStatus.parse(doc["status"]) is IncidentStatus.ABANDONED
    assert "node_drained" not in (doc.get("alerts") or {})  # it was never drained
    assert StateStore(tmp_path / "state").open_incident("n1") is None
    assert any(e["action"] == "drain" and e.get("outcome") == "refused" for e in audit(tmp_path))


def test_engine_rejudges_when_a_lend_reason_appeared_after_its_snapshot(fake):
    """Our own LEND hold written between decide and the claim: judged again
    from a fresh read, the fault's drain replaces it (as without a snapshot)."""
    slurm, make, _ = fake
    lend = format_reason(DrainReason("LEND", "0a0b0c0d", "lent to kubernetes"))
    after_the_decide_read(slurm, lend)
    (d,) = make(BINDING).handle("n1", [xid79()])
    assert slurm.nodes["n1"].reason.startswith("slurm-hooks/1 XID79 gpu3 inc=")
    assert slurm.count("drain") + slurm.count("update_reason") == 1  # once, after a fresh look
    assert slurm.count("list_nodes") == 1


# -- the claim's settle: one read, a sleep computed from it, one confirming read ----------


class ServerClock:
    """slurmctld's clock = the wall clock (offset), read through sdiag."""

    def __init__(self, wall, offset=0.0):
        self.wall, self.offset, self.reads = wall, offset, 0

    def server_time(self):
        from datetime import datetime

        self.reads += 1
        return datetime.fromtimestamp(int(self.wall() + self.offset), tz=T0.tzinfo)


def test_settle_reads_slurms_clock_twice():
    now = [1_000_000.3]
    sleeps = []

    def sleep(s):
        sleeps.append(s)
        now[0] += s

    server = ServerClock(lambda: now[0])
    reads = claim.settle(server, sleep=sleep, wall=lambda: now[0], monotonic=lambda: now[0])  # type: ignore[arg-type]
    assert reads == 2 and server.reads == 2
    assert sleeps == [pytest.approx(0.7 + claim.MARGIN_S)]


def test_settle_polls_on_when_the_local_clock_runs_ahead_of_slurms():
    now = [1_000_000.3]

    def sleep(s):
        now[0] += s

    server = ServerClock(lambda: now[0], offset=-0.5)  # slurmctld half a second behind
    reads = claim.settle(server, sleep=sleep, wall=lambda: now[0], monotonic=lambda: now[0])  # type: ignore[arg-type]
    assert reads >= 3
    assert int(now[0] - 0.5) > 999_999  # Slurm's clock did pass the first second


def test_settle_never_waits_more_than_a_second_for_the_first_look():
    now = [1_000_000.0]
    sleeps = []

    def sleep(s):
        sleeps.append(s)
        now[0] += s

    server = ServerClock(lambda: now[0], offset=+30)  # local clock far behind Slurm's
    claim.settle(server, sleep=sleep, wall=lambda: now[0], monotonic=lambda: now[0])  # type: ignore[arg-type]
    assert sleeps[0] <= 1.0 + claim.MARGIN_S


# -- the grace worker: backoff ------------------------------------------------------------


def test_worker_polls_with_backoff_up_to_a_cap():
    delays = list(worker.poll_delays(120.0))
    assert delays[0] == worker.POLL_S
    body = delays[:-1]  # the last one is what is left of the grace
    assert all(b >= a for a, b in zip(body, body[1:], strict=False))
    assert max(delays) <= worker.POLL_MAX_S
    assert sum(delays) == pytest.approx(120.0)
    assert len(delays) < 25  # was 120 polls at 1 s


# -- the CLI backend's single-node read -----------------------------------------------------

SEP = "\x1f"


def _line(*fields: str) -> str:
    return "".join(f + SEP for f in fields) + "\n"


class Runner:
    def __init__(self, *outputs: str) -> None:
        self.outputs = list(outputs)
        self.argvs: list[list[str]] = []

    def __call__(self, argv, **kw):  # type: ignore[no-untyped-def]
        self.argvs.append(list(argv))
        return CommandResult(tuple(argv), 0, self.outputs.pop(0), "", 0.01)


def test_get_node_is_one_sinfo_single_node_read():
    reason = "slurm-hooks/1 XID79 gpu0 inc=abc :: a | b; c=d [x@y] State=IDLE"
    out = _line("n2", "idle+drain", "root(0)", "2026-12-03T07:59:01", "gpu*", "a100,ib",
                "gpu:8", "64", "8/56/0/64", "rack 4", "grade=ok", reason)  # fmt: skip
    out += _line("n2", "idle+drain", "root(0)", "2026-12-03T07:59:01", "debug", "a100,ib",
                 "gpu:8", "64", "8/56/0/64", "rack 4", "grade=ok", reason)  # fmt: skip
    runner = Runner(out)
    node = CliClient(runner=runner).get_node("n2")
    assert runner.argvs == [sinfo_node_argv("n2")]
    assert "-n" in runner.argvs[0] and "n2" in runner.argvs[0]
    assert (node.name, node.state, node.flags) == ("n2", "idle", frozenset({"DRAIN"}))
    assert node.reason == reason and node.reason_user == "root"
    assert node.reason_time is not None and node.reason_time.minute == 59
    assert node.partitions == ("gpu", "debug") and node.features == ("a100", "ib")
    assert (node.gres, node.cpus, node.alloc_cpus) == ("gpu:8", 64, 8)
    assert (node.comment, node.extra) == ("rack 4", "grade=ok")


def test_get_node_without_a_reason():
    out = _line("n1", "idle", "Unknown", "Unknown", "debug*", "(null)", "(null)", "2",
                "0/2/0/2", "(null)", "(null)", "none")  # fmt: skip
    node = CliClient(runner=Runner(out)).get_node("n1")
    assert node.reason is None and node.reason_user is None and node.reason_time is None
    assert node.comment is None and node.extra is None and node.features == ()
    assert node.partitions == ("debug",) and not node.flags


def test_get_node_without_a_reason_but_the_user_who_cleared_it():
    # Slurm 24.11 on a lab node whose reason was cleared: "none", user root,
    # time Unknown (scontrol shows no reason for it).
    out = _line("n1", "idle", "root(0)", "Unknown", "debug*", "(null)", "(null)", "2",
                "0/2/0/2", "(null)", "(null)", "none")  # fmt: skip
    node = CliClient(runner=Runner(out)).get_node("n1")
    assert node.reason is None and node.reason_user is None and node.reason_time is None


def test_a_reason_that_reads_none_is_kept_when_someone_set_it():
    out = _line("n1", "idle+drain", "alice(1000)", "2026-12-03T07:59:01", "debug*", "(null)",
                "(null)", "2", "0/2/0/2", "(null)", "(null)", "none")  # fmt: skip
    node = CliClient(runner=Runner(out)).get_node("n1")
    assert (node.reason, node.reason_user) == ("none", "alice")


@pytest.mark.parametrize(
    "sinfo_out",
    [
        "",  # not listed by sinfo (no partition) or not there at all
        _line("n1", "idle", "Unknown", "Unknown", "debug*", "(null)", "(null)", "2", "0/2/0/2",
              f"a{SEP}b", "(null)", "none"),  # a separator in free text: ambiguous
    ],
)  # fmt: skip
def test_get_node_falls_back_to_scontrol_when_sinfo_cannot_say(sinfo_out):
    scontrol = "NodeName=n1 State=IDLE Partitions=debug Comment=a\x1fb\n"
    runner = Runner(sinfo_out, scontrol)
    node = CliClient(runner=runner).get_node("n1")
    assert runner.argvs[1][:4] == ["scontrol", "-o", "show", "node"]
    assert node.name == "n1" and node.state == "idle"


def test_get_node_not_found_after_the_fallback():
    runner = Runner("", "")
    with pytest.raises(NodeNotFound):
        CliClient(runner=runner).get_node("n9")


def test_get_node_takes_the_long_way_once_sinfo_refuses_its_fields():
    calls: list[list[str]] = []
    scontrol = "NodeName=n1 State=IDLE Partitions=debug\n"

    def runner(argv, **kw):  # type: ignore[no-untyped-def]
        calls.append(list(argv))
        if argv[0] == "sinfo":
            return CommandResult(tuple(argv), 1, "", "sinfo: error: Invalid node format", 0.01)
        return CommandResult(tuple(argv), 0, scontrol, "", 0.01)

    c = CliClient(runner=runner)
    assert c.get_node("n1").name == "n1" and c.get_node("n1").state == "idle"
    assert [a[0] for a in calls] == ["sinfo", "scontrol", "scontrol"]
