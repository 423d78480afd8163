"""What a progress pass keeps of each job between passes: the last report
(``/metrics``, logs) and the verdicts acted on.  Its own module so that the
records' pass and the zero-touch watch (agent/progress_signals.py) share them
without importing each other; with them, what both say of a job: its
opt-in, its ranks' skew, what came of a finding, and how many reports
about one user's jobs go out (:class:`ReportCap`)."""

from __future__ import annotations

import enum
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slurm_hooks.core.model import JobInfo
    from slurm_hooks.detect.progress.records import RankView


@dataclass
class JobReport:
    """The last pass's view of one job (``/metrics``, logs)."""

    job: str
    verdict: str
    ranks: int
    #: max/median of the ranks' recent mean busy time (1.0: no skew).
    skew: float | None = None
    explanation: str = ""
    #: Seconds since any rank of the job recorded a step.
    stalled_s: float = 0.0


class Sent(enum.Enum):
    """Whether a job report goes out (:class:`ReportCap`)."""

    SEND = "send"
    #: The first one past the cap: a note that the rest are held goes instead.
    CAP_REACHED = "cap_reached"
    HELD = "held"


@dataclass
class ReportCap:
    """At most ``per_hour`` reports a user in any hour (0: no cap); the times
    of the last ones sent, per user, are all it keeps."""

    per_hour: int
    sent: dict[str, deque[float]] = field(default_factory=dict)
    told: dict[str, float] = field(default_factory=dict)

    def take(self, user: str, now: float) -> Sent:
        if self.per_hour <= 0:
            return Sent.SEND
        times = self.sent.setdefault(user, deque())
        while times and times[0] <= now - 3600.0:
            times.popleft()
        if len(times) < self.per_hour:
            times.append(now)
            return Sent.SEND
        if self.told.get(user, -1e18) > now - 3600.0:
            return Sent.HELD
        self.told[user] = now
        return Sent.CAP_REACHED


@dataclass
class Seen:
    """The verdicts acted on: (job, restart count, verdict key), once each."""

    acted: set[tuple[str, int, str]] = field(default_factory=set)

    def keep(self, runs: Mapping[str, int]) -> None:
        """Keep the verdicts of the job runs running here now (``runs``: job
        id -> restart count) only: a watcher that runs for months keeps the
        node's current runs', not every run's since it started (a user's
        requeues of their own job make as many as they like).  A later run
        than ``runs`` says is kept: the list may be older than Slurm's answer."""
        self.acted = {k for k in self.acted if k[0] in runs and k[1] >= runs[k[0]]}


def report_families(reports: Mapping[str, JobReport]) -> list[Any]:
    """``/metrics`` of a progress pass's reports: step-time skew, stall and
    the hang verdict per job."""
    from prometheus_client.core import GaugeMetricFamily

    sk = GaugeMetricFamily(
        "slurm_hooks_job_step_skew",
        "Slowest rank's recent mean busy time over the median rank's (1: no skew), per job.",
        labels=["job"],
    )
    st = GaugeMetricFamily(
        "slurm_hooks_job_stalled_seconds",
        "Seconds since any rank of the job recorded a step.",
        labels=["job"],
    )
    verdict = GaugeMetricFamily(
        "slurm_hooks_job_progress_verdict",
        "The hang judge's verdict of each job this node runs (1 for the current one).",
        labels=["job", "verdict"],
    )
    for job, r in sorted(reports.items()):
        if r.skew is not None:
            sk.add_metric([job], r.skew)
        st.add_metric([job], r.stalled_s)
        verdict.add_metric([job, r.verdict], 1)
    return [sk, st, verdict]


#: A job whose ``--comment`` carries this token (whitespace or comma apart)
#: asks to be requeued when a hang or straggler of its own is found on its
#: own evidence alone (docs/progress.md).  It can only ever affect that job.
OPT_IN = "slurm-hooks:requeue-on-hang"


def opted_in(info: JobInfo) -> bool:
    """Whether the job's owner asked for a requeue on their own evidence."""
    text = (info.comment or "").replace(",", " ")
    return OPT_IN in text.split()


def skew(views: Mapping[int, RankView], last: int = 20) -> float | None:
    means = [statistics.fmean(b for _, b in v.busy[-last:]) for v in views.values() if v.busy]
    if len(means) < 2:
        return None
    med = statistics.median(means)
    return max(means) / med if med > 0 else None


def outcome(decisions: list[Any]) -> str:
    """What came of a finding, for the owner's alert."""
    from slurm_hooks.decide.decision import DecisionKind

    kinds = {getattr(d, "kind", None) for d in decisions}
    if any(k is not None and k.drains for k in kinds):
        return "; the node is drained and the job requeued"
    if DecisionKind.REQUEUE_JOB in kinds:
        return ("; the evidence is the job's own: the node stays in service, the job is "
                "requeued (it opted in)")  # fmt: skip
    if DecisionKind.REPORT_JOB in kinds:
        return ("; the evidence is the job's own (no trusted sign on the node): no node "
                "drained, no other job touched")  # fmt: skip
    if DecisionKind.BREAKER_TRIPPED in kinds:
        return "; the node is held by the circuit breaker"
    return ""


@dataclass(frozen=True)
class Report:
    """A report about one job: its alert's kind and text, the code, the
    alert's fields (some of them audited too)."""

    kind: str
    text: str
    code: str
    fields: dict[str, Any]


def tell(engine: Any, cap: ReportCap, node: str, info: JobInfo, r: Report, now: float) -> int:
    """The owner and the admins told of ``r`` while ``cap`` lets it out
    (the first one past it: a note that more are held), and the audit line
    always.  Returns 1 for a report held back, else 0."""
    from slurm_hooks.act.notify.base import Alert

    sent = cap.take(info.user or "", now)
    if sent is Sent.SEND:
        engine.notify(Alert(r.kind, r.text, node=node, job_id=info.job_id, user=info.user,
                            code=r.code, fields=r.fields))  # fmt: skip
    elif sent is Sent.CAP_REACHED:
        engine.notify(Alert(
            "job_reports_held",
            f"{cap.per_hour} reports about jobs of {info.user} from {node} within an hour: "
            f"more are audited here, not sent, until the hour is over (latest: {r.text})",
            node=node, job_id=info.job_id, user=info.user, code=r.code,
        ))  # fmt: skip
    engine.audit.record(
        r.kind, node=node, job=info.job_id, user=info.user, code=r.code, why=r.text,
        actor=engine.actor, **({} if sent is Sent.SEND else {"sent": False}),
        **{k: v for k, v in r.fields.items() if k in ("rank", "ranks", "steps", "provenance")},
    )  # fmt: skip
    return 0 if sent is Sent.SEND else 1
