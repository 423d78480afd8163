"""Issue 30, item 4: trusted evidence on the node of a stalled job acts at once
(two looks, ``trusted_confirm_s``), not after ``hang_s``; a stall with the
user's evidence alone still waits ``hang_s`` and acts on the job only."""

from __future__ import annotations

import os
import time

from slurm_hooks.agent.progress_pass import ProgressPass
from slurm_hooks.core.model import JobInfo, Provenance
from slurm_hooks.decide import DecisionKind
from slurm_hooks.detect.progress import corroborate
from slurm_hooks.detect.progress.judge import (
    TRUSTED_LOOKS,
    HangSettings,
    ProcState,
    TrustedSign,
    Verdict,
    judge_hang,
)
from slurm_hooks.detect.progress.records import RankView
from slurm_hooks.detect.progress.settings import ProgressConfig
from tests.test_trust import NV_STACK, PolicyEngine, _me, _proc, _records

DEFAULTS = HangSettings()
LOST = [{"index": 0, "lost": "GPU_IS_LOST"}]


def _view(rank, step, last, node="n1", pid=None, first=None):
    first = last - step if first is None else first
    return RankView(rank, node, pid or 1000 + rank, 0, first - 1.0, step, last, first, ())


def _ranks(last=1000.0):
    # Rank 0 on n0 waits in step 6's collective; rank 1 on n1 never finished step 6.
    return {0: _view(0, 6, last, node="n0"), 1: _view(1, 5, last - 1.0)}


def test_defaults_leave_a_minute_for_detection_grace_and_requeue():
    cfg = ProgressConfig()
    assert cfg.hang.trusted_confirm_s == cfg.trusted_confirm_s == 10.0
    # Found on the second look after the stall passed trusted_confirm_s:
    worst = cfg.trusted_confirm_s + cfg.interval_s
    assert worst <= 15.0 < cfg.hang_s


def test_a_confirmed_trusted_sign_makes_a_short_stall_a_hang_at_once():
    ranks = _ranks()
    procs = {1: ProcState.SLEEPING, 0: ProcState.REMOTE}
    sign = TrustedSign("NVML: gpu0 (GPU_IS_LOST) lost", TRUSTED_LOOKS)
    # 12 s of stall, 7 s after the first step: hang_s and the allowance are far.
    v = judge_hang("7", ranks, procs, 1012.0, DEFAULTS, trusted=sign)
    assert v.verdict is Verdict.HANG and (v.rank, v.node) == (1, "n1")
    assert v.trusted == sign.why and "trusted evidence on its node" in v.explanation
    assert v.evidence["trusted"] == sign.why


def test_one_look_a_short_stall_or_no_rank_here_is_not_enough():
    ranks, procs = _ranks(), {1: ProcState.SLEEPING, 0: ProcState.REMOTE}
    once = TrustedSign("NVML: gpu0 lost", TRUSTED_LOOKS - 1)
    twice = TrustedSign("NVML: gpu0 lost", TRUSTED_LOOKS)
    assert judge_hang("7", ranks, procs, 1012.0, DEFAULTS, trusted=once).verdict is Verdict.HEALTHY
    assert judge_hang("7", ranks, procs, 1008.0, DEFAULTS, trusted=twice).verdict is Verdict.HEALTHY
    # The sign is this node's: it says nothing of a job with no rank here.
    remote = {0: ProcState.REMOTE, 1: ProcState.REMOTE}
    assert (
        judge_hang("7", ranks, remote, 1012.0, DEFAULTS, trusted=twice).verdict is Verdict.HEALTHY
    )
    # Without it the same stall waits hang_s like before.
    assert judge_hang("7", ranks, procs, 1012.0, DEFAULTS).verdict is Verdict.HEALTHY
    assert judge_hang("7", ranks, procs, 1121.0, DEFAULTS).verdict is Verdict.HANG


def test_the_rank_whose_process_is_in_the_driver_is_the_culprit():
    ranks = {0: _view(0, 6, 1000.0), 1: _view(1, 5, 999.0), 2: _view(2, 6, 1000.0)}
    procs = {r: ProcState.SLEEPING for r in ranks}
    procs[2] = ProcState.DISK
    sign = TrustedSign("process 1002 of the job in D state inside the nvidia driver", 2, (2,))
    v = judge_hang("7", ranks, procs, 1012.0, DEFAULTS, trusted=sign)
    assert v.rank == 2 and v.cause == "process in uninterruptible sleep (state D)"
    # A node-wide sign (a GPU lost) blames this node's rank the others wait for.
    v = judge_hang("7", ranks, procs, 1012.0, DEFAULTS, trusted=TrustedSign("gpu lost", 2))
    assert v.rank == 2  # a D-state rank comes first, as without the sign
    procs[2] = ProcState.SLEEPING
    v = judge_hang("7", ranks, procs, 1012.0, DEFAULTS, trusted=TrustedSign("gpu lost", 2))
    assert v.rank == 1 and v.cause == "trusted evidence on the node"


def test_ancestors_lead_a_worker_to_its_rank(tmp_path):
    for pid, ppid in ((500, 400), (400, 300), (300, 1)):
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "stat").write_text(f"{pid} (python3) S {ppid} 1 1 0 -1 0 0 0 0 0 0 0 0 20 0\n")
    assert corroborate.ancestors(500, str(tmp_path)) == [500, 400, 300]
    assert corroborate.ancestors(999, str(tmp_path)) == [999]


# -- the watcher's pass, with the real policy ------------------------------------------------


def _setup(tmp_path, *, gpu_view=None, pids=(), proc="/proc", comment=None):
    t0 = time.time()
    # Both ranks' processes are alive and sleeping (this test's own pid).
    _records(tmp_path, 0, range(1, 7), t0=t0, node="n0", pid=os.getpid())
    _records(tmp_path, 1, range(1, 6), t0=t0, node="n1", pid=os.getpid())
    job = JobInfo("4242", _me(), "RUNNING", "n[0-1]", batch_host="n0", comment=comment)
    engine = PolicyEngine(job)
    now = [t0 + 6.0]  # the last record: rank 0 finished step 6
    p = ProgressPass(ProgressConfig(dir=str(tmp_path), hang_s=120.0), "n1", engine, clock=lambda: now[0],
                     gpu_view=gpu_view, proc=proc)  # fmt: skip
    p.step_pids = lambda job, node: list(pids)  # type: ignore[method-assign]
    return p, engine, now, t0


def test_a_lost_gpu_drains_on_the_second_look_at_the_defaults(tmp_path):
    p, engine, now, t0 = _setup(tmp_path, gpu_view=lambda: LOST)
    now[0] = t0 + 6 + 6  # stalled 6 s: first look
    assert p.run() == [] and not engine.alerts
    now[0] = t0 + 6 + 11  # stalled 11 s: second look, past trusted_confirm_s
    [d] = p.run()
    assert d.kind is DecisionKind.DRAIN and d.reason is not None and d.reason.code == "HANG"
    assert d.reason.component == "job:4242/rank1"
    assert Provenance.NVML in d.findings[0].provenance
    assert "GPU_IS_LOST" in d.reason.text and "rank 1 on n1" in d.reason.text
    assert p.run() == []  # once per job run


def test_a_sign_seen_once_then_gone_starts_its_count_again(tmp_path):
    views = iter([LOST, [], LOST, LOST, LOST])  # the last: gathered when acting
    p, engine, now, t0 = _setup(tmp_path, gpu_view=lambda: next(views))
    for k, dt in enumerate((6, 11, 16)):
        now[0] = t0 + 6 + dt
        assert p.run() == [], k
    now[0] = t0 + 6 + 21
    [d] = p.run()
    assert d.kind is DecisionKind.DRAIN


def test_a_rank_stuck_in_the_driver_is_named_from_slurms_pids(tmp_path):
    proc = tmp_path / "proc"
    _proc(proc, 4321, "D", NV_STACK)
    p, engine, now, t0 = _setup(tmp_path / "records", pids=[4321], proc=str(proc))
    now[0] = t0 + 6 + 6
    assert p.run() == []
    now[0] = t0 + 6 + 11
    [d] = p.run()
    assert d.kind is DecisionKind.DRAIN and Provenance.KERNEL in d.findings[0].provenance
    assert "process 4321 of the job in D state inside the nvidia driver" in d.reason.text


def test_a_quiet_job_without_trusted_evidence_waits_hang_s_and_stays_the_users(tmp_path):
    p, engine, now, t0 = _setup(tmp_path, comment="slurm-hooks:requeue-on-hang")
    for dt in (6, 11, 60, 100):
        now[0] = t0 + 6 + dt
        assert p.run() == [], dt
    now[0] = t0 + 6 + 121
    [d] = p.run()
    assert d.kind is DecisionKind.REQUEUE_JOB  # the job alone, on its own evidence


def test_a_sign_gone_when_acting_acts_on_nothing(tmp_path):
    views = iter([LOST, LOST, []])  # two looks, then gone when the evidence is gathered
    p, engine, now, t0 = _setup(tmp_path, gpu_view=lambda: next(views, []))
    now[0] = t0 + 6 + 6
    p.run()
    now[0] = t0 + 6 + 11
    assert p.run() == [] and not engine.decisions and not engine.alerts
