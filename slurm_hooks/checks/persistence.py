"""Persistence mode: without it the driver tears GPU state down between
jobs, so each job pays the init cost and some faults go unnoticed until the
next start.  Normally kept on by ``nvidia-persistenced``."""

from __future__ import annotations

from typing import Any, ClassVar

from ..model import Action, Component, Finding, Phase, Status
from ..profiles import Profile
from .base import CheckContext
from .gpubase import GpuCheck


class PersistenceCheck(GpuCheck):
    name: ClassVar[str] = "persistence"
    phases: ClassVar[frozenset[Phase]] = frozenset({Phase.HEALTHCHECK, Phase.ACCEPTANCE})

    def skip_reason(self, profile: Profile, ctx: CheckContext) -> str | None:
        if profile.persistence_mode is False:
            return "profile does not require persistence mode"
        return super().skip_reason(profile, ctx)

    def gather_gpu(self, nvml: Any, handle: Any, ctx: CheckContext) -> bool:
        return int(nvml.nvmlDeviceGetPersistenceMode(handle)) == int(nvml.NVML_FEATURE_ENABLED)

    def judge_gpu(self, comp: Component, value: Any, ctx: CheckContext) -> list[Finding]:
        if value:
            return []
        return [
            Finding(
                check=self.name,
                status=Status.WARN,
                code="PERSISTENCE_MODE",
                message=f"{comp.short()}: persistence mode is off (is nvidia-persistenced running?)",
                component=comp,
                action=Action.NONE,
                values={"persistence": False},
            )
        ]
