"""What one replay measured, per baseline: the report's rows."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Figures:
    baseline: str
    #: Effective training time ratio: useful (kept) job node-time over the
    #: job's node-time on the clock.
    ettr: float = 0.0
    node_hours_out: float = 0.0
    interruptions: int = 0
    #: Interruptions where the job checkpointed on our signal (lost nothing
    #: but the restart); the others rolled back to their last checkpoint.
    checkpointed_on_signal: int = 0
    requeues: int = 0
    #: GPU-hours of progress rolled back to a checkpoint (or never made while
    #: a job waited to restart).
    lost_gpu_hours: float = 0.0
    drains: int = 0
    #: Drains of nodes whose hardware was fine (a software hang's culprit).
    false_drains: int = 0
    #: Drains the breaker refused (nodes held), and times it latched.
    breaker_held: int = 0
    breaker_trips: int = 0
    replacements: int = 0
    spares_resumed: int = 0
    max_spares_in_use: int = 0
    #: Faults on a node someone else's reason holds (NHC, an admin, Slurm's
    #: own): left alone by the policy or refused by the door.
    foreign_refusals: int = 0
    faults: int = 0
    decisions: Counter[str] = field(default_factory=Counter)
    #: (hours, ETTR so far, nodes out, spares in use)
    timeline: list[tuple[float, float, int, int]] = field(default_factory=list)

    def to_dict(self, *, timeline: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "ettr": round(self.ettr, 5),
            "node_hours_out": round(self.node_hours_out, 1),
            "interruptions": self.interruptions,
            "checkpointed_on_signal": self.checkpointed_on_signal,
            "requeues": self.requeues,
            "lost_gpu_hours": round(self.lost_gpu_hours, 1),
            "drains": self.drains,
            "false_drains": self.false_drains,
            "breaker_held": self.breaker_held,
            "breaker_trips": self.breaker_trips,
            "replacements": self.replacements,
            "spares_resumed": self.spares_resumed,
            "max_spares_in_use": self.max_spares_in_use,
            "foreign_refusals": self.foreign_refusals,
            "faults": self.faults,
            "decisions": dict(sorted(self.decisions.items())),
        }
        if timeline:
            d["timeline"] = [
                {"hours": round(h, 2), "ettr": round(e, 5), "nodes_out": o, "spares_in_use": s}
                for h, e, o, s in self.timeline
            ]
        return d
