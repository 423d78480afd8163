"""Slurm hostlists (``gpu[001-128,200]``) through ClusterShell's NodeSet.

We never hand-parse bracket ranges: ClusterShell handles zero padding,
multiple ranges, nested prefixes and folding the way Slurm admins expect.
It is imported lazily because hooks that never see a hostlist should not
pay for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from slurm_hooks.core.errors import ConfigError


def _nodeset(spec: str | Iterable[str]) -> Any:  # ClusterShell publishes no types
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError

    try:
        if isinstance(spec, str):
            return NodeSet(spec)
        ns = NodeSet()
        for item in spec:
            ns.update(item)
        return ns
    except NodeSetParseError as exc:
        raise ConfigError(f"invalid hostlist {spec!r}: {exc}") from exc


def expand(spec: str) -> list[str]:
    """``n[1-3],gpu07`` -> ``['gpu07', 'n1', 'n2', 'n3']`` (ClusterShell order)."""
    if not spec or spec in ("(null)", "None"):
        return []
    return list(_nodeset(spec))


def fold(names: Iterable[str]) -> str:
    """``['gpu003', 'gpu017', 'gpu018']`` -> ``gpu[003,017-018]``."""
    names = [n for n in names if n]
    if not names:
        return ""
    return str(_nodeset(names))


def contains(spec: str, name: str) -> bool:
    return name in _nodeset(spec)
