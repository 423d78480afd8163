"""Lending's vocabulary: its inputs (pending jobs, demand), the steps a plan
holds, and our annotation names on a Kubernetes Node.

Pure data, no policy: ``lending.plan_lending`` decides, ``lending_patch``
writes the Node patches, ``lend_exec`` carries the steps out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

Obj = Mapping[str, Any]


class LendKeys:
    """Our annotation names under the bridge's ``annotation_prefix``.  None
    of them is a bridge (fault) key, so the two never clear each other's."""

    def __init__(self, prefix: str) -> None:
        #: lend incident the node serves (set when it is opened to inference)
        self.lent = f"{prefix}/lent-incident"
        self.lent_at = f"{prefix}/lent-at"
        #: lend incident being reclaimed, and since when
        self.reclaiming = f"{prefix}/reclaiming"
        self.reclaim_at = f"{prefix}/reclaim-started-at"
        #: when the node was last handed back to Slurm (minimum stay)
        self.reclaimed_at = f"{prefix}/reclaimed-at"
        #: since when Slurm has shown the node idle
        self.idle_since = f"{prefix}/idle-since"
        #: "true" only when we set spec.unschedulable ourselves
        self.reserve_cordon = f"{prefix}/reserve-cordon"


# -- inputs ---------------------------------------------------------------------


@dataclass(frozen=True)
class PendingJob:
    """A pending Slurm job as far as reclaiming needs it."""

    job_id: str
    partitions: tuple[str, ...]
    num_nodes: int
    reason: str
    priority: int = 0
    #: squeue's %b (tres per node), e.g. ``gres:gpu:8``; None when none.
    gres: str | None = None


@dataclass(frozen=True)
class Demand:
    """What Kubernetes asks for.  ``pod_nodes``: nodes the pending inference
    pods need; ``target``: nodes a ConfigMap wants lent (None: no ConfigMap)."""

    pod_nodes: int = 0
    pending_pods: int = 0
    target: int | None = None


# -- steps ----------------------------------------------------------------------


@dataclass(frozen=True)
class Track:
    """Bookkeeping on a Slurm-owned node: idle-since and the reserve taint."""

    node: str
    slurm_node: str
    #: set idle-since to this ISO time; None: leave it
    idle_since: str | None = None
    clear_idle: bool = False
    add_taint: bool = False


@dataclass(frozen=True)
class Lend:
    """Drain in Slurm with our LEND reason; once Slurm shows the node idle
    and drained, open it to inference (the executor does both in one go)."""

    node: str
    slurm_node: str
    incident: str
    idle_for: float


@dataclass(frozen=True)
class Open:
    """Slurm has the node drained for LEND: make it schedulable for inference."""

    node: str
    slurm_node: str
    incident: str


@dataclass(frozen=True)
class Abort:
    """A job raced in between our idle check and the drain: give the node
    straight back to Slurm (the reason is still our LEND)."""

    node: str
    slurm_node: str
    incident: str


@dataclass(frozen=True)
class Reclaim:
    """Take a lent node back: cordon + taint + label off (once), evict its
    inference pods, then resume it in Slurm if ``resume`` (the reason is
    still our LEND), else only clear our marks (a fault took over)."""

    node: str
    slurm_node: str
    incident: str
    resume: bool
    #: when the reclaim began (None: this pass begins it)
    started: datetime | None
    #: the drain timeout has passed and on_drain_timeout is "force"
    force: bool = False
    why: str = ""


Step = Track | Lend | Open | Abort | Reclaim


@dataclass(frozen=True)
class Note:
    """Something we would do but may not (a cap, hysteresis, a cordon that
    is not ours); for the log and the metrics."""

    node: str
    why: str


@dataclass(frozen=True)
class LendPlan:
    steps: tuple[Step, ...]
    notes: tuple[Note, ...] = ()
    #: Slurm node -> GPUs, for the nodes out of Slurm for lending now
    lent_gpus: Mapping[str, int] = field(default_factory=dict)
    #: nodes Slurm's pending jobs need back / nodes Kubernetes asks for
    slurm_need: int = 0
    k8s_want: int = 0

    def of(self, kind: type) -> list[Any]:
        return [s for s in self.steps if isinstance(s, kind)]


def describe(step: Step) -> str:
    if isinstance(step, Track):
        parts = []
        if step.idle_since:
            parts.append(f"idle since {step.idle_since}")
        if step.clear_idle:
            parts.append("busy again")
        if step.add_taint:
            parts.append("reserve taint on")
        return f"track {step.node}: {', '.join(parts)}"
    if isinstance(step, Lend):
        return f"lend {step.slurm_node} (idle {step.idle_for:.0f}s, incident {step.incident})"
    if isinstance(step, Open):
        return f"open {step.node} to inference (incident {step.incident})"
    if isinstance(step, Abort):
        return f"abort lending {step.slurm_node}: a job started there"
    action = "reclaim" if step.resume else "withdraw"
    return f"{action} {step.node} from inference: {step.why}"
