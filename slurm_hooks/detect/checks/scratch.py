"""Free space on the node-local scratch file system: jobs that cannot
write their checkpoints or temporary files fail late and expensively.

Free space is ``os.statvfs`` through ``probes.host`` (psutil's
``disk_usage`` semantics: free as an unprivileged user sees it); tests
inject a psutil-shaped service ``psutil``."""

from __future__ import annotations

from typing import Any, ClassVar

from slurm_hooks.core.model import Action, Component, Finding, Phase, Status
from slurm_hooks.detect.checks.base import CheckContext, Problem, ok
from slurm_hooks.detect.profiles import as_profile

GIB = 1024**3
SCRATCH_MISSING = Problem("SCRATCH_MISSING", Status.FAIL, Action.DRAIN)
SCRATCH_FULL = Problem("SCRATCH_FULL", Status.FAIL, Action.DRAIN)


class ScratchCheck:
    name: ClassVar[str] = "scratch"
    settings_class: ClassVar[type | None] = None
    phases: ClassVar[frozenset[Phase]] = frozenset(
        {Phase.HEALTHCHECK, Phase.PROLOG, Phase.EPILOG, Phase.ACCEPTANCE}
    )

    def gather(self, ctx: CheckContext) -> dict[str, Any] | None:
        profile = as_profile(ctx.profile)
        if not profile.scratch_path or profile.scratch_min_free_gb is None:
            return None
        try:
            usage = ctx.host().disk_usage(profile.scratch_path)
        except FileNotFoundError:
            return {"missing": True}
        return {"free": int(usage.free), "total": int(usage.total)}

    def judge(self, data: dict[str, Any] | None, ctx: CheckContext) -> list[Finding]:
        profile = as_profile(ctx.profile)
        if data is None or profile.scratch_min_free_gb is None:
            return [
                ok(self.name, "not applicable: profile sets no scratch_path/scratch_min_free_gb")
            ]
        comp = Component("mount", name=profile.scratch_path)
        if data.get("missing"):
            message = f"scratch {profile.scratch_path} does not exist"
            return [SCRATCH_MISSING.finding(self.name, message, comp)]
        free_gb = data["free"] / GIB
        values = {
            "free_gb": round(free_gb, 1),
            "total_gb": round(data["total"] / GIB, 1),
            "min_free_gb": profile.scratch_min_free_gb,
        }
        if free_gb < profile.scratch_min_free_gb:
            message = (
                f"scratch {profile.scratch_path}: {free_gb:.1f} GiB free, "
                f"need {profile.scratch_min_free_gb:g} GiB"
            )
            return [SCRATCH_FULL.finding(self.name, message, comp, values)]
        return [
            ok(
                self.name,
                f"scratch {profile.scratch_path}: {free_gb:.1f} GiB free",
                component=comp,
                **values,
            )
        ]
