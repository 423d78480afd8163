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
