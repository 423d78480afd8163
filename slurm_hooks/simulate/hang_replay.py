"""The false-alarm replay: healthy training jobs and hung ones through the
hang and straggler judges and the policy, on simulated time.

What a site wants to know about hang detection is two figures side by side:
how often it cries wolf on healthy jobs (false alarms per 10,000 job-hours;
the goal is none) and how soon it speaks when a job really hangs (seconds
from the stall to the verdict).  Both depend on ``[progress]`` settings
against what real training does: pauses of minutes for checkpoints and
evaluations, long first steps, data-loader stalls, restarts, uneven steps,
ranks of different speed (``workload``).

The watcher's progress pass is replayed as ``agent/progress_pass.py`` runs
it, one job at a time, every ``interval_s``: the records so far folded into
one view per rank (``records.rank_views``, kept up to date a record at a
time), the product's ``judge_hang`` and ``judge_stragglers``; on suspicion
the records of an earlier run are left alone (Slurm's restart count), a
culprit becomes the ``HANG`` finding the pass builds and goes through the
product's ``decide()``; a stall with no culprit is reported
``no_culprit_report_s`` after ``hang_s``; each verdict acts once per job run.
Only the machine is simulated: the records, the process states the pass
would read from /proc and the trusted evidence it would find beside them.

A false alarm is anything the product would do about a healthy job: tell
its owner (a hang, a stall, a straggler), requeue it, or drain its node.
"""

from __future__ import annotations

import enum
import math
import random
import statistics
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from slurm_hooks.core.model import Action, Component, Finding, Provenance, Status
from slurm_hooks.core.reason import job_component
from slurm_hooks.decide import PolicyConfig, decide
from slurm_hooks.detect.progress.departures import Departures
from slurm_hooks.detect.progress.judge import (
    CAUSES,
    ONCE_HANG,
    ONCE_SLOW,
    ProcState,
    StepState,
    TrustedSign,
    Verdict,
    judge_hang,
    judge_stragglers,
    slowest,
)
from slurm_hooks.detect.progress.records import RankView
from slurm_hooks.detect.progress.settings import STEP_RECHECK_S, ProgressConfig
from slurm_hooks.simulate.trace import EPOCH
from slurm_hooks.simulate.workload import (
    EXITED,
    Event,
    JobShape,
    Phase,
    WorkloadParams,
    draw_job,
    run_events,
    run_length_s,
)

NODE = "gpu0001"
#: Alarm kinds beside the policy's decision kinds (report_job, requeue_job, drain).
STALLED = "job_stalled"
STRAGGLER = "job_straggler"
#: The cause of a stall no culprit was found for.
NO_CULPRIT = "no culprit"
#: A rank writing its checkpoint to a network file system is seen in D state
#: (uninterruptible sleep) at this share of samples (assumption).
CHECKPOINT_D_SHARE = 0.1
#: The judge is asked to decide only on what it reads: the straggler windows
#: need this many windows of history beside the ones judged (the pass keeps
#: ``records.KEEP_STEPS``; the judges read no further back than this).
_SPARE_WINDOWS = 1
#: Culprit causes read from the state of a pid the job wrote (the user can cause each).
_PROC_CAUSES = frozenset(CAUSES.values())


@dataclass(frozen=True)
class Alarm:
    """What the product did about a job: its kind (a policy decision kind,
    ``job_stalled`` or ``job_straggler``), when (seconds of simulated time),
    what the gap was filled with (``workload.Phase``) and the verdict."""

    job: int
    run: int
    at: float
    kind: str
    phase: str
    rank: int | None
    explanation: str


class RecordFold:
    """One job's records as the watcher's view (``records.rank_views``):
    the latest restart, one view per rank, a record at a time."""

    def __init__(self, ranks: int, keep: int) -> None:
        self.n = ranks
        self.keep = keep
        self.restart = -1
        self.step = 0
        self._started = 0.0
        self.last = 0.0
        self._first: float | None = None
        self._busy: list[deque[tuple[int, float]]] = []
        self._pid = 0
        self._views: dict[int, RankView] = {}
        self._dirty = False

    def record(self, ev: Event, restart: int) -> None:
        if ev.step == 0:
            self.restart, self._started, self._first = restart, ev.time, None
            self._busy = [deque(maxlen=self.keep) for _ in range(self.n)]
            self._pid = 1000 + 100 * restart
        else:
            if self._first is None:
                self._first = ev.time
            for r in range(self.n):
                self._busy[r].append((ev.step, ev.busy[r]))
        self.step, self.last, self._dirty = ev.step, ev.time, True

    def views(self) -> dict[int, RankView]:
        if self._dirty:
            # Every rank records within milliseconds of the others: rank r
            # r milliseconds late (the order is what the judges compare).
            self._views = {
                r: RankView(r, NODE, self._pid + r, self.restart, self._started + r * 1e-3,
                            self.step, self.last + r * 1e-3,
                            None if self._first is None else self._first + r * 1e-3,
                            tuple(self._busy[r]))
                for r in range(self.n)
            }  # fmt: skip
            self._dirty = False
        return self._views


@dataclass
class _Watcher:
    """The progress pass over one job on its node (agent/progress_pass.py)."""

    job: int
    run: int
    settings: ProgressConfig
    policy: PolicyConfig
    fold: RecordFold
    opted_in: bool
    rng: random.Random
    #: Slurm's restart count of the running job.
    restart: int = 0
    #: Per rank: what /proc shows from now on (default: running), and the
    #: trusted evidence the pass would find on the node (NVML, the kernel).
    procs: dict[int, ProcState] = field(default_factory=dict)
    trusted: list[tuple[Provenance, str]] = field(default_factory=list)
    acted: set[str] = field(default_factory=set)
    #: When each rank was first seen gone (the pass keeps one per node).
    departures: Departures = field(default_factory=Departures)
    #: The job runs on this node only (``Setup.one_node``).
    alone: bool = True
    #: What Slurm would answer about the step of this node's ranks, asked
    #: once they are all gone (``agent/progress_steps.py``): over once the
    #: training step ended (every rank of the job left), else running.
    step: StepState = StepState.RUNNING
    #: Step reads the pass would have made, and when the last answer came
    #: (the pass keeps it: a step over for good, a running one a minute).
    step_reads: int = 0
    asked_at: float | None = None
    #: The client lists steps (the CLI backend); False: Slurm is never asked.
    asks: bool = True
    #: The longest stall judged a hang or a stall, per culprit cause (what a
    #: threshold per cause would have to stay above), this job's runs.
    stalls: dict[str, float] = field(default_factory=dict)
    passes: int = 0
    _window: int = -1
    #: Consecutive quiet passes that saw the trusted evidence (the pass's
    #: ``_look``: the judge acts on ``TRUSTED_LOOKS``).
    _looks: int = 0

    def run_pass(self, now: float, phase: Phase) -> list[Alarm]:
        s = self.settings
        fold = self.fold
        if fold.restart < 0:
            return []  # no records yet: never judged
        self.passes += 1
        # A job that recorded a step since the last pass is progressing: no
        # hang verdict needs asking (the judge's premise, and most passes).
        quiet = now - fold.last >= min(s.interval_s, s.hang_s)
        # The straggler verdict reads complete windows only: it can change
        # only when the ranks complete one.
        window = fold.step // s.window_steps
        if self.procs and not quiet:
            # The pass reads every rank's state on every pass: a departure is
            # dated by the first pass that sees it, quiet or not.
            self.departures.look(str(self.job), fold.views(), self.procs, now)
        if not quiet and window == self._window:
            return []
        views = fold.views()
        slow = []
        if window != self._window:
            self._window = window
            slow = judge_stragglers(str(self.job), views, s.slow)
        v = None
        if quiet:
            procs = self.procs
            if phase in (Phase.CHECKPOINT, Phase.FINAL) and not procs:
                procs = {r: ProcState.DISK for r in views if self.rng.random() < CHECKPOINT_D_SHARE}
            self._looks = self._looks + 1 if self.trusted else 0
            sign = TrustedSign(self.trusted[0][1], self._looks) if self.trusted else None
            left = self.departures.look(str(self.job), views, procs, now)
            v = judge_hang(str(self.job), views, procs, now, s.hang, trusted=sign, departed=left,
                           alone=self.alone)  # fmt: skip
            gone = bool(procs) and all(x is ProcState.GONE for x in procs.values())
            if (
                v.verdict in (Verdict.HANG, Verdict.STALLED)
                and gone
                and not self.alone
                and self.asks
            ):
                # As the pass does: only then asks Slurm whether their step runs.
                if self.asked_at is None or (
                    self.step is StepState.RUNNING and now - self.asked_at > STEP_RECHECK_S
                ):
                    self.step_reads, self.asked_at = self.step_reads + 1, now
                v = judge_hang(str(self.job), views, procs, now, s.hang, trusted=sign,
                               departed=left, alone=self.alone, step=self.step)  # fmt: skip
        else:
            self._looks = 0
        hung = v is not None and v.verdict in (Verdict.HANG, Verdict.STALLED)
        if not hung and not slow:
            return []
        if fold.restart != self.restart:
            return []  # records of an earlier run
        if v is not None and hung:
            cause = v.cause or NO_CULPRIT
            self.stalls[cause] = max(self.stalls.get(cause, 0.0), v.stalled_s)
        out: list[Alarm] = []
        if v is not None and hung and v.verdict is Verdict.HANG and v.rank is not None:
            if self._once(ONCE_HANG):
                out.append(self._hang(now, phase, v.rank, v.cause or "", v.stalled_s,
                                      v.explanation))  # fmt: skip
        elif v is not None and hung:
            if v.stalled_s >= s.hang_s + s.no_culprit_report_s and self._once("stalled"):
                out.append(Alarm(self.job, self.run, now, STALLED, str(phase), None,
                                 v.explanation))  # fmt: skip
        else:
            st = slowest(slow)
            if st is not None and self._once(ONCE_SLOW):
                out.append(Alarm(self.job, self.run, now, STRAGGLER, str(phase), st.rank,
                                 st.explanation))  # fmt: skip
        return out

    def _once(self, key: str) -> bool:
        if key in self.acted:
            return False
        self.acted.add(key)
        return True

    def _hang(self, now: float, phase: Phase, rank: int, cause: str, stalled: float,
              text: str) -> Alarm:  # fmt: skip
        """The HANG finding as the pass builds it, through the policy."""
        job = str(self.job)
        sources = [Provenance.USER_FILE]
        if cause in _PROC_CAUSES:
            sources.append(Provenance.USER_PROCESS)
        sources += [p for p, _ in self.trusted]
        drain = self.settings.drain_hang
        finding = Finding(
            check="progress", status=Status.FAIL if drain else Status.WARN, code="HANG",
            message=text, component=Component("job", name=job_component(job, rank)[4:]),
            action=Action.DRAIN if drain else Action.NONE,
            values={"job": job, "rank": rank, "user": f"user{self.job}",
                    "restart_count": self.restart, "requeue_opt_in": self.opted_in,
                    "cause": cause, "stalled_s": round(stalled, 1)},
            provenance=tuple(sources),
        )  # fmt: skip
        at = EPOCH + timedelta(seconds=now)
        kinds = [str(d.kind) for d in decide([finding], None, None, None, self.policy, at,
                                             node=NODE)]  # fmt: skip
        return Alarm(self.job, self.run, now, kinds[0] if kinds else "none", str(phase), rank,
                     text)  # fmt: skip


@dataclass(frozen=True)
class Setup:
    """What a replay runs against: the watcher's ``[progress]`` settings,
    the policy and the healthy workload (each the product's default)."""

    progress: ProgressConfig = field(default_factory=ProgressConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    workload: WorkloadParams = field(default_factory=WorkloadParams)
    #: Each job runs on the watcher's node alone (its ranks there are all of
    #: them); False: the ranks replayed are one node's share of a job on
    #: several nodes, whose other nodes this watcher cannot see.
    one_node: bool = True
    #: The watcher can ask Slurm whether a job's step still runs (the CLI
    #: backend); False: never asked (another backend), as before it could.
    asks_steps: bool = True

    def validate(self) -> None:
        self.progress.validate()
        self.workload.validate()

    def job(self, job: int, rng: random.Random) -> tuple[JobShape, _Watcher]:
        """A new job and the watcher's pass over it (half the jobs opted in
        to a requeue on their own evidence)."""
        shape = draw_job(rng, self.workload)
        s = self.progress
        fold = RecordFold(shape.ranks, (s.slow_windows + _SPARE_WINDOWS) * s.window_steps)
        w = _Watcher(job, 0, s, self.policy, fold, rng.random() < 0.5, rng)
        w.alone, w.asks = self.one_node, self.asks_steps
        return shape, w


def _passes(
    w: _Watcher,
    events: Iterator[Event],
    first_pass: float,
    until: float = math.inf,
    gaps: dict[str, float] | None = None,
) -> Iterator[tuple[float, list[Alarm]]]:
    """Feed ``events`` to the fold and run a pass every ``interval_s`` until
    the run ends (or ``until``), yielding each pass's time and alarms; the
    longest gap before a record of each phase goes to ``gaps``."""
    t = first_pass
    step = w.settings.interval_s
    fold, last = w.fold, None
    for ev in events:
        while t < ev.time and t < until:
            yield t, w.run_pass(t, ev.phase)
            t += step
        if t >= until:
            return
        if gaps is not None and last is not None and ev.time - last > gaps.get(ev.phase, 0.0):
            gaps[ev.phase] = ev.time - last
        if ev.step == EXITED:
            w.procs = {r: ProcState.GONE if r in ev.gone else ProcState.RUNNING
                       for r in range(fold.n)}  # fmt: skip
            # Every rank of the job left: Slurm lists the step no more.
            w.step = StepState.OVER if len(ev.gone) == fold.n else StepState.RUNNING
            continue
        if ev.step < 0:
            return
        last = ev.time
        fold.record(ev, w.restart)


# -- healthy jobs -------------------------------------------------------------------------


@dataclass
class HealthyResult:
    seed: int
    job_hours: float
    jobs: int
    runs: int
    passes: int
    alarms: list[Alarm]
    #: The longest gap between two records of a run (or before its end),
    #: per phase: what a hang threshold must stay above.
    longest_gap_s: dict[str, float]
    #: The longest stall judged a hang, per culprit cause (``NO_CULPRIT``:
    #: a stall).  Replayed at a short ``hang_s``, what each cause would need.
    longest_stall_s: dict[str, float] = field(default_factory=dict)
    #: Reads of a job's steps the passes would have made (Slurm asked).
    step_reads: int = 0

    @property
    def per_10k_job_hours(self) -> float:
        return 10_000.0 * len(self.alarms) / self.job_hours if self.job_hours else 0.0

    def by(self, attr: str) -> Counter[str]:
        return Counter(str(getattr(a, attr)) for a in self.alarms)


def replay_healthy(job_hours: float, seed: int, setup: Setup | None = None) -> HealthyResult:
    """Healthy jobs, one after another, until ``job_hours`` of them ran."""
    setup = setup or Setup()
    setup.validate()
    s, wp = setup.progress, setup.workload
    rng = random.Random(seed)
    alarms: list[Alarm] = []
    gaps: dict[str, float] = {}
    stalls: dict[str, float] = {}
    total = 0.0
    jobs = runs = passes = step_reads = 0
    while total < job_hours * 3600.0:
        jobs += 1
        shape, w = setup.job(jobs, rng)
        start = 0.0
        for restart in range(1000):
            runs += 1
            # Each verdict acts once per job run (job, restart count).
            w.run, w.restart, w.procs, w.acted = restart, restart, {}, set()
            w.step, w.asked_at = StepState.RUNNING, None
            w.departures = Departures()
            length = run_length_s(rng, wp)
            requeued = rng.random() < wp.requeue_share and total + length < job_hours * 3600.0
            events = run_events(shape, rng, wp, start, length, requeued)
            end = start
            for t, found in _passes(w, events, start + rng.uniform(0, s.interval_s), gaps=gaps):
                alarms += found
                end = t
            total += end - start
            if not requeued:
                break
            start = end + rng.uniform(60.0, 1800.0)  # pending, then running again
        passes += w.passes
        step_reads += w.step_reads
        for cause, stalled in w.stalls.items():
            stalls[cause] = max(stalls.get(cause, 0.0), stalled)
    return HealthyResult(seed, total / 3600.0, jobs, runs, passes, alarms, gaps, stalls,
                         step_reads)  # fmt: skip


# -- hung jobs ----------------------------------------------------------------------------


class HangCase(enum.StrEnum):
    """How a rank of a running job stops progressing."""

    #: Its owner stopped it (SIGSTOP): /proc shows T; user-side evidence only.
    STOPPED = "stopped"
    #: It exited while its peers wait: /proc shows it gone; user-side only.
    EXITED = "exited"
    #: Wedged in its GPU work: D state inside the driver, its GPU lost to
    #: NVML (trusted evidence on the node).
    WEDGED = "wedged"
    #: Blocked with no sign on the node (a network partition): every rank
    #: waits, /proc shows nothing wrong.
    SILENT = "silent"


#: What each case should come to: the alarm kinds that name it.
EXPECTED = {
    HangCase.STOPPED: frozenset({"report_job", "requeue_job"}),
    HangCase.EXITED: frozenset({"report_job", "requeue_job"}),
    HangCase.WEDGED: frozenset({"drain"}),
    HangCase.SILENT: frozenset({STALLED}),
}


@dataclass(frozen=True)
class Detection:
    case: HangCase
    #: Seconds from the rank's stall to the alarm (None: none within the horizon).
    latency_s: float | None
    kind: str | None
    #: The rank the alarm named, and the one that stalled.
    named: int | None
    culprit: int

    @property
    def right(self) -> bool:
        if self.kind not in EXPECTED[self.case]:
            return False
        return self.case is HangCase.SILENT or self.named == self.culprit


def _apply(case: HangCase, w: _Watcher, culprit: int, ranks: int) -> None:
    running = dict.fromkeys(range(ranks), ProcState.SLEEPING)
    if case is HangCase.STOPPED:
        running[culprit] = ProcState.STOPPED
    elif case is HangCase.EXITED:
        running[culprit] = ProcState.GONE
    elif case is HangCase.WEDGED:
        running[culprit] = ProcState.DISK
        w.trusted = [(Provenance.NVML, "NVML: gpu0 (GPU_IS_LOST) lost"),
                     (Provenance.KERNEL, f"rank {culprit} in D state in nvidia_* (stack)")]  # fmt: skip
    w.procs = running


def replay_hang(
    case: HangCase, seed: int, setup: Setup | None = None, horizon_s: float = 3600.0
) -> Detection:
    """One healthy job in which, at a random moment past its start, a rank
    stops progressing as ``case`` says; the first alarm after it."""
    setup = setup or Setup()
    s = setup.progress
    rng = random.Random(seed)
    shape, w = setup.job(seed, rng)
    length = 4 * 3600.0
    wedge = rng.uniform(1800.0, length - 1800.0)
    culprit = rng.randrange(shape.ranks)
    events = run_events(shape, rng, setup.workload, 0.0, length)
    first = rng.uniform(0, s.interval_s)
    for _ in _passes(w, events, first, until=wedge):
        pass
    # From the wedge on nobody records a step: the culprit stops, the others
    # block in the next collective.
    w.acted.clear()
    _apply(case, w, culprit, shape.ranks)
    t = first + s.interval_s * math.ceil((wedge - first) / s.interval_s)
    while t <= wedge + horizon_s:
        for a in w.run_pass(t, Phase.STEP):
            return Detection(case, t - wedge, a.kind, a.rank, culprit)
        t += s.interval_s
    return Detection(case, None, None, None, culprit)


@dataclass(frozen=True)
class CaseFigures:
    case: HangCase
    trials: int
    detected: int
    right: int
    latencies: tuple[float, ...]

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.latencies) if self.latencies else None

    @property
    def max_s(self) -> float | None:
        return max(self.latencies) if self.latencies else None


def replay_hangs(
    trials: int,
    seed: int,
    setup: Setup | None = None,
    cases: Sequence[HangCase] = tuple(HangCase),
) -> list[CaseFigures]:
    out = []
    for case in cases:
        found = [replay_hang(case, seed * 100_003 + i, setup) for i in range(trials)]
        lat = tuple(d.latency_s for d in found if d.latency_s is not None)
        out.append(CaseFigures(case, trials, len(lat), sum(d.right for d in found), lat))
    return out


__all__ = [
    "EXPECTED", "NO_CULPRIT", "STALLED", "STRAGGLER", "Alarm", "CaseFigures", "Detection", "HangCase",
    "HealthyResult", "RecordFold", "Setup", "replay_hang", "replay_hangs", "replay_healthy",
]  # fmt: skip
