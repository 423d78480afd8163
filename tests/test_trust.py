"""Evidence a user cannot forge (issue 27, items 1 and 2): provenance on every
finding, and the policy's rule that user-side evidence alone acts on the
user's own job only (decide/trust.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from slurm_hooks.core import hostlist
from slurm_hooks.core.history import FaultEvent, NodeHistory
from slurm_hooks.core.model import (
    Action,
    Component,
    Finding,
    JobInfo,
    NodeState,
    Provenance,
    Status,
)
from slurm_hooks.decide import DecisionKind, FleetView, PolicyConfig, decide
from slurm_hooks.detect.progress import corroborate

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
USER = (Provenance.USER_FILE, Provenance.USER_PROCESS)


def hang(provenance=USER, *, user="mallory", opt_in=False, drain=True) -> Finding:
    return Finding(
        "progress", Status.FAIL if drain else Status.WARN, "HANG",
        "job 7 made no progress for 130s; rank 0 on n1: process gone at step 1",
        Component("job", name="7/rank0"), Action.DRAIN if drain else Action.NONE,
        {"job": "7", "rank": 0, "user": user, "restart_count": 0, "requeue_opt_in": opt_in},
        provenance,
    )  # fmt: skip


def node(name="n1", **kw) -> NodeState:
    return NodeState(name, "mixed", partitions=("gpu",), **kw)


def one(findings, history=None, fleet=None, cfg=None, state=None):
    out = decide(findings, state or node(), history, fleet, cfg or PolicyConfig(), NOW, node="n1")
    assert len(out) == 1, out
    return out[0]


# -- provenance on the finding ---------------------------------------------------------------


def test_existing_checks_stay_trusted_and_provenance_is_serialised():
    f = Finding("xid", Status.FAIL, "XID79", "fell off", action=Action.REBOOT)
    assert f.provenance == (Provenance.ROOT_PROBE,) and not f.user_side
    assert f.to_dict()["provenance"] == ["root_probe"] and f.to_dict()["trusted"] is True
    d = hang().to_dict()
    assert d["provenance"] == ["user_file", "user_process"] and d["trusted"] is False
    # One trusted source beside user-side ones: not "user-side alone".
    assert not hang((*USER, Provenance.NVML)).user_side


# -- the rule --------------------------------------------------------------------------------


def test_user_side_hang_alone_reports_to_the_owner_and_never_drains():
    d = one([hang()])
    assert d.kind is DecisionKind.REPORT_JOB and not d.kind.drains
    assert d.reason is None and not d.evacuate and d.incident is None
    assert d.facts["would_be"] == "drain" and d.facts["job"] == "7"
    assert d.facts["provenance"] == ["user_file", "user_process"]
    assert "user-side only" in d.explanation and "no other job" in d.explanation


def test_opted_in_job_is_requeued_alone():
    d = one([hang(opt_in=True)])
    assert d.kind is DecisionKind.REQUEUE_JOB and not d.kind.drains and not d.evacuate
    assert (d.facts["job"], d.facts["user"], d.facts["restart_count"]) == ("7", "mallory", 0)


def test_user_side_evidence_never_meets_the_breaker():
    """A tripped breaker is no concern of a job-only verdict: it does not count
    towards it, nor is it held by it (the engine's breaker never sees it)."""
    drained = [NodeState(f"n{i}", "mixed", frozenset({"DRAIN"}), partitions=("gpu",),
                         reason=f"slurm-hooks/1 XID79 gpu0 inc=0000000{i} :: x") for i in range(2, 5)]  # fmt: skip
    fleet = FleetView((node(), *drained))
    assert one([hang()], fleet=fleet).kind is DecisionKind.REPORT_JOB
    trusted = one([hang((*USER, Provenance.NVML))], fleet=fleet)
    assert trusted.kind is DecisionKind.BREAKER_TRIPPED  # the same fault, trusted, meets it


@pytest.mark.parametrize("extra", [Provenance.NVML, Provenance.KERNEL])
def test_trusted_evidence_beside_it_blames_the_node(extra):
    d = one([hang((*USER, extra))])
    assert d.kind is DecisionKind.DRAIN and d.evacuate
    assert d.reason is not None and d.reason.code == "HANG"


def test_trusted_fault_in_the_window_corroborates():
    past = NodeHistory((FaultEvent(NOW - timedelta(minutes=5), "XID79", "gpu0", "drain"),))
    d = one([hang()], history=past)
    assert d.kind is DecisionKind.DRAIN and "XID79" in d.facts["corroborated_by"]
    old = NodeHistory((FaultEvent(NOW - timedelta(hours=2), "XID79", "gpu0", "drain"),))
    assert one([hang()], history=old).kind is DecisionKind.REPORT_JOB


@pytest.mark.parametrize(
    ("code", "severity", "trusted", "kind"),
    [
        ("XID48", "log", True, DecisionKind.DRAIN),  # a kernel XID, not the app's doing
        ("XID13", "log", True, DecisionKind.REPORT_JOB),  # a user's kernel raises it at will
        ("XID31", "log", True, DecisionKind.REPORT_JOB),
        ("GPU_TEMP", "log", True, DecisionKind.REPORT_JOB),  # a warning is no fault
        ("HANG", "report_job", False, DecisionKind.REPORT_JOB),  # the same user again
        ("SLOW", "drain", False, DecisionKind.REPORT_JOB),  # user-side, whatever it became
        ("SCRATCH_FULL", "drain", True, DecisionKind.REPORT_JOB),  # root-read, user-caused
        ("PS_LOADAVG", "drain", True, DecisionKind.REPORT_JOB),
    ],
)
def test_what_in_the_history_corroborates(code, severity, trusted, kind):
    ev = FaultEvent(NOW - timedelta(minutes=1), code, None, severity, None, trusted, "mallory")
    assert one([hang()], history=NodeHistory((ev,))).kind is kind


def test_hangs_of_two_different_users_blame_the_node_only_where_the_site_says_so():
    """Each hang is evidence its user writes: by default two users' hangs
    (two accounts that agree) stay reports; ``cross_user_hangs = 2`` makes
    them corroborate each other."""
    other = FaultEvent(NOW - timedelta(minutes=9), "HANG", "job:5/rank1", "report_job", None,
                       False, "alice")  # fmt: skip
    assert one([hang()], history=NodeHistory((other,))).kind is DecisionKind.REPORT_JOB
    two = PolicyConfig(cross_user_hangs=2)
    d = one([hang()], history=NodeHistory((other,)), cfg=two)
    assert d.kind is DecisionKind.DRAIN and "2 different users" in d.facts["corroborated_by"]
    mine = FaultEvent(NOW - timedelta(minutes=9), "HANG", "job:5/rank1", "report_job", None,
                      False, "mallory")  # fmt: skip
    assert one([hang()], history=NodeHistory((mine,)), cfg=two).kind is DecisionKind.REPORT_JOB


def test_user_side_report_only_verdicts_stay_logs():
    d = one([hang(drain=False)])
    assert d.kind is DecisionKind.LOG and d.facts["provenance"] == ["user_file", "user_process"]


def test_observe_only_still_acts_on_nothing():
    d = decide([hang(opt_in=True)], node(), None, None, PolicyConfig(), NOW, observe_only=True)
    assert [x.kind for x in d] == [DecisionKind.REQUEUE_JOB] and d[0].observe_only


def test_cross_user_rule_is_validated():
    with pytest.raises(ValueError):
        PolicyConfig(cross_user_hangs=1).validate()


def test_history_keeps_provenance_and_user(tmp_path):
    from slurm_hooks.store.state import StateStore

    st = StateStore(tmp_path)
    st.record_faults("n1", [FaultEvent(NOW, "HANG", "job:7/rank0", "report_job", None, False,
                                       "mallory"), FaultEvent(NOW, "XID79", "gpu0", "drain")])  # fmt: skip
    a, b = st.history("n1").faults
    assert (a.trusted, a.user) == (False, "mallory") and (b.trusted, b.user) == (True, None)


# -- policy explain --------------------------------------------------------------------------


def test_explain_shows_provenance_and_the_job_only_verdict(tmp_path, monkeypatch):
    from slurm_hooks.cli.policy import command
    from slurm_hooks.core import config

    monkeypatch.setitem(config.SECTIONS, "policy", "slurm_hooks.decide.config:PolicyConfig")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[general]\nstate_dir = "{tmp_path}"\n')
    path = tmp_path / "f.json"
    path.write_text(json.dumps([hang(opt_in=True).to_dict()]))
    res = CliRunner().invoke(command, ["explain", "--findings", str(path), "--node", "n1",
                                       "-c", str(cfg)])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "n1: REQUEUE_JOB HANG" in res.output
    assert "evidence: HANG from user_file, user_process (user-side only)" in res.output
    assert "requeue job 7 only" in res.output
    trusted = hang((*USER, Provenance.NVML)).to_dict()
    path.write_text(json.dumps([trusted]))
    res = CliRunner().invoke(command, ["explain", "--findings", str(path), "--node", "n1",
                                       "-c", str(cfg), "--json"])  # fmt: skip
    assert res.exit_code == 1, res.output
    [d] = json.loads(res.output)
    assert d["kind"] == "drain" and d["findings"][0]["provenance"][-1] == "nvml"


# -- trusted corroboration gathered on the node ---------------------------------------------


def _proc(root, pid, state, stack=""):
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} (python3) {state} 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0\n")
    (d / "stack").write_text(stack)


NV_STACK = ("[<0>] __schedule+0x2c0/0x6f0\n[<0>] schedule+0x4e/0xc0\n"
            "[<0>] os_acquire_spinlock+0x14/0x30 [nvidia]\n"
            "[<0>] _nv012345rm+0x1c/0x30 [nvidia]\n")  # fmt: skip
VFORK_STACK = "[<0>] wait_for_vfork_done+0x31/0x50\n[<0>] kernel_clone+0x1a1/0x3e0\n"


def test_d_state_counts_only_inside_the_nvidia_driver(tmp_path):
    _proc(tmp_path, 100, "D", NV_STACK)
    _proc(tmp_path, 101, "D", VFORK_STACK)  # a user parks their own process in D with vfork
    _proc(tmp_path, 102, "T", NV_STACK)
    _proc(tmp_path, 103, "S", NV_STACK)
    assert "os_acquire_spinlock" in (corroborate.in_driver(100, str(tmp_path)) or "")
    for pid in (101, 102, 103, 104):
        assert corroborate.in_driver(pid, str(tmp_path)) is None, pid
    assert corroborate.driver_stuck([101, 100], str(tmp_path)).startswith("process 100 ")
    assert corroborate.driver_stuck([101, 102], str(tmp_path)) is None


#: A user's own FUSE daemon that never answers, under memory the driver
#: pins (cudaHostRegister of an mmap of a file it serves): D state with
#: nvidia frames below the page fault.
FUSE_STACK = ("[<0>] request_wait_answer+0x12d/0x210 [fuse]\n"
              "[<0>] fuse_simple_request+0x18e/0x2c0 [fuse]\n"
              "[<0>] fuse_do_readpage+0x10c/0x1a0 [fuse]\n"
              "[<0>] filemap_fault+0x5f0/0x9a0\n[<0>] handle_mm_fault+0x1c7/0x2f0\n"
              "[<0>] __get_user_pages+0x1f4/0x6a0\n"
              "[<0>] os_lock_user_pages+0xa5/0x170 [nvidia]\n"
              "[<0>] _nv000745rm+0x6d/0x150 [nvidia]\n")  # fmt: skip
#: Blocked in the page cache (reading the user's own slow file), the driver below.
FAULT_STACK = ("[<0>] folio_wait_bit_common+0x134/0x300\n[<0>] filemap_fault+0x5f0/0x9a0\n"
               "[<0>] os_lock_user_pages+0xa5/0x170 [nvidia]\n")  # fmt: skip
#: Newer kernels show no scheduler frames: the driver's own frame is on top.
NV_TOP = "[<0>] os_acquire_mutex+0x4b/0x80 [nvidia]\n[<0>] _nv041225rm+0x2e/0x50 [nvidia]\n"


def test_a_process_blocked_on_something_its_user_serves_is_not_in_the_driver(tmp_path):
    _proc(tmp_path, 200, "D", FUSE_STACK)
    _proc(tmp_path, 201, "D", FAULT_STACK)
    _proc(tmp_path, 202, "D", NV_TOP)
    assert corroborate.in_driver(200, str(tmp_path)) is None
    assert corroborate.in_driver(201, str(tmp_path)) is None
    assert "os_acquire_mutex" in (corroborate.in_driver(202, str(tmp_path)) or "")


def test_listpids_parse_keeps_the_jobs_pids_only():
    text = ("PID      JOBID    STEPID   LOCALID GLOBALID\n"
            "72321    123      0        0       0\n"
            "72303    123      batch    0       0\n"
            "1        123      extern   -       -\n"
            "555      999      0        0       0\n")  # fmt: skip
    assert corroborate.parse_listpids(text, "123") == [72321, 72303]


def test_nvml_evidence_and_the_gpu_view_of_a_lost_gpu():
    class NVMLError_GpuIsLost(Exception):  # noqa: N801 - pynvml's class naming
        value = 15

    class Nvml:
        def nvmlDeviceGetMemoryInfo(self, h):  # noqa: N802
            if h == 1:
                raise NVMLError_GpuIsLost()
            return SimpleNamespace(total=1)

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):  # noqa: N802
            return 0

    from slurm_hooks.detect.probes.gpu_view import gpu_view, summary

    session = SimpleNamespace(nvml=Nvml(), device_count=lambda: 2, handle=lambda i: i)
    view = gpu_view(session)
    assert view[1] == {"index": 1, "lost": "GPU_IS_LOST"}
    assert corroborate.nvml_evidence(view) == "NVML: gpu1 (GPU_IS_LOST) lost"
    assert "gpu1 LOST" in summary(view)
    assert corroborate.nvml_evidence([{"index": 0, "throttle": ["gpu_idle"]}]) is None
    assert corroborate.slow_evidence([{"index": 2, "throttle": ["hw_slowdown"]}]).endswith(
        "hw_slowdown"
    )
    assert corroborate.slow_evidence([{"index": 0, "pcie_width": 8, "pcie_max_width": 16}])
    assert corroborate.slow_evidence([{"index": 0, "throttle": ["sw_power_cap"]}]) is None


# -- the watcher's progress pass, with the real policy ---------------------------------------


class PolicyEngine:
    """The engine's deciding half: the real decide() on what the pass hands over."""

    actor = "test"

    def __init__(self, job: JobInfo, history=None):
        self.slurm = SimpleNamespace(
            get_job=lambda j: job,
            get_node=lambda n: SimpleNamespace(name=n, state="mixed", flags=frozenset(),
                                               reason=None),
            # The pass reads this node's jobs once (one cached read).
            jobs_on_node=lambda n: [job] if hostlist.contains(job.nodes or "", n) else [],
        )  # fmt: skip
        self.history = history
        self.decisions: list = []
        self.alerts: list = []
        self.audited: list = []
        self.audit = SimpleNamespace(record=lambda *a, **k: self.audited.append((a, k)))

    def handle(self, node, findings):
        out = decide(list(findings), None, self.history, None, PolicyConfig(), NOW, node=node)
        self.decisions += out
        return out

    def notify(self, alert):
        self.alerts.append(alert)


def _records(tmp_path, rank, steps, *, t0, node, pid):
    d = tmp_path / "4242"
    d.mkdir(parents=True, exist_ok=True)
    with open(d / f"rank{rank}.log", "a") as fh:
        fh.write(f"P1 job=4242 restart=0 rank={rank} node={node} pid={pid} step=0 time={t0:.6f}\n")
        for s in steps:
            fh.write(f"P1 job=4242 restart=0 rank={rank} node={node} pid={pid} step={s} "
                     f"time={t0 + s:.6f} busy=0.5\n")  # fmt: skip


def _me():
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


@pytest.fixture
def stopped():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    os.kill(child.pid, signal.SIGSTOP)
    time.sleep(0.2)
    yield child
    child.kill()
    child.wait()


def _run_pass(tmp_path, stopped, *, comment=None, gpu_view=None, pids=(), proc="/proc"):
    from slurm_hooks.agent.progress_pass import ProgressPass
    from slurm_hooks.detect.progress.settings import ProgressConfig

    t0 = time.time()
    _records(tmp_path, 0, range(1, 11), t0=t0, node="n0", pid=os.getpid())
    _records(tmp_path, 1, range(1, 10), t0=t0, node="n1", pid=stopped.pid)
    job = JobInfo("4242", _me(), "RUNNING", "n[0-1]", batch_host="n0", comment=comment)
    engine = PolicyEngine(job)
    s = ProgressConfig(dir=str(tmp_path), hang_s=10.0, first_step_allowance_s=0.0)
    p = ProgressPass(s, "n1", engine, clock=lambda: t0 + 100, gpu_view=gpu_view, proc=proc)
    p.step_pids = lambda job, node: list(pids)  # type: ignore[method-assign]
    p.run()
    return engine


def test_a_rank_stopped_by_its_owner_is_reported_not_drained(tmp_path, stopped):
    engine = _run_pass(tmp_path, stopped)
    [d] = engine.decisions
    assert d.kind is DecisionKind.REPORT_JOB
    assert d.findings[0].provenance == USER
    [alert] = engine.alerts
    assert alert.kind == "job_hang" and alert.user == _me() and "no node drained" in alert.text


def test_the_owners_opt_in_requeues_only_that_job(tmp_path, stopped):
    engine = _run_pass(tmp_path, stopped, comment="nightly, slurm-hooks:requeue-on-hang")
    [d] = engine.decisions
    assert d.kind is DecisionKind.REQUEUE_JOB and d.facts["job"] == "4242"
    engine = _run_pass(tmp_path / "x", stopped, comment="slurm-hooks:requeue-on-hang-not")
    assert engine.decisions[0].kind is DecisionKind.REPORT_JOB


def test_a_lost_gpu_on_the_node_makes_the_hang_the_nodes(tmp_path, stopped):
    engine = _run_pass(tmp_path, stopped, gpu_view=lambda: [{"index": 2, "lost": "GPU_IS_LOST"}])
    [d] = engine.decisions
    assert d.kind is DecisionKind.DRAIN and d.reason is not None and d.reason.code == "HANG"
    assert Provenance.NVML in d.findings[0].provenance
    assert "gpu2 (GPU_IS_LOST) lost" in d.reason.text
    assert "the node is drained" in engine.alerts[0].text


def test_a_step_process_stuck_in_the_driver_makes_the_hang_the_nodes(tmp_path, stopped):
    proc = tmp_path / "proc"
    _proc(proc, 4321, "D", NV_STACK)
    engine = _run_pass(tmp_path, stopped, pids=[4321], proc=str(proc))
    [d] = engine.decisions
    assert d.kind is DecisionKind.DRAIN and Provenance.KERNEL in d.findings[0].provenance


# -- the job-only action ---------------------------------------------------------------------


class DoorEngine:
    actor = "test"

    def __init__(self, job: JobInfo):
        from slurm_hooks.slurm.door import SlurmDoor

        self.requeued: list[str] = []
        self.slurm = SimpleNamespace(get_job=lambda j: job, requeue=self.requeued.append)
        self.door = SlurmDoor(self.slurm)  # type: ignore[arg-type]
        self.audited: list = []
        self.audit = SimpleNamespace(record=lambda *a, **k: self.audited.append((a, k)))


@pytest.mark.parametrize(
    ("owner", "restarts", "outcome", "requeued"),
    [("mallory", 0, "requeued", ["7"]), ("alice", 0, "refused", []), ("mallory", 1, "already", [])],
)
def test_own_job_requeue_touches_that_job_once_and_only_the_owners(owner, restarts, outcome,
                                                                     requeued):  # fmt: skip
    from slurm_hooks.act import own_job

    d = one([hang(opt_in=True)])
    eng = DoorEngine(JobInfo("7", owner, "RUNNING", "n1", restart_count=restarts))
    assert own_job.requeue_opted_in(eng, d) == outcome  # type: ignore[arg-type]
    assert eng.requeued == requeued
    [(args, kw)] = eng.audited
    assert args == ("job_requeue",) and kw["outcome"] == outcome and kw["job"] == "7"


# -- through the engine ------------------------------------------------------------------------


def test_engine_requeues_the_opted_in_job_alone_and_records_user_side_history(tmp_path):
    """The engine's whole part: REQUEUE_JOB -> act/own_job.py, nothing drained,
    the other user's job on the node untouched, the event kept as user-side."""
    from test_actions import Clock, FakeSlurm, Recorder

    from slurm_hooks.act.engine import Engine
    from slurm_hooks.act.notify.base import Notifier
    from slurm_hooks.store.audit import AuditLog
    from slurm_hooks.store.state import StateStore

    slurm = FakeSlurm()
    slurm.jobs["7"] = JobInfo("7", "mallory", "RUNNING", "n1", "n1", True)
    slurm.jobs["8"] = JobInfo("8", "alice", "RUNNING", "n1", "n1", True)
    state = StateStore(tmp_path / "state")
    engine = Engine(slurm, PolicyConfig(grace_seconds=0), state, AuditLog(tmp_path / "a.jsonl"),
                    Notifier([Recorder()]), clock=Clock(), spawn=None)  # fmt: skip
    [d] = engine.handle("n1", [hang(opt_in=True)])
    assert d.kind is DecisionKind.REQUEUE_JOB
    assert [c[:2] for c in slurm.calls if c[0] in ("drain", "signal", "requeue", "cancel")] == [
        ("requeue", "7")
    ]
    assert slurm.jobs["8"].restart_count == 0 and slurm.nodes["n1"].reason is None
    [ev] = state.history("n1").faults
    assert (ev.code, ev.severity, ev.trusted, ev.user) == ("HANG", "requeue_job", False, "mallory")
    assert [e["action"] for e in AuditLog(tmp_path / "a.jsonl").entries()] == [
        "decision", "job_requeue"
    ]  # fmt: skip
    # The same finding again (a later pass): requeued once only.
    engine.handle("n1", [hang(opt_in=True)])
    assert slurm.count("requeue") == 1


# -- what the node's users can fill: drain, never evacuate -------------------------------------


def test_what_the_nodes_users_can_fill_drains_without_moving_their_jobs(tmp_path):
    """A full scratch or file system, a high load, little free memory, a
    stray process: any user of the node can cause these by using it.  The
    node is drained as the site asked (no new job lands there), but no job
    on it is signalled or requeued: a user must not move another user's
    job.  A mount that is gone is the node's, and still evacuates."""
    from slurm_hooks.detect.checks.scratch import ScratchCheck
    from slurm_hooks.detect.site import args as A
    from slurm_hooks.detect.site.check import judge_one
    from slurm_hooks.detect.site.gather import FsUsage
    from slurm_hooks.detect.site.spec import SiteCheck
    from tests.test_checks_host import GIB, FakePsutil, ctx
    from tests.test_checks_host import run as run_check

    prof = {"scratch_path": str(tmp_path), "scratch_min_free_gb": 100}
    [scratch] = run_check(ScratchCheck(), ctx(prof, psutil=FakePsutil(free=5 * GIB)))
    full = FsUsage(total_kb=1e9, used_kb=999e6, free_kb=1e6, inodes=10, inodes_free=1)
    [space] = judge_one(SiteCheck("tmp", "fs_space", A.FsSpace(path="/tmp", min_free="10%")),
                        full, None, True)  # fmt: skip
    [gone] = judge_one(SiteCheck("home", "fs_mount", A.FsMount(paths=("/home",))), [], None, True)
    # A write test a storm of the users' I/O makes time out.
    hung = Finding("mounts", Status.FAIL, "MOUNT_HUNG", "write test timed out after 5s",
                   Component("mount", "/home"), action=Action.DRAIN)  # fmt: skip
    for f, evacuate in ((scratch, False), (space, False), (hung, False), (gone, True)):
        [d] = decide([f], node(), None, None, PolicyConfig(), NOW, node="n1")
        assert (d.kind, d.evacuate) == (DecisionKind.DRAIN, evacuate), (f, d)
    # With a real fault beside it, the jobs are moved for that one.
    [d] = decide([scratch, gone], node(), None, None, PolicyConfig(), NOW, node="n1")
    assert d.evacuate
    # Filled again and again: never a hardware fault, never a replacement.
    from slurm_hooks.decide.decide import component_token

    past = NodeHistory(tuple(
        FaultEvent(NOW - timedelta(hours=h), f.code, component_token(f), "drain", None, True, None)
        for h in (1, 2, 3) for f in (scratch, space)
    ))  # fmt: skip
    for f in (scratch, space):
        [d] = decide([f], node(), past, None, PolicyConfig(), NOW, node="n1")
        assert (d.kind, d.evacuate) == (DecisionKind.DRAIN, False), d
        assert "hardware_faults" not in d.facts


def test_a_scratch_filled_again_and_again_never_makes_the_node_flapping(tmp_path):
    """Resumed three times within the window, the node fails again: a fault
    of its own makes it FLAPPING (held for a human), a full scratch, which
    its users can fill at will, drains it as before."""
    from slurm_hooks.detect.checks.scratch import ScratchCheck
    from tests.test_checks_host import GIB, FakePsutil, ctx
    from tests.test_checks_host import run as run_check

    prof = {"scratch_path": str(tmp_path), "scratch_min_free_gb": 100}
    [scratch] = run_check(ScratchCheck(), ctx(prof, psutil=FakePsutil(free=5 * GIB)))
    assert scratch.code == "SCRATCH_FULL"
    lost = Finding("gpu_lost", Status.FAIL, "GPU_LOST", "gpu 3 lost", Component("gpu", index=3),
                   Action.DRAIN)  # fmt: skip
    resumed = NodeHistory(resumes=tuple(NOW - timedelta(hours=h) for h in (1, 2, 3)))
    [d] = decide([scratch], node(), resumed, None, PolicyConfig(), NOW, node="n1")
    assert (d.kind, d.evacuate) == (DecisionKind.DRAIN, False)
    [d] = decide([lost], node(), resumed, None, PolicyConfig(), NOW, node="n1")
    assert d.kind is DecisionKind.HOLD_FOR_HUMAN


def test_a_scratch_over_the_breakers_cap_is_not_drained_and_trips_nothing(tmp_path):
    """Judged with Slurm's table at decide time: a full scratch over the cap
    is only logged (no BREAKER_TRIPPED, which would latch and hold), and a
    real fault counts only the drains for faults of the nodes' own."""
    from slurm_hooks.detect.checks.scratch import ScratchCheck
    from tests.test_checks_host import GIB, FakePsutil, ctx
    from tests.test_checks_host import run as run_check

    prof = {"scratch_path": str(tmp_path), "scratch_min_free_gb": 100}
    [scratch] = run_check(ScratchCheck(), ctx(prof, psutil=FakePsutil(free=5 * GIB)))
    lost = Finding("gpu_lost", Status.FAIL, "GPU_LOST", "gpu 3 lost", Component("gpu", index=3),
                   Action.DRAIN)  # fmt: skip
    ours = [
        NodeState(f"n{i}", "idle", frozenset({"DRAIN"}),
                  f"slurm-hooks/1 SCRATCH_FULL inc=0000000{i} :: full", "root",
                  NOW - timedelta(minutes=1), partitions=("gpu",))
        for i in range(2, 6)
    ] + [node("n1")]  # fmt: skip
    fleet = FleetView(tuple(ours))
    cfg = PolicyConfig(breaker_max_share=1.0, breaker_max_nodes=2)
    [d] = decide([scratch], node(), None, fleet, cfg, NOW, node="n1")
    assert d.kind is DecisionKind.LOG and "never trips the breaker" in d.explanation
    [d] = decide([lost], node(), None, fleet, cfg, NOW, node="n1")
    assert d.kind is DecisionKind.DRAIN


def test_the_xids_an_application_raises_by_itself_are_the_catalogues():
    """Every XID NVIDIA sends to the application (investigatory action
    CHECK_APP/CUDA, or the XID 13/31 workflows) is in APP_CAUSED, so none of
    them, raised by a user's own code, corroborates that user's hang."""
    from slurm_hooks.decide.trust import APP_CAUSED

    catalogue = json.loads(
        (Path(__file__).parent.parent / "slurm_hooks/data/xid_catalogue.json").read_text()
    )
    app = {
        f"XID{e['xid']}"
        for e in catalogue["xids"]
        if e.get("investigatory") in ("CHECK_APP/CUDA", "WORKFLOW_XID_13", "WORKFLOW_XID_31")
    }
    assert app and app <= APP_CAUSED, sorted(app - APP_CAUSED)
    for code in ("XID32", "XID69"):
        ev = FaultEvent(NOW - timedelta(minutes=1), code, None, "log", None, True, "mallory")
        assert one([hang()], history=NodeHistory((ev,))).kind is DecisionKind.REPORT_JOB
