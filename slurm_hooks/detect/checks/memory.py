"""Installed RAM against the profile: a DIMM that failed at POST or was
mapped out shows up as missing memory.  The kernel keeps some RAM for
itself (crash kernel, firmware), hence the tolerance.

The total is ``MemTotal`` from /proc/meminfo (``probes.host``, the value
``psutil.virtual_memory().total`` reports); tests inject a psutil-shaped
service ``psutil``."""

from __future__ import annotations

from typing import ClassVar

from slurm_hooks.core.model import Action, Component, Finding, Phase, Status
from slurm_hooks.core.record import record
from slurm_hooks.detect.checks.base import CheckContext, Problem, ok
from slurm_hooks.detect.profiles import as_profile

GIB = 1024**3
MEMORY_SIZE = Problem("MEMORY_SIZE", Status.FAIL, Action.DRAIN)


@record
class Settings:
    """``[checks.memory]``: how much RAM may be missing before the node fails."""

    #: How far below the profile's memory_gb the total may be, in percent.
    tolerance_pct: float = 5.0

    def validate(self) -> None:
        if not 0 <= self.tolerance_pct < 100:
            raise ValueError(f"tolerance_pct must be 0..100, got {self.tolerance_pct}")


class MemoryCheck:
    name: ClassVar[str] = "memory"
    settings_class: ClassVar[type | None] = Settings
    phases: ClassVar[frozenset[Phase]] = frozenset({Phase.HEALTHCHECK, Phase.ACCEPTANCE})

    def gather(self, ctx: CheckContext) -> int | None:
        if as_profile(ctx.profile).memory_gb is None:
            return None
        return int(ctx.host().virtual_memory().total)

    def judge(self, total: int | None, ctx: CheckContext) -> list[Finding]:
        expected_gb = as_profile(ctx.profile).memory_gb
        if total is None or expected_gb is None:
            return [ok(self.name, "not applicable: profile sets no memory_gb")]
        s = ctx.settings_as(Settings, self.name)
        floor = expected_gb * GIB * (1 - s.tolerance_pct / 100)
        values = {
            "total_gb": round(total / GIB, 1),
            "expected_gb": expected_gb,
            "tolerance_pct": s.tolerance_pct,
        }
        memory = Component("memory")
        if total < floor:
            message = (
                f"{total / GIB:.1f} GiB RAM, profile expects {expected_gb:g} GiB "
                f"(-{s.tolerance_pct:g}%): failed or mapped-out DIMM?"
            )
            return [MEMORY_SIZE.finding(self.name, message, memory, values)]
        return [ok(self.name, f"{total / GIB:.1f} GiB RAM", component=memory, **values)]
