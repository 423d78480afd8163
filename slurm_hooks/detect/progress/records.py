"""Parse the job's progress lines (docs/progress.md) into one view per rank.  Pure.

Every byte here was written by the job's user: a malformed line is skipped,
never an error, and nothing parsed from it reaches a command line or a
reason unvalidated (numbers are numbers; the node name must match the
watcher's own node before anything is acted on).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

_FIELD = re.compile(r"^([a-z]{1,16})=([A-Za-z0-9_.:\-\[\],+/]{1,64})$")
_INT_FIELDS = ("job", "restart", "rank", "pid", "step")
#: Steps kept per rank for the straggler windows.
KEEP_STEPS = 512
#: Characters of one record line at most (12 fields of at most 16 + 1 + 64).
MAX_LINE = 1024


@dataclass(frozen=True)
class Record:
    job: str
    restart: int
    rank: int
    node: str
    pid: int
    step: int
    time: float
    busy: float | None = None
    #: The writer's PID namespace (the inode ``/proc/self/ns/pid`` names),
    #: written only outside the host's first one: ``pid`` is then the pid
    #: inside it (a container's), not the watcher's (``pidns.py``).
    pidns: int | None = None


def parse_line(line: str) -> Record | None:
    """One record, or None for anything that is not exactly one."""
    if len(line) > MAX_LINE:
        return None
    parts = line.split(None, 12)
    if len(parts) < 8 or parts[0] != "P1" or len(parts) > 12:
        return None
    fields: dict[str, str] = {}
    for tok in parts[1:]:
        m = _FIELD.match(tok)
        if not m or m.group(1) in fields:
            return None
        fields[m.group(1)] = m.group(2)
    try:
        ints = {k: int(fields[k]) for k in _INT_FIELDS}
        t = float(fields["time"])
        busy = float(fields["busy"]) if "busy" in fields else None
        pidns = int(fields["pidns"]) if "pidns" in fields else None
        node = fields["node"]
    except (KeyError, ValueError):
        return None
    if not all(0 <= v < 2**63 for v in ints.values()) or ints["pid"] < 1:
        return None
    if pidns is not None and not 0 < pidns < 2**63:
        return None
    if (
        not math.isfinite(t)
        or t <= 0
        or (busy is not None and not (math.isfinite(busy) and busy >= 0))
    ):
        return None
    return Record(str(ints["job"]), ints["restart"], ints["rank"], node, ints["pid"],
                  ints["step"], t, busy, pidns)  # fmt: skip


@dataclass(frozen=True)
class RankView:
    """What one rank's records say about its current run (highest restart)."""

    rank: int
    node: str
    pid: int
    restart: int
    #: When the rank (re)started: its step=0 record (else its first record).
    started: float
    step: int
    last_time: float
    #: When it finished its first step of this run (None: not yet).
    first_step_time: float | None
    #: (step, busy seconds) of the recent steps, oldest first.
    busy: tuple[tuple[int, float], ...] = ()
    #: Built from the rank's processes' activity (``activity``), not from
    #: records: "step" and "last_time" are its last active look.
    signals: bool = False
    #: The PID namespace ``pid`` is in, when the records name one (None:
    #: the host's, or a writer that does not say).
    pidns: int | None = None


def rank_views(records: Iterable[Record], job: str) -> dict[int, RankView]:
    """Fold a job's records into one view per rank, keeping only the latest
    restart (records of a run before a requeue describe other processes)."""
    recs = [r for r in records if r.job == job]
    if not recs:
        return {}
    restart = max(r.restart for r in recs)
    by_rank: dict[int, list[Record]] = {}
    for r in recs:
        if r.restart == restart:
            by_rank.setdefault(r.rank, []).append(r)
    out: dict[int, RankView] = {}
    for rank, rs in by_rank.items():
        # The run of the newest process: a rank restarted in place has a new
        # pid (or, in a container of its own, the same pid in a new namespace).
        last = max(rs, key=lambda r: (r.time, r.step))
        rs = [r for r in rs if (r.pid, r.pidns) == (last.pid, last.pidns)]
        zero = [r.time for r in rs if r.step == 0]
        firsts = [r.time for r in rs if r.step >= 1]
        top = max(rs, key=lambda r: (r.step, r.time))
        busy: dict[int, float] = {}
        for r in rs:
            if r.busy is not None and r.step >= 1:
                busy[r.step] = r.busy
        steps = sorted(busy)[-KEEP_STEPS:]
        out[rank] = RankView(
            rank=rank,
            node=last.node,
            pid=last.pid,
            restart=restart,
            started=min(zero) if zero else min(r.time for r in rs),
            step=top.step,
            last_time=max(r.time for r in rs),
            first_step_time=min(firsts) if firsts else None,
            busy=tuple((s, busy[s]) for s in steps),
            pidns=last.pidns,
        )
    return out
