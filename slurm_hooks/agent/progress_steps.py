"""Whether the job step of a node's departed ranks still runs: asked of
Slurm only then, and remembered.

A node whose ranks of a job are all gone cannot tell by itself "the step
is over" (training ended on every node; the batch script may go on for
long) from "my rank crashed while the job's other nodes wait for it in the
next collective" (Open MPI 4.1 under srun leaves its peers polling and the
job RUNNING for ever).  Slurm can: the step is still listed, RUNNING, or
not.  The pass asks (``scontrol -o show step JOBID``, one read of that job's
steps: ``slurm/steps.py``) the first time it finds the node's ranks of a
job all gone, keeps the answer, and asks again before it acts on a hang
when the answer it kept is older than ``RECHECK_S``: two reads per
departure, none while ranks live, at most one a minute per job hung for
good.  A step over stays over.

Which step: the one the ranks' processes ran in, as Slurm's listing of the
node named them while they lived (``scontrol listpids``); not known (the
listing was not read): any of the job's task steps (numbered or
``interactive``), never ``batch`` or ``extern``.  A client that cannot list
steps (REST, pyslurm, a test double without it) gives no answer, and the
judge waits as it did before it could ask.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from slurm_hooks.core.errors import JobGone, SlurmError
from slurm_hooks.detect.progress.judge import StepState
from slurm_hooks.detect.progress.settings import STEP_RECHECK_S
from slurm_hooks.slurm.base import JobSteps
from slurm_hooks.slurm.steps import ENDED, UNSURE

log = logging.getLogger(__name__)

#: A kept answer older than this is asked again before a hang is acted on.
RECHECK_S = STEP_RECHECK_S
#: Step ids that are never a job's ranks.
_NOT_TASKS = frozenset({"batch", "extern"})


def step_state(listed: dict[str, str], wanted: frozenset[str]) -> StepState | None:
    """The answer for ``wanted`` (empty: any task step) from the job's steps
    (None: Slurm's lines disagree)."""
    chosen = {k: v for k, v in listed.items()
              if (k in wanted if wanted else k not in _NOT_TASKS)}  # fmt: skip
    if any(v == UNSURE for v in chosen.values()):
        return None
    if any(v not in ENDED for v in chosen.values()):
        return StepState.RUNNING
    return StepState.OVER


@dataclass
class StepWatch:
    """Per job: the steps its ranks here ran in, Slurm's last answer."""

    steps: dict[str, frozenset[str]] = field(default_factory=dict)
    #: job -> (answer, when it was given).
    answers: dict[str, tuple[StepState, float]] = field(default_factory=dict)
    #: Reads made (``/metrics`` counts them with the pass's other reads).
    asked: int = 0

    def note(self, job: str, steps: Iterable[str]) -> None:
        """The step ids of the job's live ranks here (kept once known)."""
        seen = frozenset(s for s in steps if s and s not in _NOT_TASKS)
        if seen:
            self.steps[job] = seen
        # Ranks alive here again (a new step): an earlier answer is stale.
        self.answers.pop(job, None)

    def state(
        self, slurm: Any, raw: Any, job: str, now: float, max_age_s: float = float("inf")
    ) -> StepState | None:
        """Whether the step of ``job``'s ranks here still runs: the kept
        answer unless older than ``max_age_s`` (a step over stays over);
        None when Slurm cannot say (``raw``: the client, which must list
        steps; ``slurm``: the same, as the pass counts its reads)."""
        kept = self.answers.get(job)
        if kept is not None and (kept[0] is StepState.OVER or now - kept[1] <= max_age_s):
            return kept[0]
        if not isinstance(raw, JobSteps):
            return None
        self.asked += 1
        try:
            listed = slurm.job_steps(job)
        except JobGone:
            listed = {}
        except SlurmError as exc:
            log.info("progress: cannot list the steps of job %s: %s", job, exc)
            return None
        answer = step_state(listed, self.steps.get(job, frozenset()))
        if answer is not None:
            self.answers[job] = (answer, now)
        return answer

    def keep(self, jobs: Iterable[str]) -> None:
        """Forget jobs no longer followed here."""
        wanted = set(jobs)
        self.steps = {j: s for j, s in self.steps.items() if j in wanted}
        self.answers = {j: a for j, a in self.answers.items() if j in wanted}
