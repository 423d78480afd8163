"""What a progress pass keeps of each job between passes: the last report
(``/metrics``, logs) and the verdicts acted on.  Its own module so that the
records' pass and the zero-touch watch (agent/progress_signals.py) share them
without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field


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
