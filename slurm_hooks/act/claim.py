"""Claim, settle, rank: the circuit breaker exact under concurrency.

Every node decides on its own.  Evaluating the breaker and then draining
leaves a window in which F nodes that fault in the same second all see room
under the cap and all drain.  So a drain is a *claim* first, and the breaker
judges it only then (docs/breaker.md has the proof).  The node decides on
its own state alone (one single-node read), so the rank's table read is the
fault path's only node-table read:

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
   A latch placed before the claim in that order (a held mark, a trip in
   the latch file) refuses it.  Within the limit in every partition and not
   latched: confirm (signal, grace, requeue).  Otherwise take the claim back
   through the door, hold the fault, latch.

A client without a server clock (a test double) settles at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

from slurm_hooks.core.errors import SlurmError
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
