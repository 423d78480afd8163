"""``squeue``'s rows as JobInfo: the listing of a node's or a partition's
jobs (the CLI backend's ``jobs_on_node`` and ``list_jobs``).

Pure, like ``parse``: tests feed it recorded outputs.  The format is ours
(``squeue_format``): fields Slurm generates, separated by a byte none of
them can hold, and no free text.
"""

from __future__ import annotations

from collections.abc import Sequence

from slurm_hooks.core.model import JobInfo
from slurm_hooks.slurm.parse_values import _none_if_null, json_int

#: The ASCII unit separator: no Slurm-generated field (ids, users, states,
#: hostlists, partitions, counts) can contain it.
SQUEUE_SEP = "\x1f"
#: (squeue -o directive, JobInfo field) in output order.  No free text: a
#: job name (``%j``) may hold newlines, and so whole rows of other users'
#: jobs on any node; what needs the name reads ``scontrol show job``, whose
#: parser refuses such a record.
#: ``%A``, not ``%i``: an array task's own job id (what ``scontrol show job``,
#: slurmrestd and the task's ``$SLURM_JOB_ID`` say), where ``%i`` prints
#: ``<array id>_<index>``; a job's progress directory is named by the former.
SQUEUE_FIELDS: Sequence[tuple[str, str]] = (
    ("%A", "job_id"),
    ("%u", "user"),
    ("%T", "state"),
    ("%N", "nodes"),
    ("%B", "batch_host"),
    ("%P", "partition"),
    ("%D", "num_nodes"),
)


def squeue_format() -> str:
    """The ``squeue -o`` value matching parse_squeue."""
    return SQUEUE_SEP.join(d for d, _ in SQUEUE_FIELDS)


def parse_squeue(text: str) -> tuple[list[JobInfo], int]:
    """Output of ``squeue -h -o <squeue_format()>``.  Returns the jobs and the
    number of malformed lines skipped (a caller logs that count)."""
    jobs: list[JobInfo] = []
    bad = 0
    n = len(SQUEUE_FIELDS)
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(SQUEUE_SEP)
        if len(parts) != n:
            bad += 1
            continue
        row = {field: value.strip() for (_, field), value in zip(SQUEUE_FIELDS, parts, strict=True)}
        jobs.append(
            JobInfo(
                job_id=row["job_id"],
                user=_none_if_null(row["user"]),
                state=row["state"].upper(),
                nodes=_none_if_null(row["nodes"]) or "",
                batch_host=_none_if_null(row["batch_host"]),
                partition=_none_if_null(row["partition"]),
                num_nodes=json_int(row["num_nodes"]),
            )
        )
    return jobs, bad
