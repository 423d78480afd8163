"""Persistence mode: without it the driver tears GPU state down between
jobs, so each job pays the init cost and some faults go unnoticed until the
next start.  Normally kept on by ``nvidia-persistenced``."""

from __future__ import annotations

from typing import Any, ClassVar

from slurm_hooks.core.model import Action, Component, Finding, Phase, Status
from slurm_hooks.detect.checks.base import CheckContext, Problem
from slurm_hooks.detect.checks.gpubase import GpuCheck

PERSISTENCE_MODE = Problem("PERSISTENCE_MODE", Status.WARN, Action.NONE)


class PersistenceCheck(GpuCheck):
    name: ClassVar[str] = "persistence"
    phases: ClassVar[frozenset[Phase]] = frozenset({Phase.HEALTHCHECK, Phase.ACCEPTANCE})

    # Not applicable with persistence_mode = false or gpu_count = 0: ``skip_when`` in
    # checks/registry.py, read by the runner before this module is imported.

    def gather_gpu(self, nvml: Any, handle: Any, ctx: CheckContext) -> bool:
        return int(nvml.nvmlDeviceGetPersistenceMode(handle)) == int(nvml.NVML_FEATURE_ENABLED)

    def judge_gpu(self, comp: Component, value: Any, ctx: CheckContext) -> list[Finding]:
        if value:
            return []
        detail = "persistence mode is off (is nvidia-persistenced running?)"
        return [self.gpu_finding(PERSISTENCE_MODE, comp, detail, {"persistence": False})]
