"""DCGM diagnostic check (acceptance only: ``dcgmi diag -r 2`` takes minutes).

``[checks.dcgm]`` settings (all optional)::

    level = 2                # dcgmi diag -r LEVEL
    dcgmi = "dcgmi"
    expected_s = 180         # how long the diag takes here, for the budget
    warn_is_fail = false     # treat DCGM warnings as failures
    devices = [0, 1]         # -i; default all

Skipped (OK, not applicable) when dcgmi is not installed or the profile
expects no GPUs: DCGM is an optional extra, not a requirement.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import ClassVar

from slurm_hooks.core.model import Finding, Phase
from slurm_hooks.detect.checks import _engine_check
from slurm_hooks.detect.checks.base import CheckContext
from slurm_hooks.detect.engines.burnin.budget import Skipped, budget_shortfall, command_timeout
from slurm_hooks.detect.engines.dcgm import DcgmReport, diag_argv, judge_dcgm, run_or_timeout
from slurm_hooks.detect.probes import commands


@dataclass(frozen=True)
class DcgmSettings:
    #: ``dcgmi diag -r LEVEL``, 1..4: 1 quick, 2 medium (minutes), 3 and 4 long.
    level: int = 2
    #: The dcgmi binary: a name looked up on PATH, or an absolute path.  Not
    #: installed: the check is skipped as not applicable (OK).
    dcgmi: str = "dcgmi"
    #: Seconds the diag takes here: with less time left it is not started
    #: (UNKNOWN "skipped: budget"); it is killed after twice this long
    #: (sooner at the hook's deadline).
    expected_s: float = 180.0
    #: Treat a DCGM test's warning as FAIL (drain) instead of WARN.
    warn_is_fail: bool = False
    #: Only these GPU indices (``-i``); unset: every GPU.
    devices: tuple[int, ...] | None = None

    def validate(self) -> None:
        if self.level not in (1, 2, 3, 4):
            raise ValueError(f"level must be 1..4, got {self.level}")


class DcgmCheck:
    name: ClassVar[str] = "dcgm"
    settings_class: ClassVar[type] = DcgmSettings
    phases: ClassVar[frozenset[Phase]] = frozenset({Phase.ACCEPTANCE})

    def gather(self, ctx: CheckContext) -> DcgmReport | Skipped:
        s = _engine_check.load_settings(DcgmSettings, ctx, self.name)
        skipped = _engine_check.not_applicable(ctx)
        if skipped is not None:
            return skipped
        run_cmd = ctx.services.get("run", commands.run)
        if "run" not in ctx.services and not shutil.which(
            s.dcgmi, path=commands.command_env()["PATH"]
        ):
            return Skipped(f"not applicable: {s.dcgmi} is not installed")
        short = budget_shortfall(ctx, s.expected_s)
        if short:
            return Skipped(short)
        timeout = command_timeout(ctx, 2 * s.expected_s)
        return run_or_timeout(diag_argv(s.level, s.devices, s.dcgmi), timeout, run=run_cmd)

    def judge(self, data: DcgmReport | Skipped, ctx: CheckContext) -> list[Finding]:
        if isinstance(data, Skipped):
            return _engine_check.skipped_findings(self.name, data)
        return judge_dcgm(
            data, check=self.name, warn_is_fail=bool(ctx.settings.get("warn_is_fail", False))
        )
