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
from slurm_hooks.detect.checks.base import CheckContext, Problem
from slurm_hooks.detect.checks.gpubase import GpuCheck, call_optional

ROW_REMAP_FAILED = Problem("ROW_REMAP_FAILED", Status.FAIL, Action.REPLACE)
ROW_REMAP_PENDING = Problem("ROW_REMAP_PENDING", Status.FAIL, Action.RESET_GPU)


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
            detail = "row remapping failed (no spare rows left); replace the GPU"
            return [self.gpu_finding(ROW_REMAP_FAILED, comp, detail, value)]
        if value["pending"]:
            rows = value["uncorrectable_rows"]
            detail = f"row remap pending ({rows} uncorrectable rows); reset the GPU"
            return [self.gpu_finding(ROW_REMAP_PENDING, comp, detail, value)]
        return []
