"""GPU core temperature against the profile's warn and fail thresholds.

Defaults follow the A100/H100 SXM figures ``nvidia-smi -q`` prints (max
operating 85 C, slowdown 89 C); profiles override them per SKU.
"""

from __future__ import annotations

from typing import Any, ClassVar

from slurm_hooks.core.model import Action, Component, Finding, Phase, Status
from slurm_hooks.core.record import record
from slurm_hooks.detect.checks.base import CheckContext, Problem
from slurm_hooks.detect.checks.gpubase import GpuCheck, GpuData
from slurm_hooks.detect.profiles import as_profile

GPU_TEMP_FAIL = Problem("GPU_TEMP", Status.FAIL, Action.DRAIN)
GPU_TEMP_WARN = Problem("GPU_TEMP", Status.WARN, Action.NONE)


@record
class Settings:
    #: WARN at or above this GPU temperature (deg C); the profile's
    #: gpu_temp_warn_c, when set, wins.
    warn_c: float = 85.0
    #: FAIL (drain) at or above this temperature (deg C), above warn_c; the
    #: profile's gpu_temp_fail_c, when set, wins.
    fail_c: float = 89.0

    def validate(self) -> None:
        if self.warn_c >= self.fail_c:
            raise ValueError(f"warn_c ({self.warn_c:g}) must be below fail_c ({self.fail_c:g})")


class GpuTempCheck(GpuCheck):
    name: ClassVar[str] = "gpu_temp"
    settings_class: ClassVar[type | None] = Settings
    phases: ClassVar[frozenset[Phase]] = frozenset(
        {Phase.HEALTHCHECK, Phase.ACCEPTANCE, Phase.WATCH}
    )

    def gather_gpu(self, nvml: Any, handle: Any, ctx: CheckContext) -> int:
        return int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))

    def judge_gpu(self, comp: Component, value: Any, ctx: CheckContext) -> list[Finding]:
        profile = as_profile(ctx.profile)
        s = ctx.settings_as(Settings, self.name)
        warn = profile.gpu_temp_warn_c if profile.gpu_temp_warn_c is not None else s.warn_c
        fail = profile.gpu_temp_fail_c if profile.gpu_temp_fail_c is not None else s.fail_c
        if value >= fail:
            problem, limit = GPU_TEMP_FAIL, fail
        elif value >= warn:
            problem, limit = GPU_TEMP_WARN, warn
        else:
            return []
        values = {"temp_c": value, "warn_c": warn, "fail_c": fail}
        return [self.gpu_finding(problem, comp, f"{value} C (limit {limit:g} C)", values)]

    def ok_values(self, data: GpuData) -> dict[str, Any]:
        temps = [s.value for s in data.samples if s.value is not None]
        return {"gpus": len(data.samples), "max_temp_c": max(temps) if temps else None}
