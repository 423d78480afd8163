"""Per-rank figures for a human (``slurm-hooks job``): step-time median and skew.  Pure.

The judges (``judge``) decide; this only describes what they looked at, from
the same records: for each rank its last step and when, the median interval
between its consecutive step records (the job's step time: the same on
every rank of a synchronous job), the median of its busy times (what it
computed before the step's collective: what differs on a straggler) and its
skew, its recent mean busy time over the median of all ranks' (1.0: as fast
as the others; no busy times: the step-time ratio instead; the watcher's
``slurm_hooks_job_step_skew`` is the largest of these).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurm_hooks.detect.progress.records import RankView, Record

#: Steps a rank's medians and skew look back over.
RECENT = 20


@dataclass(frozen=True)
class RankRow:
    rank: int
    node: str
    step: int
    since_s: float
    step_time_s: float | None
    busy_s: float | None
    skew: float | None


def _step_times(records: Iterable[Record], views: Mapping[int, RankView]) -> dict[int, list[float]]:
    by_rank: dict[int, dict[int, float]] = {}
    for r in records:
        v = views.get(r.rank)
        if v is None or r.pid != v.pid or r.restart != v.restart or r.step < 1:
            continue
        by_rank.setdefault(r.rank, {})[r.step] = r.time
    out: dict[int, list[float]] = {}
    for rank, times in by_rank.items():
        steps = sorted(times)[-(RECENT + 1) :]
        out[rank] = [
            times[b] - times[a] for a, b in zip(steps, steps[1:], strict=False) if b == a + 1
        ]
    return out


def rows(records: Iterable[Record], views: Mapping[int, RankView], now: float) -> list[RankRow]:
    """One row per rank, by rank."""
    steps = _step_times(records, views)
    busy = {r: [b for _, b in v.busy[-RECENT:]] for r, v in views.items()}
    means = {r: statistics.fmean(b) for r, b in busy.items() if b}
    medians = {r: statistics.median(t) for r, t in steps.items() if t}
    basis = means if len(means) >= 2 else medians
    out = []
    for rank, v in sorted(views.items()):
        mine = basis.get(rank)
        med = statistics.median(basis.values()) if len(basis) >= 2 else None
        sk = mine / med if mine is not None and med else None
        out.append(
            RankRow(
                rank=rank,
                node=v.node,
                step=v.step,
                since_s=max(0.0, now - v.last_time),
                step_time_s=medians.get(rank),
                busy_s=statistics.median(busy[rank]) if busy.get(rank) else None,
                skew=sk,
            )
        )
    return out
