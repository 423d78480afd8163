"""Job progress records: the job-side writer, the parser, the gatherer, the
hang and straggler judges, and the watcher's pass (with a fake engine)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from slurm_hooks.agent.progress_pass import ProgressPass
from slurm_hooks.core.errors import JobGone
from slurm_hooks.core.model import JobInfo
from slurm_hooks.core.reason import DrainReason, format_reason, parse_reason
from slurm_hooks.detect.progress.gather import proc_state, read_job, read_tail
from slurm_hooks.detect.progress.judge import (
    HangSettings,
    HangVerdict,
    ProcState,
    SlowSettings,
    Verdict,
    judge_hang,
    judge_stragglers,
)
from slurm_hooks.detect.progress.records import parse_line, rank_views
from slurm_hooks.detect.progress.settings import ProgressConfig
from slurm_hooks.jobside.progress import Progress

JOB = "4242"


def _write(tmp_path, rank, steps, *, t0=1000.0, dt=1.0, busy=0.5, node=None, pid=None, **kw):
    clock = iter([t0] + [t0 + dt * s for s in steps])
    p = Progress(str(tmp_path), JOB, rank, node=node or f"n{rank}", clock=lambda: next(clock), **kw)
    if pid is not None:
        p._head = p._head.replace(f"pid={os.getpid()}", f"pid={pid}")
    for s in steps:
        b = busy(rank, s) if callable(busy) else busy
        p.step(s, busy=b)
    p.close()
    return p


def _views(tmp_path, uid=None):
    return rank_views(read_job(str(tmp_path), JOB, uid=uid), JOB)


# -- writer and parser ---------------------------------------------------------------------


def test_writer_lines_parse_back(tmp_path):
    _write(tmp_path, 3, [1, 2, 3], node="gpu-7")
    lines = (tmp_path / JOB / "rank3.log").read_text().splitlines()
    assert len(lines) == 4  # step 0 when the rank starts, then one per step
    recs = [parse_line(x) for x in lines]
    assert [r.step for r in recs] == [0, 1, 2, 3]
    assert {(r.rank, r.node, r.job, r.pid) for r in recs} == {(3, "gpu-7", JOB, os.getpid())}
    assert recs[1].busy == 0.5 and recs[0].busy is None


def test_writer_is_a_noop_outside_slurm(tmp_path):
    p = Progress.from_env({"SLURM_HOOKS_PROGRESS_DIR": str(tmp_path)})
    p.step(1)
    assert not p.enabled and list(tmp_path.iterdir()) == []


def test_writer_module_imports_only_the_standard_library():
    code = (
        "import sys; import slurm_hooks.jobside.progress; "
        "print(sorted(m for m in sys.modules if m.startswith('slurm_hooks')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (
        out.stdout.strip()
        == "['slurm_hooks', 'slurm_hooks.jobside', 'slurm_hooks.jobside.progress']"
    )


@pytest.mark.parametrize(
    "line",
    [
        "",
        "P1 job=1 restart=0 rank=0 node=a pid=1 step=1",  # no time
        "P1 job=1 restart=0 rank=0 node=a pid=1 step=1 time=nan",
        "P1 job=1 restart=0 rank=0 node=a pid=1 step=-1 time=5",
        "P1 job=1 restart=0 rank=0 node=a pid=0 step=1 time=5",
        "P1 job=1 job=2 restart=0 rank=0 node=a pid=1 step=1 time=5",
        "P1 job=1 restart=0 rank=0 node=a;rm pid=1 step=1 time=5",
        "P2 job=1 restart=0 rank=0 node=a pid=1 step=1 time=5",
        "P1 job=1 restart=0 rank=0 node=a pid=1 step=1 time=5 busy=-3",
        "P1 job=1 restart=0 rank=0 node=a pid=1 step=99999999999999999999 time=5",
    ],
)
def test_hostile_lines_are_skipped(line):
    assert parse_line(line) is None


def test_a_file_speaks_only_for_its_own_rank(tmp_path):
    _write(tmp_path, 0, [1, 2])
    forged = "P1 job=4242 restart=0 rank=1 node=n1 pid=1 step=1 time=1001.0\n"
    with open(tmp_path / JOB / "rank0.log", "a") as f:
        f.write(forged)
    assert set(_views(tmp_path)) == {0}


def test_symlinked_and_foreign_files_are_not_read(tmp_path):
    _write(tmp_path, 0, [1])
    os.symlink(tmp_path / JOB / "rank0.log", tmp_path / JOB / "rank1.log")
    assert read_tail(str(tmp_path / JOB / "rank1.log"), 4096, None) == []
    # Only the job owner's files count.
    assert read_tail(str(tmp_path / JOB / "rank0.log"), 4096, os.getuid() + 12345) == []
    assert len(read_tail(str(tmp_path / JOB / "rank0.log"), 4096, os.getuid())) == 2


def test_a_job_directory_swapped_for_a_symlink_or_another_owners_is_not_read(tmp_path):
    """Every read of a job's directory holds to what the pass's first look
    checked: a real directory of the job's owner.  A directory swapped for
    a symlink (to the owner's own records elsewhere) between two looks, or
    one another user made, is read no further."""
    base, elsewhere = tmp_path / "base", tmp_path / "elsewhere"
    base.mkdir()
    _write(elsewhere, 0, [1, 2])
    assert len(read_job(str(elsewhere), JOB, uid=os.getuid())) == 3  # step 0 and two steps
    os.symlink(elsewhere / JOB, base / JOB)
    assert read_job(str(base), JOB, uid=os.getuid()) == []
    assert read_job(str(base), JOB) == []  # slurm-hooks job --no-slurm: no owner known
    assert read_job(str(elsewhere), JOB, uid=os.getuid() + 12345) == []


def test_only_the_latest_restart_counts(tmp_path):
    _write(tmp_path, 0, [1, 2, 3], restart=0)
    _write(tmp_path, 0, [4], t0=2000.0, restart=1)
    v = _views(tmp_path)[0]
    assert (v.restart, v.step, v.started) == (1, 4, 2000.0)


# -- hang judge -----------------------------------------------------------------------------

HS = HangSettings(hang_s=10.0, first_step_allowance_s=5.0)


def test_no_records_and_no_first_step_are_never_a_hang(tmp_path):
    assert judge_hang(JOB, {}, {}, 1e9, HS).verdict is Verdict.NO_RECORDS
    _write(tmp_path, 0, [])
    _write(tmp_path, 1, [])
    views = _views(tmp_path)
    # A first step that takes an hour is a slow start, not a hang.
    assert judge_hang(JOB, views, {}, 1000.0 + 3600, HS).verdict is Verdict.STARTING


def test_stopped_rank_is_the_culprit(tmp_path):
    for r in range(4):
        _write(tmp_path, r, range(1, 21 if r != 2 else 20))
    views = _views(tmp_path)
    now = 1000.0 + 20 + 11
    procs = {
        0: ProcState.SLEEPING,
        1: ProcState.SLEEPING,
        2: ProcState.STOPPED,
        3: ProcState.SLEEPING,
    }
    v = judge_hang(JOB, views, procs, now, HS)
    assert (v.verdict, v.rank, v.node, v.cause) == (
        Verdict.HANG,
        2,
        "n2",
        "process stopped (state T)",
    )
    # Not yet stalled long enough: healthy.
    assert judge_hang(JOB, views, procs, 1000.0 + 20 + 9, HS).verdict is Verdict.HEALTHY


def test_at_the_defaults_a_stopped_rank_is_a_hang_after_stopped_s_other_stalls_after_hang_s(
    tmp_path,
):
    defaults = ProgressConfig().hang
    assert defaults.stopped_s < defaults.hang_s
    for r in range(2):
        _write(tmp_path, r, range(1, 21 if r else 20))
    views = _views(tmp_path)
    last = max(v.last_time for v in views.values())
    stopped = {0: ProcState.STOPPED, 1: ProcState.SLEEPING}
    gone = {0: ProcState.GONE, 1: ProcState.SLEEPING}
    early, late = last + defaults.stopped_s - 1, last + defaults.stopped_s + 1
    assert judge_hang(JOB, views, stopped, early, defaults).verdict is Verdict.HEALTHY
    v = judge_hang(JOB, views, stopped, late, defaults)
    assert (v.verdict, v.rank, v.cause) == (Verdict.HANG, 0, "process stopped (state T)")
    # A rank that exited waits for hang_s (jobs run on after their last step).
    assert judge_hang(JOB, views, gone, late, defaults).verdict is Verdict.HEALTHY
    v = judge_hang(JOB, views, gone, last + defaults.hang_s + 1, defaults)
    assert (v.verdict, v.rank, v.cause) == (Verdict.HANG, 0, "process gone")


def test_gone_beats_stopped_and_lowest_step_without_proc_evidence(tmp_path):
    for r in range(3):
        _write(tmp_path, r, range(1, 11 if r != 1 else 8))
    views = _views(tmp_path)
    now = 1000.0 + 30
    v = judge_hang(JOB, views, {0: ProcState.STOPPED, 2: ProcState.GONE}, now, HS)
    assert (v.rank, v.cause) == (2, "process gone")
    v = judge_hang(JOB, views, {}, now, HS)
    assert (v.verdict, v.rank, v.cause) == (Verdict.HANG, 1, "lowest step")


def _finished(tmp_path, ranks=4, last=20):
    """Every rank recorded the job's last step (training over)."""
    for r in range(ranks):
        _write(tmp_path, r, range(1, last + 1), node="n0")
    return _views(tmp_path), 1000.0 + last


def test_every_rank_gone_after_the_same_last_step_is_the_steps_end_not_a_hang(tmp_path):
    """The job's training ended (its ranks exit together after the last step)
    while the job runs on: no hang however long the batch script goes on."""
    views, last = _finished(tmp_path)
    gone = dict.fromkeys(views, ProcState.GONE)
    left = dict.fromkeys(views, last + 5.0)
    for later in (11.0, 600.0, 3600.0):
        v = judge_hang(JOB, views, gone, last + later, HS, departed=left, alone=True)
        assert v.verdict is Verdict.HEALTHY and "step ended" in v.explanation
    # A job on several nodes: the others may wait for this node's ranks, a
    # hang once they are gone hang_s (undated: hang_s since the last step).
    v = judge_hang(JOB, views, gone, last + 14.0, HS, departed=left)
    assert v.verdict is Verdict.HEALTHY and "other nodes" in v.explanation
    v = judge_hang(JOB, views, gone, last + 15.0, HS, departed=left)
    assert (v.verdict, v.rank, v.cause) == (Verdict.HANG, 0, "process gone")
    assert judge_hang(JOB, views, gone, last + 10.0, HS).verdict is Verdict.HANG
    # Gone ranks that did not finish together (one went on further): not an end.
    _write(tmp_path, 3, range(21, 25), node="n0")
    views = _views(tmp_path)
    v = judge_hang(JOB, views, gone, last + 600, HS, alone=True)
    assert (v.verdict, v.rank, v.cause) == (Verdict.HANG, 0, "process gone")


def test_rank_0_alone_after_its_peers_finished_waits_hang_s_after_they_left(tmp_path):
    views, last = _finished(tmp_path)
    procs = {0: ProcState.RUNNING} | dict.fromkeys((1, 2, 3), ProcState.GONE)
    left = dict.fromkeys((1, 2, 3), last + 300.0)  # after a final checkpoint
    # Saving or uploading alone: 9 s after they left, 309 s after the last step.
    v = judge_hang(JOB, views, procs, last + 309.0, HS, departed=left)
    assert v.verdict is Verdict.HEALTHY and "alone" in v.explanation
    v = judge_hang(JOB, views, procs, last + 310.0, HS, departed=left)
    assert (v.verdict, v.rank, v.cause) == (Verdict.HANG, 1, "process gone")
    # Undated departures (a watcher that started after they left): the stall
    # since the last step counts, as before departures were dated.
    v = judge_hang(JOB, views, procs, last + 10.0, HS)
    assert (v.verdict, v.rank) == (Verdict.HANG, 1)


def test_a_rank_gone_beside_live_peers_is_a_hang_exited_s_after_it_left(tmp_path):
    views, last = _finished(tmp_path)
    hs = HangSettings(hang_s=900.0, first_step_allowance_s=5.0, exited_s=120.0)
    procs = dict.fromkeys(views, ProcState.SLEEPING) | {2: ProcState.GONE}
    left = {2: last + 3.0}
    assert judge_hang(JOB, views, procs, last + 122.0, hs, departed=left).verdict is (
        Verdict.HEALTHY
    )
    v = judge_hang(JOB, views, procs, last + 123.0, hs, departed=left)
    assert (v.verdict, v.rank, v.node, v.cause) == (Verdict.HANG, 2, "n0", "process gone")
    # Rank 0 gone, the others alive: the same (only rank 0 finishing alone waits).
    procs = dict.fromkeys(views, ProcState.SLEEPING) | {0: ProcState.GONE}
    v = judge_hang(JOB, views, procs, last + 123.0, hs, departed={0: last + 3.0})
    assert (v.verdict, v.rank) == (Verdict.HANG, 0)
    # Steps recorded after it left: the clock runs from the last of them.
    v = judge_hang(JOB, views, procs, last + 123.0, hs, departed={0: last - 200.0})
    assert v.verdict is Verdict.HANG and v.evidence["departed_s"] == 123.0
    # Undated: hang_s since the last step, as before.
    assert judge_hang(JOB, views, procs, last + 899.0, hs).verdict is Verdict.HEALTHY
    assert judge_hang(JOB, views, procs, last + 900.0, hs).verdict is Verdict.HANG


def test_departures_are_dated_by_the_first_look_that_saw_them():
    from slurm_hooks.detect.progress.departures import Departures
    from slurm_hooks.detect.progress.records import RankView

    views = {r: RankView(r, "n0", 100 + r, 0, 0.0, 5, 50.0, 10.0) for r in range(3)}
    d = Departures()
    # Gone at the first look of the job: undated (the watcher just started).
    assert d.look(JOB, views, {0: ProcState.RUNNING, 1: ProcState.GONE}, 60.0) == {}
    assert d.look(JOB, views, {1: ProcState.GONE, 2: ProcState.GONE}, 65.0) == {2: 65.0}
    assert d.look(JOB, views, {1: ProcState.GONE, 2: ProcState.GONE}, 70.0) == {2: 65.0}
    # A rank restarted in place is a new process.
    views[2] = RankView(2, "n0", 999, 0, 0.0, 5, 50.0, 10.0)
    assert d.look(JOB, views, {2: ProcState.GONE}, 75.0) == {2: 75.0}
    d.keep(set())
    assert d.look(JOB, views, {2: ProcState.GONE}, 80.0) == {}


def test_all_ranks_equal_and_healthy_processes_is_stalled_without_culprit(tmp_path):
    for r in range(2):
        _write(tmp_path, r, range(1, 6))
    v = judge_hang(JOB, _views(tmp_path), {0: ProcState.SLEEPING}, 1000.0 + 60, HS)
    assert v.verdict is Verdict.STALLED and v.rank is None


def test_first_step_allowance_delays_the_verdict(tmp_path):
    _write(tmp_path, 0, [1])
    _write(tmp_path, 1, [])
    views = _views(tmp_path)
    slow_start = HangSettings(hang_s=10.0, first_step_allowance_s=100.0)
    assert judge_hang(JOB, views, {}, 1000.0 + 50, slow_start).verdict is Verdict.HEALTHY


# -- straggler judge ------------------------------------------------------------------------

SS = SlowSettings(slow_percent=20.0, slow_windows=3, window_steps=10)


def test_a_rank_30_percent_slower_is_a_straggler(tmp_path):
    rng = random.Random(1)
    for r in range(4):
        _write(tmp_path, r, range(1, 41),
               busy=lambda rank, s: (0.39 if rank == 1 else 0.3) * rng.uniform(0.95, 1.05))  # fmt: skip
    found = judge_stragglers(JOB, _views(tmp_path), SS)
    assert [s.rank for s in found] == [1]
    assert 20 < found[0].over_percent < 45 and len(found[0].windows) == 3


def test_two_ranks_suffice_and_jitter_is_no_straggler(tmp_path):
    rng = random.Random(7)
    for r in range(2):
        _write(tmp_path, r, range(1, 201), busy=lambda rank, s: 0.3 * rng.uniform(0.8, 1.2))
    assert judge_stragglers(JOB, _views(tmp_path), SS) == []


def test_slow_in_fewer_windows_than_asked_is_not_a_straggler(tmp_path):
    for r in range(3):
        _write(tmp_path, r, range(1, 41),
               busy=lambda rank, s: 0.5 if rank == 0 and s > 25 else 0.3)  # fmt: skip
    assert judge_stragglers(JOB, _views(tmp_path), SS) == []


# -- /proc ------------------------------------------------------------------------------------


def test_proc_state_sees_stopped_and_gone_processes():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = time.time()
        assert proc_state(child.pid, uid=os.getuid(), started=started) in (
            ProcState.SLEEPING, ProcState.RUNNING)  # fmt: skip
        os.kill(child.pid, signal.SIGSTOP)
        deadline = time.time() + 5
        while proc_state(child.pid, uid=None, started=started) is not ProcState.STOPPED:
            assert time.time() < deadline
            time.sleep(0.01)
        # Another uid's process is not the rank's (a record naming it lies).
        assert proc_state(child.pid, uid=os.getuid() + 1, started=started) is ProcState.GONE
        # Started long after the rank's first record: a recycled pid.
        assert proc_state(child.pid, uid=None, started=started - 3600) is ProcState.GONE
    finally:
        child.kill()
        child.wait()
    assert proc_state(child.pid, uid=None, started=started) is ProcState.GONE


# -- reason -------------------------------------------------------------------------------


def test_hang_reason_names_job_and_rank():
    r = DrainReason("HANG", "0a1b2c3d", "job 4242 made no progress", "job:4242/rank3")
    back = parse_reason(format_reason(r))
    assert (back.code, back.component) == ("HANG", "job:4242/rank3")


def test_config_section_is_registered_and_validated():
    from slurm_hooks.core import config

    assert config.SECTIONS["progress"].endswith(":ProgressConfig")
    with pytest.raises(ValueError):
        ProgressConfig(slow_policy="panic").validate()


# -- the watcher's pass -----------------------------------------------------------------------


class FakeSlurm:
    def __init__(self, job: JobInfo | None):
        self.job = job
        self.calls = 0
        self.listed = 0

    def jobs_on_node(self, name):
        from slurm_hooks.core import hostlist

        self.listed += 1
        return [self.job] if self.job and hostlist.contains(self.job.nodes, name) else []

    def get_job(self, job_id):
        self.calls += 1
        if self.job is None or self.job.job_id != job_id:
            raise JobGone(job_id)
        return self.job

    def get_node(self, name):
        return SimpleNamespace(name=name, state="allocated", flags=frozenset(), reason=None)


class FakeEngine:
    actor = "test"

    def __init__(self, slurm):
        self.slurm = slurm
        self.handled = []
        self.alerts = []
        self.audit = SimpleNamespace(record=lambda *a, **k: None)

    def handle(self, node, findings):
        self.handled.append((node, list(findings)))
        return ["decision"]

    def notify(self, alert):
        self.alerts.append(alert)


def _job(user, nodes="n[0-1]", restart=0, batch="n0"):
    return JobInfo(JOB, user, "RUNNING", nodes, batch_host=batch, restart_count=restart)


def _me():
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _pass(tmp_path, node, slurm, now, **cfg):
    s = ProgressConfig(dir=str(tmp_path), hang_s=10.0, first_step_allowance_s=0.0, **cfg)
    engine = FakeEngine(slurm)
    return ProgressPass(s, node, engine, clock=lambda: now), engine


def test_pass_without_records_makes_no_slurm_call(tmp_path):
    slurm = FakeSlurm(_job(_me()))
    p, engine = _pass(tmp_path, "n0", slurm, 1e9)
    (tmp_path / "999").mkdir()  # a directory of no job here: never read
    (tmp_path / JOB).mkdir()  # a job's directory, no records: no question about it
    assert p.run() == [] and slurm.calls == 0 and not engine.handled
    assert p.run() == [] and slurm.listed == 1  # the node's jobs: one read, kept
    assert p.last.skipped_dirs == 1 and p.last.judged == 0


def test_pass_drains_the_stopped_ranks_node_only(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(0.2)
        t0 = time.time()  # records start after both processes did
        _write(tmp_path, 0, range(1, 11), t0=t0, node="n0")
        _write(tmp_path, 1, range(1, 10), t0=t0, node="n1", pid=child.pid)
        slurm = FakeSlurm(_job(_me()))
        # The healthy rank's node sees the culprit elsewhere: no drain there.
        p0, e0 = _pass(tmp_path, "n0", slurm, t0 + 100)
        p0.run()
        assert not e0.handled
        p1, e1 = _pass(tmp_path, "n1", slurm, t0 + 100)
        p1.run()
        [(node, [finding])] = e1.handled
        assert (node, finding.code, finding.component.short()) == ("n1", "HANG", "job:4242/rank1")
        assert finding.values["cause"] == "process stopped (state T)"
        assert e1.alerts and e1.alerts[0].user == _me()
        p1.run()  # acted once per job run
        assert len(e1.handled) == 1
    finally:
        child.kill()
        child.wait()


def test_pass_never_acts_for_records_of_another_user_or_an_old_run(tmp_path):
    t0 = time.time()
    _write(tmp_path, 0, range(1, 11), t0=t0, node="n0")
    _write(tmp_path, 1, range(1, 5), t0=t0, node="n0", pid=2**22 + 7)  # gone pid
    for job in (_job("nobody"), _job(_me(), restart=3), _job(_me(), nodes="n[5-6]"), None):
        p, engine = _pass(tmp_path, "n0", FakeSlurm(job), t0 + 100)
        p.run()
        assert not engine.handled, job
    p, engine = _pass(tmp_path, "n0", FakeSlurm(_job(_me())), t0 + 100)
    p.run()
    assert [f.values["cause"] for _, [f] in engine.handled] == ["process gone"]


def test_pass_reports_a_straggler_without_draining_by_default(tmp_path):
    t0 = time.time()
    for r in range(2):
        _write(tmp_path, r, range(1, 41), t0=t0, dt=0.1, node=f"n{r}",
               busy=lambda rank, s: 0.39 if rank == 1 else 0.3)  # fmt: skip
    p, engine = _pass(tmp_path, "n1", FakeSlurm(_job(_me())), t0 + 4.1, window_steps=10)
    p.run()
    [(node, [f])] = engine.handled
    assert (f.code, str(f.status), str(f.action)) == ("SLOW", "WARN", "none")
    assert f.values["over_percent"] == pytest.approx(30.0, abs=0.5)
    assert engine.alerts[0].kind == "job_straggler"


def test_a_thousand_forged_stragglers_of_one_job_are_one_report(tmp_path):
    """The records are their user's to write: however many straggling ranks
    they name, a job run costs one finding, one alert (about the slowest)."""
    t0 = time.time()
    slow = {r: 0.39 for r in range(0, 60, 3)} | {7: 0.45}  # 21 of 60 ranks

    def busy(rank, step):
        return slow.get(rank, 0.3)

    for r in range(60):
        _write(tmp_path, r, range(1, 41), t0=t0, dt=0.1, node="n1", busy=busy)
    p, engine = _pass(tmp_path, "n1", FakeSlurm(_job(_me())), t0 + 4.1, window_steps=10)
    p.run()
    p.run()
    [(node, [f])] = engine.handled
    assert (f.code, f.values["rank"], f.values["stragglers"]) == ("SLOW", 7, 21)
    assert f.values["ranks"] == sorted(slow)
    assert [a.kind for a in engine.alerts] == ["job_straggler"]
    assert "20 other rank(s) here are slow too" in engine.alerts[0].text


def test_a_second_ranks_hang_in_the_same_job_run_is_not_reported_again(tmp_path):
    p, engine = _pass(tmp_path, "n1", FakeSlurm(_job(_me())), 1e9)
    info = _job(_me())
    for rank in (1, 2, 3):
        p._hang(info, HangVerdict(Verdict.HANG, JOB, f"rank {rank} gone", 60.0, rank, "n1",
                                  "process gone"))  # fmt: skip
    assert [f.values["rank"] for _, [f] in engine.handled] == [1]
    assert len(engine.alerts) == 1
    p._hang(replace(info, restart_count=1),
            HangVerdict(Verdict.HANG, JOB, "rank 2 gone", 60.0, 2, "n1", "process gone"))  # fmt: skip
    assert [f.values["rank"] for _, [f] in engine.handled] == [1, 2]  # a new run: told again


def test_reports_about_one_users_jobs_are_capped_per_hour_and_audited_all(tmp_path):
    """Many jobs of one user (or requeues of one) each stalling: the admins
    get ``reports_per_user_hour`` of them and one note that more are held;
    every one is audited; another user's reports go out all the same."""
    now = [1e9]
    p, engine = _pass(tmp_path, "n1", FakeSlurm(None), 0.0, reports_per_user_hour=2)
    p.clock = lambda: now[0]
    audited = []
    engine.audit = SimpleNamespace(record=lambda kind, **kw: audited.append((kind, kw)))
    for job in range(5):
        p._tell(
            JobInfo(str(job), "mallory", "RUNNING", "n1"), "job_stalled", f"job {job}", "HANG", {}
        )
    p._tell(JobInfo("9", "alice", "RUNNING", "n1"), "job_stalled", "job 9", "HANG", {})
    kinds = [(a.kind, a.user, a.job_id) for a in engine.alerts]
    assert kinds == [("job_stalled", "mallory", "0"), ("job_stalled", "mallory", "1"),
                     ("job_reports_held", "mallory", "2"), ("job_stalled", "alice", "9")]  # fmt: skip
    assert [kw.get("sent", True) for _, kw in audited] == [True, True, False, False, False, True]
    assert p.totals.held_reports == 3
    now[0] += 3601
    p._tell(JobInfo("7", "mallory", "RUNNING", "n1"), "job_stalled", "job 7", "HANG", {})
    assert engine.alerts[-1].job_id == "7"  # a new hour


def test_the_verdicts_kept_are_those_of_the_runs_running_here():
    """Months of a watcher, and a user requeueing their own job again and
    again: what is kept is the current runs' verdicts (a run newer than the
    node's job list is kept: the list may be older than Slurm's answer)."""
    from slurm_hooks.agent.progress_report import Seen

    seen = Seen({("1", 0, "hang"), ("1", 1, "hang"), ("1", 2, "slow"), ("2", 0, "hang")})
    seen.keep({"1": 1})
    assert seen.acted == {("1", 1, "hang"), ("1", 2, "slow")}


def test_step_skew_metrics_per_job_on_the_watchers_metrics(tmp_path):
    """The last pass's per-job skew, stall and verdict are served beside the
    watcher's own families (``/metrics``)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from slurm_hooks.act.metrics import PhaseRun
    from slurm_hooks.agent.watch import _WatchCollector

    now = 1000.0 + 40
    for r, b in ((0, 0.5), (1, 0.55), (2, 0.5)):  # 10 %: below slow_percent
        _write(tmp_path, r, range(1, 31), busy=b, node="n1", pid=os.getpid())
    engine = SimpleNamespace(slurm=FakeSlurm(_job(_me())))
    pp = ProgressPass(ProgressConfig(dir=str(tmp_path)), "n1", engine, clock=lambda: now)
    assert pp.run() == []
    watcher = SimpleNamespace(progress=pp, phase_run=lambda: PhaseRun("watch", (), 0.0, 0.0))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_WatchCollector(watcher))
    text = generate_latest(reg).decode()
    assert f'slurm_hooks_job_step_skew{{job="{JOB}"}} 1.1' in text
    assert f'slurm_hooks_job_stalled_seconds{{job="{JOB}"}} 10.0' in text
    assert f'slurm_hooks_job_progress_verdict{{job="{JOB}",verdict="healthy"}} 1.0' in text
    assert "slurm_hooks_findings" in text or "slurm_hooks_phase_duration_seconds" in text


def test_ranks_killed_by_the_evacuation_are_not_new_culprits(tmp_path):
    """Found on the 4-node lab: once the stopped rank's node is drained, the job's
    step is cancelled and every other rank's process is gone while the job is
    still RUNNING (restart 0) - each other node saw "process gone" and drained
    itself.  A node of the job already carrying our HANG reason for it stops that."""
    from slurm_hooks.core.reason import DrainReason, format_reason

    t0 = time.time()
    _write(tmp_path, 0, range(1, 11), t0=t0, node="n0", pid=2**22 + 7)  # gone: killed with the step
    _write(tmp_path, 1, range(1, 10), t0=t0, node="n1", pid=2**22 + 9)
    slurm = FakeSlurm(_job(_me()))
    hang = format_reason(DrainReason("HANG", "i1", "rank 1 stopped", "job:4242/rank1"))
    slurm.get_node = lambda name: SimpleNamespace(  # type: ignore[method-assign]
        name=name,
        state="allocated",
        flags=frozenset({"DRAIN"}) if name == "n1" else frozenset(),
        reason=hang if name == "n1" else None,
    )
    p0, e0 = _pass(tmp_path, "n0", slurm, t0 + 100)
    p0.run()
    assert not e0.handled
    slurm.get_node = FakeSlurm(None).get_node  # no HANG anywhere: the gone rank is the culprit
    p0.run()
    assert [f.values["cause"] for _, [f] in e0.handled] == ["process gone"]
