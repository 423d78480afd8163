"""The single-node read: one node's record from ``sinfo -n NODE``.

Kept apart from the client because it is a format of its own (fields
separated by a byte no one types) with its own rule: a line it cannot read
exactly is never guessed at, and the client falls back to ``scontrol``.
"""

from __future__ import annotations

from slurm_hooks.core.model import NodeState
from slurm_hooks.slurm import parse_values

#: ``sinfo -O`` fields of the single-node read (``get_node``), in this order.
#: ``sinfo -n NODE`` (one name, no hostlist) asks slurmctld for that node alone
#: (``REQUEST_NODE_INFO_SINGLE``), where ``scontrol show node NODE`` and
#: ``sinfo --json -n NODE`` receive the whole table on 22.05 (measured with
#: sdiag's RPC counts; bench/bench_fault_cost.py).  ``Reason`` and
#: ``Comment`` are free text, so every field ends with a separator no one
#: types (US, 0x1f) and a line that does not split into exactly these fields
#: is not guessed at: the read falls back to ``scontrol``.
SINFO_NODE_FIELDS = (
    "NodeList", "StateComplete", "UserLong", "TimeStamp", "Partition", "Features", "Gres",
    "CPUs", "CPUsState", "Comment", "Extra", "Reason",
)  # fmt: skip
SINFO_SEP = "\x1f"


def sinfo_node_argv(name: str) -> list[str]:
    """The single-node read of ``name``: ``-a`` so hidden partitions count,
    ``-N`` one line per (node, partition), ``:0`` no truncation."""
    fmt = ",".join(f"{f}:0{SINFO_SEP}" for f in SINFO_NODE_FIELDS)
    return ["sinfo", "-a", "-N", "-h", "-n", name, "-O", fmt]


def parse_sinfo_node(text: str, name: str) -> NodeState | None:
    """``sinfo_node_argv(name)``'s output as a NodeState, or None when it
    cannot say (no line: the node is in no partition, or not there; a free
    text with our separator in it; lines that disagree): the caller then
    reads it the long way.  sinfo prints ``none`` for no reason (with user
    and time ``Unknown``; 24.11 may name the user who cleared the last one),
    ``(null)`` for empty fields and marks the default
    partition with ``*``."""
    records: list[dict[str, str]] = []
    for line in text.splitlines():
        if not line:
            continue
        values = line.split(SINFO_SEP)
        if len(values) != len(SINFO_NODE_FIELDS) + 1 or values[-1].strip():
            return None
        rec = dict(zip(SINFO_NODE_FIELDS, values, strict=False))
        if rec["NodeList"] != name:
            return None
        records.append(rec)
    if not records:
        return None
    first = records[0]
    same = [k for k in SINFO_NODE_FIELDS if k != "Partition"]
    if any(any(r[k] != first[k] for k in same) for r in records[1:]):
        return None
    partitions: list[str] = []
    for r in records:
        part = r["Partition"].rstrip("*")
        if part and part not in partitions and part != "(null)":
            partitions.append(part)
    user = None if first["UserLong"] in ("Unknown", "(null)", "") else first["UserLong"]
    reason: str | None = first["Reason"]
    reason_time = parse_values.parse_time(first["TimeStamp"])
    # No reason: "none" with no time.  24.11 keeps the user who last cleared
    # a reason beside it (root, time Unknown); a reason someone set has both.
    if reason in ("", "(null)") or (reason == "none" and (user is None or reason_time is None)):
        reason = user = None
    state, flags = parse_values.parse_state(first["StateComplete"])
    alloc = first["CPUsState"].split("/", 1)[0]
    return NodeState(
        name=name,
        state=state,
        flags=flags,
        reason=reason,
        reason_user=user.split("(", 1)[0] or user if user else None,
        reason_time=reason_time if reason else None,
        partitions=tuple(partitions),
        features=tuple(
            f for f in first["Features"].split(",") if f and f not in ("(null)", "none")
        ),
        gres=None if first["Gres"] in ("", "(null)") else first["Gres"],
        cpus=int(first["CPUs"]) if first["CPUs"].isdigit() else None,
        alloc_cpus=int(alloc) if alloc.isdigit() else None,
        comment=None if first["Comment"] in ("", "(null)") else first["Comment"],
        extra=None if first["Extra"] in ("", "(null)") else first["Extra"],
    )
