"""One job's steps as Slurm lists them: ``scontrol -o show step JOBID``.

The hang judge asks this only when a node's ranks of a job are gone
(docs/progress.md): a node whose ranks all left cannot tell "the step is
over" from "my rank crashed while the other nodes wait in the next
collective" by itself, and Slurm can.  ``scontrol show step JOBID`` asks
slurmctld for that one job's steps (``REQUEST_JOB_STEP_INFO`` with the job
id: no job table, no node table); ``squeue --steps --jobs=ID`` reads every
job's steps and filters them itself, and ``scontrol show step ID.STEP`` of
a step that ended answers only on stdout with a non-zero status, where the
job's list simply lacks it.  Output, one line per step (22.05, 24.11 and
26.05 alike)::

    StepId=12.0 UserId=1001 StartTime=... TimeLimit=UNLIMITED State=RUNNING ... Name=...

``Name`` is the user's words and comes after ``State``: only the first
``State=`` before ``Name=`` counts, a line must start with the job's own
``StepId=``, and lines that disagree about one step are not guessed at.
"""

from __future__ import annotations

#: Step states that mean the step is over (or ending): its tasks are gone.
ENDED = frozenset({"COMPLETING", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
                   "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"})  # fmt: skip
#: Lines of output read at most (a job has a handful of steps).
MAX_LINES = 4096
#: A state recorded for a step whose lines disagree.
UNSURE = "?"


def steps_argv(job_id: str) -> list[str]:
    """The read of one job's steps (``job_id`` already validated)."""
    return ["scontrol", "-o", "show", "step", job_id]


def parse_steps(text: str, job_id: str) -> dict[str, str]:
    """Step id (``0``, ``batch``, ``extern``, ``interactive``...) -> state
    of ``job_id``'s steps; a step listed twice with different states is
    ``UNSURE``."""
    prefix = f"StepId={job_id}."
    out: dict[str, str] = {}
    for line in text.splitlines()[:MAX_LINES]:
        words = line.split(" ")
        if not words or not words[0].startswith(prefix):
            continue
        step = words[0][len(prefix) :]
        if not step or len(step) > 32:
            continue
        state = ""
        for w in words[1:]:
            if w.startswith("Name="):
                break
            if w.startswith("State="):
                state = w[len("State=") :].upper()
                break
        if not state:
            continue
        out[step] = state if out.get(step, state) == state else UNSURE
    return out
