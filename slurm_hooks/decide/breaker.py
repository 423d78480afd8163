"""Circuit breaker: automation never drains more than a share of a partition.

A fleet-wide fault (a bad driver push, a shared file system hiccup read as a
GPU fault, a bug of ours) must not drain the cluster.  The count comes from
Slurm itself (nodes whose reason parses as ours, with its reason time), so
every node that evaluates the breaker sees the same picture without talking
to the others.  Once tripped, a latch (``breaker_state_file``) keeps drains
off until a human runs ``slurm-hooks breaker reset``: a count falling back
under the limit as the window slides is not evidence that the cause is gone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from slurm_hooks.core.history import aware
from slurm_hooks.core.model import NodeState
from slurm_hooks.core.reason import try_parse_reason
from slurm_hooks.decide.config import PolicyConfig

#: Partition key used for nodes Slurm lists in no partition.
ALL = "*"


@dataclass(frozen=True)
class Trip:
    """A latched trip of one partition."""

    partition: str
    at: datetime
    node: str
    counted: int
    limit: int


@dataclass(frozen=True)
class FleetView:
    """Slurm's nodes (at least those sharing a partition with the node being
    decided) plus the latched trips."""

    nodes: tuple[NodeState, ...] = ()
    trips: Mapping[str, Trip] = field(default_factory=dict)


@dataclass(frozen=True)
class BreakerVerdict:
    allowed: bool
    partition: str
    counted: int
    size: int
    limit: int
    latched: bool = False
    #: Drained-by-us nodes counted against the limit.
    counted_nodes: tuple[str, ...] = ()

    def explain(self) -> str:
        if self.latched:
            return (
                f"circuit breaker for partition {self.partition} is tripped (latched); "
                "drains stay off until 'slurm-hooks breaker reset'"
            )
        verb = "allows" if self.allowed else "trips:"
        return (
            f"circuit breaker {verb} partition {self.partition} has {self.counted} node(s) "
            f"drained by slurm-hooks in the window, limit {self.limit} of {self.size}"
        )


def limit_for(size: int, cfg: PolicyConfig) -> int:
    share = math.floor(cfg.breaker_max_share * size + 1e-9)
    return min(cfg.breaker_max_nodes, max(cfg.breaker_min_nodes, share), max(size, 0))


def drained_by_us(node: NodeState, since: datetime) -> bool:
    """A node that counts against the breaker: drained or down with our
    fault reason, set within the window (no reason time counts, to be safe).
    Nodes we lent or hold as spares are out of Slurm on purpose, not faults."""
    if not (node.drained or node.down):
        return False
    ours = try_parse_reason(node.reason)
    if ours is None or not ours.is_fault:
        return False
    return node.reason_time is None or aware(node.reason_time) >= aware(since)


def partition_usage(
    fleet: Sequence[NodeState], partition: str, cfg: PolicyConfig, now: datetime
) -> tuple[int, int, int, tuple[str, ...]]:
    """(counted, size, limit, counted node names) for one partition."""
    since = now - timedelta(seconds=cfg.breaker_window_s)
    members = [n for n in fleet if partition == ALL or partition in n.partitions]
    counted = tuple(sorted(n.name for n in members if drained_by_us(n, since)))
    size = len(members)
    return len(counted), size, limit_for(size, cfg), counted


def evaluate(node: str, fleet: FleetView, cfg: PolicyConfig, now: datetime) -> BreakerVerdict:
    """May automation drain ``node`` now?  Checked against every partition
    the node belongs to; the first one that refuses decides."""
    me = next((n for n in fleet.nodes if n.name == node), None)
    partitions = (me.partitions if me and me.partitions else ()) or (ALL,)
    verdicts = []
    for part in partitions:
        counted, size, limit, names = partition_usage(fleet.nodes, part, cfg, now)
        # The node itself may already count (re-drain of ours): do not count it twice.
        if node in names:
            counted -= 1
            names = tuple(n for n in names if n != node)
        if part in fleet.trips or ALL in fleet.trips:
            verdicts.append(BreakerVerdict(False, part, counted, size, limit, True, names))
            continue
        verdicts.append(
            BreakerVerdict(counted + 1 <= limit, part, counted, size, limit, False, names)
        )
    refused = [v for v in verdicts if not v.allowed]
    return refused[0] if refused else verdicts[0]
