"""Clock event (throttle) reasons that point at hardware trouble.

Idle, application clocks, the software power cap and sync boost are normal
operation and ignored.  Hardware slowdown, hardware thermal slowdown and
power-brake slowdown on a healthy node mean failing cooling or power
(PSU, cabling): FAIL.  Software thermal slowdown means the GPU is running
hot: WARN.  Both lists are settings.
"""

from __future__ import annotations

from typing import Any, ClassVar

from slurm_hooks.core.model import Action, Component, Finding, Phase, Status
from slurm_hooks.core.record import record
from slurm_hooks.detect.checks.base import CheckContext, Problem
from slurm_hooks.detect.checks.gpubase import GpuCheck, clock_event_reasons

#: Reason name -> pynvml constant name (the bit values are NVML's).
REASONS = {
    "gpu_idle": "nvmlClocksThrottleReasonGpuIdle",
    "applications_clocks": "nvmlClocksThrottleReasonApplicationsClocksSetting",
    "sw_power_cap": "nvmlClocksThrottleReasonSwPowerCap",
    "hw_slowdown": "nvmlClocksThrottleReasonHwSlowdown",
    "sync_boost": "nvmlClocksThrottleReasonSyncBoost",
    "sw_thermal": "nvmlClocksThrottleReasonSwThermalSlowdown",
    "hw_thermal": "nvmlClocksThrottleReasonHwThermalSlowdown",
    "hw_power_brake": "nvmlClocksThrottleReasonHwPowerBrakeSlowdown",
    "display_clock": "nvmlClocksThrottleReasonDisplayClockSetting",
}

GPU_THROTTLE_FAIL = Problem("GPU_THROTTLE", Status.FAIL, Action.DRAIN)
GPU_THROTTLE_WARN = Problem("GPU_THROTTLE", Status.WARN, Action.NONE)


@record
class Settings:
    #: Active clock event reasons (names from REASONS: gpu_idle, sw_power_cap,
    #: hw_slowdown, ...) that make a GPU FAIL (drain); wins over warn_reasons.
    fail_reasons: tuple[str, ...] = ("hw_slowdown", "hw_thermal", "hw_power_brake")
    #: Active reasons that make a GPU WARN (no action); reasons in neither
    #: list are ignored.
    warn_reasons: tuple[str, ...] = ("sw_thermal",)

    def validate(self) -> None:
        for r in (*self.fail_reasons, *self.warn_reasons):
            if r not in REASONS:
                raise ValueError(f"unknown throttle reason {r!r} (known: {', '.join(REASONS)})")


class ThrottleCheck(GpuCheck):
    name: ClassVar[str] = "throttle"
    settings_class: ClassVar[type | None] = Settings
    phases: ClassVar[frozenset[Phase]] = frozenset(
        {Phase.HEALTHCHECK, Phase.ACCEPTANCE, Phase.WATCH}
    )

    def gather_gpu(self, nvml: Any, handle: Any, ctx: CheckContext) -> dict[str, Any]:
        mask = clock_event_reasons(nvml, handle)
        active = [name for name, const in REASONS.items() if mask & int(getattr(nvml, const, 0))]
        return {"mask": mask, "active": active}

    def judge_gpu(self, comp: Component, value: Any, ctx: CheckContext) -> list[Finding]:
        s = ctx.settings_as(Settings, self.name)
        active = value["active"]
        failing = [r for r in active if r in s.fail_reasons]
        warning = [r for r in active if r in s.warn_reasons]
        if not failing and not warning:
            return []
        problem = GPU_THROTTLE_FAIL if failing else GPU_THROTTLE_WARN
        detail = f"clocks held down by {', '.join(failing + warning)}"
        values = {"mask": f"0x{value['mask']:x}", "reasons": ",".join(active)}
        return [self.gpu_finding(problem, comp, detail, values)]
