"""GPU memory held with no process on the GPU: memory the driver did not
give back when its owner went away (a teardown stuck in the driver, a
context the driver lost track of).  The next job on that GPU runs out of
memory, or fails to start, with nothing on the node to say why.  A GPU
reset frees it, so the finding asks for one.

Only NVML is read, as root: the GPU's compute and graphics processes and
its memory in use (``nvmlDeviceGetMemoryInfo`` version 2 where the driver
has it, which leaves out what the driver reserves for itself).  A user's
process holding memory is listed by NVML, so whatever a user runs or
leaves behind is never this finding.  Memory is freed a moment after its
process exits, so a GPU found so is looked at again ``settle_s`` later,
and only memory still held with still no process is reported.  A MIG GPU
is left out: its memory is split among its instances, and what NVML counts
as used on the GPU there, with no process, was not measured (no GPU here).

The finding rests on the absence of a process, so the check runs only
where that absence can be trusted: in the host's PID namespace (the
kernel's fixed inode for it, ``PROC_PID_INIT_INO``).  In a container of its
own (slurmd in a pod, Slinky) what NVML lists is the driver's to say:
NVIDIA's maintainers say the driver does not know PID namespaces and lists
host PIDs (NVIDIA/nvidia-docker#1483), which nothing here can confirm (no
GPU), and a pod's process missed on a node lent to inference would be
killed by the reset.  There the check is not applicable (a slurmd pod with
``hostPID`` is in the host's namespace).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, ClassVar

from slurm_hooks.core.model import Action, Component, Finding, Phase, Status
from slurm_hooks.core.record import record
from slurm_hooks.detect.checks.base import CheckContext, Problem
from slurm_hooks.detect.checks.gpubase import (
    GpuCheck,
    GpuData,
    GpuSample,
    call_optional,
    nvml_session,
)
from slurm_hooks.detect.engines.burnin.budget import time_left
from slurm_hooks.detect.probes.nvml import (
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_FUNCTION_NOT_FOUND,
    is_nvml_error,
    mig_mode_enabled,
)

GPU_MEMORY_HELD = Problem("GPU_MEMORY_HELD", Status.FAIL, Action.RESET_GPU)
MIB = 1024 * 1024
#: The inode of the host's PID namespace (``PROC_PID_INIT_INO``, a kernel
#: constant in ``include/linux/proc_ns.h``).
HOST_PID_NS_INODE = 0xEFFFFFFC


def host_pid_namespace(path: str = "/proc/self/ns/pid") -> bool:
    """Whether this process sees every process of the machine (the host's
    PID namespace), so NVML lists every process on a GPU."""
    try:
        return os.stat(path).st_ino == HOST_PID_NS_INODE
    except OSError:
        return False


@record
class Settings:
    """``[checks.gpu_memory]``: how much memory a GPU with no process may hold."""

    #: Memory in use (MiB) on a GPU with no process that counts as held.
    held_mib: float = 1024.0
    #: Seconds between the first look and the second, for memory that a
    #: process which just exited is still giving back.
    settle_s: float = 2.0

    def validate(self) -> None:
        if self.held_mib <= 0:
            raise ValueError(f"held_mib must be positive, got {self.held_mib:g}")
        if self.settle_s < 0:
            raise ValueError(f"settle_s must be 0 or more, got {self.settle_s:g}")


@record
class Held:
    """One look at a GPU: its processes and memory in use."""

    processes: int
    used_mib: float
    mig: bool = False


def _processes(nvml: Any, handle: Any) -> int:
    count = len(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
    graphics = call_optional(nvml.nvmlDeviceGetGraphicsRunningProcesses, handle)
    return count + len(graphics or ())


def _used_mib(nvml: Any, handle: Any) -> float:
    version = getattr(nvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            return float(nvml.nvmlDeviceGetMemoryInfo(handle, version=version).used) / MIB
        except Exception as exc:
            # A driver before R510 has only version 1 (the driver's reserve included).
            if not is_nvml_error(exc, ERROR_FUNCTION_NOT_FOUND, ERROR_ARGUMENT_VERSION_MISMATCH):
                raise
    return float(nvml.nvmlDeviceGetMemoryInfo(handle).used) / MIB


class GpuMemoryCheck(GpuCheck):
    name: ClassVar[str] = "gpu_memory"
    settings_class: ClassVar[type | None] = Settings
    phases: ClassVar[frozenset[Phase]] = frozenset({Phase.HEALTHCHECK, Phase.ACCEPTANCE})

    def skip_reason(self, profile: Any, ctx: CheckContext) -> str | None:
        reason = super().skip_reason(profile, ctx)
        host: Callable[[], bool] = ctx.services.get("host_pid_namespace", host_pid_namespace)
        if reason is None and not host():
            reason = (
                "not in the host's PID namespace: a process NVML does not list "
                "here would look like memory held, and the reset would kill it"
            )
        return reason

    def gather_gpu(self, nvml: Any, handle: Any, ctx: CheckContext) -> Held:
        if mig_mode_enabled(nvml, handle):
            return Held(0, 0.0, mig=True)
        return Held(_processes(nvml, handle), _used_mib(nvml, handle))

    def gather(self, ctx: CheckContext) -> GpuData:
        data = super().gather(ctx)
        s = ctx.settings_as(Settings, self.name)
        suspects = [i for i, g in enumerate(data.samples) if self._held(g.value, s)]
        if not suspects:
            return data
        left = time_left(ctx)
        wait = s.settle_s if left is None else max(0.0, min(s.settle_s, left - 1.0))
        ctx.services.get("sleep", time.sleep)(wait)
        session = nvml_session(ctx)
        samples = list(data.samples)
        for i in suspects:
            # The second look decides: held only if still held, with still no process.
            comp = samples[i].component
            try:
                samples[i] = GpuSample(comp, self.gather_gpu(session.nvml, session.handle(i), ctx))
            except Exception as exc:  # noqa: BLE001 - judged as a first look's NVML error is
                samples[i] = GpuSample(comp, error=exc)
        # A new GpuData, not dataclasses.replace: that import stays off the hook path.
        return GpuData(tuple(samples), node=data.node, skipped=data.skipped, extra=data.extra)

    @staticmethod
    def _held(value: Any, s: Settings) -> bool:
        return (
            isinstance(value, Held)
            and not value.mig
            and value.processes == 0
            and value.used_mib >= s.held_mib
        )

    def judge_gpu(self, comp: Component, value: Any, ctx: CheckContext) -> list[Finding]:
        s = ctx.settings_as(Settings, self.name)
        if not self._held(value, s):
            return []
        detail = (
            f"{value.used_mib:.0f} MiB of GPU memory held with no process on the GPU; "
            "a GPU reset frees it"
        )
        values = {"used_mib": round(value.used_mib), "processes": 0}
        return [self.gpu_finding(GPU_MEMORY_HELD, comp, detail, values)]
