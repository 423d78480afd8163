"""What a progress pass keeps of each job between passes: the last report
(``/metrics``, logs) and the verdicts acted on.  Its own module so that the
records' pass and the zero-touch watch (agent/progress_signals.py) share them
without importing each other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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


@dataclass
class Seen:
    """The verdicts acted on: (job, restart count, verdict key), once each."""

    acted: set[tuple[str, int, str]] = field(default_factory=set)


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
