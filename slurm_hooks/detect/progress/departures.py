"""When the watcher first saw each rank's process gone.  Time passed in.

/proc says a process is gone, not when it went.  The hang judge needs that
moment to tell a rank lost mid-run from ranks that finished: a job's ranks
leave together when its training ends (``torchrun`` tears the step down
after ``destroy_process_group``), and rank 0 often goes on alone for minutes
(its final save or upload) after its peers exited.  The watcher looks every
``interval_s``, so the first look that found a rank gone dates its departure
to within one interval; a rank already gone at the watcher's first look at
its job (the watcher restarted) has no date, and the judge waits as long as
it did before departures were dated.  The watcher's progress pass and the
false-alarm replay keep one each, so both judge from the same evidence.
"""

from __future__ import annotations

from collections.abc import Mapping

from slurm_hooks.detect.progress.judge import ProcState
from slurm_hooks.detect.progress.records import RankView


class Departures:
    """First sight of each (job, rank, pid) gone; a rank restarted with a new
    pid is a new process."""

    def __init__(self) -> None:
        #: (job, rank, pid) -> first seen gone (None: gone at the first look).
        self._seen: dict[tuple[str, int, int], float | None] = {}
        self._jobs: set[str] = set()

    def look(
        self,
        job: str,
        ranks: Mapping[int, RankView],
        procs: Mapping[int, ProcState],
        now: float,
    ) -> dict[int, float]:
        """Note this look's gone ranks; the departures of ``job``'s ranks
        gone now (rank -> when first seen gone)."""
        first = job not in self._jobs
        self._jobs.add(job)
        out: dict[int, float] = {}
        for rank, state in procs.items():
            view = ranks.get(rank)
            if state is not ProcState.GONE or view is None:
                continue
            when = self._seen.setdefault((job, rank, view.pid), None if first else now)
            if when is not None:
                out[rank] = when
        return out

    def keep(self, jobs: set[str]) -> None:
        """Forget the jobs no longer running here."""
        self._seen = {k: t for k, t in self._seen.items() if k[0] in jobs}
        self._jobs &= jobs
