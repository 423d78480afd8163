"""Slurm's network topology, parsed: which nodes share a leaf switch or a block.

Pure: text in, values out (the file is read by the caller, ``act/spares.py``).
Two formats, both from Slurm's own docs (topology.conf(5), topology.yaml(5)):

* ``topology.conf`` (``topology/tree``, and ``topology/block`` from 23.11),
  one line per switch or block, Slurm hostlists, ``#`` comments, keys case
  insensitive::

      SwitchName=s1 Nodes=gpu[001-016] LinkSpeed=100
      SwitchName=spine Switches=s[1-4]
      BlockName=b1 Nodes=gpu[001-018]

* ``topology.yaml`` (24.11+; it wins over topology.conf when both exist), a
  list of topologies each with ``tree: {switches: [{switch, nodes|children}]}``
  or ``block: {blocks: [{block, nodes}]}``.  Parsed only where PyYAML is
  installed (an optional dependency); the cluster default topology is used.

The group of a node is its *leaf*: the switch whose ``Nodes=`` names it (tree)
or its block.  Spares are picked from the group the job's other nodes are in
(``pick_spare``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from slurm_hooks.core import hostlist
from slurm_hooks.core.errors import ConfigError

_PAIR = re.compile(r"([A-Za-z]+)=(\S+)")


@dataclass(frozen=True)
class Topology:
    """Leaf groups: group name -> its nodes, and node -> group."""

    kind: str = "flat"
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))

    def group_of(self, node: str) -> str | None:
        for name, nodes in self.groups.items():
            if node in nodes:
                return name
        return None

    @property
    def empty(self) -> bool:
        return not self.groups


FLAT = Topology()


def _expand(spec: str, where: str) -> tuple[str, ...]:
    try:
        return tuple(hostlist.expand(spec))
    except Exception as exc:  # noqa: BLE001 - ClusterShell raises its own parse errors
        raise ConfigError(f"{where}: bad hostlist {spec!r}: {exc}") from exc


def parse_topology_conf(text: str, *, source: str = "topology.conf") -> Topology:
    """Leaf switches (``SwitchName=.. Nodes=..``) or blocks (``BlockName=..``).
    Switches that only name other switches are not leaves and are skipped.
    ConfigError on a line that has neither name key."""
    groups: dict[str, tuple[str, ...]] = {}
    kind = "flat"
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        pairs = {k.lower(): v for k, v in _PAIR.findall(line)}
        where = f"{source}:{lineno}"
        name = pairs.get("switchname") or pairs.get("blockname")
        if name is None:
            if pairs.get("blocksizes") is not None:
                continue
            raise ConfigError(f"{where}: expected SwitchName= or BlockName=: {line[:80]!r}")
        kind = "block" if "blockname" in pairs else "tree"
        if "nodes" in pairs:
            groups[name] = groups.get(name, ()) + _expand(pairs["nodes"], where)
    return Topology(kind, MappingProxyType(groups))


def topology_from_yaml_data(data: Any, *, source: str = "topology.yaml") -> Topology:
    """The cluster-default topology (or the first) of parsed topology.yaml data."""
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{source}: expected a list of topologies")
    chosen = next(
        (t for t in data if isinstance(t, dict) and t.get("cluster_default") is True), data[0]
    )
    if not isinstance(chosen, dict):
        raise ConfigError(f"{source}: a topology must be a mapping")
    groups: dict[str, tuple[str, ...]] = {}
    if isinstance(chosen.get("block"), dict):
        for b in chosen["block"].get("blocks") or []:
            if isinstance(b, dict) and b.get("block") and b.get("nodes"):
                groups[str(b["block"])] = _expand(str(b["nodes"]), source)
        return Topology("block", MappingProxyType(groups))
    if isinstance(chosen.get("tree"), dict):
        for s in chosen["tree"].get("switches") or []:
            if isinstance(s, dict) and s.get("switch") and s.get("nodes"):
                groups[str(s["switch"])] = _expand(str(s["nodes"]), source)
        return Topology("tree", MappingProxyType(groups))
    return FLAT


def parse_topology_yaml(text: str, *, source: str = "topology.yaml") -> Topology:
    """topology.yaml; ConfigError when PyYAML is missing or the file is invalid."""
    try:
        import yaml
    except ImportError as exc:
        raise ConfigError(f"{source}: reading topology.yaml needs PyYAML") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {exc}") from exc
    return topology_from_yaml_data(data, source=source)


def pick_spare(
    job_nodes: Iterable[str],
    failed: str,
    spares: Sequence[str],
    topology: Topology = FLAT,
    *,
    cold: Collection[str] = (),
) -> str | None:
    """The spare to resume for a job that lost ``failed``: one in the group
    most of the job's surviving nodes are in (the failed node's group when
    none survive), else any spare; ties by name, so every caller picks the
    same one.  None when there is no spare.

    ``cold``: spares that are powered down (power saving): usable, Slurm
    powers one up when the job lands there, but that costs its
    ResumeTimeout, so within a group a warm spare comes first.  Placement
    wins over warmth: the job runs on the group for its whole life, the boot
    is paid once."""
    if not spares:
        return None
    ordered = sorted(spares, key=lambda s: (s in cold, s))
    if topology.empty:
        return ordered[0]
    others = [n for n in job_nodes if n != failed] or [failed]
    counts: dict[str, int] = {}
    for n in others:
        g = topology.group_of(n)
        if g is not None:
            counts[g] = counts.get(g, 0) + 1
    for group, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        same = [s for s in ordered if topology.group_of(s) == group]
        if same:
            return same[0]
    return ordered[0]


__all__ = [
    "FLAT",
    "Topology",
    "parse_topology_conf",
    "parse_topology_yaml",
    "pick_spare",
    "topology_from_yaml_data",
]
