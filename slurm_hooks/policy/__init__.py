"""Pure policy: findings, node states and history in, decisions out.  No I/O.

Importing this package imports nothing beyond the shared model, so hooks pay
nothing for it until something needs deciding.
"""

from .breaker import FleetView, Trip
from .config import PolicyConfig, RepeatRule
from .decide import decide, decide_resume
from .decision import Decision, DecisionKind
from .history import FaultEvent, NodeHistory

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
