"""Issue 30: a node whose ranks of a job are all gone asks Slurm whether
their step still runs (``scontrol -o show step JOBID``), and only then: the
step over is no hang; the step running, its other nodes wait for the rank
that left, and the owner and the admins are told."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurm_hooks.agent.progress_steps import StepWatch, step_state
from slurm_hooks.core.errors import JobGone, SlurmError
from slurm_hooks.decide import DecisionKind
from slurm_hooks.detect.progress import tasks
from slurm_hooks.detect.progress.judge import (
    HangSettings,
    ProcState,
    StepState,
    Verdict,
    judge_hang,
)
from slurm_hooks.detect.progress.records import RankView
from slurm_hooks.slurm.steps import UNSURE, parse_steps
from tests.test_progress_signals import HANG_S, LISTPIDS, _pass, _procs
from tests.test_slurm_cli_backend import FakeRunner, client, res

DATA = Path(__file__).parent / "data" / "slurm"


def test_the_recorded_step_lists_read_as_running_then_over():
    running = parse_steps((DATA / "22.05-show_step_running.txt").read_text(), "1")
    over = parse_steps((DATA / "22.05-show_step_over.txt").read_text(), "1")
    assert running == {"batch": "RUNNING", "0": "RUNNING"}
    assert over == {"batch": "RUNNING"}
    assert step_state(running, frozenset({"0"})) is StepState.RUNNING
    assert step_state(over, frozenset({"0"})) is StepState.OVER
    # The step not known: any task step, never the batch script's.
    assert step_state(running, frozenset()) is StepState.RUNNING
    assert step_state(over, frozenset()) is StepState.OVER


def test_a_step_name_cannot_shadow_the_state_nor_another_jobs_step():
    line = ("StepId=5.0 UserId=1001 StartTime=x TimeLimit=UNLIMITED State=COMPLETING "
            "Partition=debug Name=a State=RUNNING\n")  # fmt: skip
    forged = "StepId=5.0 UserId=1001 State=RUNNING Name=x\n"
    assert parse_steps(line, "5") == {"0": "COMPLETING"}
    assert step_state(parse_steps(line, "5"), frozenset({"0"})) is StepState.OVER
    assert parse_steps(line + forged, "5") == {"0": UNSURE}
    assert step_state(parse_steps(line + forged, "5"), frozenset({"0"})) is None
    assert parse_steps(line, "50") == {}


def test_the_cli_reads_one_jobs_steps_and_a_job_gone_is_typed():
    runner = FakeRunner(res(0, (DATA / "22.05-show_step_running.txt").read_text()),
                        res(1, "", "slurm_get_job_steps error: Invalid job id specified\n"))  # fmt: skip
    c, _ = client(runner)
    assert c.job_steps("1")["0"] == "RUNNING"
    assert runner.calls[0][0] == ["scontrol", "-o", "show", "step", "1"]
    with pytest.raises(JobGone):
        c.job_steps("99999")
    for bad in ("1;ls", "1.0", "12_3"):
        with pytest.raises(SlurmError):
            c.job_steps(bad)
    assert len(runner.calls) == 2


class _Steps:
    def __init__(self, *answers):
        self.answers = list(answers)
        self.asked = 0

    def job_steps(self, job_id):
        self.asked += 1
        item = self.answers.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


def test_the_answer_is_kept_and_asked_again_only_when_old():
    w = StepWatch()
    w.note("7", ["0", "batch"])
    slurm = _Steps({"0": "RUNNING"}, {"batch": "RUNNING"})
    assert w.state(slurm, slurm, "7", 100.0, 60.0) is StepState.RUNNING
    assert w.state(slurm, slurm, "7", 150.0, 60.0) is StepState.RUNNING
    assert slurm.asked == 1
    assert w.state(slurm, slurm, "7", 170.0, 60.0) is StepState.OVER
    assert w.state(slurm, slurm, "7", 999.0, 0.0) is StepState.OVER  # over stays over
    assert slurm.asked == 2
    gone = _Steps(JobGone("8", "gone"))
    assert w.state(gone, gone, "8", 0.0) is StepState.OVER
    assert w.state(object(), object(), "9", 0.0) is None  # a client that cannot list steps


def _views(n=2, step=40, last=1000.0):
    return {r: RankView(r, "n1", 100 + r, 0, 0.0, step, last, 10.0, ()) for r in range(n)}


def test_the_judge_calls_ranks_gone_with_their_step_over_healthy_however_long():
    s = HangSettings(hang_s=900.0, exited_s=120.0)
    gone = {0: ProcState.GONE, 1: ProcState.GONE}
    left = {0: 1000.0, 1: 1000.0}
    late = 1000.0 + 5000.0
    assert judge_hang("7", _views(), gone, late, s, departed=left).verdict is Verdict.HANG
    over = judge_hang("7", _views(), gone, late, s, departed=left, step=StepState.OVER)
    assert over.verdict is Verdict.HEALTHY and "step ended" in over.explanation
    running = judge_hang("7", _views(), gone, late, s, departed=left, step=StepState.RUNNING)
    assert running.verdict is Verdict.HANG and running.rank == 0
    early = judge_hang("7", _views(), gone, 1000.0 + 600, s, departed=left, step=StepState.RUNNING)
    assert early.verdict is Verdict.HEALTHY  # all here left together: waits hang_s


# -- the zero-touch watch: a job that leaves the node's listing ---------------------------------

HEADER = LISTPIDS.splitlines()[0] + "\n"


def _crash_then(tmp_path, answer):
    p, engine, now, proc = _pass(tmp_path, comment="slurm-hooks:requeue-on-hang")
    steps = _Steps(*([answer] * 20))
    engine.slurm.job_steps = steps.job_steps
    tick = os.sysconf("SC_CLK_TCK")
    for k in range(14):
        _procs(proc, 5 * k * tick)
        now[0] = 1000.0 + 5 * k
        assert p.run() == []
    # Both ranks of job 77 here exit: the node lists no process of the job.
    p.signals.node_tasks = lambda node, limit: tasks.parse_node_listpids(HEADER, limit)
    out = []
    for t in range(70, 70 + 3 * int(HANG_S), 5):
        now[0] = 1000.0 + t
        out += [(t, d) for d in p.run()]
    return p, engine, steps, out


def test_ranks_that_left_while_their_step_runs_are_reported_and_the_job_requeued(tmp_path):
    p, engine, steps, out = _crash_then(tmp_path, {"0": "RUNNING", "batch": "RUNNING"})
    [(t, d)] = out
    assert HANG_S <= t - 70 <= HANG_S + 5  # hang_s after the pass that saw them gone
    assert d.kind is DecisionKind.REQUEUE_JOB
    assert d.findings[0].values["rank"] == 2 and d.findings[0].values["cause"] == "process gone"
    [alert] = engine.alerts
    assert "rank 2 on n1: process gone" in alert.text
    assert steps.asked == 1  # asked once, when it would be a hang
    assert "77" not in p.signals.jobs  # acted on: followed no more


def test_ranks_that_left_with_their_step_over_are_no_hang(tmp_path):
    p, engine, steps, out = _crash_then(tmp_path, {"batch": "RUNNING"})
    assert out == [] and engine.alerts == []
    assert steps.asked == 1
    assert "77" not in p.signals.jobs
