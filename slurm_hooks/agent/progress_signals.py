"""The progress pass's zero-touch half: jobs that write no progress records.

Every pass (``[progress] zero_touch``): one ``scontrol listpids '*' NODE``
names every job process on this node with its task's rank (Slurm's own
record, ``detect/progress/tasks.py``); at most ``max_pids`` of them are
sampled from ``/proc`` (CPU time, state, context switches) beside one
NVML per-process utilisation call per GPU; the samples fold into each
job's :class:`JobActivity`, whose rank views the same judge reads as it
reads records (``judge_hang``).  A job that writes records is judged from
them alone (the precise, opted-in signal).

A job is read from Slurm once, when it first appears here (its owner, its
restart count, its comment: ``--comment slurm-hooks:no-watch`` opts it
out, as ``SLURM_HOOKS_WATCH=0`` in its environment does); again only when
a verdict is to be acted on.  What a job's processes show is its owner's
to cause (``USER_PROCESS``): alone it reports to the owner and the admins,
or requeues a job that opted in; trusted evidence on this node (NVML, a
process in the driver) goes the trusted way (``ProgressPass._look``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from slurm_hooks.agent.progress_cost import PassStats
from slurm_hooks.agent.progress_report import JobReport, Seen
from slurm_hooks.agent.progress_steps import RECHECK_S, StepWatch
from slurm_hooks.core import hostlist
from slurm_hooks.core.errors import JobGone, SlurmError
from slurm_hooks.core.identifiers import uid_of
from slurm_hooks.core.model import JobInfo, Provenance
from slurm_hooks.detect.progress import sockets
from slurm_hooks.detect.progress import tasks as tasklist
from slurm_hooks.detect.progress.activity import JobActivity, RankSample
from slurm_hooks.detect.progress.departures import Departures
from slurm_hooks.detect.progress.gather import read_hints
from slurm_hooks.detect.progress.judge import (
    ONCE_HANG,
    HangVerdict,
    ProcState,
    StepState,
    Verdict,
    judge_hang,
)

if TYPE_CHECKING:
    from slurm_hooks.detect.progress.judge import TrustedSign
    from slurm_hooks.detect.progress.records import RankView
    from slurm_hooks.detect.progress.settings import ProgressConfig

log = logging.getLogger(__name__)


class PassOwner(Protocol):
    """What the zero-touch watch uses of the progress pass that owns it
    (agent/progress_pass.py): a Protocol, so that the pass can import this
    module and this module need not import the pass."""

    node: str
    proc: str
    s: ProgressConfig
    seen: Seen

    @property
    def slurm(self) -> Any: ...

    @property
    def engine(self) -> Any: ...

    def _look(
        self, job: str, local: Mapping[int, RankView], stalled: float
    ) -> TrustedSign | None: ...

    def _hang(
        self, info: JobInfo, v: HangVerdict, base: tuple[Provenance, ...] = ...
    ) -> list[Any]: ...

    def _stalled(self, info: JobInfo, v: HangVerdict, now: float) -> None: ...

    def _named_elsewhere(self, info: JobInfo) -> bool: ...


#: A job whose ``--comment`` carries this token is not sampled (its records,
#: if it writes any, still are read: writing them is opting in).
NO_WATCH = "slurm-hooks:no-watch"
#: Jobs new on this node read from Slurm per pass at most (the others are
#: read on the next passes).
NEW_JOB_READS = 4


def comment_tokens(info: JobInfo) -> list[str]:
    return (info.comment or "").replace(",", " ").split()


@dataclass
class Watched:
    info: JobInfo
    activity: JobActivity
    #: Tasks of the job (its environment's ``SLURM_NTASKS``; None: not said).
    ntasks: int | None = None
    #: A rank of the job lived here at the last look.
    live: bool = False
    #: It left the listing while a rank lived here (followed on).
    away: bool = False
    #: Followed no more once it left the listing (its step over, acted on).
    done: bool = False

    def judged_on_its_own(self, views: Mapping[int, Any], worked_s: float) -> str | None:
        """Why a stall with the owner's evidence alone is not acted on (None:
        it is).  Only a job of several tasks (a collective can hang it) that
        worked ``worked_s`` (``first_step_allowance_s``) before going quiet:
        a single process that stops working, or a job that worked a moment
        and waits (an interactive session between commands), is its owner's
        business."""
        tasks = max(self.ntasks or 0, len(views), max(views, default=0) + 1)
        if tasks < 2:
            return "a single task"
        if self.activity.active_s < worked_s:
            return f"worked {self.activity.active_s:.0f}s only"
        return None


@dataclass
class SignalWatch:
    """Zero-touch state across passes: the jobs watched, the ones that opted out."""

    owner: PassOwner
    #: This node's job processes (tests replace it).
    node_tasks: Callable[[str, int], dict[str, list[tasklist.TaskPid]] | None] = field(
        default=tasklist.node_tasks
    )
    #: Per-process GPU utilisation since the last look (None: no GPUs).
    gpu_procs: Callable[[], dict[int, int]] | None = None
    jobs: dict[str, Watched] = field(default_factory=dict)
    refused: set[str] = field(default_factory=set)
    #: This pass's listing (None: none yet / Slurm not asked).
    listing: dict[str, list[tasklist.TaskPid]] | None = None
    turn: int = 0
    #: When each rank's process was first seen gone.
    departures: Departures = field(default_factory=Departures)
    #: Whether the step of a job's departed ranks still runs (Slurm, asked then).
    steps: StepWatch = field(default_factory=StepWatch)
    #: This pass's look at the ranks' TCP connections (the node's networks kept).
    socket_look: sockets.SocketLook | None = None

    def refresh(self) -> None:
        """This pass's listing of the node's job processes (one local call)."""
        self.listing = self.node_tasks(self.owner.node, self.owner.s.max_pids * 4)

    def run(
        self, now: float, stats: PassStats, reports: dict[str, JobReport], skip: set[str]
    ) -> list[Any]:
        """Sample and judge the jobs without records (``skip``: those with)."""
        p = self.owner
        listing = self.listing
        if listing is None:
            return []
        # A job that left the listing while its ranks here lived: its ranks
        # all exited here; followed on until Slurm says their step is over
        # or a verdict came of it (``Watched.done``).
        gone = {j: w for j, w in self.jobs.items() if j not in listing and j not in skip
                and (w.live or w.away) and not w.done}  # fmt: skip
        for w in gone.values():
            w.away = True
        self.jobs = {j: w for j, w in self.jobs.items() if j in listing or j in gone}
        self.departures.keep(set(self.jobs))
        self.steps.keep(self.jobs)
        self.refused &= set(listing)
        order = sorted((j for j in listing if j not in skip and j not in self.refused), key=int)
        if order:
            k = self.turn % len(order)
            order = order[k:] + order[:k]
        gpu = self.gpu_procs() if self.gpu_procs else None
        self.socket_look = sockets.SocketLook(
            p.proc, self.socket_look.networks if self.socket_look else None
        )
        left, reads, out = p.s.max_pids, 0, []
        for i, job in enumerate(order):
            if left <= 0:
                stats.skipped_pids += sum(len(listing[j]) for j in order[i:])
                self.turn += i
                break
            # Slurm's extern step is never a rank: not sampled.
            listed = [t for t in listing[job] if t.step != "extern"]
            watched = self.jobs.get(job)
            if watched is None:
                if reads >= NEW_JOB_READS:
                    continue
                reads += 1
                watched = self._start(job, [t.pid for t in listed if t.rank is not None], now)
                if watched is None:
                    continue
            # The tasks first (each rank's own process), then their children,
            # up to what the pass has left: the same ones every pass.
            chosen = sorted(listed, key=lambda t: t.rank is None)[:left]
            stats.skipped_pids += len(listed) - len(chosen)
            left -= len(chosen)
            stats.sampled_pids += len(chosen)
            out += self._judge(job, watched, chosen, gpu, now, stats, reports)
        for job, watched in gone.items():
            out += self._judge(job, watched, [], gpu, now, stats, reports)
        return out

    def _start(self, job: str, pids: list[int], now: float) -> Watched | None:
        """A job new here: its owner's opt-outs (``pids``: its tasks, whose
        environment is the job's), then Slurm's record of it."""
        p = self.owner
        env = tasklist.job_env(pids, p.proc)
        if env.watch_off:
            log.info("progress node=%s: job %s: SLURM_HOOKS_WATCH=0, not sampled", p.node, job)
            self.refused.add(job)
            return None
        try:
            info = p.slurm.get_job(job)
        except JobGone:
            return None
        except SlurmError as exc:
            log.info("progress: cannot read job %s: %s; read again next pass", job, exc)
            return None
        if NO_WATCH in comment_tokens(info):
            log.info("progress node=%s: job %s: %s, not sampled", p.node, job, NO_WATCH)
            self.refused.add(job)
            return None
        self.jobs[job] = Watched(info, JobActivity(now), env.ntasks)
        return self.jobs[job]

    def _judge(
        self,
        job: str,
        watched: Watched,
        listed: list[tasklist.TaskPid],
        gpu: dict[int, int] | None,
        now: float,
        stats: PassStats,
        reports: dict[str, JobReport],
    ) -> list[Any]:
        p = self.owner
        samples = {t.pid: s for t in listed if (s := tasklist.sample(t.pid, p.proc)) is not None}
        ranks = tasklist.ranks_of(listed, samples)
        # Each rank's own task holds its collective's connections.
        look = self.socket_look or sockets.SocketLook(p.proc)
        cut = look.unacked(pids[0] for pids in ranks.values() if pids[0] in samples)
        looked = {}
        for rank, pids in ranks.items():
            got = [samples[x] for x in pids if x in samples]
            util = max((gpu.get(x, 0) for x in pids), default=0) if gpu is not None else None
            looked[rank] = RankSample(
                pid=pids[0],
                cpu_s=sum(s.cpu_s for s in got),
                states=tuple(s.state for s in got),
                switches=sum(s.voluntary + s.involuntary for s in got),
                gpu_util=util,
                unacked=tuple(f"{u.peer} ({u.retransmits} retransmissions, {u.queued} bytes)"
                              for u in sorted(cut.get(pids[0], ()), key=lambda u: -u.retransmits)),
            )  # fmt: skip
        watched.activity.update(looked, now)
        views = watched.activity.views(p.node, watched.info.restart_count)
        if not views:
            return []
        procs = watched.activity.procs()
        watched.live = any(x is not ProcState.GONE for x in procs.values())
        if watched.live:
            self.steps.note(job, (t.step for t in listed if t.rank is not None))
        stats.judged += 1
        stats.signal_jobs += 1
        stalled = now - max(v.last_time for v in views.values())
        # No process of the job left here: nothing for trusted evidence to
        # point at (a lost GPU is the health check's, which never waits).
        sign = p._look(job, views, stalled) if listed else None
        hints = []
        if stalled >= p.s.hang_s:
            # The flight-recorder dumps the TaskProlog asked PyTorch for, and
            # NCCL RAS output: the job owner's files only.
            uid = uid_of(watched.info.user)
            if uid is not None:
                hints = read_hints(p.s.ras_path, p.s.flight_recorder_path, job, uid=uid)
        left = self.departures.look(job, views, procs, now)
        alone = hostlist.expand(watched.info.nodes or "")[:2] == [p.node]
        unacked = watched.activity.unacked()
        verdict = judge_hang(job, views, procs, now, p.s.hang, hints, sign, left, alone,
                             unacked=unacked)  # fmt: skip
        if verdict.verdict in (Verdict.HANG, Verdict.STALLED) and not watched.live:
            # Its ranks here all gone: does Slurm still run their step?  Asked
            # again when the answer kept is a minute old (then acted on at once).
            step = self._step(job, watched, now)
            if step is not None:
                verdict = judge_hang(job, views, procs, now, p.s.hang, hints, sign, left, alone,
                                     step, unacked)  # fmt: skip
            watched.done = step is StepState.OVER and not listed
        verdict.evidence["switches"] = watched.activity.switches()
        reports[job] = JobReport(job, str(verdict.verdict), len(views), None,
                                 verdict.explanation, verdict.stalled_s)  # fmt: skip
        if verdict.verdict not in (Verdict.HANG, Verdict.STALLED):
            return []
        if verdict.trusted is None:
            why = watched.judged_on_its_own(views, p.s.first_step_allowance_s)
            if why is not None:
                reports[job].explanation += f" (not acted on: {why})"
                return []
        return self._act(watched, verdict, now)

    def _step(self, job: str, watched: Watched, now: float) -> StepState | None:
        """Once the job's ranks here are all gone (on a job of several
        nodes), whether Slurm still runs their step (``progress_steps``)."""
        p = self.owner
        if watched.live or hostlist.expand(watched.info.nodes or "")[:2] == [p.node]:
            return None
        return self.steps.state(p.slurm, p.engine.slurm, job, now, RECHECK_S)

    def _act(self, watched: Watched, v: HangVerdict, now: float) -> list[Any]:
        """Check with Slurm that the job still runs here, in the same run, then act."""
        p = self.owner
        info = watched.info
        if v.verdict is Verdict.STALLED and (
            (info.batch_host and info.batch_host != p.node)
            or v.stalled_s < p.s.hang_s + p.s.no_culprit_report_s
        ):
            return []  # only the batch host reports a stall, and only late enough
        key = ONCE_HANG if v.verdict is Verdict.HANG else "stalled"
        if (info.job_id, info.restart_count, key) in p.seen.acted:
            return []
        try:
            now_info = p.slurm.get_job(info.job_id)
        except JobGone:
            return []
        except SlurmError as exc:
            log.warning("progress: cannot read job %s: %s; judged again next pass",
                        info.job_id, exc)  # fmt: skip
            return []
        base = (now_info.state or "").upper().split()[0] if now_info.state else ""
        if (
            base != "RUNNING"
            or not hostlist.contains(now_info.nodes or "", p.node)
            or now_info.restart_count != info.restart_count
        ):
            return []
        if v.verdict is Verdict.STALLED:
            p._stalled(now_info, v, now)
            return []
        if p._named_elsewhere(now_info):
            return []
        acted = p._hang(now_info, v, base=(Provenance.USER_PROCESS,))
        watched.done = True
        return acted
