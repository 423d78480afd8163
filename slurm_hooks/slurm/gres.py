"""A node's GRES as Slurm prints them (``scontrol show node``'s ``Gres=``,
``sinfo %G``, the REST ``gres``): how many GPUs it has.

Forms seen: ``gpu:4``, ``gpu:h100:8``, ``gpu:h100:8(S:0-1)``, ``gpu:a100:4,
gpu:v100:2``, ``gpu:4,nic:1``, MIG slices ``gpu:1g.10gb:7``; ``(null)`` or
empty for none.  Used where a job of ours must be given every GPU of a node
(the acceptance job: a step without GPU GRES is denied the GPUs' device files
where ``ConstrainDevices=yes``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: The socket or core binding Slurm appends to an entry, ``(S:0-1)``; it may
#: hold commas (``(S:0,2)``), so it goes before the entries are split.
_BINDING = re.compile(r"\([^)]*\)")


#: A GPU-sharing GRES in what a job asked for: ``gres:shard:2`` (22.05),
#: ``gres/shard:2`` (24.11 on), ``gres/mps:50``.
_SHARING = re.compile(r"(?:^|[,\s])gres[:/](?:shard|mps)(?=[:,\s]|$)")


def shares_gpus(tres_per: str | None) -> bool:
    """Whether a job's request (``JobInfo.tres_per``) asks for a share of a
    GPU (``gres/shard``, ``gres/mps``) rather than GPUs whole."""
    return bool(tres_per and _SHARING.search(tres_per))


def types_named(gres_types: str | None) -> set[str]:
    """The GRES names in ``GresTypes`` (``scontrol show config``:
    ``gpu,shard``; ``(null)`` or unset for none), lower case."""
    return {t.strip().lower() for t in (gres_types or "").split(",")} - {"", "(null)"}


def gpu_count(gres: str | None) -> int:
    """The GPUs (or GPU slices) in ``gres``: the counts of its ``gpu``
    entries added up; 0 for none, for ``(null)`` and for an entry whose
    count is not a number (nothing to ask for is safer than a wrong ask)."""
    if not gres:
        return 0
    total = 0
    for entry in _BINDING.sub("", gres).split(","):
        parts = entry.strip().split(":")
        if parts[0] != "gpu":
            continue
        if len(parts) == 1:
            total += 1  # "gpu" alone: one
        elif parts[-1].isdigit():
            total += int(parts[-1])
    return total


#: MIG slices as GPU types (``gpu:1g.10gb:1``, ``gpu:3g.40gb:2``): their IDX
#: numbers slices, not the GPUs a fault names.
_MIG_TYPE = re.compile(r"^\d+g\.\d+gb$", re.IGNORECASE)
#: One ``gpu[:type]:count(IDX:list)`` entry of a job's per-node detail.
_GPU_DETAIL = re.compile(r"^gpu(?::([^:()]+))?:\d+\(IDX:([0-9,\-]+)\)$")
_IDX_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _detail_entries(detail: str) -> list[str]:
    """``gpu:2(IDX:0,3),nic:1(IDX:0)`` split on the commas outside parentheses."""
    entries, depth, start = [], 0, 0
    for i, ch in enumerate(detail):
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            entries.append(detail[start:i])
            start = i + 1
    entries.append(detail[start:])
    return [e.strip() for e in entries if e.strip()]


def gpu_indices(detail: str | None) -> frozenset[int] | None:
    """The GPUs (Slurm's indices on the node) in one node's GRES detail of a
    job: ``scontrol -d show job``'s ``GRES=gpu:2(IDX:1-2)``, slurmrestd's
    ``gres_detail`` entry.  Empty for a job given no GPU there (``GRES=``).
    None when it cannot be told: a share of a GPU (``shard``, ``mps``: the
    detail does not say which GPU), MIG slices, a ``gpu`` entry without IDX.
    Measured on 22.05, 24.11 and 26.05 (tests/test_gpu_scope_lab.py)."""
    if detail is None or detail.strip() in ("", "(null)"):
        return frozenset()
    found: set[int] = set()
    for entry in _detail_entries(detail):
        name = entry.split(":", 1)[0].split("(", 1)[0]
        if name in ("shard", "mps"):
            return None
        if name != "gpu":
            continue  # another GRES (a NIC, a license-like count): not a GPU
        m = _GPU_DETAIL.match(entry)
        if m is None or (m.group(1) and _MIG_TYPE.match(m.group(1))):
            return None
        for part in m.group(2).split(","):
            r = _IDX_RANGE.match(part)
            if r is None:
                return None
            lo = int(r.group(1))
            hi = int(r.group(2)) if r.group(2) else lo
            if hi < lo or hi - lo > 4096:
                return None
            found.update(range(lo, hi + 1))
    return frozenset(found)


def gpus_on(detail: Sequence[tuple[str, str]], node: str) -> frozenset[int] | None:
    """The job's GPUs on ``node`` from its per-node detail, ``(nodes,
    gres)`` pairs (``nodes`` a hostlist: Slurm groups nodes whose detail
    is the same); None when no pair names the node (not known)."""
    from slurm_hooks.core.slurm_model import names

    for nodes, gres in detail:
        if names(nodes, node):
            return gpu_indices(gres)
    return None
