"""The false-alarm replay (issue #30): healthy training jobs through the hang
and straggler judges and the policy raise no alarm at the product's
defaults, each hang case is found and named, and a threshold below the
workload's pauses does cry wolf (so the zero can fail)."""

from __future__ import annotations

import random

import pytest

from slurm_hooks.detect.progress.records import Record, rank_views
from slurm_hooks.detect.progress.settings import ProgressConfig
from slurm_hooks.simulate.hang_replay import (
    EXPECTED,
    HangCase,
    RecordFold,
    Setup,
    replay_hang,
    replay_hangs,
    replay_healthy,
)
from slurm_hooks.simulate.workload import (
    EXITED,
    Phase,
    WorkloadParams,
    draw_job,
    run_events,
)

#: Simulated job-hours of the reduced set (the benchmark replays 10,000).
JOB_HOURS = 500.0
SEED = 20261205
#: Short jobs that all end their training while the job runs on: the batch
#: script converting or uploading after the step, or rank 0 saving alone
#: after its peers exited (what the default workload does at 30 % and 20 %).
AFTER_TRAINING = WorkloadParams(run_h=(1.0, 3.0), epilogue_share=0.5, rank0_tail_share=0.5)


def test_no_false_alarm_at_the_defaults():
    cfg = ProgressConfig()
    r = replay_healthy(JOB_HOURS, SEED, Setup(cfg))
    assert r.job_hours >= JOB_HOURS and r.runs > r.jobs  # restarts were replayed
    # The workload did pause for minutes, far beyond a step...
    assert r.longest_gap_s[Phase.CHECKPOINT] > 300
    assert r.longest_gap_s[Phase.EVAL] > 120
    assert r.longest_gap_s[Phase.FIRST_STEP] > cfg.first_step_allowance_s
    # ... its jobs went on past their training with no record for longer than hang_s ...
    assert r.longest_gap_s[Phase.EPILOGUE] > cfg.hang_s
    # ... and nothing was said about a healthy job.
    assert r.alarms == [], [a.explanation for a in r.alarms[:3]]


def test_no_false_alarm_when_the_training_ends_before_the_job():
    """Every rank gone after the last step is the step's end; rank 0 alone
    after its peers finished is its final save: neither is a hang, though
    both outlast ``hang_s`` since the last record."""
    cfg = ProgressConfig()
    r = replay_healthy(150.0, SEED, Setup(cfg, workload=AFTER_TRAINING))
    assert r.longest_gap_s[Phase.EPILOGUE] > cfg.hang_s
    assert r.longest_gap_s[Phase.RANK0_TAIL] > cfg.hang_s
    assert r.alarms == [], [a.explanation for a in r.alarms[:3]]


def test_no_false_alarm_on_jobs_of_several_nodes_once_slurm_is_asked_about_the_step():
    """One node's share of a job on several: its ranks all gone while the
    batch script goes on is the step's end only Slurm can confirm.  Asked
    then (and only then), the node raises nothing; where Slurm cannot say,
    the node calls it a hang after ``hang_s``, as it did before it asked."""
    cfg = ProgressConfig()
    setup = Setup(cfg, workload=AFTER_TRAINING, one_node=False)
    r = replay_healthy(150.0, SEED, setup)
    assert r.longest_gap_s[Phase.EPILOGUE] > cfg.hang_s
    assert r.alarms == [], [a.explanation for a in r.alarms[:3]]
    assert 0 < r.step_reads < r.runs  # asked at the end of some runs, never every pass
    # The same jobs where Slurm cannot be asked: the epilogues cry wolf.
    blind = replay_healthy(150.0, SEED, Setup(cfg, workload=AFTER_TRAINING, one_node=False,
                                              asks_steps=False))  # fmt: skip
    assert blind.step_reads == 0
    assert blind.by("phase")[Phase.EPILOGUE] > 0


def test_a_threshold_below_the_pauses_cries_wolf_on_checkpoints():
    r = replay_healthy(100.0, SEED, Setup(ProgressConfig(hang_s=120.0)))
    assert r.per_10k_job_hours > 0
    assert r.by("phase")[Phase.CHECKPOINT] > 0
    # The policy saw user-side evidence only: the job is told about, or
    # requeued, never its node drained.
    assert set(r.by("kind")) <= {"report_job", "requeue_job", "job_stalled"}
    # What each culprit cause would need: the stalls it was blamed for.
    assert r.longest_stall_s and min(r.longest_stall_s.values()) >= 120.0
    assert "process stopped (state T)" not in r.longest_stall_s


@pytest.mark.parametrize("case", list(HangCase))
def test_each_hang_case_is_found_at_the_defaults(case):
    cfg = ProgressConfig()
    (fig,) = replay_hangs(3, SEED, Setup(cfg), cases=[case])
    assert fig.detected == fig.trials == fig.right
    # Trusted evidence (the wedge) acts after trusted_confirm_s, a stopped rank
    # after stopped_s, the others after hang_s (an exited rank sooner, below).
    wait = {HangCase.WEDGED: cfg.trusted_confirm_s, HangCase.STOPPED: cfg.stopped_s}
    bound = wait.get(case, cfg.hang_s) + 2 * cfg.interval_s
    if case is HangCase.SILENT:
        bound += cfg.no_culprit_report_s
    assert fig.max_s is not None and fig.max_s <= bound


def test_an_exited_rank_is_told_exited_s_after_it_left_unless_rank_0_is_left_alone():
    """A rank gone while its peers live and wait is told ``exited_s`` after
    it left; where it leaves rank 0 alone (a job of two ranks), rank 0 may be
    saving the final model, and the judge waits ``hang_s``."""
    cfg = ProgressConfig()
    (fig,) = replay_hangs(12, SEED, Setup(cfg), cases=[HangCase.EXITED])
    assert fig.detected == fig.trials == fig.right
    soon = [x for x in fig.latencies if x <= cfg.exited_s + 2 * cfg.interval_s]
    assert len(soon) > fig.trials // 2
    assert fig.max_s is not None and fig.max_s <= cfg.hang_s + 2 * cfg.interval_s


def test_a_hang_names_the_culprit_and_what_the_policy_does():
    d = replay_hang(HangCase.WEDGED, SEED)
    assert d.kind in EXPECTED[HangCase.WEDGED] and d.named == d.culprit and d.right
    d = replay_hang(HangCase.STOPPED, SEED)
    assert d.kind in ("report_job", "requeue_job") and d.named == d.culprit


def test_the_replay_is_deterministic_for_a_seed():
    cfg = ProgressConfig(hang_s=120.0)
    a = replay_healthy(40.0, 3, Setup(cfg))
    b = replay_healthy(40.0, 3, Setup(cfg))
    assert (a.job_hours, a.passes, a.alarms) == (b.job_hours, b.passes, b.alarms)


def test_the_fold_is_what_rank_views_makes_of_the_records():
    """The replay keeps the watcher's view a record at a time: it must be
    what ``records.rank_views`` makes of the same records (the part of the
    busy history the judges read)."""
    rng = random.Random(SEED)
    p = WorkloadParams()
    for restart in (0, 1):
        job = draw_job(rng, p)
        fold = RecordFold(job.ranks, keep=40)
        records: list[Record] = []
        for n, ev in enumerate(run_events(job, rng, p, 1000.0, 3 * 3600.0)):
            if ev.step < 0 or ev.step == EXITED:
                continue
            fold.record(ev, restart)
            pid = 1000 + 100 * restart
            records += [Record("1", restart, r, "gpu0001", pid + r, ev.step, ev.time + r * 1e-3,
                               None if ev.step == 0 else ev.busy[r]) for r in range(job.ranks)]  # fmt: skip
            if n % 97 == 0 or n < 3:
                want = rank_views(records, "1")
                got = fold.views()
                assert got.keys() == want.keys()
                for r, v in want.items():
                    g = got[r]
                    assert (g.node, g.pid, g.restart, g.step) == (v.node, v.pid, v.restart, v.step)
                    assert g.started == pytest.approx(v.started)
                    assert g.last_time == pytest.approx(v.last_time)
                    assert g.first_step_time == pytest.approx(v.first_step_time)
                    assert g.busy == v.busy[-40:]


def test_workload_params_are_checked():
    with pytest.raises(ValueError, match="checkpoint_s"):
        WorkloadParams(checkpoint_s=(600.0, 120.0)).validate()
    with pytest.raises(ValueError, match="ranks"):
        WorkloadParams(ranks=(0,)).validate()
