"""Slurm's nodes and jobs as the stages after detection see them.

Apart from :mod:`slurm_hooks.core.model` only because a healthy hook never
needs them: model loads this module on first use of a name from it
(``from slurm_hooks.core.model import NodeState`` keeps working).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime


class ReasonOwner(enum.StrEnum):
    """Who wrote a Slurm node reason.  We only ever clear our own."""

    OURS = "ours"
    NHC = "nhc"
    OPERATOR = "operator"
    SLURM = "slurm"
    ADMIN = "admin"
    NONE = "none"


@dataclass(frozen=True)
class NodeState:
    """A Slurm node as the access layer reports it.

    ``state`` is the base state in lower case (idle, allocated, mixed, down,
    completing, ...); ``flags`` the upper-case modifiers (DRAIN, NOT_RESPONDING,
    MAINTENANCE, ...).
    """

    name: str
    state: str
    flags: frozenset[str] = frozenset()
    reason: str | None = None
    reason_user: str | None = None
    reason_time: datetime | None = None
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    gres: str | None = None
    cpus: int | None = None
    alloc_cpus: int | None = None
    #: The node's ``Comment`` (admin-set; slurm-hooks marks held faults there).
    comment: str | None = None
    #: The node's ``Extra`` (free text or JSON; our health grade is one key in it).
    extra: str | None = None

    @property
    def drained(self) -> bool:
        """True for DRAINING and DRAINED alike: Slurm schedules nothing new there."""
        return "DRAIN" in self.flags

    @property
    def down(self) -> bool:
        return self.state == "down"

    @property
    def busy(self) -> bool:
        return self.state in ("allocated", "mixed", "completing") or "COMPLETING" in self.flags


#: Job states that hold a node: what ``jobs_on_node`` counts and squeue is
#: asked for when the question is "what still runs there".
ACTIVE_JOB_STATES = ("RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STOPPED")


@dataclass(frozen=True)
class JobInfo:
    """A Slurm job as far as remediation needs it."""

    job_id: str
    user: str | None
    state: str
    nodes: str
    batch_host: str | None = None
    requeue: bool | None = None
    comment: str | None = None
    admin_comment: str | None = None
    restart_count: int = 0
    name: str | None = None
    partition: str | None = None
    num_nodes: int | None = None
    #: What the job asked for per node, job, task and socket (scontrol's
    #: ``TresPerNode`` ... ``TresPerSocket``, joined by ","), e.g.
    #: ``gres:shard:2`` (22.05) or ``gres/shard:2`` (24.11 on); None: nothing.
    tres_per: str | None = None

    def runs_on(self, node: str) -> bool:
        """Whether the job's node list (``n[1-3],n7``) names ``node``."""
        return names(self.nodes or "", node)


def names(nodes: str, node: str) -> bool:
    """Whether a Slurm node list (``n[1-3],n7``) names ``node``; a list
    without brackets is compared name by name, without folding (and
    without loading the hostlist parser)."""
    if "[" not in nodes:
        return node in nodes.split(",")
    from slurm_hooks.core import hostlist  # only for a bracketed list

    return hostlist.contains(nodes, node)
