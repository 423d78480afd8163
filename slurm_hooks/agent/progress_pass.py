"""The watcher's progress pass: judge the jobs on this node that write progress
records, and act on a hang or a straggler through the engine.

Every ``[progress] interval_s`` the watcher's progress thread calls
:meth:`ProgressPass.run`.  Its cost is bounded whatever users put in the
directory (issue #27): one Slurm read of this node's jobs (kept
``jobs_cache_s`` unless a new directory appears), and only the directories
of jobs running here are read, within a budget of files, bytes and CPU
(``gather.Budget``); what was skipped or refused is counted
(``progress_cost``).  A job without records is never looked at.  On suspicion (a stall, a
straggler) it asks Slurm about the job and judges again with what Slurm
says, because the records were written by the job's user:

* the job must be RUNNING on this node with the restart count the records
  carry, and only record files owned by the job's owner count;
* a culprit is acted on only by the node that hosts it, and only when its
  process (same uid, started before its first record) is gone, stopped or
  in D state, or when it is visibly the rank the others wait for;
* every such finding names its provenance (core.model.Provenance): the
  records and the process state are the user's (USER_FILE, USER_PROCESS);
  trusted evidence found on this node beside them (NVML: a GPU lost;
  the kernel: a process of the job, per Slurm, stuck inside the nvidia
  driver; ``detect/progress/corroborate.py``) is added.  The policy
  (``decide/trust.py``) drains only on trusted evidence; user-side alone
  reports to the owner, or requeues that job when it opted in
  (``OPT_IN`` in its comment).

Across nodes (docs/progress.md): each watcher judges the records it can
see - its own ranks' on a node-local ``[progress] dir``, every rank's when
the directory is shared - and drains only its own node.  A stall with no
culprit here is reported (owner and admins, no drain) by the job's batch
host, ``no_culprit_report_s`` after ``hang_s``, unless a node of the job
already carries our HANG reason for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from slurm_hooks.agent.progress_cost import PassReads, PassStats, PassTotals
from slurm_hooks.agent.progress_report import (
    JobReport,
    Report,
    ReportCap,
    Seen,
    opted_in,
    outcome,
    report_families,
    skew,
    tell,
)
from slurm_hooks.agent.progress_steps import RECHECK_S, StepWatch
from slurm_hooks.core import hostlist
from slurm_hooks.core.errors import JobGone, SlurmError
from slurm_hooks.core.identifiers import uid_of
from slurm_hooks.core.model import Action, Component, Finding, JobInfo, Provenance, Status
from slurm_hooks.core.ownership import our_reason
from slurm_hooks.core.reason import job_component
from slurm_hooks.detect.progress import corroborate
from slurm_hooks.detect.progress.departures import Departures
from slurm_hooks.detect.progress.external import Suspect
from slurm_hooks.detect.progress.gather import (
    Budget,
    base_stat,
    is_job_dir,
    job_dirs,
    metering,
    read_hints,
    read_job,
)
from slurm_hooks.detect.progress.judge import (
    MAX_NAMED_RANKS,
    ONCE_HANG,
    ONCE_SLOW,
    HangVerdict,
    ProcState,
    Straggler,
    TrustedSign,
    Verdict,
    judge_hang,
    judge_stragglers,
    slowest,
)
from slurm_hooks.detect.progress.pidns import rank_processes
from slurm_hooks.detect.progress.records import RankView, rank_views
from slurm_hooks.detect.progress.settings import ProgressConfig

log = logging.getLogger(__name__)

CHECK = "progress"
#: Job directories whose newest record is older than this are not read.
FORGET_S = 86400.0
#: Culprit causes read from a pid the job wrote (the user can cause each).
_PROC_CAUSES = frozenset(("process gone", "process stopped (state T)",
                          "process in uninterruptible sleep (state D)"))  # fmt: skip


class ProgressPass:
    #: The job's processes on this node as Slurm knows them (tests replace it).
    step_pids: Callable[[str, str], list[int]] = staticmethod(corroborate.step_pids)

    def __init__(
        self,
        settings: ProgressConfig,
        node: str,
        engine: Any,
        *,
        gpu_view: Callable[[], list[dict[str, Any]]] | None = None,
        gpu_procs: Callable[[], dict[int, int]] | None = None,
        clock: Callable[[], float] = time.time,
        proc: str = "/proc",
    ):
        from slurm_hooks.agent.progress_signals import SignalWatch

        self.s = settings
        self.node = node
        self.engine = engine
        self.gpu_view = gpu_view
        self.clock = clock
        self.proc = proc
        self.seen = Seen()
        self.cap = ReportCap(settings.reports_per_user_hour)
        self.reports: dict[str, JobReport] = {}
        #: This node's running jobs from the last Slurm read, and when.
        self._jobs: dict[str, JobInfo] | None = None
        self._jobs_at = 0.0
        #: Directories the last read found no running job for.
        self._absent: set[str] = set()
        self._turn = 0
        self._suspect_turn = 0
        self._reads: PassReads | None = None
        self._names: tuple[tuple[int, int, int], float, list[str]] | None = None
        #: Per job: the trusted sign seen on its last looks (key, looks).
        self._signs: dict[str, tuple[str, int]] = {}
        #: This pass's NVML view, read once at most (None: not yet).
        self._view: list[dict[str, Any]] | None = None
        #: What this pass's looks found per job: (key, why, ranks).
        self._found: dict[str, tuple[str, str, tuple[int, ...]]] = {}
        #: When each rank's process was first seen gone (the judge tells a
        #: rank lost mid-run from ranks that finished by it).
        self.departures = Departures()
        #: Whether the step of a job's departed ranks still runs (Slurm, asked then).
        self.steps = StepWatch()
        #: The last pass's cost, and every pass's summed (``/metrics``).
        self.last = PassStats()
        self.totals = PassTotals()
        #: Jobs without records, through their processes (zero-touch).
        self.signals = SignalWatch(self, gpu_procs=gpu_procs)

    @property
    def slurm(self) -> Any:
        """Slurm as the pass reads it: every read counted, nodes read once
        per pass (:class:`PassReads`)."""
        return self._reads if self._reads is not None else self.engine.slurm

    # -- the pass -------------------------------------------------------------------

    def _node_jobs(self, names: list[str], stats: PassStats) -> dict[str, JobInfo] | None:
        """This node's running jobs: one Slurm read, kept ``jobs_cache_s``
        unless a directory appeared that the last read did not explain."""
        now = time.monotonic()
        fresh = self._jobs is not None and now - self._jobs_at < self.s.jobs_cache_s
        if fresh and self._jobs is not None and not (set(names) - set(self._jobs) - self._absent):
            return self._jobs
        stats.slurm_reads += 1
        try:
            jobs = self.engine.slurm.jobs_on_node(self.node)
        except SlurmError as exc:
            log.warning("progress node=%s: cannot list the node's jobs: %s; pass skipped",
                        self.node, exc)  # fmt: skip
            return None
        self._jobs = {j.job_id: j for j in jobs if (j.state or "").upper().startswith("RUNNING")}
        self._jobs_at = now
        self._absent = {n for n in names if n not in self._jobs}
        return self._jobs

    def _listing(self) -> list[str]:
        """The directory's job names, listed again only when it changed (its
        mtime moves when an entry is added or removed) or ``jobs_cache_s``
        passed: thousands of entries cost one ``stat`` a pass, not a walk."""
        st = base_stat(self.s.dir)
        if st is None:
            return []
        stamp = (st.st_dev, st.st_ino, st.st_mtime_ns)
        now = time.monotonic()
        if (
            self._names is None
            or self._names[0] != stamp
            or now - self._names[1] > self.s.jobs_cache_s
        ):
            self._names = (stamp, now, list(job_dirs(self.s.dir, self.s.max_dirs)))
        return self._names[2]

    def run(self) -> list[Any]:
        """One look at the record directories of this node's running jobs;
        returns the engine's decisions.  Cost bounded by :class:`Budget`."""
        now = self.clock()
        stats = PassStats()
        budget = Budget(self.s.max_files, self.s.max_bytes, self.s.max_cpu_s)
        out: list[Any] = []
        reports: dict[str, JobReport] = {}
        self._reads = PassReads(self.engine.slurm, stats)
        self._view = None
        self._found = {}
        try:
            with metering(budget):
                out = self._pass(now, stats, budget, reports)
        finally:
            self._reads = None
            stats.files, stats.bytes = budget.files, budget.bytes
            stats.skipped_files = budget.skipped_files
            stats.rejected = list(budget.rejected)
            stats.cpu_s = budget.cpu_s()
            self.last = stats
            self.totals.add(stats)
        self.reports = reports
        return out

    def _pass(
        self, now: float, stats: PassStats, budget: Budget, reports: dict[str, JobReport]
    ) -> list[Any]:
        recorded: set[str] = set()
        # This node's job processes first: the records' trusted looks use them too.
        if self.s.zero_touch:
            self.signals.refresh()
        out = self._records(now, stats, budget, reports, recorded)
        if self.s.zero_touch:
            out += self.signals.run(now, stats, reports, recorded)
        return out

    def _records(
        self,
        now: float,
        stats: PassStats,
        budget: Budget,
        reports: dict[str, JobReport],
        recorded: set[str],
    ) -> list[Any]:
        """Judge the jobs that write records (``recorded``: the jobs that do)."""
        names = self._listing()
        stats.dirs = len(names)
        if not names:
            return []
        jobs = self._node_jobs(names, stats)
        if jobs is None:
            stats.skipped_dirs = len(names)
            return []
        # A job's directory and files count only if its owner's (uid from
        # Slurm's user name): never a squatter's under the job's id.
        owners = {n: uid_of(jobs[n].user) for n in jobs.keys() & set(names)}
        mine = sorted((n for n, uid in owners.items()
                       if uid is not None and is_job_dir(self.s.dir, n, uid)), key=int)  # fmt: skip
        stats.skipped_dirs = len(names) - len(mine)
        # In turn: a pass cut short by its budget starts further on next time.
        if mine:
            k = self._turn % len(mine)
            mine = mine[k:] + mine[:k]
        out: list[Any] = []
        suspects: list[str] = []
        self._signs = {j: v for j, v in self._signs.items() if j in jobs}
        self.seen.keep({j: info.restart_count for j, info in jobs.items()})
        self.departures.keep(set(jobs))
        self.steps.keep(jobs)
        for i, job in enumerate(mine):
            if budget.spent():
                stats.skipped_dirs += len(mine) - i
                self._turn += i
                break
            views = rank_views(
                read_job(self.s.dir, job, tail_bytes=self.s.tail_bytes, uid=owners[job]), job
            )
            if views:
                recorded.add(job)
            local = {r: v for r, v in views.items() if v.node == self.node}
            if not local or now - max(v.last_time for v in views.values()) > FORGET_S:
                continue
            stats.judged += 1
            local, procs = self._procs(job, local, None, False)
            sign = self._look(job, local, now - max(v.last_time for v in views.values()))
            verdict = self._judge(job, jobs[job], views, local, procs, now, (), sign)
            slow = [x for x in judge_stragglers(job, views, self.s.slow) if x.rank in local]
            reports[job] = JobReport(job, str(verdict.verdict), len(views), skew(views),
                                     verdict.explanation, verdict.stalled_s)  # fmt: skip
            if verdict.verdict in (Verdict.HANG, Verdict.STALLED) or slow:
                suspects.append(job)
        # Suspects ask Slurm about their job: at most max_job_reads per pass,
        # the others in turn on the next passes.
        k = self._suspect_turn % len(suspects) if suspects else 0
        ordered = suspects[k:] + suspects[:k]
        for n, job in enumerate(ordered):
            if n >= self.s.max_job_reads:
                stats.deferred_suspects += 1
                continue
            out += self._suspect(job, now)
        self._suspect_turn += min(len(ordered), self.s.max_job_reads)
        return out

    # -- trusted evidence beside a stall --------------------------------------------

    def _nvml_view(self) -> list[dict[str, Any]]:
        if self._view is None:
            self._view = self.gpu_view() if self.gpu_view else []
        return self._view

    def _judge(
        self, job: str, info: JobInfo, views: Mapping[int, RankView],
        local: Mapping[int, RankView], procs: dict[int, ProcState], now: float,
        hints: Sequence[Suspect], sign: TrustedSign | None, max_age_s: float = float("inf"),
    ) -> HangVerdict:  # fmt: skip
        """``judge_hang`` with what this node knows besides the records: when
        each of its ranks left, whether the job runs here alone, and, when
        that would be a hang with its ranks here all gone, whether Slurm
        still runs their step (asked then, kept; asked again before acting
        when ``max_age_s`` old: ``progress_steps``)."""
        left = self.departures.look(job, local, procs, now)
        alone = hostlist.expand(info.nodes or "")[:2] == [self.node]
        v = judge_hang(job, views, procs, now, self.s.hang, hints, sign, left, alone)
        here = [s for r, s in procs.items() if r in local]
        if any(s is not ProcState.GONE for s in here):
            if (listing := self.signals.listing) is not None and job in listing:
                pids = {x.pid for x in local.values()}
                self.steps.note(job, (t.step for t in listing[job] if t.pid in pids))
            return v
        if v.verdict in (Verdict.HANG, Verdict.STALLED) and here and not alone:
            step = self.steps.state(self.slurm, self.engine.slurm, job, now, max_age_s)
            if step is not None:
                v = judge_hang(job, views, procs, now, self.s.hang, hints, sign, left, alone, step)
        return v

    def _look(self, job: str, local: Mapping[int, RankView], stalled: float) -> TrustedSign | None:
        """Look for trusted evidence beside a job quiet for a pass or more,
        and count the consecutive looks that saw the same (the judge acts
        on two: ``TRUSTED_LOOKS``).  A job that progresses costs nothing."""
        if stalled < min(self.s.interval_s, self.s.trusted_confirm_s):
            self._signs.pop(job, None)
            return None
        found = self._trusted_now(job, local)
        if found is None:
            self._signs.pop(job, None)
            return None
        key, _, _ = found
        prev = self._signs.get(job)
        looks = prev[1] + 1 if prev is not None and prev[0] == key else 1
        self._signs[job] = (key, looks)
        self._found[job] = found
        return self._sign(job)

    def _sign(self, job: str) -> TrustedSign | None:
        """The sign this pass's look found for ``job`` (None: none)."""
        seen, found = self._signs.get(job), self._found.get(job)
        if seen is None or found is None:
            return None
        return TrustedSign(found[1], seen[1], found[2])

    def _trusted_now(
        self, job: str, local: Mapping[int, RankView]
    ) -> tuple[str, str, tuple[int, ...]] | None:
        """(key, why, ranks pointed at) of the trusted evidence on this node
        now: a process of the job (as Slurm lists it) stuck in the driver
        first, else NVML's GPU lost or silent; None when there is none."""
        stuck = corroborate.stuck_pid(self._job_pids(job), self.proc)
        if stuck is not None:
            pid, why = stuck
            chain = corroborate.ancestors(pid, self.proc)
            ranks = tuple(r for r, v in sorted(local.items()) if v.pid in chain)
            return f"kernel:{pid}", why, ranks
        seen = corroborate.nvml_evidence(self._nvml_view())
        if seen is not None:
            return "nvml", seen, ()
        return None

    def _job_pids(self, job: str, ask: bool = True) -> list[int]:
        """The job's processes here as Slurm lists them: from this pass's
        listing of the node, else (``ask``) asked for this job alone."""
        listing = self.signals.listing
        if listing is not None and job in listing:
            return [t.pid for t in listing[job]]
        return self.step_pids(job, self.node) if ask else []

    def _procs(
        self, job: str, local: Mapping[int, RankView], uid: int | None, ask: bool
    ) -> tuple[dict[int, RankView], dict[int, ProcState]]:
        """The ranks here as the watcher sees them (``pidns``), and their
        processes.  Only a suspect may cost a Slurm call (``ask``): every
        job of a pass could name a namespace."""
        return rank_processes(local, uid, lambda: self._job_pids(job, ask), proc=self.proc)

    def _suspect(self, job: str, now: float) -> list[Any]:
        """Ask Slurm, re-read trusting only the owner's files, judge again, act."""
        try:
            info = self.slurm.get_job(job)
        except JobGone:
            return []
        except SlurmError as exc:
            log.warning("progress: cannot read job %s: %s; judged again next pass", job, exc)
            return []
        base = (info.state or "").upper().split()[0] if info.state else ""
        if base != "RUNNING" or not hostlist.contains(info.nodes or "", self.node):
            return []
        uid = uid_of(info.user)
        if uid is None:
            return []
        views = rank_views(read_job(self.s.dir, job, tail_bytes=self.s.tail_bytes, uid=uid), job)
        if not views or next(iter(views.values())).restart != info.restart_count:
            return []  # records of an earlier run (or none of the owner's)
        local = {r: v for r, v in views.items() if v.node == self.node}
        local, procs = self._procs(job, local, uid, True)
        procs.update({r: ProcState.REMOTE for r in views if r not in local})
        hints = read_hints(self.s.ras_path, self.s.flight_recorder_path, job, uid=uid)
        verdict = self._judge(job, info, views, local, procs, now, hints, self._sign(job),
                              RECHECK_S)  # fmt: skip
        out: list[Any] = []
        if verdict.verdict is Verdict.HANG and verdict.rank in local:
            # One culprit per job run: once a node of the job carries our HANG
            # reason for it, the job is being evacuated, and ranks dying of
            # that (killed with the step) are its consequence, not new culprits.
            if self._named_elsewhere(info):
                log.info("progress node=%s: job %s already has a HANG culprit; %s not acted on",
                         self.node, info.job_id, verdict.explanation)  # fmt: skip
                return []
            out += self._hang(info, verdict)
        elif verdict.verdict in (Verdict.HANG, Verdict.STALLED):
            self._stalled(info, verdict, now)
        if verdict.verdict not in (Verdict.HANG, Verdict.STALLED):
            found = [st for st in judge_stragglers(job, views, self.s.slow) if st.rank in local]
            if found:
                out += self._slow(info, found)
        return out

    # -- metrics ------------------------------------------------------------------------

    def metric_families(self) -> list[Any]:
        """``/metrics`` of the last pass: step-time skew and stall per job."""
        return report_families(self.reports)

    # -- acting -------------------------------------------------------------------------

    def _once(self, info: JobInfo, key: str) -> bool:
        k = (info.job_id, info.restart_count, key)
        if k in self.seen.acted:
            return False
        self.seen.acted.add(k)
        return True

    def _hang(
        self, info: JobInfo, v: HangVerdict, base: tuple[Provenance, ...] = (Provenance.USER_FILE,)
    ) -> list[Any]:
        """Act on a hang: ``base`` is whose evidence the verdict stands on
        (records: USER_FILE; zero-touch samples: USER_PROCESS)."""
        assert v.rank is not None
        if not self._once(info, ONCE_HANG):
            return []
        drain = self.s.drain_hang
        sources = list(base)
        if v.cause in _PROC_CAUSES and Provenance.USER_PROCESS not in sources:
            sources.append(Provenance.USER_PROCESS)
        trusted = self._hang_evidence(info)
        if v.trusted is not None and not trusted:
            # The sign that cut the wait short is gone: the stall is the
            # user's again and waits for ``hang_s`` like any other.
            self.seen.acted.discard((info.job_id, info.restart_count, ONCE_HANG))
            log.info("progress node=%s: job %s: trusted evidence gone before acting",
                     self.node, info.job_id)  # fmt: skip
            return []
        sources += [p for p, _ in trusted]
        values = self._job_values(info, v.rank)
        values.update({"cause": v.cause or "", "stalled_s": round(v.stalled_s, 1)})
        message = v.explanation
        if trusted:
            values["corroborated_by"] = "; ".join(why for _, why in trusted)[:300]
            message += f"; {values['corroborated_by']}"
        finding = Finding(
            check=CHECK,
            status=Status.FAIL if drain else Status.WARN,
            code="HANG",
            message=message,
            component=Component("job", name=job_component(info.job_id, v.rank)[4:]),
            action=Action.DRAIN if drain else Action.NONE,
            values=values,
            provenance=tuple(sources),
        )
        log.warning("progress node=%s: HANG %s", self.node, message)
        try:
            decisions = list(self.engine.handle(self.node, [finding]))
        except SlurmError:
            self.seen.acted.discard((info.job_id, info.restart_count, ONCE_HANG))
            raise
        self._tell(info, "job_hang", f"job {info.job_id}: {message}{outcome(decisions)}",
                   "HANG", {"rank": v.rank, "cause": v.cause, "steps": v.evidence.get("steps"),
                            "provenance": [str(p) for p in sources]})  # fmt: skip
        return decisions

    def _job_values(self, info: JobInfo, rank: int) -> dict[str, Any]:
        """What the policy needs to act on the job alone (decide/trust.py)."""
        return {
            "job": info.job_id,
            "rank": rank,
            "user": info.user or "",
            "restart_count": info.restart_count,
            "requeue_opt_in": opted_in(info),
        }

    def _hang_evidence(self, info: JobInfo) -> list[tuple[Provenance, str]]:
        """Trusted evidence on this node that it, not the job, hung the job."""
        out: list[tuple[Provenance, str]] = []
        seen = corroborate.nvml_evidence(self.gpu_view() if self.gpu_view else [])
        if seen is not None:
            out.append((Provenance.NVML, seen))
        stuck = corroborate.driver_stuck(self._job_pids(info.job_id), self.proc)
        if stuck is not None:
            out.append((Provenance.KERNEL, stuck))
        return out

    def _stalled(self, info: JobInfo, v: HangVerdict, now: float) -> None:
        """No culprit here: the batch host tells the owner and the admins, late
        enough for the culprit's own node to act first."""
        if info.batch_host and info.batch_host != self.node:
            return
        if v.stalled_s < self.s.hang_s + self.s.no_culprit_report_s:
            return
        if self._named_elsewhere(info):
            return
        if not self._once(info, "stalled"):
            return
        log.warning("progress node=%s: %s", self.node, v.explanation)
        self._tell(info, "job_stalled",
                   f"job {info.job_id}: {v.explanation}; no node drained (no culprit found)",
                   "HANG", {"steps": v.evidence.get("steps"), "procs": v.evidence.get("procs")})  # fmt: skip

    def _named_elsewhere(self, info: JobInfo) -> bool:
        prefix = f"job:{info.job_id}/"
        for name in hostlist.expand(info.nodes or "")[:256]:
            try:
                ours = our_reason(self.slurm.get_node(name))
            except SlurmError:
                continue
            if (
                ours is not None
                and ours.code == "HANG"
                and (ours.component or "").startswith(prefix)
            ):
                return True
        return False

    def _slow(self, info: JobInfo, found: Sequence[Straggler]) -> list[Any]:
        """One report per job run for this node's straggling ranks (``found``),
        about the slowest (``judge.ONCE_SLOW``)."""
        st = slowest(found)
        if st is None or not self._once(info, ONCE_SLOW):
            return []
        from slurm_hooks.detect.probes.gpu_view import summary

        view = self.gpu_view() if self.gpu_view else []
        policy = self.s.slow_policy
        ranks = sorted(x.rank for x in found)
        others = f"; {len(ranks) - 1} other rank(s) here are slow too" if len(ranks) > 1 else ""
        text = st.explanation + others + (f"; GPUs: {summary(view)}" if view else "")
        values: dict[str, Any] = {
            "job": info.job_id, "rank": st.rank, "over_percent": round(st.over_percent, 1),
            "busy_s": round(st.windows[-1][1], 4), "peers_median_s": round(st.windows[-1][2], 4),
            "windows": len(st.windows), "policy": policy, "gpus": summary(view)[:200],
            "stragglers": len(ranks), "ranks": ranks[:MAX_NAMED_RANKS],
        }  # fmt: skip
        if policy == "drain_at_end":
            values["evacuate"] = False
        values.update({k: v for k, v in self._job_values(info, st.rank).items() if k != "rank"})
        sources = [Provenance.USER_FILE]
        backed = corroborate.slow_evidence(view)
        if backed is not None:
            sources.append(Provenance.NVML)
            values["corroborated_by"] = backed[:300]
        finding = Finding(
            check=CHECK,
            status=Status.WARN if policy == "report" else Status.FAIL,
            code="SLOW",
            message=text,
            component=Component("job", name=job_component(info.job_id, st.rank)[4:]),
            action=Action.NONE if policy == "report" else Action.DRAIN,
            values=values,
            provenance=tuple(sources),
        )
        log.warning("progress node=%s: SLOW %s", self.node, text)
        decisions = list(self.engine.handle(self.node, [finding]))
        self._tell(info, "job_straggler",
                   f"job {info.job_id}: {text} (policy: {policy}){outcome(decisions)}", "SLOW",
                   {"rank": st.rank, "ranks": values["ranks"],
                    "windows": [list(w) for w in st.windows], "gpus": view,
                    "provenance": [str(p) for p in sources]})  # fmt: skip
        return decisions

    def _tell(self, info: JobInfo, kind: str, text: str, code: str, fields: dict[str, Any]) -> None:
        """The owner and the admins told (within ``reports_per_user_hour``), and the audit."""
        held = tell(self.engine, self.cap, self.node, info, Report(kind, text, code, fields),
                    self.clock())  # fmt: skip
        self.totals.held_reports += held
