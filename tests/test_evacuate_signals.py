"""The evacuation's signal step: all of a node's jobs with one door call per
(signal, target) (``SlurmDoor.signal_many``; the CLI's one ``scancel`` reads
the job table once for all of them), with the guarantees of the per-job
step kept: intents journalled before anything goes out, at most once per
job, SlurmUnavailable before anything went out takes the intents back,
what went out is kept, one audit line per job."""

from __future__ import annotations

import pytest
from test_actions import Clock, FakeSlurm, Recorder, xid79

from slurm_hooks.act import evacuate
from slurm_hooks.act.engine import Engine
from slurm_hooks.act.notify import Notifier
from slurm_hooks.core.errors import JobGone, SignalMaybeSent, SlurmError, SlurmUnavailable
from slurm_hooks.core.model import JobInfo
from slurm_hooks.decide import PolicyConfig
from slurm_hooks.slurm.base import JobsSignal, SignalTarget
from slurm_hooks.slurm.door import SlurmDoor
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import StateStore

JOBS = ("101", "102", "103")


class ManySlurm(FakeSlurm):
    """A client that signals many jobs per call, as the CLI does.

    ``answers``: per call, in order, what to do: None (every job
    signalled), a dict job id -> error for the jobs it refuses, or an
    exception to raise as a whole.  ``on_call`` runs before each answer
    (the test reads the journal as it stands then)."""

    def __init__(self, answers=(), on_call=None):
        super().__init__()
        self.answers = list(answers)
        self.on_call = on_call
        self.many: list[tuple[tuple[str, ...], str, SignalTarget]] = []
        for i, job_id in enumerate(JOBS):
            self.jobs[job_id] = JobInfo(job_id, f"user{i}", "RUNNING", "n1", "n1", True)

    def signal_jobs(self, job_ids, signal, target):
        self.many.append((tuple(job_ids), signal, target))
        if self.on_call is not None:
            self.on_call()
        answer = self.answers.pop(0) if self.answers else None
        if isinstance(answer, BaseException):
            raise answer
        refused = answer or {}
        return {j: refused.get(j) for j in job_ids}


@pytest.fixture
def make(tmp_path):
    def build(slurm):
        return Engine(
            slurm, PolicyConfig(grace_seconds=60), StateStore(tmp_path / "state"),
            AuditLog(tmp_path / "audit.jsonl"), Notifier([Recorder()]), clock=Clock(),
            spawn=None,
        )  # fmt: skip

    return build


def incident_doc(tmp_path):
    (doc,) = StateStore(tmp_path / "state").incidents()
    return doc


def signal_audit(tmp_path):
    return {
        e["job"]: e["signals"]
        for e in AuditLog(tmp_path / "audit.jsonl").entries()
        if e["action"] == "signal"
    }


def test_all_jobs_are_signalled_with_one_call_per_target(make, tmp_path):
    slurm = ManySlurm()
    seen = []
    slurm.on_call = lambda: seen.append(
        {j: r["signal_intent_at"] for j, r in incident_doc(tmp_path)["jobs"].items()}
    )
    assert isinstance(slurm, JobsSignal)
    make(slurm).handle("n1", [xid79()])
    assert slurm.many == [(JOBS, "USR1", SignalTarget.BATCH), (JOBS, "TERM", SignalTarget.STEPS)]
    assert slurm.count("signal") == 0  # never one job at a time
    # Every job's intent was on disk before the first call went out.
    assert all(seen[0][j] for j in JOBS)
    jobs = incident_doc(tmp_path)["jobs"]
    assert {j: r["signals"] for j, r in jobs.items()} == dict.fromkeys(
        JOBS, ["USR1->batch", "TERM->steps"]
    )
    assert all(r["signalled_at"] for r in jobs.values())
    assert signal_audit(tmp_path) == dict.fromkeys(JOBS, ["USR1->batch", "TERM->steps"])


def test_one_jobs_refusal_does_not_stop_the_others(make, tmp_path):
    slurm = ManySlurm(answers=[{"102": JobGone("102")}, {"102": JobGone("102")}])
    make(slurm).handle("n1", [xid79()])
    jobs = incident_doc(tmp_path)["jobs"]
    assert jobs["101"]["signals"] == jobs["103"]["signals"] == ["USR1->batch", "TERM->steps"]
    # The ended job is recorded as signalled with nothing sent: the requeue
    # step tells what became of it; it is not signalled again.
    assert jobs["102"]["signals"] == [] and jobs["102"]["signalled_at"]
    assert signal_audit(tmp_path)["102"] == []


def test_controller_absent_takes_every_intent_back_and_the_next_run_sends(make, tmp_path):
    slurm = ManySlurm(answers=[SlurmUnavailable("slurmctld does not answer")])
    with pytest.raises(SlurmUnavailable):
        make(slurm).handle("n1", [xid79()])
    jobs = incident_doc(tmp_path)["jobs"]
    assert all(r["signal_intent_at"] is None and not r["signalled_at"] for r in jobs.values())
    assert all(r["signal_retries"] == 1 for r in jobs.values())
    assert signal_audit(tmp_path) == {}
    assert len(slurm.many) == 1  # nothing more tried once the controller was gone
    make(slurm).resume_pending()
    assert slurm.many[1:] == [
        (JOBS, "USR1", SignalTarget.BATCH), (JOBS, "TERM", SignalTarget.STEPS),
    ]  # fmt: skip
    assert all(r["signalled_at"] for r in incident_doc(tmp_path)["jobs"].values())


def test_controller_lost_after_the_first_signal_keeps_what_went_out(make, tmp_path):
    slurm = ManySlurm(answers=[None, SlurmUnavailable("slurmctld stopped answering")])
    make(slurm).handle("n1", [xid79()])  # every job got something: no error
    jobs = incident_doc(tmp_path)["jobs"]
    assert {j: r["signals"] for j, r in jobs.items()} == dict.fromkeys(JOBS, ["USR1->batch"])
    make(slurm).resume_pending()
    assert len(slurm.many) == 2  # the checkpoint signal is never sent twice


def test_jobs_the_controller_did_not_reach_are_sent_next_run_and_only_they(make, tmp_path):
    lost = SlurmUnavailable("slurmctld stopped answering")
    slurm = ManySlurm(answers=[{"102": lost, "103": lost}])
    with pytest.raises(SlurmUnavailable):
        make(slurm).handle("n1", [xid79()])
    jobs = incident_doc(tmp_path)["jobs"]
    assert jobs["101"]["signals"] == ["USR1->batch"]  # no more targets after the loss
    assert jobs["102"]["signal_intent_at"] is None and jobs["103"]["signal_intent_at"] is None
    make(slurm).resume_pending()
    assert slurm.many[1:] == [
        (("102", "103"), "USR1", SignalTarget.BATCH), (("102", "103"), "TERM", SignalTarget.STEPS),
    ]  # fmt: skip
    assert signal_audit(tmp_path) == {
        "101": ["USR1->batch"], "102": ["USR1->batch", "TERM->steps"],
        "103": ["USR1->batch", "TERM->steps"],
    }  # fmt: skip


def test_a_run_that_died_after_the_intents_never_signals_again(make, tmp_path):
    class Died(BaseException):
        pass

    slurm = ManySlurm(answers=[Died()])
    with pytest.raises(Died):
        make(slurm).handle("n1", [xid79()])
    assert all(r["signal_intent_at"] for r in incident_doc(tmp_path)["jobs"].values())
    make(slurm).resume_pending()
    assert len(slurm.many) == 1
    jobs = incident_doc(tmp_path)["jobs"]
    assert all(r["signals"] == ["unknown: a run died while signalling"] for r in jobs.values())


def test_a_job_signalled_already_is_left_out_of_the_call(make, tmp_path):
    slurm = ManySlurm()
    eng = make(slurm)
    eng.handle("n1", [xid79()])
    doc = incident_doc(tmp_path)
    # A job not yet signalled beside three that were: only it is signalled.
    doc["jobs"]["104"] = dict(doc["jobs"]["101"], signal_intent_at=None, signalled_at=None)
    StateStore(tmp_path / "state").write_incident(doc)
    evacuate.evacuate(eng.context, doc["incident"])
    assert slurm.many[2:] == [
        (("104",), "USR1", SignalTarget.BATCH), (("104",), "TERM", SignalTarget.STEPS),
    ]  # fmt: skip


# -- the door: one call for a JobsSignal client, one per job for any other --------


class OneByOne(FakeSlurm):
    """A client without ``signal_jobs`` (the REST or pyslurm backend)."""

    def __init__(self, errors=None):
        super().__init__()
        self.errors = errors or {}

    def signal_job(self, job_id, signal, target):
        self._log("signal", job_id, signal, target)
        if job_id in self.errors:
            raise self.errors[job_id]


def test_door_falls_back_to_one_signal_per_job():
    slurm = OneByOne(errors={"2": JobGone("2")})
    assert not isinstance(slurm, JobsSignal)
    out = SlurmDoor(slurm).signal_many(["1", "2", "3", "1"], "USR1", SignalTarget.BATCH)
    assert [c[1] for c in slurm.calls] == ["1", "2", "3"]  # each id once
    assert out["1"] is None and out["3"] is None and isinstance(out["2"], JobGone)


def test_door_fallback_stops_at_a_lost_controller():
    lost = SlurmUnavailable("gone")
    slurm = OneByOne(errors={"2": lost})
    out = SlurmDoor(slurm).signal_many(["1", "2", "3"], "USR1", SignalTarget.BATCH)
    assert [c[1] for c in slurm.calls] == ["1", "2"]  # 3 is not waited for again
    assert out == {"1": None, "2": lost, "3": lost}
    with pytest.raises(SlurmUnavailable):  # nothing answered: raised
        SlurmDoor(OneByOne(errors={"1": lost})).signal_many(["1", "2"], "USR1", SignalTarget.BATCH)


def test_door_passes_a_jobs_signal_client_all_ids_in_one_call():
    slurm = ManySlurm(answers=[{"102": SlurmError("no steps")}])
    out = SlurmDoor(slurm).signal_many(JOBS, "TERM", SignalTarget.STEPS)
    assert slurm.many == [(JOBS, "TERM", SignalTarget.STEPS)] and slurm.count("signal") == 0
    assert out["101"] is None and isinstance(out["102"], SlurmError)
    assert SlurmDoor(slurm).signal_many([], "TERM", SignalTarget.STEPS) == {}
    assert len(slurm.many) == 1


def test_a_signal_that_may_have_gone_out_is_never_sent_again(make, tmp_path):
    """slurmctld took the request but did not answer (stopped): it may
    still deliver it, so the job counts as signalled, ``unknown``; the run
    stops sending and fails, and the next run sends nothing to anyone."""
    maybe = SignalMaybeSent("scancel 102: no answer")
    slurm = ManySlurm(answers=[{"102": maybe}])
    with pytest.raises(SlurmUnavailable):
        make(slurm).handle("n1", [xid79()])
    jobs = incident_doc(tmp_path)["jobs"]
    assert jobs["101"]["signals"] == jobs["103"]["signals"] == ["USR1->batch"]
    assert jobs["102"]["signalled_at"] and jobs["102"]["signals"][0].startswith("unknown: USR1")
    assert "signal_retries" not in jobs["102"]
    make(slurm).resume_pending()
    assert len(slurm.many) == 1


def test_door_fallback_keeps_a_maybe_sent_signal_as_its_outcome():
    maybe = SignalMaybeSent("no answer")
    slurm = OneByOne(errors={"1": maybe})
    out = SlurmDoor(slurm).signal_many(["1", "2"], "USR1", SignalTarget.BATCH)
    assert out["1"] is maybe
    assert isinstance(out["2"], SlurmUnavailable) and not isinstance(out["2"], SignalMaybeSent)
