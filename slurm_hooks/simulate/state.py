"""The replay's records: the baselines, a node's history and hardware, a job."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

from slurm_hooks.core.history import FaultEvent, NodeHistory
from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.decide.repair import Attempt
from slurm_hooks.detect.xid.rules import Incident
from slurm_hooks.simulate.cluster import SimJob
from slurm_hooks.simulate.trace import Fault


class Baseline(enum.StrEnum):
    """Who looks after the fleet (replay.py's docstring says how)."""

    MANUAL = "manual"
    NHC = "nhc"
    HOOKS = "slurm-hooks"


@dataclass
class _Job:
    """A training job as the replay tracks it (its Slurm side is ``sim``)."""

    sim: SimJob
    need: int
    running: bool = True
    seg_start: float = 0.0
    gen: int = 0
    waiting: bool = False


@dataclass
class NodeRecord:
    """What the state store would hold for one node (its history for the
    policy, its repair attempts for the ladder, its XID incidents for the
    repeat rules), plus the simulated hardware's state (``broken``)."""

    broken: Fault | None = None
    faults: list[FaultEvent] = field(default_factory=list)
    resumes: list[datetime] = field(default_factory=list)
    accepted: list[datetime] = field(default_factory=list)
    incident: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    xid: list[Incident] = field(default_factory=list)
    #: Times a person repaired it (the manual ladder: twice in a week, replace).
    fixed: list[float] = field(default_factory=list)

    def history(self) -> NodeHistory:
        return NodeHistory(tuple(self.faults), tuple(self.resumes), tuple(self.accepted),
                           self.incident)  # fmt: skip


def spare_reason() -> str:
    return format_reason(DrainReason("SPARE", "spare", "held as a spare by slurm-hooks"))


__all__ = ["Baseline", "NodeRecord", "spare_reason"]
