"""The jobs on a set of Slurm nodes, from one job list per pass.

The bridge's incident pass, and ``slurm-hooks status`` for the jobs still
on the nodes it drains, read it.  The bridge's pass used to ask ``squeue -w NODE`` once per open
incident: each of those is a whole job-table transfer from slurmctld, so a
mass failure multiplied the controller's work by the number of incidents.
One ``list_jobs`` of the active states, indexed here by node, answers every
question of the pass from a single read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from slurm_hooks.core import hostlist
from slurm_hooks.core.errors import ConfigError, SlurmError
from slurm_hooks.core.model import JobInfo
from slurm_hooks.core.slurm_model import ACTIVE_JOB_STATES
from slurm_hooks.slurm.base import SlurmClient

log = logging.getLogger(__name__)


def unknown_jobs(name: str) -> list[JobInfo]:
    """A placeholder job: the node is treated as busy when its jobs are unknown."""
    return [JobInfo("?", None, "UNKNOWN", name)]


def jobs_by_node(slurm: SlurmClient, names: Iterable[str]) -> dict[str, list[JobInfo]]:
    """The active jobs on each of ``names``: one job list for all of them,
    none when ``names`` is empty.  A failed list leaves every node busy (a
    step that needs the node empty waits for the next pass)."""
    wanted = sorted(set(names))
    if not wanted:
        return {}
    try:
        jobs = slurm.list_jobs(ACTIVE_JOB_STATES)
    except SlurmError as exc:
        log.warning("nodes=%s jobs unknown (%s): treating as busy", hostlist.fold(wanted), exc)
        return {name: unknown_jobs(name) for name in wanted}
    out: dict[str, list[JobInfo]] = {name: [] for name in wanted}
    for job in jobs:
        if job.state.upper() not in ACTIVE_JOB_STATES or not job.nodes:
            continue
        try:
            on = hostlist.expand(job.nodes)
        except (ValueError, ConfigError) as exc:
            # A node list we cannot read: every wanted node might be in it.
            log.warning(
                "job=%s nodes %r unreadable (%s): treating as busy", job.job_id, job.nodes, exc
            )
            for name in wanted:
                out[name].append(job)
            continue
        for name in on:
            if name in out:
                out[name].append(job)
    return out
