"""Retired pages waiting for a reset (pre-Ampere page retirement).

Until the GPU is reset, a page marked for retirement is still in use.  A100
and later replaced page retirement with row remapping and answer
NOT_SUPPORTED here, which is "not applicable" (see ``row_remap``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from slurm_hooks.core.model import Action, Component, Finding, Phase, Status
from slurm_hooks.detect.checks.base import CheckContext, Problem
from slurm_hooks.detect.checks.gpubase import GpuCheck, call_optional

RETIRED_PAGES_PENDING = Problem("RETIRED_PAGES_PENDING", Status.FAIL, Action.RESET_GPU)


class RetiredPagesCheck(GpuCheck):
    name: ClassVar[str] = "retired_pages"
    phases: ClassVar[frozenset[Phase]] = frozenset(Phase)

    def gather_gpu(self, nvml: Any, handle: Any, ctx: CheckContext) -> bool | None:
        pending = call_optional(nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        return None if pending is None else pending == nvml.NVML_FEATURE_ENABLED

    def judge_gpu(self, comp: Component, value: Any, ctx: CheckContext) -> list[Finding]:
        if not value:
            return []
        detail = "retired pages pending; reset the GPU to retire them"
        return [self.gpu_finding(RETIRED_PAGES_PENDING, comp, detail, {"pending": True})]
