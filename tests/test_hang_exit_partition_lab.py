"""A rank that exits and a network partition, on the real lab (issue 30).

Two plain MPI jobs (mpi_train.py, mpi4py over Debian's Open MPI, ``srun
--mpi=pmix``, nothing of slurm-hooks imported, no progress records), each on
two lab nodes, both run by the unprivileged user and opted into requeue, our
watchers on every node at the product's defaults (only the job's grace set):

* **exit**: rank 1 exits after step ``EXIT_AT_STEP`` (``os._exit(1)``, no
  ``MPI_Finalize``: a crashed rank).  What Open MPI under srun does then
  depends on Open MPI (measured in the lab):

  - Open MPI 4.1 (Debian 12, the host's Slurm 22.05): srun logs ``task 1:
    Exited with exit code 1`` and nothing else happens: Slurm does not end
    the step (no ``--kill-on-bad-exit``), rank 0 stays blocked inside
    ``MPI_Allreduce``, alive, busy-polling (state R, CPU time rising); the
    job stays RUNNING and makes no progress, for ever (as NCCL's ranks wait
    for a crashed peer until NCCL's timeout).
  - Open MPI 5.0 (Debian 13, Slurm 24.11): rank 0 aborts as soon as its
    peer is gone (``task 0: Exited with exit code 14``),
    srun aborts the step (``Job step aborted``) and the job ends FAILED
    within seconds.  There is no hang to find: nothing is drained, nobody is
    told, Slurm does not requeue a failed job.
* **partition**: every packet to or from the job's MPI ports is dropped on
  ``lo`` (slurm_hooks_lab/partition.py) while both ranks stay alive.  Both
  ranks block in ``MPI_Allreduce``, both busy-poll, and TCP retransmits
  until the kernel gives up on the connection (``tcp_retries2`` = 15: about
  15 minutes on the loopback; each rank logs ``readv failed: Connection
  timed out``).  Open MPI 4.1's ranks then poll on: the job stays RUNNING,
  and does not step again once the partition is healed; Open MPI 5.0 aborts
  the step (about 945 s after the cut in the 24.11 root) and the job ends.

What the product does (measured on the host, 940 s window): no node is
drained.  The crashed rank's node lists no process of the job any more
(the lab runs no extern step); its watcher follows the job on, dated from
the first pass that missed it, and when the wait runs out asks Slurm
whether the step still runs (``scontrol -o show step JOBID``): it does, so
the owner and the admins are told, naming rank 1, and the opted-in job is
requeued.  The wait is ``hang_s`` from the departure, not ``exited_s``:
every rank of that node left, which from there looks the same as ranks
that finished while rank 0 saves alone on another node (docs/progress.md),
so the case stays in this soak module.  The partition is told of although
both ranks busy-poll: the rank whose data goes unacknowledged holds a TCP
connection the kernel retransmits on with no answer
(``detect/progress/sockets.py``), and ``unacked_s`` (120 s) after the
watcher first saw it the owner and the admins are told, naming that rank
and its peer, and the opted-in job is requeued.

The default hang window is long (``hang_s`` = 900 s), so both jobs run at
once and one window covers both; the module runs on one Slurm release only
(``one_slurm``: the host's, whose Open MPI 4.1 leaves the crashed rank's peer
blocked, the hang the product is for; what it judges is ours, not the
release's).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mpi_job import (
    MPI_TRAIN,
    USER_PYTHON,
    first_records,
    proc_sample,
    records,
    require_mpi,
    workspace,
)
from mpi_job import submit as submit_mpi
from slurm_hooks_lab import partition
from slurm_hooks_lab.hooks import LabHooks, install
from slurm_hooks_lab.lab import TEST_USER, Lab

from slurm_hooks.core.errors import SlurmError
from slurm_hooks.detect.probes.commands import run
from slurm_hooks.detect.progress.settings import ProgressConfig

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.one_slurm, pytest.mark.soak]

GRACE_S = 10.0
#: Steps of 0.2 s at least: the crash comes after the first-step allowance
#: (60 s), and the requeued run (from the last checkpoint) ends soon after.
EXIT_AT_STEP = 400
EXIT_MAX_STEPS = 480
#: The partitioned job never ends by itself.
PART_MAX_STEPS = 100_000
#: The partitioned job's MPI ports (aligned: one u32 mask).
PART_PORTS = partition.PortRange(46080, 16)


def last_step(ckpt: Path, rank: int, restart: int = 0) -> int:
    steps = [r["step"] for r in records(ckpt / f"metrics.rank{rank}.jsonl")
             if r["event"] == "step" and r["restart"] == restart]  # fmt: skip
    return max(steps, default=0)


def proc_state(pid: int) -> str:
    return proc_sample(pid)[0]


def proc_ticks(pid: int) -> int:
    return proc_sample(pid)[1]


def open_mpi_major() -> int:
    """Open MPI's major version, as the job's Python sees it."""
    res = run(["runuser", "-u", TEST_USER, "--", USER_PYTHON, "-c",
               "from mpi4py import MPI; print(MPI.Get_library_version())"], timeout=60)  # fmt: skip
    words = res.stdout.split()
    version = words[words.index("MPI") + 1] if "MPI" in words else "v0"
    return int(version.lstrip("v").split(".")[0])


def limit_s() -> float:
    """From the event to the report, at the latest, at the defaults: a stall
    is judged ``hang_s`` after the rank's last activity, on a watcher's pass
    (``interval_s``), and a stall with no culprit is reported by the batch
    host ``no_culprit_report_s`` later; one more pass for our polling."""
    cfg = ProgressConfig()
    return cfg.hang_s + 2 * cfg.interval_s + cfg.no_culprit_report_s


@dataclass
class Job:
    """One of the module's two jobs."""

    name: str
    id: str
    nodes: list[str]
    ckpt: Path
    out: Path
    pids: dict[int, int] = field(default_factory=dict)
    #: Wall-clock time of the event (the crash record, or the cut).
    event_at: float = 0.0
    event_step: int = 0
    told: list[dict[str, Any]] = field(default_factory=list)
    told_after_s: float | None = None
    ended_after_s: float | None = None  # left RUNNING, from the event
    restarts: int = 0


@dataclass
class Scene:
    """What the lab showed, from the two events to the end of the window."""

    lab: Lab
    hooks: LabHooks
    exit: Job
    part: Job
    open_mpi: int
    partition_error: str = ""
    #: Rank 0 of the exit job just after the crash: state, CPU ticks, step.
    exit_rank0_states: list[str] = field(default_factory=list)
    exit_rank0_ticks: list[int] = field(default_factory=list)
    exit_rank0_steps: list[int] = field(default_factory=list)
    exit_state_after: str = ""
    exit_stack: str = ""
    #: The partitioned job's ranks' last steps, per sample over the window.
    part_steps: list[tuple[int, int]] = field(default_factory=list)
    part_states: list[tuple[str, str]] = field(default_factory=list)
    dropped: int = 0
    #: After the partition was healed: did the job step again?
    part_steps_after_heal: int | None = None
    drained: dict[str, str] = field(default_factory=dict)
    audit: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    window_s: float = 0.0


def _submit(lab: Lab, work: Path, name: str, nodes: list[str], env_extra: dict[str, str],
            args: list[str]) -> Job:  # fmt: skip
    job, ckpt, out = submit_mpi(lab, work, name, args, nodes=nodes, env=env_extra)
    return Job(name, job, nodes, ckpt, out)


def _told(hooks: LabHooks, nodes: list[str], job: str) -> list[dict[str, Any]]:
    return [e for n in nodes for e in hooks.audit(n)
            if e.get("action") in ("job_hang", "job_stalled") and e.get("job") == job]  # fmt: skip


def _crash(job: Job) -> dict[str, Any] | None:
    return next((r for r in records(job.ckpt / "metrics.rank1.jsonl") if r["event"] == "crash"),
                None)  # fmt: skip


@pytest.fixture(scope="module")
def scene(lab: Lab) -> Iterator[Scene]:
    require_mpi(lab)
    open_mpi = open_mpi_major()
    lab.reset()
    work, pdir = workspace(lab, "hang-exit-partition")
    hooks = install(lab, grace_s=GRACE_S, progress={"dir": str(pdir)})
    jobs: list[Job] = []
    try:
        for node in lab.node_names:
            hooks.start_watcher(node)
        names = lab.node_names
        ex = _submit(lab, work, "exit", names[:2], {},
                     ["--max-steps", str(EXIT_MAX_STEPS), "--exit-rank", "1",
                      "--exit-at-step", str(EXIT_AT_STEP)])  # fmt: skip
        jobs.append(ex)
        pa = _submit(lab, work, "partition", names[2:], PART_PORTS.mpi_env(),
                     ["--max-steps", str(PART_MAX_STEPS)])  # fmt: skip
        jobs.append(pa)
        try:
            crash = lab.wait_for(lambda: _crash(ex), EXIT_AT_STEP * 0.2 + 240, interval=0.5,
                                 what="rank 1 of the exit job to crash")  # fmt: skip
        except Exception:
            for j in jobs:
                print(j.out.read_text()[-3000:] if j.out.exists() else f"no output of {j.name}")
            raise
        for j in jobs:
            first = first_records(j.ckpt)
            j.pids = {r: rec["pid"] for r, rec in first.items()}
        ex.event_at, ex.event_step = crash["time"], crash["step"]
        s = Scene(lab, hooks, ex, pa, open_mpi)
        try:
            partition.cut(PART_PORTS)
        except partition.PartitionError as exc:
            s.partition_error = str(exc)
        else:
            pa.event_at = time.time()
            time.sleep(1.0)  # a step under way when the cut came may still complete
            pa.event_step = max(last_step(pa.ckpt, 0), last_step(pa.ckpt, 1))
        # The exiting rank's peer, just after: alive, blocked, polling.
        for _ in range(6):
            time.sleep(0.5)
            s.exit_rank0_states.append(proc_state(ex.pids[0]))
            s.exit_rank0_ticks.append(proc_ticks(ex.pids[0]))
            s.exit_rank0_steps.append(last_step(ex.ckpt, 0))
        if open_mpi >= 5:  # the step is aborted: give it srun's 7 s and some
            try:
                lab.wait_for(lambda: lab.client().get_job(ex.id).state != "RUNNING", 30,
                             interval=0.5, what="the exit job to end")  # fmt: skip
            except Exception:
                pass  # asserted by the test, with what it was
        s.exit_state_after = lab.client().get_job(ex.id).state
        if proc_state(ex.pids[0]) != "gone":
            run(["runuser", "-u", TEST_USER, "--", "kill", "-USR2", str(ex.pids[0])],
                timeout=10)  # fmt: skip
            stack = ex.ckpt / "stack.rank0.txt"
            lab.wait_for(lambda: stack.exists() and "line" in stack.read_text(), 10,
                         what="rank 0's stack dump")  # fmt: skip
            s.exit_stack = stack.read_text()
        _watch(s)
        yield s
    finally:
        partition.heal()
        for j in jobs:
            run(["scancel", j.id], timeout=30, env=lab.env(), check=False)
        hooks.finish(reconfigure=False)


def _state(client: Any, job: str) -> str:
    try:
        return str(client.get_job(job).state)
    except SlurmError:  # gone from the controller (MinJobAge)
        return "GONE"


def _watch(s: Scene) -> None:
    """Sample the lab until both events are ``limit_s`` old; then heal the
    partition and see whether the job steps again."""
    lab, hooks, client = s.lab, s.hooks, s.lab.client()
    events = [j for j in (s.exit, s.part) if j.event_at]
    end = max(j.event_at for j in events) + limit_s()
    started = time.time()
    while (now := time.time()) < end:
        for node in client.list_nodes():
            if node.drained or node.down:
                s.drained.setdefault(node.name, node.reason or "")
        for j in events:
            if not j.told and (told := _told(hooks, j.nodes, j.id)):
                j.told, j.told_after_s = told, now - j.event_at
            if j.ended_after_s is None and _state(client, j.id) != "RUNNING":
                j.ended_after_s = now - j.event_at
        if s.part.event_at and s.part.ended_after_s is None:
            # Until the job leaves RUNNING (the product requeues it).
            pa = s.part
            s.part_steps.append((last_step(pa.ckpt, 0), last_step(pa.ckpt, 1)))
            s.part_states.append((proc_state(pa.pids[0]), proc_state(pa.pids[1])))
        time.sleep(2.0)
    s.window_s = time.time() - started
    s.audit = {n: hooks.audit(n) for n in lab.node_names}
    for j in events:
        with contextlib.suppress(SlurmError):  # a job that ended long ago: none
            j.restarts = client.get_job(j.id).restart_count
    if s.part.event_at:
        s.dropped = partition.dropped_packets()
        partition.heal()
        before = max(s.part_steps[-1]) if s.part_steps else 0
        try:
            lab.wait_for(lambda: max(last_step(s.part.ckpt, 0), last_step(s.part.ckpt, 1))
                         > before + 2, 30, interval=0.5, what="steps after the heal")  # fmt: skip
            s.part_steps_after_heal = max(last_step(s.part.ckpt, r) for r in (0, 1)) - before
        except Exception:
            s.part_steps_after_heal = 0
    print(f"exit: told after {s.exit.told_after_s} s, ended after {s.exit.ended_after_s} s, "
          f"restarts {s.exit.restarts}; partition: told after {s.part.told_after_s} s, ended "
          f"after {s.part.ended_after_s} s, restarts {s.part.restarts}, dropped {s.dropped}, "
          f"steps after the heal {s.part_steps_after_heal}; drained {s.drained}")  # fmt: skip
    for j in (s.exit, s.part):
        print(f"--- {j.name} job {j.id} output:")
        print(j.out.read_text()[-2000:] if j.out.exists() else "none")


def _no_node_action(s: Scene) -> None:
    assert not s.drained, s.drained
    for node, entries in s.audit.items():
        for e in entries:
            assert e.get("action") not in ("drain", "breaker_trip"), (node, e)


# -- what the lab does (the truth the product faces) ------------------------------------------


def test_a_rank_that_exits_leaves_its_peer_blocked_or_the_step_aborted(scene):
    """Open MPI 4 under srun: the crashed rank's peer stays inside
    ``MPI_Allreduce``, alive and polling, and Slurm does not end the step.
    Open MPI 5: the peer aborts, srun aborts the step, the job ends."""
    ex = scene.exit
    assert proc_state(ex.pids[1]) == "gone"
    out = ex.out.read_text() if ex.out.exists() else ""
    assert "task 1: Exited with exit code 1" in out, out[-2000:]
    if scene.open_mpi >= 5:
        assert "Job step aborted" in out, out[-2000:]
        assert scene.exit_state_after != "RUNNING", scene.exit_state_after
        return
    assert set(scene.exit_rank0_states) <= {"R", "S"}, scene.exit_rank0_states
    assert len(set(scene.exit_rank0_steps)) == 1, scene.exit_rank0_steps
    assert scene.exit_rank0_steps[-1] <= ex.event_step + 1
    assert scene.exit_state_after == "RUNNING"
    allreduce = next(i for i, t in enumerate(MPI_TRAIN.read_text().splitlines(), 1)
                     if "comm.Allreduce(" in t)  # fmt: skip
    assert f'mpi_train.py", line {allreduce} in main' in scene.exit_stack, scene.exit_stack
    ticks = scene.exit_rank0_ticks
    print(f"rank 0 after the crash: states {scene.exit_rank0_states}, CPU ticks {ticks}")


def test_a_partition_stops_the_job_while_both_ranks_live(scene):
    """The lab's partition is one: from the cut until the job leaves
    RUNNING (requeued by the product, or the window's end) neither rank of
    the partitioned job goes past the step under way at the cut, both stay
    alive, packets are dropped."""
    if scene.partition_error:
        pytest.skip(f"no partition on this kernel: {scene.partition_error}")
    pa = scene.part
    assert scene.part_steps, "no sample"
    assert max(max(x) for x in scene.part_steps) <= pa.event_step + 1, scene.part_steps[-3:]
    alive = [st for st in scene.part_states[: len(scene.part_states) // 2]]
    assert all(a in ("R", "S") and b in ("R", "S") for a, b in alive), alive
    assert scene.dropped > 0
    print(
        f"partition: ranks' states over the window {sorted(set(scene.part_states))}, "
        f"steps after the heal {scene.part_steps_after_heal}"
    )


# -- what the product does at its defaults --------------------------------------------------


def test_neither_a_crashed_rank_nor_a_partition_drains_a_node(scene):
    """Both are the job's (or the network's) business as far as the node's
    own evidence goes: over the whole window no node goes out of service and
    no node-level action is taken."""
    _no_node_action(scene)


def test_a_crashed_rank_whose_step_is_aborted_is_left_to_slurm(scene):
    """Open MPI 5: the step is aborted and the job is over within seconds;
    there is no hang: nobody is told of one, no node drained, and the job is
    not requeued (Slurm's rule for a failed job; the opt-in is for hangs)."""
    if scene.open_mpi < 5:
        pytest.skip(f"Open MPI {scene.open_mpi} leaves the peer blocked: the next test")
    _no_node_action(scene)
    assert not scene.exit.told, scene.exit.told
    assert scene.exit.restarts == 0


def test_a_crashed_rank_whose_peer_blocks_is_reported_and_the_job_requeued(scene):
    """Issue 30's done-means for the crashed rank, where its peer blocks
    (Open MPI 4): the owner and the admins are told within the default
    window from the crash, naming rank 1, and the opted-in job is requeued;
    no node drained."""
    if scene.open_mpi >= 5:
        pytest.skip(f"Open MPI {scene.open_mpi} aborts the step: the test above")
    ex = scene.exit
    _no_node_action(scene)
    assert ex.told, f"nobody was told of the crashed rank in {limit_s():.0f} s"
    assert ex.told_after_s is not None and ex.told_after_s <= limit_s()
    entry = ex.told[-1]
    assert entry.get("user") == TEST_USER, entry
    assert entry.get("rank") == 1 or f"job:{ex.id}/rank1" in json.dumps(entry), entry
    assert ex.restarts >= 1, "the opted-in job was not requeued"


def test_a_partition_is_reported_and_the_opted_in_job_requeued(scene):
    """Issue 30's done-means for the partition: the owner and the admins are
    told within the default window from the cut, naming a rank whose
    connection to its peer went unacknowledged (both ranks busy-poll: their
    CPU says nothing; the kernel's retransmission count does,
    ``unacked_s`` after the cut); the opted-in job requeued; no node
    drained."""
    if scene.partition_error:
        pytest.skip(f"no partition on this kernel: {scene.partition_error}")
    pa = scene.part
    assert pa.told, f"nobody was told of the partition in {limit_s():.0f} s"
    assert pa.told_after_s is not None and pa.told_after_s <= limit_s()
    assert pa.told[-1].get("user") == TEST_USER, pa.told
    assert "has had no acknowledgement" in pa.told[-1].get("why", ""), pa.told[-1]
    assert pa.restarts >= 1, "the opted-in job was not requeued"
    _no_node_action(scene)
    print(f"partition: told after {pa.told_after_s} s: {pa.told[-1]}")
