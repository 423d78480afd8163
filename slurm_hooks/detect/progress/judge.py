"""Hang and straggler verdicts from progress records and process states.  Pure.

A synchronous job progresses together: when one rank stops, every other
rank blocks in the next collective, so "no rank recorded a step for
``hang_s``" is a hang.  The culprit, first match wins:

1. a rank on this node whose process is gone (the job still runs);
2. a rank on this node stopped (``/proc/PID/stat`` state ``T``/``t``);
3. a rank on this node in uninterruptible sleep (``D``: a driver or a
   file system that does not answer);
4. a rank NCCL RAS or the flight recorder names as the one the others wait
   for (``hints``, from ``external``: dead, not answering, or alone behind in
   its collectives);
5. the rank the others wait for: the one, unique, with the lowest step.

No hang before the job's first step completed and ``first_step_allowance_s``
passed since (a first step can take long: compilation, data loading).

A rank's process gone is read with when it went (``departed``: when the
watcher first saw it gone, ``departures``), because healthy jobs end that
way too:

* every rank of this node gone and Slurm, asked then, lists their step no
  more (``step``: ``StepState.OVER``): the step ended, on every node.  Not
  a hang.  Slurm still running it: its ranks elsewhere go on or wait, and
  the rules below apply.
* every rank of a job that runs on this node alone gone, all at the same
  last step: the step ended (training over,
  ``torchrun`` tore its workers down after ``destroy_process_group``; the
  batch script may go on converting or uploading).  Not a hang, however long
  since the last record: nobody waits.  On a job of several nodes the others
  may wait for them: a hang ``hang_s`` after the last of them left.
* rank 0 alone alive, its peers here gone after they recorded its last
  step: rank 0 saves or uploads the final model after the others finished
  (``if rank == 0: save(...)``).  A hang only when it is still alone
  ``hang_s`` after the last of them left.
* any other rank gone beside live ones, nobody progressing: its peers wait
  for it in their next collective.  A hang
  ``exited_s`` after it left (ranks that finish leave within seconds of each
  other, not minutes).  Without a departure time (a watcher restarted) the
  stall must reach ``hang_s``, as before.

Trusted evidence on this node (``TrustedSign``: NVML answering a GPU lost
or not at all, a process of the job in D state inside the nvidia driver;
read by root where no user writes, ``corroborate``) shortens the wait: a
job stalled ``trusted_confirm_s`` while the same sign was seen on
``TRUSTED_LOOKS`` consecutive looks is a hang at once, the first-step
allowance and ``hang_s`` notwithstanding.  Both protect a job whose own
evidence only says it is quiet (a checkpoint, a slow first step); a GPU
that stopped answering is not quiet, and waiting for it costs the job its
minutes.  The culprit is then this node's rank the sign points at (the
process in the driver), else this node's rank by the order above.

A straggler is a rank whose busy time (what it computed before entering the
step's collective) exceeds the median of its peers' by ``slow_percent`` in
each of ``slow_windows`` consecutive windows of ``window_steps`` steps.
"""

from __future__ import annotations

import enum
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_hooks.detect.progress.external import Suspect, resolve
from slurm_hooks.detect.progress.records import RankView


class ProcState(enum.StrEnum):
    """A rank's process as /proc shows it (REMOTE: not on this node)."""

    RUNNING = "running"
    SLEEPING = "sleeping"
    STOPPED = "stopped"
    DISK = "uninterruptible"
    GONE = "gone"
    REMOTE = "remote"
    UNKNOWN = "unknown"


class StepState(enum.StrEnum):
    """Whether the job step this node's ranks ran in still runs, as Slurm
    says when asked (``agent/progress_steps.py``): a fact gathered only once
    the node's ranks of the job are gone."""

    RUNNING = "running"
    OVER = "over"


class Verdict(enum.StrEnum):
    NO_RECORDS = "no_records"
    STARTING = "starting"
    HEALTHY = "healthy"
    #: Stalled, culprit named.
    HANG = "hang"
    #: Stalled, no culprit visible from here.
    STALLED = "stalled"


#: States that say nothing of a rank's process (another node's, unread).
_UNSEEN = frozenset({ProcState.REMOTE, ProcState.UNKNOWN})

#: Culprit causes, strongest evidence first.
CAUSES = {
    ProcState.GONE: "process gone",
    ProcState.STOPPED: "process stopped (state T)",
    ProcState.DISK: "process in uninterruptible sleep (state D)",
}


@dataclass(frozen=True)
class HangSettings:
    hang_s: float = 120.0
    first_step_allowance_s: float = 60.0
    #: A stall this long beside confirmed trusted evidence on this node is a hang.
    trusted_confirm_s: float = 10.0
    #: A stall this long with a rank of this node stopped (state T) is a hang
    #: (when shorter than ``hang_s``): healthy training never stops a rank.
    stopped_s: float = 120.0
    #: A stall with a rank of this node gone this long while peers other than
    #: a lone rank 0 are alive is a hang (when shorter than ``hang_s``).
    exited_s: float = 120.0
    #: A rank of this node whose connection to a peer went unacknowledged
    #: this long is a hang, whatever its activity (``unacked`` of judge_hang).
    unacked_s: float = 120.0


#: Consecutive looks (watcher passes) that must see the same trusted sign:
#: one look can catch a process passing through the driver.
TRUSTED_LOOKS = 2


@dataclass(frozen=True)
class TrustedSign:
    """Trusted evidence on this node beside a stalled job (never the user's:
    NVML, the kernel's view of a process Slurm lists as the job's)."""

    #: One line: what was seen (``corroborate``'s reason).
    why: str
    #: Consecutive looks that saw it (the first sight is 1).
    looks: int
    #: The ranks it points at (a rank's process in the driver); empty: the
    #: node as a whole (a GPU lost), any of the job's ranks here.
    ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class HangVerdict:
    verdict: Verdict
    job: str
    explanation: str
    stalled_s: float = 0.0
    rank: int | None = None
    node: str | None = None
    cause: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    #: The trusted sign that made it a hang before ``hang_s`` (None: the
    #: stall alone did).
    trusted: str | None = None


def _quiet(job: str, stalled: float, ranks: Mapping[int, RankView]) -> str:
    if all(v.signals for v in ranks.values()):
        return f"job {job} showed no CPU or GPU activity here for {stalled:.0f}s"
    return f"job {job} made no progress for {stalled:.0f}s"


def _at(v: RankView) -> str:
    return "(no progress records: its processes idle)" if v.signals else f"at step {v.step}"


def judge_hang(
    job: str,
    ranks: Mapping[int, RankView],
    procs: Mapping[int, ProcState],
    now: float,
    settings: HangSettings,
    hints: Sequence[Suspect] = (),
    trusted: TrustedSign | None = None,
    departed: Mapping[int, float] | None = None,
    alone: bool = False,
    step: StepState | None = None,
    unacked: Mapping[int, tuple[float, str]] | None = None,
) -> HangVerdict:
    """The job's verdict.  ``procs`` holds this node's ranks' states (other
    nodes' ranks absent or ``REMOTE``); ``trusted`` what root sees on this
    node beside the stall (None: nothing); ``departed`` when each gone rank
    was first seen gone (a rank missing: not known); ``alone``: the job runs
    on this node only (its ranks here are all of them); ``step``: whether
    Slurm still runs the step of this node's ranks (None: not asked);
    ``unacked``: per rank of this node, since when a connection of it to a
    peer has gone unacknowledged, and which (the kernel's view: a rank that
    busy-polls in a partitioned collective looks active)."""
    if not ranks:
        return HangVerdict(Verdict.NO_RECORDS, job, "no progress records: job did not opt in")
    firsts = [v.first_step_time for v in ranks.values() if v.first_step_time is not None]
    if not firsts:
        return HangVerdict(Verdict.STARTING, job, "no rank finished a first step yet")
    last = max(v.last_time for v in ranks.values())
    stalled = max(0.0, now - last)
    steps = {r: v.step for r, v in sorted(ranks.items())}
    evidence: dict[str, Any] = {"steps": steps, "procs": {r: str(procs.get(r, ProcState.UNKNOWN))
                                                          for r in sorted(ranks)}}  # fmt: skip
    allowed_at = min(firsts) + settings.first_step_allowance_s
    if (
        trusted is not None
        and trusted.looks >= TRUSTED_LOOKS
        and stalled >= settings.trusted_confirm_s
    ):
        early = _trusted_culprit(job, ranks, procs, stalled, trusted, evidence)
        if early is not None:
            return early
    known = sorted(r for r, s in procs.items() if r in ranks and s not in _UNSEEN)
    gone = [r for r in known if procs[r] is ProcState.GONE]
    alive = [r for r in known if procs[r] is not ProcState.GONE]
    if gone and not alive and step is StepState.OVER:
        return HangVerdict(Verdict.HEALTHY, job,
                           f"its {len(gone)} rank(s) here exited and Slurm lists their step no "
                           f"more ({stalled:.0f}s since the last step): the step ended", stalled,
                           evidence=evidence)  # fmt: skip
    if alone and gone and not alive and len(set(steps.values())) == 1:
        return HangVerdict(Verdict.HEALTHY, job,
                           f"its {len(gone)} rank(s) exited after the same last step "
                           f"({stalled:.0f}s ago): the step ended", stalled, evidence=evidence)  # fmt: skip
    cut = _unacked(job, ranks, unacked or {}, now, allowed_at, settings, evidence)
    if cut is not None:
        return cut
    stopped = sorted(r for r, s in procs.items() if s is ProcState.STOPPED and r in ranks)
    if stopped and now >= allowed_at and settings.stopped_s <= stalled < settings.hang_s:
        v = ranks[stopped[0]]
        return HangVerdict(
            Verdict.HANG, job,
            f"{_quiet(job, stalled, ranks)}; rank {v.rank} on {v.node}: "
            f"{CAUSES[ProcState.STOPPED]} {_at(v)}",
            stalled, v.rank, v.node, CAUSES[ProcState.STOPPED], evidence,
        )  # fmt: skip
    if gone and now >= allowed_at:
        left = _departed(job, ranks, gone, alive, now, stalled, settings, departed or {},
                         evidence)  # fmt: skip
        if left is not None:
            return left
    if stalled < settings.hang_s or now < allowed_at:
        return HangVerdict(Verdict.HEALTHY, job, f"last step {stalled:.0f}s ago", stalled,
                           evidence=evidence)  # fmt: skip
    for state, cause in CAUSES.items():
        if state is ProcState.GONE:
            continue  # judged with its departure above
        hit = sorted(r for r, s in procs.items() if s is state and r in ranks)
        if hit:
            v = ranks[hit[0]]
            return HangVerdict(
                Verdict.HANG, job,
                f"{_quiet(job, stalled, ranks)}; rank {v.rank} on {v.node}: {cause} {_at(v)}",
                stalled, v.rank, v.node, cause, evidence,
            )  # fmt: skip
    named = resolve(hints, ranks)
    if named is not None:
        rank, hint = named
        v = ranks[rank]
        source = "NCCL RAS" if hint.source == "ras" else "the flight recorder"
        evidence["hint"] = {"source": hint.source, "why": hint.why, "detail": hint.detail}
        return HangVerdict(
            Verdict.HANG, job,
            f"{_quiet(job, stalled, ranks)}; {source} names rank {v.rank} "
            f"on {v.node} ({hint.why})", stalled, v.rank, v.node,
            f"{hint.source}: {hint.why}", evidence,
        )  # fmt: skip
    low = min(steps.values())
    behind = [r for r, s in steps.items() if s == low]
    if all(v.signals for v in ranks.values()):
        return HangVerdict(
            Verdict.STALLED, job,
            f"{_quiet(job, stalled, ranks)}; none of its {len(ranks)} rank(s) here gone, "
            "stopped or in D state", stalled, evidence=evidence,
        )  # fmt: skip
    if len(behind) == 1 and len(steps) > 1 and max(steps.values()) > low:
        v = ranks[behind[0]]
        return HangVerdict(
            Verdict.HANG, job,
            f"job {job} made no progress for {stalled:.0f}s; the others wait for rank {v.rank} "
            f"on {v.node} (step {v.step}, others at {max(steps.values())})",
            stalled, v.rank, v.node, "lowest step", evidence,
        )  # fmt: skip
    return HangVerdict(
        Verdict.STALLED, job,
        f"job {job} made no progress for {stalled:.0f}s; no culprit among the "
        f"{len(ranks)} rank(s) visible here (all at step {low})", stalled, evidence=evidence,
    )  # fmt: skip


def _unacked(
    job: str,
    ranks: Mapping[int, RankView],
    unacked: Mapping[int, tuple[float, str]],
    now: float,
    allowed_at: float,
    settings: HangSettings,
    evidence: dict[str, Any],
) -> HangVerdict | None:
    """A rank whose connection to a peer has had no acknowledgement for
    ``unacked_s``: a hang naming it and the peer (None: no such rank)."""
    if now < allowed_at:
        return None
    long = sorted((since, r, peer) for r, (since, peer) in unacked.items()
                  if r in ranks and now - since >= settings.unacked_s)  # fmt: skip
    if not long:
        return None
    since, rank, peer = long[0]
    v = ranks[rank]
    silent = now - since
    evidence["unacked"] = {str(r): {"peer": p, "s": round(now - t, 1)}
                           for r, (t, p) in sorted(unacked.items())}  # fmt: skip
    cause = f"connection to {peer} unacknowledged"
    return HangVerdict(
        Verdict.HANG, job,
        f"rank {v.rank} on {v.node}: its connection to {peer} has had no "
        f"acknowledgement for {silent:.0f}s (a network partition or its peer's host gone)",
        silent, v.rank, v.node, cause, evidence,
    )  # fmt: skip


def _departed(
    job: str,
    ranks: Mapping[int, RankView],
    gone: list[int],
    alive: list[int],
    now: float,
    stalled: float,
    settings: HangSettings,
    departed: Mapping[int, float],
    evidence: dict[str, Any],
) -> HangVerdict | None:
    """Ranks gone beside live ones: a hang naming the first gone rank, the
    lone rank 0's grace (HEALTHY), or None (not yet: judge on)."""
    when = [departed[r] for r in gone if r in departed]
    # Rank 0 finishing alone, or (a job on several nodes) this node's ranks
    # all gone: they reached the last step seen here, then left.  A rank
    # that left behind a peer was lost mid-run.
    top = max(ranks[r].step for r in gone + alive)
    finishing = alive in ([0], []) and all(ranks[r].step >= top for r in gone)
    if finishing:
        # Alone since the last peer left; unknown departures: the last step.
        since = now - max(when) if len(when) == len(gone) else stalled
        wait = settings.hang_s
    else:
        since = now - min(when) if when else stalled
        wait = settings.exited_s if when else settings.hang_s
    # A step recorded after the departure: the survivors went on without it.
    since = min(since, stalled)
    if since >= wait:
        v = ranks[gone[0]]
        cause = CAUSES[ProcState.GONE]
        evidence["departed_s"] = round(since, 1)
        return HangVerdict(
            Verdict.HANG, job,
            f"{_quiet(job, stalled, ranks)}; rank {v.rank} on {v.node}: {cause} {_at(v)} "
            f"{since:.0f}s ago" + (f", rank(s) {', '.join(map(str, alive))} alive" if alive else ""),
            stalled, v.rank, v.node, cause, evidence,
        )  # fmt: skip
    if finishing:
        why = (f"rank 0 goes on alone {since:.0f}s after its {len(gone)} peer(s) here exited "
               "(a final save or upload)") if alive else (
               f"its {len(gone)} rank(s) here exited {since:.0f}s ago after the last step "
               "(the job's other nodes may go on)")  # fmt: skip
        return HangVerdict(Verdict.HEALTHY, job, why, stalled, evidence=evidence)
    return None


def _trusted_culprit(
    job: str,
    ranks: Mapping[int, RankView],
    procs: Mapping[int, ProcState],
    stalled: float,
    sign: TrustedSign,
    evidence: dict[str, Any],
) -> HangVerdict | None:
    """This node's rank the trusted sign blames (None: no rank of the job here)."""
    here = sorted(r for r, s in procs.items() if r in ranks and s is not ProcState.REMOTE)
    pointed = [r for r in sign.ranks if r in here]
    if pointed:
        rank, why = pointed[0], "its process is stuck"
    elif not here:
        return None
    else:
        order = [r for state in CAUSES for r in here if procs[r] is state]
        low = min(ranks[r].step for r in here)
        rank = (order or [r for r in here if ranks[r].step == low])[0]
        why = CAUSES.get(procs[rank], "stalled")
    v = ranks[rank]
    evidence["trusted"] = sign.why
    return HangVerdict(
        Verdict.HANG, job,
        f"{_quiet(job, stalled, ranks)}; rank {v.rank} on {v.node}: {why} {_at(v)}, "
        "with trusted evidence on its node", stalled, v.rank, v.node,
        CAUSES.get(procs[rank], "trusted evidence on the node"), evidence, sign.why,
    )  # fmt: skip


# -- stragglers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SlowSettings:
    slow_percent: float = 20.0
    slow_windows: int = 3
    window_steps: int = 10


@dataclass(frozen=True)
class Straggler:
    job: str
    rank: int
    node: str
    #: Per window: (first step, this rank's mean busy s, peers' median busy s).
    windows: tuple[tuple[int, float, float], ...]
    explanation: str

    @property
    def over_percent(self) -> float:
        return min(100.0 * (m / p - 1.0) for _, m, p in self.windows if p > 0)


def _window_means(v: RankView, w: int) -> dict[int, float]:
    buckets: dict[int, list[float]] = {}
    for step, busy in v.busy:
        buckets.setdefault((step - 1) // w, []).append(busy)
    return {k: statistics.fmean(b) for k, b in buckets.items() if len(b) * 2 >= w}


def judge_stragglers(
    job: str, ranks: Mapping[int, RankView], settings: SlowSettings
) -> list[Straggler]:
    """Ranks slower than their peers' median in the last ``slow_windows``
    complete windows.  Needs at least two ranks with busy times."""
    w, n = settings.window_steps, settings.slow_windows
    if len(ranks) < 2:
        return []
    means = {r: _window_means(v, w) for r, v in ranks.items()}
    # Complete windows only: the current one is still filling on some rank.
    done = min(v.step for v in ranks.values()) // w
    wanted = list(range(done - n, done))
    if not wanted or wanted[0] < 0:
        return []
    out = []
    factor = 1.0 + settings.slow_percent / 100.0
    for rank, v in sorted(ranks.items()):
        rows = []
        for k in wanted:
            mine = means[rank].get(k)
            peers = [m[k] for r, m in means.items() if r != rank and k in m]
            if mine is None or not peers:
                break
            med = statistics.median(peers)
            if med <= 0 or mine <= med * factor:
                break
            rows.append((k * w + 1, mine, med))
        if len(rows) == n:
            s = Straggler(job, rank, v.node, tuple(rows), "")
            out.append(Straggler(job, rank, v.node, s.windows,
                f"rank {rank} on {v.node} is {s.over_percent:.0f}% slower than the median of "
                f"its peers in {n} consecutive windows of {w} steps "
                f"(busy {rows[-1][1]:.3f}s vs {rows[-1][2]:.3f}s)"))  # fmt: skip
    return out


#: The once-keys of a job run's reports (``agent/progress_pass.py``, and
#: the replay's copy in ``simulate/hang_replay.py``): one hang report and
#: one straggler report per job run and node, however many ranks the
#: records name.  The records are their user's to write: a thousand forged
#: ranks cost one alert, one audit line and one history entry, not a
#: thousand that flood the owner and the admins and push the node's own
#: faults out of its history (store/state.py).
ONCE_HANG = "hang"
ONCE_SLOW = "slow"
#: At most this many straggler ranks are named in the one report.
MAX_NAMED_RANKS = 32


def slowest(stragglers: Sequence[Straggler]) -> Straggler | None:
    """The straggler a job run's one report is about: the one furthest
    behind its peers (the lowest rank of a tie); None for none."""
    return max(stragglers, key=lambda s: (s.over_percent, -s.rank), default=None)
