"""A rank's process as the watcher sees it, for a rank in a PID namespace of
its own (a container: ``apptainer --containall``, ``unshare --pid``, a pod).

A rank writes the pid it sees, ``os.getpid()``: inside a PID namespace of
its own that is the container's number (often 1), which on the host names
another process (init) or none.  Judged by that pid, a stopped rank read as
alive and then as not its owner's ("process gone"), and its job's hang was
never reported.  The job-side writer adds ``pidns=<inode>`` to its records
when it runs outside the host's first PID namespace; here the rank is found
among the job's own processes on this node, as Slurm lists them (root's
list: slurmstepd's process tracking), by their namespace
(``/proc/PID/ns/pid``) and innermost pid (the last of ``NSpid`` in
``/proc/PID/status``).

What the user wrote only chooses among their own job's processes, so no
namespace a record names can point the judge at anyone else's.  A rank none
or several of them match is UNKNOWN (seen neither alive nor gone), never
another process.  A record in the watcher's own namespace (slurmd and the
watcher in the same pod) is read as it is.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Iterable, Mapping

from slurm_hooks.detect.progress.gather import proc_state
from slurm_hooks.detect.progress.judge import ProcState
from slurm_hooks.detect.progress.records import RankView

log = logging.getLogger(__name__)


def namespace_of(link: str) -> int | None:
    """``pid:[4026532201]`` (what ``/proc/PID/ns/pid`` links to) -> 4026532201."""
    if link.startswith("pid:[") and link.endswith("]") and link[5:-1].isdigit():
        return int(link[5:-1])
    return None


def pid_namespace(pid: int | str, proc: str = "/proc") -> int | None:
    """The PID namespace of ``pid`` (``"self"``: this process); None when /proc cannot say."""
    try:
        return namespace_of(os.readlink(f"{proc}/{pid}/ns/pid"))
    except OSError:
        return None


def innermost_pid(pid: int, proc: str = "/proc") -> int | None:
    """``pid``'s number in its own PID namespace: the last of ``NSpid``."""
    try:
        with open(f"{proc}/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("NSpid:"):
                    last = line.split()[-1]
                    return int(last) if last.isdigit() else None
    except OSError:
        return None
    return None


def by_namespace(pids: Iterable[int], proc: str = "/proc") -> dict[tuple[int, int], list[int]]:
    """(namespace, innermost pid) -> the pids here that are it."""
    out: dict[tuple[int, int], list[int]] = {}
    for pid in pids:
        ns, inner = pid_namespace(pid, proc), innermost_pid(pid, proc)
        if ns is not None and inner is not None:
            out.setdefault((ns, inner), []).append(pid)
    return out


def rank_processes(
    local: Mapping[int, RankView],
    uid: int | None,
    job_pids: Callable[[], Iterable[int]],
    *,
    proc: str = "/proc",
) -> tuple[dict[int, RankView], dict[int, ProcState]]:
    """This node's ranks with their pids as the watcher sees them, and each
    one's process state (``gather.proc_state``: same uid when ``uid`` is
    given, started before the rank's first record).  ``job_pids`` (the job's
    processes here as Slurm lists them) is asked only when a rank's records
    name a namespace other than the watcher's."""
    own = pid_namespace("self", proc)
    views = dict(local)
    unknown: set[int] = set()
    # rank -> (namespace, pid there): the ranks whose pid is not the watcher's.
    foreign = {r: (v.pidns, v.pid) for r, v in local.items() if v.pidns not in (None, own)}
    if foreign:
        index = by_namespace(set(job_pids()), proc)
        for r, key in foreign.items():
            hits = index.get(key, [])
            if len(hits) == 1:
                views[r] = dataclasses.replace(local[r], pid=hits[0], pidns=own)
            else:
                log.debug("progress: rank %d (pid %d in namespace %s) is %d of the job's "
                          "processes here", r, key[1], key[0], len(hits))  # fmt: skip
                unknown.add(r)
    states = {
        r: ProcState.UNKNOWN
        if r in unknown
        else proc_state(v.pid, uid=uid, started=v.started, proc=proc)
        for r, v in views.items()
    }
    return views, states
