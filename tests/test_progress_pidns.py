"""A rank in a PID namespace of its own: the writer says which, the watcher
finds the rank's process among the job's own (detect/progress/pidns.py).

The /proc trees here are built by hand (``/proc/PID/ns/pid`` links and
``NSpid`` lines as the kernel writes them, proc(5)); one test makes a real
namespace with unshare(1) and reads back what the writer wrote in it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_hooks.detect.progress import pidns
from slurm_hooks.detect.progress.judge import ProcState
from slurm_hooks.detect.progress.records import parse_line, rank_views
from slurm_hooks.jobside import progress as writer

REPO = Path(__file__).resolve().parent.parent
HOST_NS = 0xEFFFFFFC
CONTAINER_NS = 4026532201
OTHER_NS = 4026532300


def proc_entry(root: Path, pid: int | str, ns: int, nspid: list[int], state: str = "S",
               uid: int | None = None, started_ticks: int = 0) -> None:  # fmt: skip
    """``/proc/<pid>`` as the watcher reads it: ns/pid, status (NSpid), stat."""
    d = root / str(pid)
    (d / "ns").mkdir(parents=True)
    (d / "ns" / "pid").symlink_to(f"pid:[{ns}]")
    (d / "status").write_text(f"Name:\tpython3\nState:\t{state}\nNSpid:\t"
                              + "\t".join(map(str, nspid)) + "\n")  # fmt: skip
    fields = [state] + ["0"] * 18 + [str(started_ticks)] + ["0"] * 30
    (d / "stat").write_text(f"{pid} (python3) " + " ".join(fields) + "\n")
    if uid is not None:
        os.chown(d, uid, uid)


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    root.mkdir()
    proc_entry(root, "self", HOST_NS, [4242])
    # Boot an hour ago: every process here started then (ticks 0).
    (root / "stat").write_text(f"cpu 0 0 0 0\nbtime {int(time.time()) - 3600}\n")
    return root


def view(pid: int, ns: int | None, rank: int = 0):
    ns_field = f" pidns={ns}" if ns is not None else ""
    now = time.time()
    lines = [f"P1 job=7 restart=0 rank={rank} node=n1 pid={pid}{ns_field} step={s} time={now - 60 + s}"
             for s in (0, 1)]  # fmt: skip
    return rank_views([parse_line(x) for x in lines], "7")[rank]


def test_the_namespace_a_record_names_is_parsed_and_kept_per_rank():
    rec = parse_line(f"P1 job=7 restart=0 rank=0 node=n1 pid=1 pidns={CONTAINER_NS} step=3 time=5")
    assert rec is not None and (rec.pid, rec.pidns) == (1, CONTAINER_NS)
    assert parse_line("P1 job=7 restart=0 rank=0 node=n1 pid=1 step=3 time=5").pidns is None
    for bad in ("0", "-4", "x", str(2**63)):
        assert (
            parse_line(f"P1 job=7 restart=0 rank=0 node=n1 pid=1 pidns={bad} step=3 time=5") is None
        )
    assert view(1, CONTAINER_NS).pidns == CONTAINER_NS


def test_a_rank_restarted_in_a_new_container_is_a_new_process():
    # pid 1 in both: only the namespace tells the runs apart.
    lines = [
        f"P1 job=7 restart=0 rank=0 node=n1 pid=1 pidns={CONTAINER_NS} step={s} time={100 + s}"
        for s in range(5)
    ] + [  # fmt: skip
        f"P1 job=7 restart=0 rank=0 node=n1 pid=1 pidns={OTHER_NS} step=0 time=110"
    ]
    v = rank_views([parse_line(x) for x in lines], "7")[0]
    assert (v.pidns, v.step, v.started) == (OTHER_NS, 0, 110.0)


def test_a_containers_rank_is_found_among_the_jobs_own_processes(proc: Path):
    proc_entry(proc, 9001, CONTAINER_NS, [9001, 1], state="T")  # the rank, stopped
    proc_entry(proc, 9000, HOST_NS, [9000])  # unshare, its parent
    proc_entry(proc, 1, HOST_NS, [1])  # init, what pid=1 names on the host
    asked = []

    def job_pids():
        asked.append(1)
        return [9000, 9001]

    local = {0: view(1, CONTAINER_NS)}
    views, states = pidns.rank_processes(local, None, job_pids, proc=str(proc))
    assert views[0].pid == 9001 and states == {0: ProcState.STOPPED}
    assert asked == [1]


def test_a_namespace_none_or_several_of_the_jobs_processes_match_is_unknown_never_another(
    proc: Path,
):
    proc_entry(proc, 9001, CONTAINER_NS, [9001, 1])
    proc_entry(proc, 9002, CONTAINER_NS, [9002, 1])  # impossible in one namespace; a race
    proc_entry(proc, 9003, OTHER_NS, [9003, 5])
    # Another user's process is pid 1 in this namespace, but not the job's.
    proc_entry(proc, 8000, OTHER_NS, [8000, 1])
    local = {0: view(1, CONTAINER_NS, 0), 1: view(1, OTHER_NS, 1)}
    views, states = pidns.rank_processes(local, None, lambda: [9001, 9002, 9003], proc=str(proc))
    assert states == {0: ProcState.UNKNOWN, 1: ProcState.UNKNOWN}
    assert views[1].pid == 1  # not 8000


def test_records_in_the_watchers_namespace_or_without_one_are_read_as_they_are(proc: Path):
    proc_entry(proc, 500, HOST_NS, [500], state="R")

    def job_pids():
        raise AssertionError("Slurm asked for nothing to resolve")

    local = {0: view(500, None, 0), 1: view(500, HOST_NS, 1)}
    views, states = pidns.rank_processes(local, None, job_pids, proc=str(proc))
    assert [views[r].pid for r in (0, 1)] == [500, 500]
    assert states == {0: ProcState.RUNNING, 1: ProcState.RUNNING}


def test_the_resolved_process_must_still_be_the_owners(proc: Path):
    proc_entry(proc, 9001, CONTAINER_NS, [9001, 1], uid=os.getuid())
    local = {0: view(1, CONTAINER_NS)}
    _, states = pidns.rank_processes(local, os.getuid() + 1, lambda: [9001], proc=str(proc))
    assert states == {0: ProcState.GONE}


def test_the_namespace_link_is_read_as_the_kernel_writes_it():
    assert pidns.namespace_of("pid:[4026531836]") == HOST_NS
    for bad in ("pid:[]", "net:[4026531836]", "pid:[12x]", "4026531836"):
        assert pidns.namespace_of(bad) is None
    assert pidns.pid_namespace("self") == os.stat("/proc/self/ns/pid").st_ino


def test_the_writer_names_its_namespace_only_outside_the_hosts(tmp_path, monkeypatch):
    def head(ns):
        monkeypatch.setattr(writer, "_pid_namespace", lambda: ns)
        p = writer.Progress(str(tmp_path / str(ns)), "7", 0, node="n1")
        p.close()
        return parse_line((tmp_path / str(ns) / "7" / "rank0.log").read_text().splitlines()[0])

    assert head(HOST_NS).pidns is None
    assert head(None).pidns is None
    assert head(CONTAINER_NS).pidns == CONTAINER_NS


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1)")
def test_a_writer_in_a_real_pid_namespace_is_found_by_the_watcher(tmp_path):
    code = (
        "import sys, time\n"
        "from slurm_hooks.jobside.progress import Progress\n"
        "p = Progress(sys.argv[1], '7', 0, node='n1')\n"
        "p.step(1)\n"
        "time.sleep(60)\n"
    )
    argv = ["unshare", "--pid", "--fork", "--kill-child"]
    if os.geteuid() != 0:
        argv[1:1] = ["--user", "--map-root-user"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([*argv, "--", sys.executable, "-c", code, str(tmp_path)], env=env)  # noqa: S603
    try:
        log = tmp_path / "7" / "rank0.log"
        deadline = time.monotonic() + 20
        while len(log.read_text().splitlines() if log.exists() else []) < 2:
            if child.poll() is not None:
                pytest.skip(f"unshare could not make a PID namespace here (rc {child.returncode})")
            assert time.monotonic() < deadline, "the writer wrote nothing"
            time.sleep(0.05)
        views = rank_views([parse_line(x) for x in log.read_text().splitlines()], "7")
        v = views[0]
        assert v.pid == 1 and v.pidns not in (None, HOST_NS)
        # The job's processes as Slurm would list them: unshare and its child.
        kids = Path(f"/proc/{child.pid}/task/{child.pid}/children").read_text().split()
        assert len(kids) == 1
        resolved, states = pidns.rank_processes(views, None, lambda: [child.pid, int(kids[0])])
        assert resolved[0].pid == int(kids[0]) != 1
        assert states[0] is ProcState.SLEEPING
    finally:
        child.kill()
        child.wait(10)


# -- the watcher's pass ------------------------------------------------------------------------


def _pass_on(tmp_path: Path, proc: Path, t0: float, now: float, steps: int):
    """A pass on n0 over one rank in a container (pid 1 there, 9001 here),
    its records written ``steps`` steps from ``t0``, one a second."""
    import pwd

    from test_progress import FakeEngine, FakeSlurm, _job

    from slurm_hooks.agent.progress_pass import ProgressPass
    from slurm_hooks.detect.progress.settings import ProgressConfig

    me = pwd.getpwuid(os.getuid()).pw_name
    d = tmp_path / "records" / "4242"
    d.mkdir(parents=True)
    (d / "rank0.log").write_text("".join(
        f"P1 job=4242 restart=0 rank=0 node=n0 pid=1 pidns={CONTAINER_NS} step={s} time={t0 + s}\n"
        for s in range(steps)))  # fmt: skip
    s = ProgressConfig(dir=str(tmp_path / "records"), hang_s=10.0, first_step_allowance_s=0.0,
                       zero_touch=False)  # fmt: skip
    engine = FakeEngine(FakeSlurm(_job(me, nodes="n0", batch="n0")))
    p = ProgressPass(s, "n0", engine, clock=lambda: now, proc=str(proc))
    asked: list[str] = []
    p.step_pids = lambda job, node: asked.append(job) or [9000, 9001]  # type: ignore[method-assign]
    return p, engine, asked


def test_the_pass_judges_a_containers_stopped_rank_by_its_process(tmp_path: Path, proc: Path):
    t0 = time.time() - 200
    (proc / "stat").write_text(f"cpu 0 0 0 0\nbtime {int(t0) - 3600}\n")
    proc_entry(proc, 9000, HOST_NS, [9000], uid=os.getuid())  # unshare
    proc_entry(proc, 9001, CONTAINER_NS, [9001, 1], state="T", uid=os.getuid())
    proc_entry(proc, 1, HOST_NS, [1], uid=os.getuid() + 1)  # init: not the user's
    p, engine, asked = _pass_on(tmp_path, proc, t0, t0 + 100, steps=10)
    p.run()
    [(node, [finding])] = engine.handled
    assert (node, finding.code) == ("n0", "HANG")
    assert finding.values["cause"] == "process stopped (state T)"
    assert asked  # the job's processes, as Slurm lists them


def test_a_containers_rank_that_progresses_costs_no_slurm_call(tmp_path: Path, proc: Path):
    t0 = time.time() - 20
    (proc / "stat").write_text(f"cpu 0 0 0 0\nbtime {int(t0) - 3600}\n")
    proc_entry(proc, 9001, CONTAINER_NS, [9001, 1], state="R", uid=os.getuid())
    p, engine, asked = _pass_on(tmp_path, proc, t0, t0 + 10.5, steps=10)
    for _ in range(3):
        p.run()
    assert not engine.handled and asked == []
