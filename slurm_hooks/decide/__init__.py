"""Pure policy: findings, node states and history in, decisions out.  No I/O.

Importing this package imports nothing beyond the shared model, so hooks pay
nothing for it until something needs deciding.
"""

from slurm_hooks.core.history import FaultEvent, NodeHistory, Trip
from slurm_hooks.decide.breaker import FleetView
from slurm_hooks.decide.config import PolicyConfig, RepeatRule
from slurm_hooks.decide.decide import decide, decide_resume
from slurm_hooks.decide.decision import Decision, DecisionKind

__all__ = [
    "Decision",
    "DecisionKind",
    "FaultEvent",
    "FleetView",
    "NodeHistory",
    "PolicyConfig",
    "RepeatRule",
    "Trip",
    "decide",
    "decide_resume",
]
