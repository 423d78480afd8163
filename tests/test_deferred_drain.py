"""A fault on a node someone else drained (NHC, an admin): the jobs are
evacuated, their reason stays, and our drain goes on the moment theirs is
lifted (act/deferred.py; issue 17).  Against the in-memory Slurm of
test_actions.py; tests/test_nhc_lab.py runs the same on the real lab."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from test_actions import FakeSlurm, env, xid79  # noqa: F401 - env is a fixture

from slurm_hooks.core.reason import parse_reason
from slurm_hooks.decide import DecisionKind, PolicyConfig
from slurm_hooks.store.state import StateStore

NHC = "NHC: check_hw_gpu: GPU 3 missing"


def nhc_drain(slurm: FakeSlurm, node: str = "n1") -> None:
    slurm.nodes[node] = dataclasses.replace(
        slurm.nodes[node], flags=frozenset({"DRAIN"}), reason=NHC
    )


def nhc_resume(slurm: FakeSlurm, node: str = "n1") -> None:
    slurm.nodes[node] = dataclasses.replace(
        slurm.nodes[node], flags=frozenset(), reason=None, reason_time=None
    )


def test_jobs_are_evacuated_under_a_foreign_drain_and_owners_told(env):  # noqa: F811
    slurm, clock, rec, make, tmp_path = env
    nhc_drain(slurm)
    eng = make()
    (d,) = eng.handle("n1", [xid79()])
    assert d.kind is DecisionKind.FOREIGN_REASON
    assert slurm.nodes["n1"].reason == NHC and slurm.count("drain") == 0
    assert {c[1] for c in slurm.calls if c[0] == "signal"} == {"101", "102"}
    clock.now += timedelta(seconds=61)
    outcomes = {o.job_id: o.outcome for o in eng.finish_incident(d.incident)}
    assert outcomes == {"101": "requeued", "102": "cancelled"}
    kinds = sorted(a.kind for a in rec.alerts)
    assert kinds == ["job_cancelled", "job_requeued", "node_fault"]
    assert "node_drained" not in kinds, "we drained nothing"
    assert slurm.nodes["n1"].reason == NHC, "their reason is never written over"
    # The fault is not forgotten: the incident stays open behind their reason.
    doc = StateStore(tmp_path / "state").read_incident(d.incident)
    assert doc["jobs_done"] and doc["drain_deferred"]
    assert StateStore(tmp_path / "state").open_incident("n1") == d.incident


def test_our_drain_goes_on_the_moment_the_foreign_reason_is_lifted(env):  # noqa: F811
    slurm, clock, rec, make, tmp_path = env
    nhc_drain(slurm)
    (d,) = make().handle("n1", [xid79()])
    # While NHC holds it, each run costs one look and writes nothing.
    slurm.calls.clear()
    assert make().handle("n1", []) == []
    assert [c[0] for c in slurm.calls] == ["get_node"]
    assert slurm.nodes["n1"].reason == NHC
    # NHC's own check passes and it resumes the node: the next run (no new
    # finding: the watcher's refeed is minutes away) drains with our reason.
    nhc_resume(slurm)
    make().handle("n1", [])
    ours = parse_reason(slurm.nodes["n1"].reason)
    assert (ours.code, ours.component, ours.incident) == ("XID79", "gpu3", d.incident)
    assert "DRAIN" in slurm.nodes["n1"].flags
    assert "node_drained" in [a.kind for a in rec.alerts]
    doc = StateStore(tmp_path / "state").read_incident(d.incident)
    assert not doc["drain_deferred"] and doc["status"] == "drained"
    # Done: further runs make no Slurm write and the repeat is ours already.
    slurm.calls.clear()
    (again,) = make().handle("n1", [xid79()])
    assert again.kind is DecisionKind.ALREADY_HANDLED and slurm.count("drain") == 0


def test_a_repeat_under_the_foreign_drain_opens_no_second_incident(env):  # noqa: F811
    slurm, clock, _, make, tmp_path = env
    nhc_drain(slurm)
    (d,) = make().handle("n1", [xid79()])
    clock.now += timedelta(seconds=5)
    make().handle("n1", [xid79()])
    docs = StateStore(tmp_path / "state").incidents()
    assert [x["incident"] for x in docs] == [d.incident]
    assert sum(1 for c in slurm.calls if c[0] == "signal") == 4, "each job signalled once"


def test_observe_only_evacuates_nothing(env):  # noqa: F811
    slurm, _, _, make, _ = env
    nhc_drain(slurm)
    (d,) = make(PolicyConfig(grace_seconds=60, observe_only=True)).handle("n1", [xid79()])
    assert d.kind is DecisionKind.FOREIGN_REASON and d.observe_only
    assert slurm.count("signal") == 0 and slurm.count("drain") == 0


def test_reason_taken_by_an_admin_after_nhc_is_still_foreign(env):  # noqa: F811
    slurm, _, _, make, _ = env
    nhc_drain(slurm)
    make().handle("n1", [xid79()])
    slurm.nodes["n1"] = dataclasses.replace(slurm.nodes["n1"], reason="RMA ticket 77 -- ops")
    make().handle("n1", [])
    assert slurm.nodes["n1"].reason == "RMA ticket 77 -- ops" and slurm.count("drain") == 0
