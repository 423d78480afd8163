"""Zero-touch progress: a job's ranks' CPU and GPU activity as the judge's
rank views.  Pure (time passed in).

A job that writes no progress records still shows, to root, whether its
ranks work: the CPU time of each rank's processes, their GPU utilisation
(NVML, per process), their state.  Each look folds one sample per rank into
:class:`JobActivity`; :meth:`JobActivity.views` hands the judge one
``RankView`` per rank whose "last step" is the last look the rank was
active, so one judge (``judge_hang``) weighs records and samples alike:
the job stalls when none of its ranks here was active for ``hang_s``, and
the culprit is a rank whose task exited, was stopped, or sleeps in D state.

Active, per look: CPU time since the last look of at least ``ACTIVE_SHARE``
of one core over the time between the looks, or any GPU utilisation NVML
reports for one of the rank's processes.  A rank that waits by polling
(a sleep of a few milliseconds between checks) stays below it.  A job
counts as started once a rank was active: a job idle from its start (an
interactive allocation, a ``sleep``) is never judged; ``active_s`` is how
long it has worked (the pass acts on the owner's evidence only for a job
that worked a while, docs/progress.md).  Context
switches are kept as evidence, not as activity: a thread that wakes to
wait again (a heartbeat, a timeout loop) switches without progressing.

Blind spots (docs/progress.md): a rank that waits by spinning (NCCL's
kernels and proxy threads, MPI's busy polling) looks active; progress
records, the flight recorder and NCCL's own timeout cover those jobs, and
where the collective runs over TCP, the kernel's count of a connection's
unacknowledged retransmissions (``sockets``, ``unacked``): a rank whose
peer stopped acknowledging is judged on that, whatever its CPU shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_hooks.detect.progress.judge import ProcState
from slurm_hooks.detect.progress.records import RankView

#: Share of one core, averaged since the last look, that counts as progress:
#: a rank blocked in a collective uses none, a rank polling for its peers
#: (a few ms of sleep between checks) well under 1 %, a rank that computes
#: or drives a GPU tens of percent.
ACTIVE_SHARE = 0.02
#: /proc state letters, worst first: one stopped process stops its rank.
_WORST = (("T", ProcState.STOPPED), ("t", ProcState.STOPPED), ("D", ProcState.DISK),
          ("R", ProcState.RUNNING), ("S", ProcState.SLEEPING), ("I", ProcState.SLEEPING))  # fmt: skip


@dataclass(frozen=True)
class RankSample:
    """One rank at one look: its task's pid and what its processes showed."""

    pid: int
    #: CPU seconds of all the rank's processes (they only grow).
    cpu_s: float
    #: Their /proc state letters.
    states: tuple[str, ...]
    #: Context switches of their main threads, summed.
    switches: int = 0
    #: Highest GPU utilisation (percent) NVML reported for them since the
    #: last look (None: no GPU view).
    gpu_util: int | None = None
    #: Its connections to peers that stopped acknowledging (``sockets``),
    #: the worst first: empty when none.
    unacked: tuple[str, ...] = ()


def rank_state(states: tuple[str, ...]) -> ProcState:
    if not states:
        return ProcState.GONE
    for letter, state in _WORST:
        if letter in states:
            return state
    return ProcState.GONE if all(s in "ZX" for s in states) else ProcState.UNKNOWN


@dataclass
class _Rank:
    pid: int
    cpu_s: float
    last_active: float
    state: ProcState
    switches: int
    #: When it was last looked at.
    seen: float
    #: Since when, looked at without a break, a connection of it has gone
    #: unacknowledged, and the worst one last seen (None: not now).
    unacked_since: float | None = None
    unacked_peer: str = ""

    def note_unacked(self, peers: tuple[str, ...], now: float) -> None:
        if not peers:
            self.unacked_since, self.unacked_peer = None, ""
            return
        if self.unacked_since is None:
            self.unacked_since = now
        self.unacked_peer = peers[0]


@dataclass
class JobActivity:
    """What the looks so far saw of one job's ranks on this node."""

    first_seen: float
    first_active: float | None = None
    ranks: dict[int, _Rank] = field(default_factory=dict)
    looks: int = 0
    #: Seconds between looks in which a rank of the job was active.
    active_s: float = 0.0
    #: When the job was last looked at.
    seen: float | None = None

    def update(self, samples: Mapping[int, RankSample], now: float) -> None:
        """Fold one look in.  A rank absent from ``samples`` has exited (Slurm
        lists live tasks only)."""
        self.looks += 1
        any_active = False
        for rank, s in samples.items():
            prev = self.ranks.get(rank)
            state = rank_state(s.states)
            if prev is None or prev.pid != s.pid:
                # First sight (or a new process): no delta yet, the clock starts.
                self.ranks[rank] = _Rank(s.pid, s.cpu_s, now, state, s.switches, now)
                self.ranks[rank].note_unacked(s.unacked, now)
                continue
            prev.note_unacked(s.unacked, now)
            span = now - prev.seen
            busy = span > 0 and s.cpu_s - prev.cpu_s >= ACTIVE_SHARE * span
            if busy or bool(s.gpu_util):
                any_active = True
                prev.last_active = now
                if self.first_active is None:
                    self.first_active = now
            prev.cpu_s, prev.state, prev.switches, prev.seen = s.cpu_s, state, s.switches, now
        if any_active and self.seen is not None:
            self.active_s += now - self.seen
        self.seen = now
        for rank, r in self.ranks.items():
            if rank not in samples:
                r.state = ProcState.GONE
                r.note_unacked((), now)

    def views(self, node: str, restart: int) -> dict[int, RankView]:
        """The ranks as the judge reads records: the last active look is the
        "last step", the first active look the "first step"."""
        return {
            rank: RankView(
                rank,
                node,
                r.pid,
                restart,
                self.first_seen,
                0,
                r.last_active,
                self.first_active,
                (),
                signals=True,
            )  # fmt: skip
            for rank, r in sorted(self.ranks.items())
        }

    def unacked(self) -> dict[int, tuple[float, str]]:
        """Rank -> (since when, which peer) for each rank whose connection to
        a peer has gone unacknowledged at every look since then."""
        return {rank: (r.unacked_since, r.unacked_peer) for rank, r in sorted(self.ranks.items())
                if r.unacked_since is not None and r.state is not ProcState.GONE}  # fmt: skip

    def procs(self) -> dict[int, ProcState]:
        return {rank: r.state for rank, r in sorted(self.ranks.items())}

    def switches(self) -> dict[int, int]:
        return {rank: r.switches for rank, r in sorted(self.ranks.items())}
