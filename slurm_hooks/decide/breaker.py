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
from datetime import UTC, datetime, timedelta

from slurm_hooks.core.held import parse_mark
from slurm_hooks.core.history import Trip, aware
from slurm_hooks.core.model import NodeState
from slurm_hooks.core.reason import try_parse_reason
from slurm_hooks.core.user_caused import USERS_CAUSE
from slurm_hooks.decide.config import PolicyConfig

#: Partition key used for nodes Slurm lists in no partition.
ALL = "*"


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


def drained_by_us(node: NodeState, since: datetime, *, users_cause: bool = True) -> bool:
    """A node that counts against the breaker: drained or down with our
    fault reason, set within the window (no reason time counts, to be safe).
    Nodes we lent or hold as spares are out of Slurm on purpose, not faults.
    ``users_cause`` False leaves out our drains for what a node's users
    cause (a full scratch: ``core/user_caused.py``): they never count
    against the drain of a fault of the node's own, so a user who fills the
    scratch of many nodes can neither use up nor trip the cap real faults
    drain under."""
    if not (node.drained or node.down):
        return False
    ours = try_parse_reason(node.reason)
    if ours is None or not ours.is_fault or (not users_cause and ours.code in USERS_CAUSE):
        return False
    return node.reason_time is None or aware(node.reason_time) >= aware(since)


def partition_usage(
    fleet: Sequence[NodeState],
    partition: str,
    cfg: PolicyConfig,
    now: datetime,
    *,
    users_cause: bool = True,
) -> tuple[int, int, int, tuple[str, ...]]:
    """(counted, size, limit, counted node names) for one partition
    (``users_cause``: as for :func:`drained_by_us`)."""
    since = now - timedelta(seconds=cfg.breaker_window_s)
    members = [n for n in fleet if partition == ALL or partition in n.partitions]
    counted = tuple(
        sorted(n.name for n in members if drained_by_us(n, since, users_cause=users_cause))
    )
    size = len(members)
    return len(counted), size, limit_for(size, cfg), counted


def evaluate(
    node: str, fleet: FleetView, cfg: PolicyConfig, now: datetime, *, users_cause: bool = False
) -> BreakerVerdict:
    """May automation drain ``node`` now?  Checked against every partition
    the node belongs to; the first one that refuses decides.
    ``users_cause``: the drain is for what the node's users cause, and
    counts every drain of ours; a drain for a fault of the node's own
    counts only those (:func:`drained_by_us`)."""
    me = next((n for n in fleet.nodes if n.name == node), None)
    partitions = (me.partitions if me and me.partitions else ()) or (ALL,)
    verdicts = []
    for part in partitions:
        counted, size, limit, names = partition_usage(
            fleet.nodes, part, cfg, now, users_cause=users_cause
        )
        # The node itself may already count (re-drain of ours): do not count it twice.
        if node in names:
            counted -= 1
            names = tuple(n for n in names if n != node)
        if part in fleet.trips or ALL in fleet.trips or held_in(fleet.nodes, part):
            verdicts.append(BreakerVerdict(False, part, counted, size, limit, True, names))
            continue
        verdicts.append(
            BreakerVerdict(counted + 1 <= limit, part, counted, size, limit, False, names)
        )
    refused = [v for v in verdicts if not v.allowed]
    return refused[0] if refused else verdicts[0]


def held_in(fleet: Sequence[NodeState], partition: str) -> tuple[str, ...]:
    """Nodes of ``partition`` that carry our held mark in Slurm: the trip
    seen fleet-wide without a shared latch file (``core/held.py``)."""
    return tuple(
        sorted(
            n.name
            for n in fleet
            if (partition == ALL or partition in n.partitions) and parse_mark(n.comment)
        )
    )


# -- the claim's rank (act/claim.py) ---------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def claim_key(node: NodeState) -> tuple[datetime, str]:
    """The total order of claims: (Slurm's reason time, node name).  No
    reason time sorts first: counted, and ahead of every claim (safe)."""
    t = node.reason_time
    return (aware(t) if t is not None else _EPOCH, node.name)


@dataclass(frozen=True)
class ClaimVerdict:
    """Where a claim (our drain, written before any job is signalled) ranks
    in each of its partitions, read after Slurm settled its second."""

    confirmed: bool
    #: The claim is no longer on the node (an admin resumed it, another
    #: reason replaced it): nothing to confirm or take back.
    lost: bool = False
    partition: str = ALL
    rank: int = 0
    limit: int = 0
    size: int = 0
    #: Claims ahead of this one in the deciding partition (names).
    ahead: tuple[str, ...] = ()
    #: Refused by the latch: a trip (a held mark in Slurm, or the latch
    #: file) placed before this claim in the order; ``latched_by`` names it.
    latched: bool = False
    latched_by: str = ""
    #: The claim's Slurm reason time: the key a back-off latches with.
    key_at: datetime | None = None

    def explain(self) -> str:
        if self.lost:
            return "the claim is no longer on the node"
        if self.latched:
            return (
                f"circuit breaker for partition {self.partition} is tripped (latched by "
                f"{self.latched_by}); drains stay off until 'slurm-hooks breaker reset'"
            )
        verb = "within" if self.confirmed else "past"
        return (
            f"claim ranks {self.rank} in partition {self.partition} by (reason time, node), "
            f"{verb} the breaker's limit {self.limit} of {self.size}"
        )


def latch_key(at: datetime | None, node: str) -> tuple[datetime, str] | None:
    """A trip's place in the claims' order; None: before every claim."""
    return (aware(at), node) if at is not None else None


def latched_before(
    key: tuple[datetime, str],
    partition: str,
    members: Sequence[NodeState],
    trips: Mapping[str, Trip],
) -> str:
    """Who latched ``partition`` ahead of the claim with ``key`` (empty: no
    one).  A held mark in a member's Comment, or a trip in the latch file for
    the partition (or all), whose key is not after the claim's (an equal key
    is the same node's claim of the same second: latched, to be safe), or
    that has no key.  A trip placed after the claim does not refuse it: the claim
    that tripped ranked past the cap behind claims like this one, which are
    ranked as usual (docs/breaker.md)."""
    for n in members:
        mark = parse_mark(n.comment)
        if mark is None:
            continue
        k = latch_key(mark.key_at, n.name)
        if k is None or k <= key:
            return f"the held mark on {n.name}"
    for part in (partition, ALL):
        trip = trips.get(part)
        if trip is None:
            continue
        k = latch_key(trip.key_at, trip.node)
        if k is None or k <= key:
            return f"the latch file's trip by {trip.node}"
    return ""


def rank_claim(
    node: str,
    claim: str,
    fleet: Sequence[NodeState],
    cfg: PolicyConfig,
    now: datetime,
    trips: Mapping[str, Trip] | None = None,
) -> ClaimVerdict:
    """Confirm or refuse ``node``'s claim (its reason ``claim``) against the
    node table ``fleet`` read after slurmctld's clock passed the claim's
    reason time (docs/breaker.md has the proof).  This is the breaker's only
    judgement on the fault path: the node decided on its own state alone.

    In every partition of the node: the claims ahead are our fault drains
    in the window with a smaller (reason time, name); a drain of ours whose
    reason time is later but that carries ``repl=`` (a reason rewritten on a
    node drained earlier, which Slurm re-stamps) counts as ahead too, to be
    safe.  A latch placed before the claim (``latched_before``: held marks
    in the table, ``trips`` from the latch file) refuses it.  Confirmed when
    the rank is within the limit everywhere and nothing latched.  A claim
    for a fault of the node's own does not count the drains for what users
    cause ahead of it (:func:`drained_by_us`); one for what users cause
    counts every drain of ours."""
    me = next((n for n in fleet if n.name == node), None)
    if me is None or me.reason != claim or not (me.drained or me.down):
        return ClaimVerdict(False, lost=True)
    key = claim_key(me)
    since = now - timedelta(seconds=cfg.breaker_window_s)
    mine = try_parse_reason(claim)
    users_cause = mine is not None and mine.code in USERS_CAUSE
    verdicts = []
    for part in me.partitions or (ALL,):
        members = [n for n in fleet if part == ALL or part in n.partitions]
        ahead = []
        for other in members:
            if other.name == node or not drained_by_us(other, since, users_cause=users_cause):
                continue
            ours = try_parse_reason(other.reason)
            if claim_key(other) < key or (ours is not None and ours.replacement_asked):
                ahead.append(other.name)
        limit = limit_for(len(members), cfg)
        rank = len(ahead) + 1
        by = latched_before(key, part, members, trips or {})
        verdicts.append(
            ClaimVerdict(
                rank <= limit and not by,
                partition=part,
                rank=rank,
                limit=limit,
                size=len(members),
                ahead=tuple(sorted(ahead)),
                latched=bool(by),
                latched_by=by,
                key_at=me.reason_time,
            )
        )
    refused = [v for v in verdicts if not v.confirmed]
    return refused[0] if refused else verdicts[0]
