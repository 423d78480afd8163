"""What the policy knows of a node's past, as plain values.

The state store builds these from its files; the policy only reads them,
so decisions stay pure functions of their inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class FaultEvent:
    at: datetime
    code: str
    component: str | None = None
    #: The action the policy mapped it to ("log", "drain", "replace", ...).
    severity: str = "log"
    incident: str | None = None
    #: False when the finding's evidence was user-side only (core.model.Provenance):
    #: such an event never corroborates a fault of the node by itself.
    trusted: bool = True
    #: The job's owner, for user-side findings about a job (HANG, SLOW): the
    #: policy counts distinct users whose jobs this node hung.
    user: str | None = None


@dataclass(frozen=True)
class NodeHistory:
    faults: tuple[FaultEvent, ...] = ()
    #: When we (automation or ``slurm-hooks resume``) returned the node to service.
    resumes: tuple[datetime, ...] = ()
    #: Times acceptance passed on this node.
    acceptance_passes: tuple[datetime, ...] = ()
    #: Incident we drained the node for and have not closed.
    open_incident: str | None = None

    def faults_since(
        self, since: datetime, code: str | None = None, component: str | None = None
    ) -> list[FaultEvent]:
        since = aware(since)
        return [
            f
            for f in self.faults
            if aware(f.at) >= since
            and (code is None or f.code == code)
            and (component is None or f.component == component)
        ]

    def acceptance_since(self, since: datetime | None) -> datetime | None:
        """The latest acceptance pass after ``since`` (any, if since is None)."""
        since = aware(since) if since is not None else None
        passes = [aware(t) for t in self.acceptance_passes]
        passes = [t for t in passes if since is None or t >= since]
        return max(passes) if passes else None


def aware(t: datetime) -> datetime:
    """Slurm prints local times without a zone; treat naive times as local so
    they compare with our UTC timestamps."""
    return t if t.tzinfo is not None else t.astimezone()


EMPTY_HISTORY = NodeHistory()


@dataclass(frozen=True)
class Trip:
    """A latched circuit-breaker trip of one partition (the policy reads it,
    the state store keeps it: so it lives below both)."""

    partition: str
    at: datetime
    node: str
    counted: int
    limit: int
    #: The Slurm reason time of the claim that backed off (with ``node``,
    #: its key in the claims' order: ``decide.breaker.rank_claim``).  A claim
    #: ahead of it is still ranked; None latches every claim (safe).
    key_at: datetime | None = None
