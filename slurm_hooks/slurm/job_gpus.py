"""Which GPUs of a node a job was given: Slurm's per-node GRES detail.

``scontrol -d -o show job ID`` prints, in the record's fixed middle (no
user text there, ``parse.job_middle``), one run per group of nodes::

    Nodes=n1 CPU_IDs=1 Mem=0 GRES=gpu:1(IDX:0)
    Nodes=n[2-3] CPU_IDs=0-1 Mem=0 GRES=gpu:2(IDX:1-2)

(measured on 22.05, 24.11 and 26.05; ``GRES=`` empty for a job given no
GRES there).  slurmrestd gives the same strings as ``gres_detail``, one per
node of the job's node list.  The GPU-scoped evacuation
(``[policy] evacuate = "gpu"``, act/gpu_scope.py) reads them; a job whose
detail is unknown is evacuated as before.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from slurm_hooks.core import hostlist
from slurm_hooks.core.errors import ConfigError
from slurm_hooks.slurm import parse

#: ``(nodes, gres)``: a hostlist and the GRES detail Slurm printed for it.
Detail = list[tuple[str, str]]

_RUN = re.compile(r"(?:^|\s)Nodes=(\S+) CPU_IDs=\S* Mem=\S* GRES=(\S*)")


def detail_from_scontrol(text: str, job_id: str) -> Detail:
    """The per-node detail of job ``job_id`` in ``scontrol -d -o show job
    ID`` output; empty when the job is not there.  ShadowedRecord, as for
    get_job, when a record is ambiguous or the id stands in more than one
    (a job name with newlines can hold a whole record)."""
    mine = []
    for record in parse.records(text, "JobId"):
        middle = parse.job_middle(record)  # any ambiguous record: refused
        if record.split(None, 1)[0] == f"JobId={job_id}":
            mine.append(middle)
    if len(mine) > 1:
        raise parse.ShadowedRecord(f"{len(mine)} records of job {job_id}")
    return [(m.group(1), m.group(2)) for m in _RUN.finditer(mine[0])] if mine else []


def detail_from_json(obj: Mapping[str, Any]) -> Detail:
    """slurmrestd's job: ``gres_detail``, one string per node of ``nodes``
    in Slurm's node order, which a hostlist here need not share; so the
    detail is taken only where the order cannot matter (one node, or the
    same string for every node), else empty: nothing is guessed."""
    detail = obj.get("gres_detail")
    nodes = obj.get("nodes")
    if not isinstance(detail, list) or not detail or not isinstance(nodes, str) or not nodes:
        return []
    try:
        count = len(hostlist.expand(nodes))
    except ConfigError:
        return []
    if count != len(detail) or not all(isinstance(d, str) and d == detail[0] for d in detail):
        return []
    return [(nodes, detail[0])]
