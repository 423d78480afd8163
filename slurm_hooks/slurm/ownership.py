"""Change a node's drain only when the reason on it is ours.

Slurm has no compare-and-set on reasons, so these helpers read the node,
refuse (ForeignReasonError) when someone else's reason is on it (an admin's
words, ``NHC:``, Slinky's ``slurm-operator:``, Slurm's ``Prolog error``),
and only then write.  The window between read and write is one scontrol
call; after writing we read back so a caller learns if it lost that race.
"""

from __future__ import annotations

import logging

from slurm_hooks.core.errors import ForeignReasonError, SlurmError
from slurm_hooks.core.model import NodeState, ReasonOwner
from slurm_hooks.core.reason import classify_owner, try_parse_reason
from slurm_hooks.slurm.base import SlurmClient

log = logging.getLogger(__name__)


def _holds_reason(node: NodeState) -> bool:
    """Slurm keeps a reason only on drained/down/failed nodes."""
    return bool(node.reason) and (node.drained or node.down or "FAIL" in node.flags)


def drain_if_ours_or_clear(client: SlurmClient, name: str, reason: str) -> NodeState:
    """Drain ``name`` with ``reason`` (one of ours, see drain_reason) when it
    carries no reason or one of ours; an existing reason of ours is replaced.
    Raises ForeignReasonError, without writing, when another party's reason
    is on the node.  Returns the node as read back after the write."""
    if try_parse_reason(reason) is None:
        raise SlurmError(f"refusing to drain {name} with a reason that is not ours: {reason!r}")
    node = client.get_node(name)
    owner = classify_owner(node.reason) if _holds_reason(node) else ReasonOwner.NONE
    if owner not in (ReasonOwner.NONE, ReasonOwner.OURS):
        raise ForeignReasonError(
            f"node {name} already has a {owner.value} reason {node.reason!r} "
            f"(set by {node.reason_user or '?'}); not touching it"
        )
    if node.reason == reason and node.drained:
        return node
    client.drain(name, reason)
    after = client.get_node(name)
    if after.reason != reason:
        log.warning(
            "drain race node=%s wrote=%r now=%r user=%s",
            name,
            reason,
            after.reason,
            after.reason_user,
        )
    return after


def resume_if_ours(client: SlurmClient, name: str, *, incident: str | None = None) -> bool:
    """Resume ``name`` if its drain/down reason is ours (and, with
    ``incident``, of that incident).  False when there is nothing to resume;
    ForeignReasonError when the reason belongs to anyone else - an admin's
    drain is never lifted by us."""
    node = client.get_node(name)
    if not (node.drained or node.down):
        return False
    parsed = try_parse_reason(node.reason)
    if parsed is None:
        owner = classify_owner(node.reason)
        raise ForeignReasonError(
            f"node {name} is {node.state}+{'+'.join(sorted(node.flags))} with a "
            f"{owner.value} reason {node.reason!r}; only its owner may resume it"
        )
    if incident is not None and parsed.incident != incident:
        raise ForeignReasonError(
            f"node {name} carries our incident {parsed.incident}, not {incident}; not resuming"
        )
    client.resume(name)
    return True
