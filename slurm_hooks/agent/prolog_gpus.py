"""Which GPUs a job has, as its prolog's environment says: the job's own
GPUs are the only ones its prolog may burn in on a shared node.

slurmd names them by their index in its GPU list (``SLURM_JOB_GPUS``);
the checks run their engines, and NVML names GPUs, in PCI bus order.
``in_nvml_order`` renames the former into the latter where the two differ
(``slurm/gpu_order.py`` says how), and gives the job no GPU work where
which GPUs are its own cannot be told.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from slurm_hooks.core.record import record

#: The variable slurmd sets in the prolog for a job allocated whole GPUs
#: (``gres/gpu``): the only one the prolog takes devices from.
GPU_ENV = "SLURM_JOB_GPUS"
#: Variables set without it for a job that shares GPUs (``gres/mps``,
#: ``gres/shard``): other jobs run on those GPUs.
SHARED_GPU_ENV = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")


class SlurmOrder(Protocol):
    """Slurm's GPU numbering on this node (``slurm.gpu_order.GpuOrder``)."""

    @property
    def why(self) -> str: ...

    def nvml(self, indices: Iterable[int]) -> tuple[int, ...] | None: ...


class GpuSettings(Protocol):
    """The ``[prolog]`` settings ``job_gpus`` reads (``PrologConfig``)."""

    @property
    def gpu_jobs_only(self) -> bool: ...
    @property
    def gres_gpus(self) -> bool: ...


# -- which GPUs the job has ------------------------------------------------------


@record
class GpuUse:
    """Whether the prolog should do GPU work for this job, on which GPUs
    (None: all of the node's), and why."""

    gpus: bool
    devices: tuple[int, ...] | None
    why: str


def parse_devices(text: str) -> tuple[int, ...] | None:
    """``"0,2,3"`` -> (0, 2, 3); None for anything that is not a list of
    indices (UUIDs, MIG names, ``NoDevFiles``)."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items or not all(t.isdigit() for t in items):
        return None
    return tuple(sorted({int(t) for t in items}))


def job_gpus(env: Mapping[str, str], cfg: GpuSettings, profile_gpu_count: int | None) -> GpuUse:
    """Decide from the prolog's environment; pure."""
    if profile_gpu_count == 0:
        return GpuUse(False, None, "profile expects no GPUs")
    value = (env.get(GPU_ENV) or "").strip()
    if value and value != "NoDevFiles":
        return GpuUse(True, parse_devices(value), f"{GPU_ENV}={value}")
    for var in SHARED_GPU_ENV:
        value = (env.get(var) or "").strip()
        if value and value != "NoDevFiles":
            # A burn-in there would take the GPU from other jobs (its memory,
            # its time) and judge it slow for their load: never a drain.
            return GpuUse(False, None, f"{var}={value} without {GPU_ENV}: GPUs shared "
                          "(gres/mps, gres/shard) are not burned in")  # fmt: skip
    if not cfg.gpu_jobs_only:
        return GpuUse(True, None, "gpu_jobs_only = false: every job gets the GPU checks")
    if cfg.gres_gpus:
        return GpuUse(False, None, "job was allocated no GPUs (no SLURM_JOB_GPUS)")
    return GpuUse(True, None, "gres_gpus = false: cannot tell from the environment, all GPUs")


def in_nvml_order(gpu: GpuUse, order: SlurmOrder) -> GpuUse:
    """The job's GPUs renamed from Slurm's indices to NVML's (PCI bus
    order), the numbering the checks run the engines in: where the two
    differ, Slurm's taken as NVML's would burn in another job's GPUs.
    Where which GPUs are the job's cannot be told, no GPU work (a guess
    could be another job's GPU).  Pure; unchanged where they agree."""
    if not gpu.devices:
        return gpu
    devices = order.nvml(gpu.devices)
    if devices is None:
        return GpuUse(False, None, f"{gpu.why}: which GPUs these are cannot be told "
                      f"({order.why}); no GPU work for this job")  # fmt: skip
    if devices == gpu.devices:
        return gpu
    shown = ",".join(map(str, devices))
    return GpuUse(gpu.gpus, devices, f"{gpu.why}: Slurm's indices; NVML's {shown} ({order.why})")
