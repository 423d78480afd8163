"""Flapping: a node that keeps failing after we resume it is a human's job.

Resuming a node with an intermittent fault puts it back into every job's
way; after ``flap_count`` resumes within the window, the next fault drains
it with code FLAPPING and automation stops resuming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from slurm_hooks.core.history import aware

FLAPPING = "FLAPPING"


@dataclass(frozen=True)
class FlapVerdict:
    flapping: bool
    resumes_in_window: int
    threshold: int
    window_s: float

    def explain(self) -> str:
        hours = self.window_s / 3600
        return (
            f"resumed {self.resumes_in_window} time(s) in the last {hours:g}h "
            f"(limit {self.threshold}) and failed again"
        )


def flap_verdict(
    resumes: Sequence[datetime], now: datetime, count: int, window_s: float
) -> FlapVerdict:
    """Flapping when the node was resumed ``count`` times or more within the
    window and is failing again now."""
    now = aware(now)
    since = now - timedelta(seconds=window_s)
    recent = sum(1 for t in resumes if since <= aware(t) <= now)
    return FlapVerdict(recent >= count, recent, count, window_s)
