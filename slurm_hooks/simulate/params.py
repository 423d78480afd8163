"""The replay's knobs: the simulated fleet, the job, the hardware's repair
times and the people in the loop, each with a default and where it comes
from (``SOURCES``; docs/simulate.md prints the same table).

A default marked *assumption* has no published figure behind it: it is a
round number a site should replace with its own (``--set name=value``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from slurm_hooks.core.bounds import require_at_least, require_positive

#: Where each default comes from.
SOURCES: dict[str, str] = {
    "nodes": "Llama 3: 16,384 H100 = 2,048 nodes of 8 GPUs (arXiv:2407.21783, 3.3.4)",
    "gpus_per_node": "HGX H100 / Grand Teton: 8 GPUs per server (arXiv:2407.21783, 3.3.1)",
    "days": "Llama 3's 54-day pre-training snapshot (arXiv:2407.21783, 3.3.4)",
    "spares": "assumption: 32 nodes (1.6 % of 2,048) held as spares",
    "jobs": "Llama 3: one synchronous job on the whole cluster",
    "checkpoint_s": "assumption: 30 min; Llama 3 reports checkpoint times being cut, not the interval",
    "restart_s": "assumption: 10 min to reschedule, start 2,000 nodes and load a checkpoint",
    "nccl_timeout_s": "PyTorch >= 2.2: ProcessGroupNCCL's default timeout is 10 min (pytorch/pytorch#110947)",
    "response_s": "assumption: a person notices, finds the node, drains and requeues in 1 h",
    "fix_s": "assumption: a person fixes a node left to them (cable, reseat, firmware) in 4 h",
    "nhc_interval_s": "the slurm.conf lines of NHC's README (mej/nhc): HealthCheckInterval=300",
    "watch_latency_s": "slurm-hooks watch: a kernel-log XID is seen within a second (bench_demo)",
    "reset_s": "[repair] reset_timeout_s = 120 s bounds nvidia-smi -r",
    "reboot_s": "assumption: 15 min for a GPU server to reboot; [repair] reboot_timeout_s = 30 min",
    "acceptance_s": "assumption: 10 min of acceptance checks (burn-in, NCCL) before resume",
    "replace_s": "assumption: 3 days from a hardware ticket to a swapped node",
    "recur_s": "assumption: a fault that persists after a repair returns within 6 h",
    "maintenance_s": "assumption: a host down for maintenance is back in 2 h",
    "switch_nodes": "assumption: 16 nodes behind one leaf switch",
}


@dataclass(frozen=True)
class SimParams:
    """One replay's setting (seconds unless named otherwise)."""

    nodes: int = 2048
    gpus_per_node: int = 8
    days: float = 54.0
    #: Nodes held out of the job as spares (slurm-hooks: our SPARE reason;
    #: the manual baselines: idle nodes a person may place the job on).
    spares: int = 32
    #: Training jobs sharing the rest of the fleet equally.
    jobs: int = 1
    checkpoint_s: float = 1800.0
    restart_s: float = 600.0
    nccl_timeout_s: float = 600.0
    response_s: float = 3600.0
    fix_s: float = 4 * 3600.0
    nhc_interval_s: float = 300.0
    watch_latency_s: float = 1.0
    reset_s: float = 120.0
    reboot_s: float = 900.0
    acceptance_s: float = 600.0
    replace_s: float = 3 * 86400.0
    recur_s: float = 6 * 3600.0
    maintenance_s: float = 2 * 3600.0
    switch_nodes: int = 16
    #: Policy knobs (None: the site's config, else the product's default).
    breaker_cap: int | None = None
    hang_s: float | None = None
    grace_s: float | None = None

    def validate(self) -> None:
        require_at_least(self, 2, "nodes")
        require_at_least(self, 1, "jobs")
        if not 0 <= self.spares < self.nodes:
            raise ValueError("spares must be in [0, nodes)")
        if (self.nodes - self.spares) < self.jobs:
            raise ValueError("every job needs at least one node")
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, float) and v < 0:
                raise ValueError(f"{f.name} must be >= 0")
        require_positive(self, "checkpoint_s", "days")

    @property
    def job_nodes(self) -> int:
        """Nodes per job: the fleet less the spares, shared equally."""
        return (self.nodes - self.spares) // self.jobs

    def with_value(self, name: str, raw: str) -> SimParams:
        """A copy with one knob set from text (``--set``/``--sweep``)."""
        return with_value(self, name, raw)


def with_value(params: Any, name: str, raw: str) -> Any:
    """A copy of the dataclass ``params`` with one number (or text) field
    set from text; ValueError naming the known fields for another name."""
    fields = {f.name: f for f in dataclasses.fields(params)}
    if name not in fields:
        raise ValueError(f"unknown parameter {name!r} (known: {', '.join(sorted(fields))})")
    kind = str(fields[name].type)
    value: Any = raw
    if kind in ("int", "float", "int | None", "float | None"):
        value = int(raw) if "int" in kind else float(raw)
    elif kind != "str":
        raise ValueError(f"{name} cannot be set from text")
    return dataclasses.replace(params, **{name: value})
