"""Claim, settle, rank: the circuit breaker exact under concurrency.

Every node decides on its own, from Slurm's node table.  Evaluating the
breaker and then draining leaves a window in which F nodes that fault in the
same second all see room under the cap and all drain.  So a drain is a
*claim* first (docs/breaker.md has the proof):

1. CLAIM: write the drain with our reason through the door, before any job
   is signalled (the journal says ``claimed``).  slurmctld processes updates
   one at a time under its node write lock and stamps the reason with its
   own clock (1 s resolution).
2. SETTLE (this module): wait until slurmctld's clock (``server_time()``,
   ``sdiag``) is past the second our claim was stamped in.  Every claim
   stamped in that second or before is then visible to a read that follows.
   Two clock reads: one, a sleep computed from it, one to confirm.
3. RANK (``decide.breaker.rank_claim``, pure): re-read the node table once;
   order our fault drains of the window by (reason time, node name).  A
   claim that arrives later has a later reason time, so the rank is final.
   Within the limit in every partition: confirm (signal, grace, requeue).
   Past it: take the claim back through the door, hold the fault, latch.

A claim the breaker cannot refuse (``cannot_bind``: in every partition of
the node the limit is at least the partition's size) skips settle and rank:
one single-node read checks that it is still on the node (``unbound_check``).

A client without a server clock (a test double) settles at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from slurm_hooks.core.errors import SlurmError
from slurm_hooks.core.model import NodeState
from slurm_hooks.decide.breaker import ALL, ClaimVerdict, limit_for
from slurm_hooks.decide.config import PolicyConfig
from slurm_hooks.slurm.base import ServerClock, SlurmClient

log = logging.getLogger(__name__)

#: Seconds between two reads of slurmctld's clock when the confirming read
#: still showed the first second (this host's clock runs ahead of slurmctld's).
POLL_S = 0.2
#: Slept past the second boundary this host's clock expects slurmctld's at.
MARGIN_S = 0.05
#: Settling gives up after this long (slurmctld's clock not moving: it is
#: hung or our reads fail); the claim stays and the next run settles again.
SETTLE_TIMEOUT_S = 15.0


class SettleTimeout(SlurmError):
    """slurmctld's clock did not pass the claim's second in time."""


def server_time(client: SlurmClient) -> datetime | None:
    """slurmctld's clock, or None for a client that cannot read it."""
    if not isinstance(client, ServerClock):
        return None
    return client.server_time()


def settle(
    client: SlurmClient,
    *,
    poll_s: float = POLL_S,
    timeout_s: float = SETTLE_TIMEOUT_S,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
) -> int:
    """Return once slurmctld's clock has moved past the second it showed
    first: that first reading is taken after our claim was written (the
    write returned), so it is at or after the claim's reason time, and a
    later second means every update stamped at or before the claim's second
    is visible.

    Two reads, not a poll every ``poll_s``: after the first reading ``T``,
    sleep until this host's clock says ``T + 1`` (plus ``MARGIN_S``), never
    longer than one second (slurmctld answered within its second ``T``, so
    one second after the answer its clock is past ``T`` whatever this
    host's clock says), then read again to confirm.  Only when that read
    still shows ``T`` do we poll on.  Local time only paces the reads: the
    proof rests on slurmctld's clock.  Returns the number of clock reads (0
    for a client without a server clock)."""
    first = server_time(client)
    if first is None:
        return 0
    reads = 1
    second = int(first.timestamp())
    deadline = monotonic() + timeout_s
    sleep(min(1.0, max(0.0, second + 1 - wall())) + MARGIN_S)
    while True:
        now = server_time(client)
        reads += 1
        if now is not None and int(now.timestamp()) > second:
            return reads
        if monotonic() > deadline:
            raise SettleTimeout(
                f"slurmctld's clock did not pass {first.isoformat()} within {timeout_s:g}s"
            )
        sleep(poll_s)


def cannot_bind(node: str, table: Sequence[NodeState], cfg: PolicyConfig) -> bool:
    """True when no rank could refuse ``node``'s claim: in every partition
    the node is in (per ``table``, the read the decision was made on) the
    breaker's limit is at least the partition's size, and a rank never
    exceeds the size.  Then settling and the rank's table re-read prove
    nothing and are skipped (docs/breaker.md).  False for a node missing
    from ``table``: rank it."""
    me = next((n for n in table if n.name == node), None)
    if me is None:
        return False
    for part in me.partitions or (ALL,):
        size = sum(1 for n in table if part == ALL or part in n.partitions)
        if limit_for(size, cfg) < size:
            return False
    return True


def unbound_check(
    node: str, claim: str, current: NodeState, table: Sequence[NodeState], cfg: PolicyConfig
) -> ClaimVerdict:
    """The verdict on a claim that ``cannot_bind``: lost when ``current``
    (the node read just now, alone) no longer carries it, else confirmed.
    Partition, limit and size are those of the node's first partition in
    ``table``; rank 0: not ranked."""
    if current.reason != claim or not (current.drained or current.down):
        return ClaimVerdict(False, lost=True)
    me = next((n for n in table if n.name == node), current)
    part = (me.partitions or (ALL,))[0]
    size = sum(1 for n in table if part == ALL or part in n.partitions)
    return ClaimVerdict(True, False, part, 0, limit_for(size, cfg), size)
