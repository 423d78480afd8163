"""Slurm hostlists (``gpu[001-128,200]``) through ClusterShell's NodeSet.

We never hand-parse bracket ranges: ClusterShell handles zero padding,
multiple ranges, nested prefixes and folding the way Slurm admins expect.
It is imported lazily because hooks that never see a hostlist should not
pay for it.

Only Slurm's grammar is accepted: ClusterShell's own extensions (``@group``,
``*``, the set operators ``&``, ``!``, ``^``) are refused with a
:class:`ConfigError`, and no group resolver is ever consulted.  A group
would run the upcalls of the host's ``/etc/clustershell/groups.conf``
inside a root hook, and a spec such as ``*`` used to escape as
ClusterShell's ``GroupResolverSourceError`` (a traceback, not a config error).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from slurm_hooks.core.errors import ConfigError

#: ClusterShell syntax that is not Slurm's: groups, "all", set operators.
_NOT_SLURM = frozenset("@*&!^")


def _refuse_extensions(spec: str) -> None:
    bad = sorted(_NOT_SLURM.intersection(spec))
    if bad:
        raise ConfigError(
            f"invalid hostlist {spec!r}: {' '.join(bad)} is not Slurm hostlist syntax "
            "(give node names and ranges, e.g. gpu[001-128],gpu200)"
        )


def _nodeset(spec: str | Iterable[str]) -> Any:  # ClusterShell publishes no types
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetParseError

    items = [spec] if isinstance(spec, str) else list(spec)
    for item in items:
        _refuse_extensions(item)
    try:
        if isinstance(spec, str):
            return NodeSet(spec, resolver=RESOLVER_NOGROUP)
        ns = NodeSet(resolver=RESOLVER_NOGROUP)
        for item in items:
            ns.update(item)  # parsed with ns's resolver: no groups
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
