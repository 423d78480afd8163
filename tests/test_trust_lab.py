"""Evidence a user cannot forge (issue 27), on the real lab: an unprivileged
user (``sltest``) does what any user can - backdated records naming pid 1,
a rank that exits, a rank stopped by its owner, a planted symlink, records
naming other jobs and other nodes, flight-recorder dumps that crashed the
pass, XID 13s of the user's own processes, a job name holding rows of
another user's job, a thousand forged stragglers, directories made
under the next job's id, an XID line through ``logger``, an
XID the kernel quotes from a file name the user chose, a
connection cut off in a network namespace of their own, a site check
slowed while the health check runs it, two users' hangs on one node, a
progress directory the user made first, a scratch the user fills - beside a
job of another user (``sltest2``) on the same node.  In each: no node
drained (sinfo), the other user's job untouched (running, restart count 0,
no signal), the owner told (audit).  The real case still drains: a hung rank
whose node's GPU NVML reports lost."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_hooks_lab.hooks import install, wait_drained
from slurm_hooks_lab.lab import TEST_USER, ensure_user

from slurm_hooks.core.errors import LabError
from slurm_hooks.core.reason import parse_reason
from slurm_hooks.detect.probes.commands import run
from slurm_hooks.store.state import StateStore

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

VICTIM_USER = "sltest2"
REPO = Path(__file__).resolve().parent.parent
TRAIN = REPO / "lab/slurm_hooks_lab/train/train.py"
USER_PYTHON = "/usr/bin/python3"
PROGRESS = {"hang_s": 4.0, "first_step_allowance_s": 2.0, "interval_s": 0.5,
            "no_culprit_report_s": 2.0}  # fmt: skip
#: The NVML poll runs once, at the watcher's start: a GPU lost later is found
#: by the progress pass's own look (the trusted evidence under test), not
#: drained as GPU_LOST first.
WATCH = {"nvml_interval_s": 3600.0}


@contextlib.contextmanager
def _rigged(
    lab,
    job_dir: Path,
    progress: dict,
    policy: dict | None = None,
    pdir: Path | None = None,
    prolog: bool = False,
) -> Iterator[tuple]:
    """The hooks installed with ``progress`` (and the prolog with ``prolog``)
    and a watcher on every node; the progress directory made by root
    (1777), or ``pdir`` as it is."""
    ensure_user(VICTIM_USER)
    if pdir is None:
        pdir = job_dir / "progress"
        pdir.mkdir(mode=0o1777)
        os.chmod(pdir, 0o1777)
    hooks = install(lab, grace_s=3.0, progress={**progress, "dir": str(pdir)}, watch=WATCH,
                    policy=policy, prolog=prolog)  # fmt: skip
    try:
        for node in lab.node_names:
            hooks.start_watcher(node)
        yield lab, hooks, pdir
    finally:
        hooks.finish(reconfigure=False)


@pytest.fixture
def rig(fresh_lab, job_dir):
    with _rigged(fresh_lab, job_dir, PROGRESS) as rigged:
        yield rigged


def submit(lab, script: Path, *args: str, user: str = TEST_USER, env=None) -> str:
    res = run(["runuser", "-u", user, "--", "sbatch", "--parsable", *args, str(script)],
              timeout=30, env={**lab.env(), **(env or {})}, cwd=str(script.parent))  # fmt: skip
    return res.stdout.strip().split(";")[0]


def script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)
    return path


def victim(lab, job_dir: Path, node: str) -> tuple[str, Path]:
    """Another user's job on ``node``: records every signal it gets."""
    log = job_dir / f"victim-{node}.log"
    body = (f"trap 'echo USR1 >> {log}' USR1\ntrap 'echo TERM >> {log}; exit 0' TERM\n"
            f"touch {log}\nfor i in $(seq 600); do sleep 1; done\n")  # fmt: skip
    s = script(job_dir / f"victim-{node}.sh", body)
    job = submit(lab, s, "-w", node, "-n1", "--requeue", f"--output={job_dir}/v-{node}.out",
                 user=VICTIM_USER)  # fmt: skip
    lab.wait_job(job, lambda j: j.state == "RUNNING", timeout=60)
    return job, log


def assert_untouched(lab, hooks, victims: list[tuple[str, Path]]) -> None:
    out = run(["sinfo", "-h", "-N", "-o", "%N %T %E"], timeout=30, env=lab.env()).stdout
    for line in out.splitlines():
        name, state = line.split()[:2]
        assert "drain" not in state.lower(), out
        # The ownership rule: a reason counts only on a node out of service
        # (24.11 keeps a resumed node's old reason; 22.05 may show "none").
        node = lab.client().get_node(name)
        assert not (node.drained or node.down), out
    for job, log in victims:
        info = lab.client().get_job(job)
        assert (info.state, info.restart_count) == ("RUNNING", 0), (job, info)
        assert log.read_text() == "", f"victim {job} was signalled: {log.read_text()!r}"
    for n in lab.node_names:
        for e in hooks.audit(n):
            assert e.get("action") not in ("drain", "signal", "requeue", "breaker_trip"), e
            assert e.get("job") not in [j for j, _ in victims], e


def assert_untouched_victims(lab, victims: list[tuple[str, Path]]) -> None:
    for job, log in victims:
        info = lab.client().get_job(job)
        assert (info.state, info.restart_count) == ("RUNNING", 0), (job, info)
        assert log.read_text() == "", f"victim {job} was signalled: {log.read_text()!r}"


def told(hooks, node: str, job: str) -> dict:
    """The owner's alert as audited (job_hang, with the job-only decision beside it)."""
    entries = hooks.audit(node)
    alert = [e for e in entries if e.get("action") == "job_hang" and e.get("job") == job]
    if not alert:
        return {}
    decided = [e for e in entries if e.get("action") == "decision" and e.get("code") == "HANG"
               and str(e.get("component", "")).startswith(f"job:{job}/")]  # fmt: skip
    return {**alert[-1], "decision": decided[-1]["decision"]} if decided else {}


def dump(lab, hooks, pdir: Path, node: str) -> None:
    """What a failing test needs to be read: the audit, the watcher's log, the records."""
    for e in hooks.audit(node):
        print("audit", e)
    log = hooks.node(node).dir / "watch.log"
    print(log.read_text()[-4000:] if log.exists() else "no watch.log")
    for p in sorted(pdir.rglob("*")):
        text = p.read_text(errors="replace")[-400:] if p.is_file() and not p.is_symlink() else ""
        print(p, p.lstat().st_uid, text)


def owners_told_and_nothing_else(lab, hooks, pdir: Path, node: str, owned: list) -> None:
    """Each job's owner told about that job (``report_job``), and nothing
    else: the node in service, every job running with restart count 0, no
    drain, signal or requeue audited.  ``owned``: (job, user) pairs."""
    try:
        for job, user in owned:
            entry = lab.wait_for(lambda j=job: told(hooks, node, j), 60,
                                 what=f"the owner of job {job} told")  # fmt: skip
            assert entry["user"] == user and entry["decision"] == "report_job", entry
    except Exception:
        dump(lab, hooks, pdir, node)
        raise
    state = lab.client().get_node(node)
    assert not (state.drained or state.down), state
    for job, _ in owned:
        info = lab.client().get_job(job)
        assert (info.state, info.restart_count) == ("RUNNING", 0), info
    for e in hooks.audit(node):
        assert e.get("action") not in ("drain", "signal", "requeue", "breaker_trip"), e


# -- forged records --------------------------------------------------------------------------


def test_forged_records_exited_rank_symlink_other_jobs_and_nodes_drain_nothing(rig, job_dir):
    lab, hooks, pdir = rig
    # Two CPUs a node: each attacker job beside one victim job.
    node, exits, other = lab.node_names[0], lab.node_names[1], lab.node_names[2]
    victims = [victim(lab, job_dir, node), victim(lab, job_dir, exits)]
    vjob = victims[0][0]
    forged = job_dir / "forged.txt"  # a root-owned file a symlink points at
    rec = "printf 'P1 job=%s restart=0 rank=%s node=%s pid=%s step=%s time=%s\\n'"
    # Job A: the attack - two backdated records for rank 0 naming pid=1,
    # a symlink to root's file of forged records, records in the other user's
    # job directory, and records naming another node.  Its only rank (pid 1,
    # not its own) reads as a one-node job whose ranks all left after the
    # same step: the step's end (issue 30's judge), so its owner need not be
    # told; what matters is that nothing outside the job happens.
    a = script(
        job_dir / "a.sh",
        f"""
D={pdir}/$SLURM_JOB_ID; mkdir -p $D; now=$(date +%s)
{rec} $SLURM_JOB_ID 0 $SLURMD_NODENAME 1 0 $((now-1100)) >> $D/rank0.log
{rec} $SLURM_JOB_ID 0 $SLURMD_NODENAME 1 1 $((now-1000)) >> $D/rank0.log
ln -s {forged} $D/rank1.log
mkdir -p {pdir}/{vjob}
{rec} {vjob} 0 $SLURMD_NODENAME 1 0 $((now-1100)) >> {pdir}/{vjob}/rank0.log
{rec} {vjob} 0 $SLURMD_NODENAME 1 1 $((now-1000)) >> {pdir}/{vjob}/rank0.log
for i in $(seq 600); do sleep 1; done
""",
    )
    forged.write_text("")
    # Job B: rank 1 records steps, then exits while rank 0 (the batch shell,
    # at the same step) lives on without it.
    b = script(
        job_dir / "b.sh",
        f"""
D={pdir}/$SLURM_JOB_ID; mkdir -p $D
( for s in 0 1 2 3; do {rec} $SLURM_JOB_ID 1 $SLURMD_NODENAME $BASHPID $s $(date +%s.%N) \\
    >> $D/rank1.log; {rec} $SLURM_JOB_ID 0 $SLURMD_NODENAME $$ $s $(date +%s.%N) \\
    >> $D/rank0.log; sleep 0.3; done )
for i in $(seq 600); do sleep 1; done
""",
    )
    # Job C (on a third node): records naming this node's name, a rank of
    # job A, and a job that does not exist.
    c = script(
        job_dir / "c.sh",
        f"""
now=$(date +%s); mkdir -p {pdir}/$SLURM_JOB_ID {pdir}/99999
{rec} $SLURM_JOB_ID 0 {node} 1 0 $((now-1100)) >> {pdir}/$SLURM_JOB_ID/rank0.log
{rec} $SLURM_JOB_ID 0 {node} 1 1 $((now-1000)) >> {pdir}/$SLURM_JOB_ID/rank0.log
{rec} 99999 0 {node} 1 0 $((now-1100)) >> {pdir}/99999/rank0.log
{rec} 99999 0 {node} 1 1 $((now-1000)) >> {pdir}/99999/rank0.log
for i in $(seq 600); do sleep 1; done
""",
    )
    jobs = [submit(lab, a, "-w", node, "-n1", f"--output={job_dir}/a.out"),
            submit(lab, b, "-w", exits, "-n1", f"--output={job_dir}/b.out"),
            submit(lab, c, "-w", other, "-n1", f"--output={job_dir}/c.out")]  # fmt: skip
    try:
        forged.write_text("".join(
            f"P1 job={jobs[0]} restart=0 rank=1 node={node} pid=1 step={s} time={time.time() - 900 + s}\n"
            for s in range(2)))  # fmt: skip
        ja, jb, jc = jobs
        try:
            lab.wait_for(lambda: told(hooks, exits, jb), 60, what="the owner told of job B's hang")
        except Exception:
            dump(lab, hooks, pdir, node)
            dump(lab, hooks, pdir, exits)
            raise
        for job, where in ((ja, node), (jb, exits)):
            entry = told(hooks, where, job)
            if job == ja and not entry:
                continue  # job A's forged rank: the step's end, nobody told
            assert entry["user"] == TEST_USER and entry["decision"] == "report_job", entry
            assert "process gone" in entry["why"] and "no node drained" in entry["why"], entry
            assert entry["provenance"] == ["user_file", "user_process"], entry
        time.sleep(3 * PROGRESS["interval_s"] + 1)  # a few more passes over job C's records
        assert_untouched(lab, hooks, victims)
        for n in lab.node_names:
            assert not [e for e in hooks.audit(n) if e.get("job") in (jc, "99999")], n
        # Every job of the attacker still runs: nothing was requeued (no opt-in).
        for job in jobs:
            info = lab.client().get_job(job)
            assert (info.state, info.restart_count) == ("RUNNING", 0), info
    finally:
        run(["scancel", *jobs, *[j for j, _ in victims]], timeout=30, env=lab.env(), check=False)


# -- a rank stopped by its owner; the real case ------------------------------------------------


def train(lab, job_dir: Path, pdir: Path, *extra: str) -> str:
    # The job runs as the unprivileged user: the system's python (numpy), and
    # the progress writer (standard library only) from this checkout.
    env = {"PYTHON": USER_PYTHON, "PYTHONPATH": str(REPO), "TRAIN_PY": str(TRAIN),
           "CKPT_DIR": str(job_dir / "ckpt"), "SLURM_HOOKS_PROGRESS_DIR": str(pdir)}  # fmt: skip
    s = TRAIN.with_name("train.sbatch")
    argv = ["runuser", "-u", TEST_USER, "--", "sbatch", "--parsable", "-N2", *extra,
            f"--output={job_dir}/train.out", f"--chdir={job_dir}", str(s), "--backend", "numpy",
            "--collective", "file", "--max-steps", "60", "--step-seconds", "0.2",
            "--ckpt-every", "1000"]  # fmt: skip
    return run(argv, timeout=30, env={**lab.env(), **env}).stdout.strip()


def last_record(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines() if path.exists() else []
    return dict(tok.split("=", 1) for tok in lines[-1].split()[1:]) if lines else {}


def _stop_rank1(lab, pdir: Path, job: str) -> tuple[str, int]:
    f = pdir / job / "rank1.log"
    lab.wait_for(lambda: int(last_record(f).get("step", 0)) >= 5, 90, what="training progress")
    rec = last_record(f)
    # The owner stops their own rank: what any user can do.
    run(["runuser", "-u", TEST_USER, "--", "kill", "-STOP", rec["pid"]], timeout=10)
    return rec["node"], int(rec["pid"])


def _user_python() -> None:
    res = run(["runuser", "-u", TEST_USER, "--", USER_PYTHON, "-c", "import numpy"], timeout=30,
              check=False)  # fmt: skip
    if not res.ok:
        pytest.skip(f"{USER_PYTHON} with numpy is not usable by {TEST_USER}")


def test_rank_stopped_by_its_owner_requeues_only_that_job_when_opted_in(rig, job_dir):
    lab, hooks, pdir = rig
    _user_python()
    job = train(lab, job_dir, pdir, "--comment", "slurm-hooks:requeue-on-hang")
    victims: list[tuple[str, Path]] = []
    pid = 0
    try:
        info = lab.wait_job(job, lambda j: j.state == "RUNNING", timeout=60)
        from slurm_hooks.core.hostlist import expand

        victims = [victim(lab, job_dir, n) for n in expand(info.nodes)]
        culprit, pid = _stop_rank1(lab, pdir, job)
        lab.wait_for(lambda: any(e.get("action") == "job_requeue" and e.get("job") == job
                                 for e in hooks.audit(culprit)), 60, what="the job's requeue")  # fmt: skip
        # The alert is audited just after the engine's own entries (the
        # requeue): wait for it rather than race it.
        entry = lab.wait_for(lambda: told(hooks, culprit, job), 30,
                             what="the owner's alert as audited")  # fmt: skip
        assert entry["decision"] == "requeue_job" and "process stopped" in entry["why"], entry
        req = [e for e in hooks.audit(culprit) if e.get("action") == "job_requeue"][-1]
        assert req["outcome"] == "requeued" and req["user"] == TEST_USER, req
        lab.wait_for(lambda: lab.client().get_job(job).restart_count >= 1, 60, what="requeue")
        assert_untouched(lab, hooks, victims)
    finally:
        if pid and _alive(pid):
            os.kill(pid, signal.SIGKILL)
        run(["scancel", job, *[j for j, _ in victims]], timeout=30, env=lab.env(), check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def test_hung_rank_with_its_gpu_lost_drains_its_node_and_requeues_the_job(rig, job_dir):
    """The real case: trusted evidence (NVML: the rank's node lost a GPU) beside
    the hang -> that node drained with HANG, the job requeued, the other node kept."""
    lab, hooks, pdir = rig
    _user_python()
    job = train(lab, job_dir, pdir)
    try:
        lab.wait_job(job, lambda j: j.state == "RUNNING", timeout=60)
        f = pdir / job / "rank1.log"
        lab.wait_for(lambda: int(last_record(f).get("step", 0)) >= 5, 90, what="progress")
        culprit = last_record(f)["node"]
        hooks.lose_gpu(culprit, 0)
        _stop_rank1(lab, pdir, job)
        reason = parse_reason(wait_drained(lab, culprit, timeout=30))
        assert reason.code == "HANG" and reason.component == f"job:{job}/rank1", reason
        assert "gpu0 (GPU_IS_LOST) lost" in reason.text, reason
        lab.wait_for(lambda: lab.client().get_job(job).restart_count >= 1, 60, what="requeue")
        others = [n for n in lab.node_names if n != culprit]
        assert not any(lab.client().get_node(n).drained for n in others)
        # The alert is audited just after the engine's own entries (the
        # requeue): wait for it rather than race it.
        entry = lab.wait_for(lambda: told(hooks, culprit, job), 30,
                             what="the owner's alert as audited")  # fmt: skip
        assert entry["decision"] == "drain" and "nvml" in entry["provenance"], entry
    finally:
        run(["scancel", job], timeout=30, env=lab.env(), check=False)


# -- a job that never imports slurm-hooks (zero-touch signals) ---------------------------------

#: Two ranks work 6 s (a core each), then wait for their peers the way a
#: blocking collective does (asleep), each having said where it runs.
PLAIN_JOB = """#SBATCH -N2
#SBATCH --ntasks-per-node=1
srun {python} -c '
import os, time
end = time.time() + 6
while time.time() < end:
    pass
with open("{out}/rank%s" % os.environ["SLURM_PROCID"], "w") as f:
    f.write(os.environ["SLURMD_NODENAME"] + " " + str(os.getpid()))
while True:
    time.sleep(0.2)
'
"""


def test_a_plain_job_without_records_stopped_by_its_owner_is_requeued_from_its_processes(
    rig, job_dir
):
    """Zero-touch: no records, no import of slurm-hooks.  The watcher finds
    the job's ranks from Slurm's listpids, sees them idle and rank 1
    stopped: the owner's doing, so the job (opted in) is requeued alone and
    no node is drained."""
    lab, hooks, pdir = rig
    out = job_dir / "plain"
    out.mkdir(mode=0o777)
    os.chmod(out, 0o777)
    s = script(job_dir / "plain.sh", PLAIN_JOB.format(python=USER_PYTHON, out=out))
    job = submit(lab, s, "--comment", "slurm-hooks:requeue-on-hang", "--requeue",
                 f"--output={job_dir}/plain.out")  # fmt: skip
    pid = 0
    try:
        lab.wait_job(job, lambda j: j.state == "RUNNING", timeout=60)
        lab.wait_for(lambda: (out / "rank1").exists() and (out / "rank1").read_text(), 60,
                     what="rank 1 done working")  # fmt: skip
        culprit, pid_text = (out / "rank1").read_text().split()
        pid = int(pid_text)
        run(["runuser", "-u", TEST_USER, "--", "kill", "-STOP", str(pid)], timeout=10)
        lab.wait_for(lambda: any(e.get("action") == "job_requeue" and e.get("job") == job
                                 for e in hooks.audit(culprit)), 60, what="the job's requeue")  # fmt: skip
        # The alert is audited just after the engine's own entries (the
        # requeue): wait for it rather than race it.
        entry = lab.wait_for(lambda: told(hooks, culprit, job), 30,
                             what="the owner's alert as audited")  # fmt: skip
        assert entry["decision"] == "requeue_job", entry
        assert "rank 1 on" in entry["why"] and "process stopped" in entry["why"], entry
        assert entry["provenance"] == ["user_process"], entry
        assert_untouched(lab, hooks, [])
    except AssertionError:
        dump(lab, hooks, pdir, culprit if pid else lab.node_names[0])
        raise
    finally:
        if pid and _alive(pid):
            os.kill(pid, signal.SIGKILL)
        run(["scancel", job], timeout=30, env=lab.env(), check=False)


# -- an XID line through logger ----------------------------------------------------------------


class SyslogStandIn:
    """What a syslog daemon does with ``logger`` (RFC 3164 over a datagram
    socket): it writes ``stamp host tag: message`` to the kernel-log file the
    node's XID source reads.  There is no syslog daemon on the lab host."""

    def __init__(self, sock: Path, target: Path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(sock))
        os.chmod(sock, 0o666)
        self.target = target
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                data = self.sock.recv(8192)
            except OSError:
                return
            text = data.decode(errors="replace")
            if text.startswith("<") and ">" in text:
                text = text.split(">", 1)[1]
            self.lines.append(text)
            with open(self.target, "a") as fh:
                fh.write(text.rstrip("\n") + "\n")

    def close(self) -> None:
        self.sock.close()


def no_xid_then_a_real_one_drains(lab, hooks, node: str, victims) -> None:
    """After a user's XID-looking line reached ``node``'s kernel log: nothing
    happened; then the watchers' kernel-log source is shown live: a line of
    the driver's own form drains (on an idle node: nothing to evacuate)."""
    time.sleep(3)  # the watcher follows the file every 50 ms
    assert_untouched(lab, hooks, victims)
    assert not [e for e in hooks.audit(node) if str(e.get("code", "")).startswith("XID")]
    idle = lab.node_names[2]
    hooks.inject_xid(idle, 79)
    assert parse_reason(wait_drained(lab, idle, timeout=30)).code.startswith("XID")
    assert_untouched_victims(lab, victims)


def test_a_users_logger_xid_line_drains_nothing(rig, job_dir):
    lab, hooks, _ = rig
    node = lab.node_names[0]
    victims = [victim(lab, job_dir, node)]
    sock = job_dir / "log.sock"
    stand_in = SyslogStandIn(sock, hooks.node(node).kern_log)
    xid = "NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus."
    try:
        res = run(["runuser", "-u", TEST_USER, "--", "logger", "--rfc3164", "-p", "kern.err",
                   "--socket", str(sock), xid], timeout=10)  # fmt: skip
        assert res.ok
        lab.wait_for(lambda: stand_in.lines, 10, what="the syslog line")
        assert xid in hooks.node(node).kern_log.read_text()
        # The kernel's own record device is not the user's to write.
        kmsg = run(["runuser", "-u", TEST_USER, "--", "sh", "-c", f"echo '{xid}' > /dev/kmsg"],
                   timeout=10, check=False)  # fmt: skip
        assert kmsg.rc != 0
        no_xid_then_a_real_one_drains(lab, hooks, node, victims)
    finally:
        stand_in.close()
        run(["scancel", *[j for j, _ in victims]], timeout=30, env=lab.env(), check=False)


# -- a flight-recorder dump that crashed the pass -----------------------------------------

#: A rank that exits while the batch shell (rank 0) lives on at the same
#: step: a stall its owner is told of (job B of the forged-records test).
EXITED_RANK = """
D={pdir}/$SLURM_JOB_ID; mkdir -p $D
( for s in 0 1 2 3; do {rec} $SLURM_JOB_ID 1 $SLURMD_NODENAME $BASHPID $s $(date +%s.%N) \\
    >> $D/rank1.log; {rec} $SLURM_JOB_ID 0 $SLURMD_NODENAME $$ $s $(date +%s.%N) \\
    >> $D/rank0.log; sleep 0.3; done )
{extra}
for i in $(seq 600); do sleep 1; done
"""
RECORD = "printf 'P1 job=%s restart=0 rank=%s node=%s pid=%s step=%s time=%s\\n'"
#: The user's flight-recorder dumps: a pickle whose numbers are past the
#: 4,300 digits ``str()`` turns into text (plain ``pickle.dumps``).
HUGE_DUMP = (
    USER_PYTHON + " -c 'import pickle, sys; big = 1 << 20000; "
    'open(sys.argv[1], "wb").write(pickle.dumps({{"version": big, "pg_status": '
    '{{"0": {{"last_enqueued_collective": big}}}}}}, protocol=4))\' $D/fr_{n}'
)


def test_a_users_flight_recorder_dump_never_stops_the_pass_for_others(fresh_lab, job_dir):
    """sltest's stalled job leaves dumps whose numbers Python cannot print;
    sltest2's job beside it stalls after.  Both owners are told (the pass
    goes on past the refused dump); nothing is drained."""
    progress = {**PROGRESS, "flight_recorder_path": f"{job_dir}/progress/{{job}}/fr_*"}
    with _rigged(fresh_lab, job_dir, progress) as (lab, hooks, pdir):
        node = lab.node_names[0]
        dumps = "\n".join(HUGE_DUMP.format(n=n) for n in range(2))
        bad = script(job_dir / "bad.sh",
                     EXITED_RANK.format(pdir=pdir, rec=RECORD, extra=dumps))  # fmt: skip
        plain = script(job_dir / "plain.sh", EXITED_RANK.format(pdir=pdir, rec=RECORD, extra=""))
        jobs = [submit(lab, bad, "-w", node, "-n1", f"--output={job_dir}/bad.out")]
        try:
            lab.wait_for(lambda: (pdir / jobs[0] / "fr_1").exists(), 30, what="the dumps")
            jobs.append(submit(lab, plain, "-w", node, "-n1", f"--output={job_dir}/plain.out",
                               user=VICTIM_USER))  # fmt: skip
            owners_told_and_nothing_else(
                lab, hooks, pdir, node, list(zip(jobs, (TEST_USER, VICTIM_USER), strict=True))
            )
            log = (hooks.node(node).dir / "watch.log").read_text()
            assert "an integer of 20001 bits" in log, log[-2000:]
        finally:
            run(["scancel", *jobs], timeout=30, env=lab.env(), check=False)


def test_two_users_hangs_on_one_node_drain_nothing(fresh_lab, job_dir):
    """Two accounts that agree (sltest and sltest2) each run a job on n1
    whose records say a rank exited: two users' hangs name n1.  Each is
    evidence its user wrote, so at the defaults each owner is told about
    their own job and nothing else happens: n1 stays in service, both jobs
    run on (``[policy] cross_user_hangs`` would let them corroborate each
    other; it is off unless a site turns it on)."""
    with _rigged(fresh_lab, job_dir, PROGRESS) as (lab, hooks, pdir):
        node = lab.node_names[0]
        body = EXITED_RANK.format(pdir=pdir, rec=RECORD, extra="")
        jobs: list[str] = []
        try:
            for user in (TEST_USER, VICTIM_USER):
                s = script(job_dir / f"hang-{user}.sh", body)
                jobs.append(submit(lab, s, "-w", node, "-n1", f"--output={job_dir}/{user}.out",
                                   user=user))  # fmt: skip
            owners_told_and_nothing_else(
                lab, hooks, pdir, node, list(zip(jobs, (TEST_USER, VICTIM_USER), strict=True))
            )
        finally:
            run(["scancel", *jobs], timeout=30, env=lab.env(), check=False)


#: 200 ranks of one job on one node, every 25th (and rank 7) slower than
#: the rest, a step each 0.1 s: what any user can write into their records.
FORGED_STRAGGLERS = (
    USER_PYTHON
    + """ - <<'EOF'
import os, time
d = os.path.join({pdir!r}, os.environ["SLURM_JOB_ID"]); os.makedirs(d, exist_ok=True)
job, node, pid = os.environ["SLURM_JOB_ID"], os.environ["SLURMD_NODENAME"], os.getpid()
files = [open(os.path.join(d, "rank%d.log" % r), "a", buffering=1) for r in range(200)]
for step in range(100000):
    for r, f in enumerate(files):
        busy = 0.45 if r == 7 else 0.39 if r % 25 == 0 else 0.3
        f.write("P1 job=%s restart=0 rank=%d node=%s pid=%d step=%d time=%.6f busy=%g\\n"
                % (job, r, node, pid, step, time.time(), busy))
    time.sleep(0.1)
EOF
"""
)


def test_a_thousand_forged_stragglers_cost_one_report_and_keep_the_nodes_history(rig, job_dir):
    """sltest's job writes records for 200 ranks on n1, nine of them slow
    (as many as it likes: the records are sltest's to write).  sltest is
    told once, about the slowest (rank 7), not once a rank, and n1's fault
    history gains one SLOW entry; sltest2's job beside it is untouched and
    n1 stays in service."""
    lab, hooks, pdir = rig
    node = lab.node_names[0]
    victims = [victim(lab, job_dir, node)]
    s = script(job_dir / "stragglers.sh", FORGED_STRAGGLERS.format(pdir=str(pdir)))
    job = submit(lab, s, "-w", node, "-n1", f"--output={job_dir}/stragglers.out")

    def reports() -> list[dict]:
        return [e for e in hooks.audit(node)
                if e.get("action") == "job_straggler" and e.get("job") == job]  # fmt: skip

    try:
        try:
            [first] = lab.wait_for(reports, 60, what="the straggler report")
        except Exception:
            dump(lab, hooks, pdir, node)
            raise
        assert (first["user"], first["rank"]) == (TEST_USER, 7), first
        assert first["ranks"] == [0, 7, 25, 50, 75, 100, 125, 150, 175], first
        time.sleep(3)  # six more passes (interval 0.5 s), the ranks still slow
        assert len(reports()) == 1
        faults = StateStore(hooks.node(node).state_dir).read_node(node).get("faults", [])
        assert [f["code"] for f in faults] == ["SLOW"], faults
        assert_untouched_victims(lab, victims)
        state = lab.client().get_node(node)
        assert not (state.drained or state.down), state
    finally:
        run(["scancel", job, *[j for j, _ in victims]], timeout=30, env=lab.env(), check=False)


#: A job of sltest2's writing progress records with the job-side writer,
#: a step each 0.2 s (the system's python, the writer from this checkout).
JOBSIDE_WRITER = (
    USER_PYTHON + " -c 'import time\n"
    "from slurm_hooks.jobside.progress import Progress\n"
    "p = Progress.from_env()\n"
    "for i in range(1, 3000): p.step(i); time.sleep(0.2)'\n"
)


def test_a_directory_a_user_made_under_the_next_jobs_id_costs_that_job_nothing(fresh_lab, job_dir):
    """Job ids come in order: sltest makes the progress directories of the
    next ids (anyone may write, a FIFO where rank 0's file goes) before
    sltest2 submits.  sltest2's job starts and writes its records in a
    directory of its own (the prolog moved sltest's aside); before, its
    writer waited on the FIFO for ever."""
    with _rigged(fresh_lab, job_dir, PROGRESS, prolog=True) as (lab, hooks, pdir):
        _next_jobs_directories(lab, hooks, pdir, job_dir)


def _next_jobs_directories(lab, hooks, pdir: Path, job_dir: Path) -> None:
    node = lab.node_names[0]
    probe = submit(lab, script(job_dir / "probe.sh", "true\n"), "-w", node, "-n1",
                   f"--output={job_dir}/probe.out")  # fmt: skip
    for n in range(int(probe) + 1, int(probe) + 4):
        d = pdir / str(n)
        run(["runuser", "-u", TEST_USER, "--", "mkdir", "-m", "0777", str(d)], timeout=10)
        run(["runuser", "-u", TEST_USER, "--", "mkfifo", str(d / "rank0.log")], timeout=10)
    env = {"PYTHONPATH": str(REPO), "SLURM_HOOKS_PROGRESS_DIR": str(pdir)}
    job = submit(lab, script(job_dir / "writer.sh", JOBSIDE_WRITER), "-w", node, "-n1",
                 f"--output={job_dir}/writer.out", user=VICTIM_USER, env=env)  # fmt: skip
    try:
        assert int(probe) < int(job) < int(probe) + 4
        f = pdir / job / "rank0.log"
        try:
            lab.wait_for(lambda: f.is_file() and int(last_record(f).get("step", 0)) >= 3, 60,
                         what="sltest2's records")  # fmt: skip
        except Exception:
            dump(lab, hooks, pdir, node)
            raise
        assert f.stat().st_uid == (pdir / job).stat().st_uid != pdir.stat().st_uid
        aside = [p for p in pdir.iterdir() if p.name.startswith(f".untrusted-{job}-")]
        assert len(aside) == 1 and (aside[0] / "rank0.log").is_fifo()
        assert lab.client().get_job(job).state == "RUNNING"
    finally:
        run(["scancel", job, probe], timeout=30, env=lab.env(), check=False)


def test_a_progress_directory_a_user_made_first_is_taken_from_them(fresh_lab, job_dir):
    """sltest makes the progress directory before any watcher runs (as a job
    that ran first could, in /dev/shm) and so owns it: the owner of a
    directory can rename every entry in it.  The watcher makes it root's at
    its start and moves sltest's aside (kept); sltest then cannot move
    sltest2's job directory out of it, and sltest2's stalled job is
    reported to sltest2; nothing is drained."""
    shm = job_dir / "shm"
    shm.mkdir()
    os.chmod(shm, 0o1777)
    pdir = shm / "progress"
    run(["runuser", "-u", TEST_USER, "--", "mkdir", "-m", "0777", str(pdir)], timeout=10)
    users = pdir.stat().st_uid
    assert users != 0
    with _rigged(fresh_lab, job_dir, PROGRESS, pdir=pdir) as (lab, hooks, _):
        node = lab.node_names[0]
        st = pdir.lstat()
        assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o1777)
        aside = [p for p in shm.iterdir() if p.name.startswith("progress.untrusted-")]
        assert [p.stat().st_uid for p in aside] == [users], aside
        s = script(job_dir / "stall.sh", EXITED_RANK.format(pdir=pdir, rec=RECORD, extra=""))
        job = submit(lab, s, "-w", node, "-n1", f"--output={job_dir}/stall.out", user=VICTIM_USER)
        try:
            lab.wait_for(lambda: (pdir / job / "rank0.log").exists(), 30, what="the records")
            moved = run(["runuser", "-u", TEST_USER, "--", "mv", str(pdir / job), str(shm / "x")],
                        timeout=10, check=False)  # fmt: skip
            assert not moved.ok and (pdir / job).is_dir()
            owners_told_and_nothing_else(lab, hooks, pdir, node, [(job, VICTIM_USER)])
        finally:
            run(["scancel", job], timeout=30, env=lab.env(), check=False)


# -- XID 13 from a user's own code --------------------------------------------------------


def test_a_users_own_xid13s_on_one_gpu_stay_theirs(rig, job_dir):
    """XID 13 (graphics engine exception) is what a user's own kernel
    raises, as often as they like.  The driver names three processes of
    sltest's job on GPU 1 of n1, where sltest2's job runs too (no GPU here:
    the lab writes the driver's lines, naming the real processes).  Nothing
    is drained, nothing of sltest2's touched.  When the driver then names
    sltest2's process on the same GPU, two users' code saw it fail: n1 is
    drained for the GPU."""
    lab, hooks, _ = rig
    node = lab.node_names[0]
    victims = [victim(lab, job_dir, node)]
    pids = job_dir / "pids"
    s = script(job_dir / "cuda.sh",
               f"for i in 1 2 3; do sleep 600 & echo $! >> {pids}; done\nwait\n")  # fmt: skip
    mine = submit(lab, s, "-w", node, "-n1", f"--output={job_dir}/cuda.out")
    log = hooks.node(node).dir / "watch.log"

    def decided() -> list[str]:
        text = log.read_text() if log.exists() else ""
        return [line for line in text.splitlines() if "decision node=" in line and "XID13" in line]

    try:
        lab.wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 3, 60,
                     what="the job's processes")  # fmt: skip
        for n, pid in enumerate(pids.read_text().split(), 1):
            assert os.stat(f"/proc/{pid}").st_uid == ensure_user(TEST_USER).pw_uid
            hooks.inject_xid(node, 13, gpu=1, pid=int(pid), name="python3")
            # The audit keeps one entry for repeats of a log decision; the
            # watcher's log has each.
            lab.wait_for(lambda n=n: len(decided()) >= n, 30, what=f"decision {n} on XID 13")
        assert "kind=log" in decided()[-1] and "1 user(s)" in decided()[-1], decided()
        assert_untouched(lab, hooks, victims)
        # The victim's own batch script (slurmd keeps it as job<id>/slurm_script,
        # the id 0-padded): the oldest of sltest2's scripts on the host may be an
        # earlier test's, on another node, gone before the watcher reads its owner.
        vid = victims[0][0]
        theirs = run(["pgrep", "-u", VICTIM_USER, "-f", f"job0*{vid}/slurm_script"], timeout=10)
        other = int(theirs.stdout.split()[0])
        hooks.inject_xid(node, 13, gpu=1, pid=other, name="python3")
        try:
            ours = parse_reason(wait_drained(lab, node, timeout=30))
        except LabError as exc:  # say what the watcher made of it
            alive = os.path.exists(f"/proc/{other}")
            raise AssertionError(f"{exc}; pid {other} alive={alive}; {decided()[-2:]}") from exc
        assert (ours.code, ours.component) == ("XID13", "gpu1")
    finally:
        run(["scancel", mine, *[j for j, _ in victims]], timeout=30, env=lab.env(), check=False)


# -- a job name that holds rows of another user's job ------------------------------------


def test_a_job_name_naming_another_users_job_on_a_faulty_node_moves_only_its_own(rig, job_dir):
    """squeue prints a job's name as its user wrote it, newlines and all.
    sltest's job on n1 is named so that the rows after its own say
    sltest2's job (on n2) runs on n1 too; then n1 really fails (XID 79).
    Only sltest's own job is evacuated; sltest2's is not signalled,
    requeued or named in any audit entry."""
    lab, hooks, _ = rig
    faulty, other = lab.node_names[0], lab.node_names[1]
    victims = [victim(lab, job_dir, other)]
    vid = victims[0][0]
    part = lab.client().get_job(vid).partition or ""
    # The row as the listing's format was (id user state nodes batch
    # partition count name), and as it is now (no name).
    rows = [f"{vid}\x1f{VICTIM_USER}\x1fRUNNING\x1f{faulty}\x1f{faulty}\x1f{part}\x1f1{tail}"
            for tail in ("\x1fy", "")]  # fmt: skip
    name = "x\n" + "\n".join(rows)
    s = script(job_dir / "named.sh", "sleep 600\n")
    mine = submit(lab, s, "-w", faulty, "-n1", f"--job-name={name}", f"--output={job_dir}/n.out")
    try:
        lab.wait_job(mine, lambda j: j.state == "RUNNING", timeout=60)
        shown = run(["squeue", "-h", "-j", mine, "-o", "%j"], timeout=30, env=lab.env()).stdout
        assert f"{vid}\x1f{VICTIM_USER}" in shown, "Slurm kept the name's newlines"
        hooks.inject_xid(faulty, 79)
        assert parse_reason(wait_drained(lab, faulty, timeout=30)).code == "XID79"
        lab.wait_for(lambda: [e for e in hooks.audit(faulty)
                              if e.get("action") == "signal" and e.get("job") == mine],
                     30, what="the signal to the job on the faulty node")  # fmt: skip
        time.sleep(4)  # past the 3 s grace: any requeue has happened
        assert_untouched_victims(lab, victims)
        assert not lab.client().get_node(other).drained
        for n in lab.node_names:
            assert not [e for e in hooks.audit(n) if e.get("job") == vid], n
    finally:
        run(["scancel", mine, *[j for j, _ in victims]], timeout=30, env=lab.env(), check=False)


# -- an XID in a kernel record that quotes the user's words --------------------------------

#: The user's whole part: execve() with an empty argv, from plain Python.
#: Linux 5.18+ (fs/exec.c) then logs at kernel facility, once a boot,
#: ``process '%s' launched '%s' with NULL argv: empty string added`` with
#: the file name the user chose.
EXEC_NULL_ARGV = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
none = (ctypes.c_char_p * 1)(None)
libc.execve(sys.argv[1].encode(), none, none)
sys.exit("execve: errno %d" % ctypes.get_errno())
"""
QUOTED_XID = "NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus."


def _kmsg_null_argv() -> str | None:
    """The kernel's NULL-argv record of this boot that quotes an XID, as
    ``/dev/kmsg`` gives it (``prio,seq,usec,-;message``), if there is one."""
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    found = None
    try:
        while True:
            try:
                rec = os.read(fd, 8192).decode(errors="replace")
            except BlockingIOError:
                return found
            except BrokenPipeError:  # overwritten under us: read on
                continue
            if "with NULL argv" in rec and QUOTED_XID in rec:
                found = rec.split("\n", 1)[0]
    finally:
        os.close(fd)


def test_an_xid_the_kernel_quotes_from_a_users_file_name_drains_nothing(rig, job_dir):
    lab, hooks, _ = rig
    node = lab.node_names[0]
    victims = [victim(lab, job_dir, node)]
    try:
        if _kmsg_null_argv() is None:
            # The user makes the kernel write it: a file of theirs named
            # as an XID, run with no arguments.
            home = job_dir / "exec"
            home.mkdir(mode=0o777)
            os.chmod(home, 0o777)
            target = home / QUOTED_XID
            run(["runuser", "-u", TEST_USER, "--", "cp", "/bin/true", str(target)], timeout=10)
            res = run(["runuser", "-u", TEST_USER, "--", USER_PYTHON, "-c", EXEC_NULL_ARGV,
                       str(target)], timeout=10, check=False)  # fmt: skip
            assert res.ok, res.stderr
        record = _kmsg_null_argv()
        if record is None:
            pytest.skip("the kernel's once-a-boot NULL-argv warning was used by another program")
        assert int(record.split(",", 1)[0]) >> 3 == 0, record  # the kernel's own facility
        # The node's kernel log gets the record as rsyslog writes kern.log.
        head, message = record.split(";", 1)
        usec = int(head.split(",")[2])
        line = f"{time.strftime('%b %e %H:%M:%S')} {node} kernel: [{usec / 1e6:12.6f}] {message}"
        with open(hooks.node(node).kern_log, "a") as fh:
            fh.write(line + "\n")
        no_xid_then_a_real_one_drains(lab, hooks, node, victims)
    finally:
        run(["scancel", *[j for j, _ in victims]], timeout=30, env=lab.env(), check=False)


# -- a health check slowed by what users do --------------------------------------------------

#: The site check a user slows (a process walk over thousands of their
#: processes, a statvfs on the NFS mount their job's I/O swamps, an admin's
#: command that reads their files), played by a command that says it has
#: started and then waits until the test lets it end.
SLOW_SITE = """
[checks.site]
timeout_s = 50
[[site_checks]]
name = "slowed"
kind = "command"
argv = ["/bin/sh", "-c", "touch {started}; while [ ! -e {release} ]; do sleep 0.1; done"]
timeout_s = 50
"""


def test_an_xid_drains_while_a_health_check_waits_in_a_slow_site_check(rig, job_dir):
    """The watcher's XID scan takes the node's detect lock; the health check
    holds it only for its own XID part and for acting, never across the
    site checks.  While the health check waits in a site check, an XID 79
    on the node drains it (sinfo) before that check ends."""
    lab, hooks, _ = rig
    node = lab.node_names[0]
    started, release = job_dir / "site.started", job_dir / "site.release"
    hooks.add_config(node, SLOW_SITE.format(started=started, release=release))
    rc: list[int] = []
    check = threading.Thread(target=lambda: rc.append(
        lab.run_on_node(node, [str(hooks.shims["healthcheck"])], timeout=60).rc))  # fmt: skip
    check.start()
    try:
        lab.wait_for(started.exists, 30, what="the health check in its site check")
        hooks.inject_xid(node, 79, gpu=1)
        reason = parse_reason(wait_drained(lab, node, timeout=15))
        assert reason.code == "XID79"
        assert check.is_alive() and not release.exists()
    finally:
        release.touch()
        check.join(60)
    assert rc == [0]  # its own XID part ran before the XID was written; the site check passed


# -- what a user fills on the node ------------------------------------------------------------


@contextlib.contextmanager
def small_scratch(path: Path, size: str = "64m") -> Iterator[Path]:
    """A tmpfs of ``size`` at ``path`` (1777, like /scratch), unmounted after."""
    path.mkdir()
    res = run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=1777", "--", "tmpfs", str(path)],
              timeout=30, check=False)  # fmt: skip
    if not res.ok:
        pytest.skip(f"cannot mount a tmpfs here: {(res.stderr or res.stdout).strip()!r}")
    try:
        yield path
    finally:
        run(["umount", "-l", "--", str(path)], timeout=30, check=False)


def test_a_scratch_a_user_fills_drains_the_node_but_moves_no_ones_job(rig, job_dir):
    """sltest's job fills n1's scratch (64 MiB, the profile asks for 30 MiB
    free) while sltest2's job runs there.  The health check drains n1 for
    SCRATCH_FULL, as the site asked (no new job lands there), but no job on
    it is signalled or requeued: not sltest2's, not even sltest's.  Once
    sltest removes the file, the next health check resumes n1."""
    lab, hooks, _ = rig
    node = lab.node_names[0]
    with small_scratch(job_dir / "scratch") as scratch:
        hooks.add_config(node, f'[profiles.default]\nscratch_path = "{scratch}"\n'
                               "scratch_min_free_gb = 0.03\n")  # fmt: skip
        victims = [victim(lab, job_dir, node)]
        filler = script(job_dir / "fill.sh",
                        f"dd if=/dev/zero of={scratch}/mine bs=1M count=50 2>/dev/null\n"
                        f"touch {job_dir}/filled\nsleep 600\n")  # fmt: skip
        own = submit(lab, filler, "-w", node, "-n1", f"--output={job_dir}/fill.out")
        try:
            lab.wait_for((job_dir / "filled").exists, 30, what="the scratch filled")
            rc = lab.run_on_node(node, [str(hooks.shims["healthcheck"])], timeout=60).rc
            assert rc == 1
            assert parse_reason(wait_drained(lab, node)).code == "SCRATCH_FULL"
            time.sleep(5)  # past the grace (3 s) an evacuation would have taken
            assert_untouched_victims(lab, victims)
            info = lab.client().get_job(own)
            assert (info.state, info.restart_count) == ("RUNNING", 0), info
            for e in hooks.audit(node):
                assert e.get("action") not in ("signal", "requeue"), e
            # sltest cleans up: the next health check finds every check
            # passing, which is this drain's acceptance; n1 is back.
            run(["runuser", "-u", TEST_USER, "--", "rm", "--", f"{scratch}/mine"], timeout=10)
            rc = lab.run_on_node(node, [str(hooks.shims["healthcheck"])], timeout=60).rc
            state = lab.client().get_node(node)
            assert rc == 0 and not (state.drained or state.down), state
            assert [e["code"] for e in hooks.audit(node) if e.get("action") == "resume"] == [
                "SCRATCH_FULL"
            ]
            assert_untouched_victims(lab, victims)
        finally:
            run(["scancel", own, *[j for j, _ in victims]], timeout=30, env=lab.env(), check=False)


def test_a_scratch_drain_an_admin_resumed_is_closed_and_the_next_one_drains_again(rig, job_dir):
    """sltest fills n1's scratch: drained for SCRATCH_FULL.  An admin resumes
    n1 by hand (Slurm 24.11 and later keep the old reason on it); sltest
    cleans up, and the next health check closes the incident instead of
    leaving it open for ever.  Filled again: a new incident, drained again."""
    lab, hooks, _ = rig
    node = lab.node_names[0]
    with small_scratch(job_dir / "scratch") as scratch:
        hooks.add_config(node, f'[profiles.default]\nscratch_path = "{scratch}"\n'
                               "scratch_min_free_gb = 0.03\n")  # fmt: skip
        fill = ["runuser", "-u", TEST_USER, "--", "dd", "if=/dev/zero", f"of={scratch}/mine",
                "bs=1M", "count=50"]  # fmt: skip
        check = [str(hooks.shims["healthcheck"])]
        run(fill, timeout=60)
        assert lab.run_on_node(node, check, timeout=60).rc == 1
        first = parse_reason(wait_drained(lab, node)).incident
        lab.client().resume(node)  # the admin
        run(["runuser", "-u", TEST_USER, "--", "rm", "--", f"{scratch}/mine"], timeout=10)
        assert lab.run_on_node(node, check, timeout=60).rc == 0
        (doc,) = [d for d in hooks.incidents(node) if d.get("incident") == first]
        assert doc["status"] == "closed", doc
        assert [e.get("incident") for e in hooks.audit(node)
                if e.get("outcome") == "resumed_elsewhere"] == [first]  # fmt: skip
        run(fill, timeout=60)
        assert lab.run_on_node(node, check, timeout=60).rc == 1
        again = parse_reason(wait_drained(lab, node))
        assert again.code == "SCRATCH_FULL" and again.incident != first


def test_a_scratch_a_user_fills_on_every_node_cannot_keep_a_real_xid_from_draining(rig, job_dir):
    """One scratch for every node (the lab's nodes share a host, as nodes
    share a Lustre scratch), filled by sltest.  The lab's breaker lets 2 of 4
    nodes be drained by automation: the health checks of n1, n2, n3 drain two
    for SCRATCH_FULL and leave the third, latching nothing; an XID 79 on n4
    then still drains n4."""
    lab, hooks, _ = rig
    n1, n2, n3, n4 = lab.node_names[:4]
    with small_scratch(job_dir / "scratch") as scratch:
        for node in (n1, n2, n3):
            hooks.add_config(node, f'[profiles.default]\nscratch_path = "{scratch}"\n'
                                   "scratch_min_free_gb = 0.03\n")  # fmt: skip
        run(["runuser", "-u", TEST_USER, "--", "dd", "if=/dev/zero", f"of={scratch}/mine",
             "bs=1M", "count=50"], timeout=60)  # fmt: skip
        for node in (n1, n2, n3):
            lab.run_on_node(node, [str(hooks.shims["healthcheck"])], timeout=60)
        codes = {}
        for node in (n1, n2, n3):
            state = lab.client().get_node(node)
            codes[node] = parse_reason(state.reason).code if state.drained else None
        assert sorted(c for c in codes.values() if c) == ["SCRATCH_FULL", "SCRATCH_FULL"], codes
        for node in lab.node_names:
            assert not [e for e in hooks.audit(node) if e.get("action") == "breaker_trip"]
        hooks.inject_xid(n4, 79, gpu=1)
        assert parse_reason(wait_drained(lab, n4, timeout=30)).code == "XID79"


# -- a connection the user cuts off in a network namespace of their own ---------------------

#: The unacked connection is judged after 10 s (the product's 120 s would
#: make the test slow); the rest as the other tests.
PROGRESS_UNACKED = {**PROGRESS, "unacked_s": 10.0}

#: The hostile job's one process, plain Python as the user, nothing of
#: slurm-hooks: inside the network namespace its batch script made, a
#: loopback connection that worked, then ``lo`` taken down (the user is
#: root of that namespace) and data sent that nobody can acknowledge.  It
#: says where it is (pid, the peer's port), then polls for the answer the
#: way a collective does (working a little each 50 ms: busy, never a stall).
CUT_PY = """
import os, socket, subprocess, sys, time
out, ip = sys.argv[1], sys.argv[2]
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
conn = socket.create_connection(srv.getsockname())
peer, _ = srv.accept()
conn.sendall(b"x")
assert peer.recv(1) == b"x"
subprocess.run([ip, "link", "set", "lo", "down"], check=True)
conn.sendall(b"y" * 100)
with open(out + ".tmp", "w") as f:
    f.write("%d %d" % (os.getpid(), srv.getsockname()[1]))
os.rename(out + ".tmp", out)
while True:
    end = time.time() + 0.01
    while time.time() < end:
        pass
    time.sleep(0.04)
"""


def _ip() -> str:
    for path in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"):
        if os.access(path, os.X_OK):
            return path
    pytest.skip("no ip(8) to take the namespace's loopback down")


def _own_netns_or_skip(ip: str) -> None:
    """What the kernel lets the unprivileged user do here: a user and network
    namespace of their own (refused, e.g., to a process in a chroot, or where
    unprivileged user namespaces are off): skip, saying why."""
    res = run(["runuser", "-u", TEST_USER, "--", "unshare", "-rn", "--", ip, "link", "set", "lo",
               "up"], timeout=30, check=False)  # fmt: skip
    if not res.ok:
        pytest.skip(f"{TEST_USER} cannot make a network namespace here (unshare -rn: rc {res.rc}, "
                    f"{(res.stderr or res.stdout).strip()!r})")  # fmt: skip


def _retransmitting(pid: int, port: int) -> int:
    """The lab's truth, read by root: the unanswered retransmissions of
    ``pid``'s connection to 127.0.0.1:``port`` in its namespace's table
    (``/proc/PID/net/tcp``: ESTABLISHED, retransmission timer running; 0:
    no such row)."""
    try:
        rows = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return 0
    for row in rows:
        f = row.split()
        if f[2] == f"0100007F:{port:04X}" and f[3] == "01" and f[5].startswith("01:"):
            return int(f[6], 16)
    return 0


def test_a_connection_cut_in_the_users_own_namespace_reports_and_requeues_only_their_job(
    fresh_lab, job_dir
):
    """The unacked-connection signal, forged by the job's owner without root.
    ``unshare -rn`` (an unprivileged user namespace with a network namespace)
    gives the user a loopback of their own; a connection over it that worked,
    then ``lo`` down and data sent: the kernel retransmits with no answer, as
    for a partition.  The watcher does see it: it reads each rank's
    ``/proc/PID/net/tcp``, which is the table of that process's own
    namespace, and 127.0.0.1 is on one of the node's networks (its
    loopback); the socket is held by the rank's own task (the batch script
    execs into the process, as a rank's collective does).  So two hostile
    jobs of ``sltest``, each a single busy process (several tasks
    allocated: a job the watcher judges on its own evidence), each beside
    a job of ``sltest2`` on the same node: after
    ``unacked_s`` the owner is told of a hang naming the connection, on
    the owner's evidence (``user_process``); the job that opted in is
    requeued, the other only reported; no node drained, the other user's
    jobs untouched, nothing else requeued."""
    ip = _ip()
    _own_netns_or_skip(ip)
    with _rigged(fresh_lab, job_dir, PROGRESS_UNACKED) as (lab, hooks, pdir):
        out = job_dir / "cut"
        out.mkdir(mode=0o777)
        os.chmod(out, 0o777)
        prog = job_dir / "cut.py"
        prog.write_text(CUT_PY)
        prog.chmod(0o644)
        nodes = {"opted": lab.node_names[0], "plain": lab.node_names[1]}
        victims = [victim(lab, job_dir, n) for n in nodes.values()]
        jobs: dict[str, str] = {}
        peers: dict[str, str] = {}
        try:
            for name, node in nodes.items():
                s = script(job_dir / f"cut-{name}.sh",
                           f"exec unshare -rn -- /bin/bash -c '{ip} link set lo up && "
                           f"exec {USER_PYTHON} {prog} {out}/{name} {ip}'\n")  # fmt: skip
                # Two tasks on one CPU (--overcommit): a job of several tasks,
                # leaving the node's other CPU to the victim.
                opt = ["--comment", "slurm-hooks:requeue-on-hang"] if name == "opted" else []
                jobs[name] = submit(lab, s, "-w", node, "-N1", "-n2", "--overcommit", "--requeue",
                                    *opt, f"--output={job_dir}/cut-{name}.out")  # fmt: skip
            for name in nodes:
                said = lab.wait_for(lambda n=name: (out / n).exists() and (out / n).read_text(),
                                    60, what=f"the {name} job's connection cut")  # fmt: skip
                pid, port = (int(x) for x in said.split())
                # The evidence is real: the kernel retransmits, unanswered.
                lab.wait_for(lambda p=pid, q=port: _retransmitting(p, q) >= 3, 30,
                             what="the connection's retransmissions")  # fmt: skip
                peers[name] = f"127.0.0.1:{port}"
            opted, plain = jobs["opted"], jobs["plain"]
            lab.wait_for(lambda: any(e.get("action") == "job_requeue" and e.get("job") == opted
                                     for e in hooks.audit(nodes["opted"])), 60,
                         what="the opted-in job's requeue")  # fmt: skip
            for name, decision in (("opted", "requeue_job"), ("plain", "report_job")):
                entry = lab.wait_for(lambda n=name: told(hooks, nodes[n], jobs[n]), 30,
                                     what=f"the {name} job's owner told")  # fmt: skip
                assert entry["user"] == TEST_USER and entry["decision"] == decision, entry
                assert entry["provenance"] == ["user_process"], entry
                why = f"rank 0 on {nodes[name]}: its connection to {peers[name]} ("
                assert why in entry["why"] and "has had no acknowledgement" in entry["why"], entry
            # Only the opted-in job was requeued, anywhere (a rerun of it may
            # cut its connection again: requeued again, still only it).
            req = [e for n in lab.node_names for e in hooks.audit(n)
                   if e.get("action") == "job_requeue"]  # fmt: skip
            assert {(e["job"], e["outcome"], e["user"]) for e in req} == {
                (opted, "requeued", TEST_USER)}, req  # fmt: skip
            lab.wait_for(lambda: lab.client().get_job(opted).restart_count >= 1, 60,
                         what="the opted-in job requeued")  # fmt: skip
            time.sleep(3 * PROGRESS["interval_s"] + 1)  # a few more passes
            info = lab.client().get_job(plain)
            assert (info.state, info.restart_count) == ("RUNNING", 0), info
            assert_untouched(lab, hooks, victims)
        except AssertionError:
            for n in nodes.values():
                dump(lab, hooks, pdir, n)
            raise
        finally:
            run(["scancel", *jobs.values(), *[j for j, _ in victims]], timeout=30, env=lab.env(),
                check=False)  # fmt: skip
