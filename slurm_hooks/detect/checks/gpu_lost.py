"""GPUs that NVML can no longer talk to: the NVML side of XID 79.

After a GPU falls off the bus, NVML still counts it, but getting its handle
(or any query) fails with ``NVML_ERROR_GPU_IS_LOST``; some driver states
answer ``NVML_ERROR_UNKNOWN`` instead.  Either way only a reboot brings the
GPU back, and a GPU that keeps getting lost needs replacing (the policy's
history decides that).  ``NVML_ERROR_RESET_REQUIRED`` asks for a GPU reset.
"""

from __future__ import annotations

from typing import Any, ClassVar

from slurm_hooks.core.model import Action, Finding, Phase, Status
from slurm_hooks.detect.checks.base import CheckContext, Problem
from slurm_hooks.detect.checks.gpubase import GpuCheck, GpuSample, nvml_unknown
from slurm_hooks.detect.probes.nvml import (
    ERROR_GPU_IS_LOST,
    ERROR_RESET_REQUIRED,
    ERROR_UNKNOWN,
    error_name,
    is_nvml_error,
)

GPU_LOST = Problem("GPU_LOST", Status.FAIL, Action.REBOOT)
GPU_RESET_REQUIRED = Problem("GPU_RESET_REQUIRED", Status.FAIL, Action.RESET_GPU)


class GpuLostCheck(GpuCheck):
    name: ClassVar[str] = "gpu_lost"
    phases: ClassVar[frozenset[Phase]] = frozenset(Phase)

    def gather_gpu(self, nvml: Any, handle: Any, ctx: CheckContext) -> Any:
        # Handle lookup can succeed from cached state; a memory query reaches
        # the GPU through the resource manager, which is where a lost GPU fails.
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        return int(mem.total)

    def judge_gpu(self, comp: Any, value: Any, ctx: CheckContext) -> list[Finding]:
        return []

    def on_gpu_error(self, sample: GpuSample, ctx: CheckContext) -> Finding:
        exc = sample.error
        assert exc is not None
        comp = sample.component
        values = {"nvml_error": error_name(exc)}
        if is_nvml_error(exc, ERROR_GPU_IS_LOST, ERROR_UNKNOWN):
            message = (
                f"{comp.short()} is lost to NVML ({error_name(exc)}): fallen off the bus "
                "(XID 79); reboot, replace if it recurs"
            )
            return GPU_LOST.finding(self.name, message, comp, values)
        if is_nvml_error(exc, ERROR_RESET_REQUIRED):
            return self.gpu_finding(
                GPU_RESET_REQUIRED, comp, "NVML says the GPU needs a reset", values
            )
        return nvml_unknown(self.name, comp, exc)
