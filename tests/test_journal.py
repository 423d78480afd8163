"""The typed incident journal (store/journal.py): reads what earlier code
wrote, round-trips it, and steps an incident with one locked write."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from test_actions import Clock, FakeSlurm, env, xid79  # noqa: F401 - env is a fixture

from slurm_hooks.core.errors import StateError
from slurm_hooks.core.incident import IncidentStatus, Outcome
from slurm_hooks.core.model import JobInfo, NodeState
from slurm_hooks.decide import PolicyConfig
from slurm_hooks.store.journal import Incident, Journal
from slurm_hooks.store.state import LockTimeout, StateStore, locked

#: A journal as the release before the typed journal wrote it after a
#: drain, an evacuation and a requeue (keys and value types as written then;
#: "future_key" stands for a key this release does not know).
LEGACY = {
    "incident": "inc-n1-XID79-20240501T120000",
    "node": "n1",
    "kind": "drain",
    "code": "XID79",
    "component": "gpu3",
    "reason": "slurm-hooks: XID79 gpu3 inc=inc-n1-XID79-20240501T120000",
    "why": "GPU has fallen off the bus",
    "opened_at": "2024-05-01T12:00:00+00:00",
    "grace_s": 60,
    "signal_batch": "USR1",
    "signal_steps": "TERM",
    "evacuate": True,
    "action": "reset_gpu",
    "status": "jobs_done",
    "jobs": {
        "101": {
            "user": "alice", "name": "train", "restart_count": 0, "requeue": True,
            "state": "RUNNING", "nodes": "n1", "signal_intent_at": "2024-05-01T12:00:00+00:00",
            "signalled_at": "2024-05-01T12:00:00+00:00", "requeue_intent_at": None,
            "outcome": "requeued", "outcome_at": "2024-05-01T12:01:01+00:00",
            "detail": "requeued after 60s grace", "signals": ["USR1->batch"],
        }
    },
    "jobs_done": True,
    "deadline": "2024-05-01T12:01:00+00:00",
    "worker_env": {"SLURM_CONF": "/etc/slurm/slurm.conf"},
    "audit_log": "/var/lib/slurm-hooks/audit.jsonl",
    "steps": [{"step": "drain_intent", "at": "2024-05-01T12:00:00+00:00"}],
    "claim": {"rank": 1, "limit": 2, "partition": "gpu"},
    "alerts": {"node_drained": {"done": True}},
    "future_key": {"kept": [1, 2]},
}  # fmt: skip


def assert_round_trips(raw: dict) -> Incident:
    """Read ``raw`` (as JSON gave it), write it back: the same value, and
    every non-null key of the file kept with its value."""
    inc = Incident.from_doc(raw)
    doc = json.loads(json.dumps(inc.to_doc()))
    assert Incident.from_doc(doc) == inc
    for key, value in raw.items():
        if value is not None and value is not False:
            assert key in doc, key
            assert doc[key] == value or (key == "grace_s" and float(doc[key]) == float(value))
    return inc


def test_a_journal_of_the_earlier_release_reads_typed_and_round_trips():
    inc = assert_round_trips(LEGACY)
    assert inc.id == LEGACY["incident"] and inc.status is IncidentStatus.JOBS_DONE
    assert inc.grace_s == 60.0 and inc.deadline == LEGACY["deadline"]
    (job,) = inc.job_records()
    assert job.outcome is Outcome.REQUEUED and job.user == "alice" and job.requeue is True
    assert inc.extra == {"future_key": {"kept": [1, 2]}}
    assert not inc.unsignalled


@pytest.mark.parametrize(
    "raw",
    [
        {"incident": "i1", "node": "n1"},  # the least a file can say
        {"incident": "i2", "node": "n1", "status": "no-such-status", "grace_s": "x",
         "jobs": [], "steps": ["garbage", {"step": "s", "at": "t"}], "worker_pid": "nan"},
    ],
)  # fmt: skip
def test_missing_or_mistyped_fields_read_as_their_defaults(raw):
    inc = Incident.from_doc(raw)
    assert inc.status is None and inc.jobs is None and inc.grace_s == 0.0
    assert inc.unsignalled and inc.evacuate
    assert [s.step for s in inc.steps] in ([], ["s"])
    assert Incident.from_doc(inc.to_doc()) == inc


def journals_of(tmp_path) -> list[dict]:
    folder = tmp_path / "state" / "incidents"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def test_every_journal_the_engine_writes_round_trips(env):  # noqa: F811
    """Drain, evacuation and requeue; a deferred drain behind a foreign
    reason; a journal rebuilt from Slurm after it was lost: each file the
    current code leaves behind reads typed and writes back unchanged."""
    slurm, clock, _, make_engine, tmp_path = env
    policy = PolicyConfig(grace_seconds=60, breaker_max_share=1.0, breaker_max_nodes=10)

    def make():
        return make_engine(policy)

    (d,) = make().handle("n1", [xid79()])
    clock.now += timedelta(seconds=61)
    make().finish_incident(d.incident)
    slurm.nodes["n2"] = NodeState("n2", "idle", frozenset({"DRAIN"}), "NHC: memory")
    make().handle("n2", [xid79(1)])
    slurm.jobs["103"] = JobInfo("103", "carol", "RUNNING", "n3", "n3", True)
    (d3,) = make().handle("n3", [xid79(2)])
    assert d3.kind.drains
    StateStore(tmp_path / "state").incident_path(d3.incident).unlink()
    make().handle("n3", [])  # rebuilt from Slurm's reason
    docs = journals_of(tmp_path)
    assert {doc["node"] for doc in docs} == {"n1", "n2", "n3"}
    steps = {s["step"] for doc in docs for s in doc["steps"]}
    assert {"drain_intent", "claimed", "drained", "jobs_listed", "jobs_done"} <= steps
    assert {"drain_deferred", "rebuilt_from_slurm"} <= steps
    for doc in docs:
        assert_round_trips(doc)


def test_a_step_is_one_locked_write_and_the_lock_is_reentrant(tmp_path):
    state = StateStore(tmp_path, lock_timeout=0.2)
    journal = Journal(state, Clock())
    journal.write(Incident.from_doc({"incident": "i1", "node": "n1"}))
    writes = []
    real = state.write_incident
    state.write_incident = lambda doc: (writes.append(doc), real(doc))  # type: ignore[method-assign]
    with journal.lock("i1"):  # a caller holding the lock steps without waiting on itself
        inc = journal.step("i1", "claimed", status=IncidentStatus.CLAIMED)
    assert len(writes) == 1
    assert inc.status is IncidentStatus.CLAIMED and [s.step for s in inc.steps] == ["claimed"]
    # The step takes the lock: while another holder has it, the step waits and gives up.
    with locked(state.root / "locks" / "incident-i1.lock", 1.0):
        pass  # (same process: a fresh open file; released on exit)
    with state.incident_lock("i1"), pytest.raises(LockTimeout):
        journal.step("i1", "drained")
    with pytest.raises(StateError):
        journal.step("gone", "claimed")
