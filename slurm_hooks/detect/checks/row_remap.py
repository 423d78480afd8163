"""Row remapping (A100 and later): pending remaps and remap failures.

``nvmlDeviceGetRemappedRows`` returns (corrRows, uncRows, isPending,
failureOccurred).  Pending: a row was marked for remapping and the GPU
needs a reset before it takes effect.  Failure: a bank ran out of spare
rows, so the bad memory can no longer be hidden; NVIDIA's guidance is to
replace the GPU.  Pre-Ampere GPUs answer NOT_SUPPORTED ("not applicable").
"""

from __future__ import annotations

from typing import Any, ClassVar

from slurm_hooks.core.model import Action, Component, Finding, Phase, Status
from slurm_hooks.detect.checks.base import CheckContext
from slurm_hooks.detect.checks.gpubase import GpuCheck, call_optional


class RowRemapCheck(GpuCheck):
    name: ClassVar[str] = "row_remap"
    phases: ClassVar[frozenset[Phase]] = frozenset(Phase)

    def gather_gpu(self, nvml: Any, handle: Any, ctx: CheckContext) -> dict[str, int] | None:
        rows = call_optional(nvml.nvmlDeviceGetRemappedRows, handle)
        if rows is None:
            return None
        corr, unc, pending, failure = (int(x) for x in rows)
        return {
            "correctable_rows": corr,
            "uncorrectable_rows": unc,
            "pending": pending,
            "failure": failure,
        }

    def judge_gpu(self, comp: Component, value: Any, ctx: CheckContext) -> list[Finding]:
        if value is None:
            return []
        if value["failure"]:
            return [
                Finding(
                    check=self.name,
                    status=Status.FAIL,
                    code="ROW_REMAP_FAILED",
                    message=f"{comp.short()}: row remapping failed (no spare rows left); replace the GPU",
                    component=comp,
                    action=Action.REPLACE,
                    values=value,
                )
            ]
        if value["pending"]:
            return [
                Finding(
                    check=self.name,
                    status=Status.FAIL,
                    code="ROW_REMAP_PENDING",
                    message=f"{comp.short()}: row remap pending ({value['uncorrectable_rows']} "
                    "uncorrectable rows); reset the GPU",
                    component=comp,
                    action=Action.RESET_GPU,
                    values=value,
                )
            ]
        return []
