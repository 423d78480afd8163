"""Driver version against the profile: exact (or dotted prefix) and minimum.

Mixed driver versions across a partition break multi-node jobs in subtle
ways and usually mean a node missed an image update, so a mismatch drains.
"""

from __future__ import annotations

from typing import ClassVar

from slurm_hooks.core.model import Action, Finding, Phase, Status
from slurm_hooks.core.record import record
from slurm_hooks.detect.checks.base import CheckContext, Problem, ok
from slurm_hooks.detect.checks.gpubase import nvml_session
from slurm_hooks.detect.checks.registry import CHECKS
from slurm_hooks.detect.profiles import as_profile

DRIVER_VERSION = Problem("DRIVER_VERSION", Status.FAIL, Action.DRAIN)


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.strip().split(".") if p.isdigit())


def version_matches(actual: str, wanted: str) -> bool:
    """``wanted`` "550" or "550.54" accepts "550.54.15"; "550.54.15" only itself."""
    want = version_tuple(wanted)
    return version_tuple(actual)[: len(want)] == want


@record
class DriverData:
    version: str | None = None
    skipped: str | None = None


class DriverCheck:
    name: ClassVar[str] = "driver"
    settings_class: ClassVar[type | None] = None
    phases: ClassVar[frozenset[Phase]] = frozenset({Phase.HEALTHCHECK, Phase.ACCEPTANCE})

    def gather(self, ctx: CheckContext) -> DriverData:
        reason = CHECKS[self.name].not_applicable(as_profile(ctx.profile))
        if reason:
            return DriverData(skipped=reason)
        nvml = nvml_session(ctx).nvml
        return DriverData(version=str(nvml.nvmlSystemGetDriverVersion()))

    def judge(self, data: DriverData, ctx: CheckContext) -> list[Finding]:
        if data.skipped:
            return [ok(self.name, f"not applicable: {data.skipped}")]
        profile = as_profile(ctx.profile)
        version = data.version or ""
        problems = []
        if profile.driver_version and not version_matches(version, profile.driver_version):
            problems.append(
                f"driver {version}, profile {profile.name!r} wants {profile.driver_version}"
            )
        if profile.driver_min_version and version_tuple(version) < version_tuple(
            profile.driver_min_version
        ):
            problems.append(
                f"driver {version} is older than the minimum {profile.driver_min_version}"
            )
        if problems:
            values = {
                "version": version,
                "expected": profile.driver_version,
                "minimum": profile.driver_min_version,
            }
            return [DRIVER_VERSION.finding(self.name, "; ".join(problems), values=values)]
        return [ok(self.name, f"driver {version}", version=version)]
