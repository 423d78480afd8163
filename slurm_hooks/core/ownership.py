"""Whose reason is on a node: ours, foreign, stale or none.  One rule, pure.

Slurm keeps a node's ``Reason`` for different lengths of time per release:
22.05 clears it on ``State=RESUME``, 24.11 keeps the last one on a node that
is back in service (seen in a Debian 13 root, Slurm 24.11.5; see
``../shared/notes/slurm-versions-roots.md`` and issue 15).  So a reason means
something only while the node is out of service (DRAIN, DRAINED, DRAINING,
DOWN, FAIL, FAILING); on an IDLE, ALLOCATED or MIXED node without such a flag
it is a leftover that claims nothing (STALE): it must neither stop our drain
nor pass for our drain.

The policy (``decide/``), the lending executor, the engine and the Slurm door
(``slurm/door.py``) all ask here, so the rule cannot drift between them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from slurm_hooks.core.model import NodeState, ReasonOwner
from slurm_hooks.core.reason import DrainReason, classify_owner, try_parse_reason

#: Flags (as slurm/parse.py normalises them: DRAINED and DRAINING become
#: DRAIN) under which Slurm's reason is the claim of whoever wrote it.
HOLDING_FLAGS = frozenset({"DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING"})
#: Base states under which the same holds.
HOLDING_STATES = frozenset({"down", "fail", "failing"})


class Ownership(enum.StrEnum):
    """What a node's reason means for us."""

    #: No reason that counts: no reason at all (on any state).
    NONE = "none"
    #: One of our reasons, on a node that is out of service.
    OURS = "ours"
    #: Anyone else's reason (admin, NHC, operator, Slurm), on a node that is
    #: out of service: never overwritten, never lifted.
    FOREIGN = "foreign"
    #: A reason (anyone's) left on a node that is in service: a 24.11
    #: leftover of a resumed drain.  Nobody's claim.
    STALE = "stale"

    @property
    def claimed(self) -> bool:
        """True when someone holds the node out of service with this reason."""
        return self in (Ownership.OURS, Ownership.FOREIGN)


def reason_counts(state: str, flags: Iterable[str]) -> bool:
    """Does a reason on a node in ``state`` with ``flags`` mean anything?"""
    return state.lower() in HOLDING_STATES or not HOLDING_FLAGS.isdisjoint(f.upper() for f in flags)


def classify(state: str, flags: Iterable[str], reason: str | None) -> Ownership:
    """The rule: state + flags + reason -> OURS / FOREIGN / STALE / NONE."""
    if reason is None or not reason.strip():
        return Ownership.NONE
    if not reason_counts(state, flags):
        return Ownership.STALE
    return Ownership.OURS if classify_owner(reason) is ReasonOwner.OURS else Ownership.FOREIGN


def node_ownership(node: NodeState | None) -> Ownership:
    """``classify`` for a node as the access layer reports it (None: not read)."""
    if node is None:
        return Ownership.NONE
    return classify(node.state, node.flags, node.reason)


def effective_owner(node: NodeState | None) -> ReasonOwner:
    """Who holds the node out of service: the writer of its reason where the
    reason counts, ``ReasonOwner.NONE`` where there is none or it is stale."""
    if node is None or not node_ownership(node).claimed:
        return ReasonOwner.NONE
    return classify_owner(node.reason)


def our_reason(node: NodeState | None) -> DrainReason | None:
    """Our parsed reason when it holds the node (OURS), else None: a stale
    reason of ours on a node in service is not a drain of ours."""
    if node_ownership(node) is not Ownership.OURS:
        return None
    assert node is not None
    return try_parse_reason(node.reason)
