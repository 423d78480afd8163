"""This node's job processes as Slurm knows them, and what root sees of each.

Zero-touch signals (docs/progress.md): a job that writes no progress
records is still watched through what the kernel says of its processes.
Which processes are the job's comes from Slurm's own record, never from
the job: one ``scontrol listpids '*' NODE`` a pass lists every job step's
processes on this node (slurmstepd's proctrack container; the node name
picks the slurmd where several share a host), with each task's global rank.
Each sampled process costs a ``stat`` and two small reads of ``/proc``:
its state, its CPU time (all threads), its context switches.

Whatever a process shows is its owner's to cause (a user can idle or stop
their own job): these samples are user-side evidence (``USER_PROCESS``),
except a process in D state inside the nvidia driver (``corroborate``).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurm_hooks.core.errors import CommandError

log = logging.getLogger(__name__)

LISTPIDS_TIMEOUT_S = 5.0
#: Lines of ``scontrol listpids`` output parsed at most.
MAX_LINES = 65536
#: Bytes of a process's environment read for the opt-out.
ENVIRON_BYTES = 256 << 10
#: ``SLURM_HOOKS_WATCH=0`` in a job's environment: no sampling of it.
WATCH_ENV = b"SLURM_HOOKS_WATCH"
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
_CLK_TCK = float(os.sysconf("SC_CLK_TCK"))


@dataclass(frozen=True)
class TaskPid:
    """One process of a job step on this node, as ``scontrol listpids`` lists it."""

    pid: int
    job: str
    #: ``batch``, ``extern``, ``interactive`` or the step's number.
    step: str
    #: The task's global rank; None for another process of the step (srun,
    #: a task's child).
    rank: int | None


def parse_node_listpids(text: str, limit: int) -> dict[str, list[TaskPid]]:
    """Every job's processes in ``scontrol listpids`` output (header
    ``PID JOBID STEPID LOCALID GLOBALID``), at most ``limit`` in all."""
    out: dict[str, list[TaskPid]] = {}
    n = 0
    for line in text.splitlines()[:MAX_LINES]:
        cols = line.split()
        if len(cols) != 5 or not cols[0].isdigit() or not cols[1].isdigit():
            continue
        pid = int(cols[0])
        if pid <= 1 or n >= limit:
            continue
        rank = int(cols[4]) if cols[4].isdigit() else None
        out.setdefault(cols[1], []).append(TaskPid(pid, cols[1], cols[2][:16], rank))
        n += 1
    return out


def node_tasks(node: str, limit: int) -> dict[str, list[TaskPid]] | None:
    """This node's job processes (None: Slurm could not be asked).  One local
    call (slurmstepd's sockets, no controller); a step finishing meanwhile
    makes it exit 1 with the others listed, so its output is read anyway."""
    from slurm_hooks.detect.probes.commands import run

    if not _NODE.match(node):
        return None
    try:
        res = run(["scontrol", "listpids", "*", node], timeout=LISTPIDS_TIMEOUT_S, check=False)
    except CommandError as exc:
        log.info("scontrol listpids * %s: %s", node, exc)
        return None
    if "PID" not in res.stdout[:200]:
        if res.stderr.strip():
            log.info("scontrol listpids * %s: %s", node, res.stderr.strip()[:200])
        return {} if res.ok else None
    return parse_node_listpids(res.stdout, limit)


@dataclass(frozen=True)
class ProcSample:
    """One process at one moment, as ``/proc`` shows it."""

    pid: int
    ppid: int
    #: The ``/proc/PID/stat`` state letter (R, S, D, T, Z, ...).
    state: str
    #: User + system CPU seconds of all its threads.
    cpu_s: float
    uid: int
    #: Context switches of its main thread (``/proc/PID/status``).
    voluntary: int = 0
    involuntary: int = 0


def read_small(path: str, limit: int = 4096) -> bytes | None:
    """At most ``limit`` bytes of a ``/proc`` file (None: unreadable, gone)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def sample(pid: int, proc: str = "/proc") -> ProcSample | None:
    """``pid`` now (None: gone)."""
    try:
        uid = os.stat(f"{proc}/{pid}").st_uid
    except OSError:
        return None
    raw = read_small(f"{proc}/{pid}/stat")
    if raw is None or b")" not in raw:
        return None
    fields = raw.rsplit(b")", 1)[1].split()
    try:
        state = fields[0].decode("ascii", errors="replace")[:1]
        ppid = int(fields[1])
        cpu = (int(fields[11]) + int(fields[12])) / _CLK_TCK
    except (IndexError, ValueError):
        return None
    vol = invol = 0
    status = read_small(f"{proc}/{pid}/status", 8192) or b""
    for line in status.splitlines():
        if line.startswith(b"voluntary_ctxt_switches:"):
            vol = _int(line)
        elif line.startswith(b"nonvoluntary_ctxt_switches:"):
            invol = _int(line)
    return ProcSample(pid, ppid, state, cpu, uid, vol, invol)


def _int(line: bytes) -> int:
    try:
        return int(line.split(b":", 1)[1])
    except (IndexError, ValueError):
        return 0


@dataclass(frozen=True)
class JobEnv:
    """What a job's environment says to the watcher (the owner's word about
    their own job only)."""

    #: ``SLURM_HOOKS_WATCH=0``: do not sample this job.
    watch_off: bool = False
    #: ``SLURM_NTASKS``: how many tasks the job runs (None: not said).
    ntasks: int | None = None


def job_env(pids: Iterable[int], proc: str = "/proc") -> JobEnv:
    """The environment of the job's first task (``/proc/PID/environ``)."""
    for pid in list(pids)[:2]:
        env = read_small(f"{proc}/{pid}/environ", ENVIRON_BYTES)
        if not env:
            continue
        off, ntasks = False, None
        for item in env.split(b"\0"):
            name, _, value = item.partition(b"=")
            if name == WATCH_ENV:
                off = value.strip().lower() in (b"0", b"no", b"false", b"off")
            elif name == b"SLURM_NTASKS" and value.isdigit() and len(value) < 10:
                ntasks = int(value)
        return JobEnv(off, ntasks)
    return JobEnv()


def ranks_of(tasks: Iterable[TaskPid], samples: Mapping[int, ProcSample]) -> dict[int, list[int]]:
    """The job's ranks on this node and the pids of each (its task and the
    task's descendants among the step's processes).  The ranks are the
    tasks of the job's steps; a job without steps (a script run by
    ``sbatch`` alone) is its batch script, rank 0.  The ``extern`` step
    (Slurm's own) is never a rank."""
    tasks = [t for t in tasks if t.step != "extern"]
    stepped = [t for t in tasks if t.step.isdigit() or t.step == "interactive"]
    chosen = (
        stepped
        if any(t.rank is not None for t in stepped)
        else [t for t in tasks if t.step == "batch"]
    )
    owner: dict[int, int] = {}
    for t in chosen:
        if t.rank is not None:
            owner[t.pid] = t.rank
    if not owner and chosen:
        owner[chosen[0].pid] = 0
    out: dict[int, list[int]] = {r: [p] for p, r in owner.items()}
    for t in chosen:
        if t.pid in owner:
            continue
        pid, hops = t.pid, 0
        while pid in samples and pid not in owner and hops < 16:
            pid, hops = samples[pid].ppid, hops + 1
        if pid in owner:
            out[owner[pid]].append(t.pid)
    return out
