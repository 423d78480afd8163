"""Volatile uncorrectable (double-bit) ECC errors.

The volatile counter covers errors since the last driver load or GPU reset.
Any uncorrectable error means the data a job saw may be wrong and the GPU
needs a reset (which also triggers row remapping on A100 and later).  GPUs
without ECC answer NOT_SUPPORTED: that is "not applicable", not a fault.
"""

from __future__ import annotations

from typing import Any, ClassVar

from slurm_hooks.core.model import Action, Component, Finding, Phase, Status
from slurm_hooks.core.record import record
from slurm_hooks.detect.checks.base import CheckContext, Problem
from slurm_hooks.detect.checks.gpubase import GpuCheck, GpuData, call_optional

ECC_DBE = Problem("ECC_DBE", Status.FAIL, Action.RESET_GPU)
ECC_DBE_AGGREGATE = Problem("ECC_DBE_AGGREGATE", Status.WARN, Action.DRAIN)


@record
class Settings:
    #: Volatile uncorrectable errors tolerated before FAIL.
    max_volatile_uncorrected: int = 0
    #: Lifetime (aggregate) uncorrectable errors before WARN; unset: not checked.
    max_aggregate_uncorrected: int | None = None


class EccCheck(GpuCheck):
    name: ClassVar[str] = "ecc"
    settings_class: ClassVar[type | None] = Settings
    phases: ClassVar[frozenset[Phase]] = frozenset(Phase)

    def gather_gpu(self, nvml: Any, handle: Any, ctx: CheckContext) -> dict[str, int] | None:
        get = nvml.nvmlDeviceGetTotalEccErrors
        unc = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        vol = call_optional(get, handle, unc, nvml.NVML_VOLATILE_ECC)
        if vol is None:
            return None
        agg = call_optional(get, handle, unc, nvml.NVML_AGGREGATE_ECC)
        corr = call_optional(
            get, handle, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC
        )
        return {
            "volatile_uncorrected": int(vol),
            "aggregate_uncorrected": agg,
            "volatile_corrected": corr,
        }

    def judge_gpu(self, comp: Component, value: Any, ctx: CheckContext) -> list[Finding]:
        if value is None:
            return []
        s = ctx.settings_as(Settings, self.name)
        vol = value["volatile_uncorrected"]
        if vol > s.max_volatile_uncorrected:
            detail = f"{vol} volatile uncorrectable ECC error(s); reset the GPU"
            return [self.gpu_finding(ECC_DBE, comp, detail, value)]
        agg = value.get("aggregate_uncorrected")
        if (
            s.max_aggregate_uncorrected is not None
            and agg is not None
            and agg > s.max_aggregate_uncorrected
        ):
            detail = (
                f"{agg} uncorrectable ECC errors over its lifetime "
                f"(limit {s.max_aggregate_uncorrected})"
            )
            return [self.gpu_finding(ECC_DBE_AGGREGATE, comp, detail, value)]
        return []

    def ok_values(self, data: GpuData) -> dict[str, Any]:
        supported = sum(1 for s in data.samples if s.value is not None)
        return {"gpus": len(data.samples), "ecc_supported": supported}
