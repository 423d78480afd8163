"""What the engine-driven checks (burnin, nccl, dcgm) share: their settings
less the runner's keys, the choice of the fake engine, GPU selection for a
command, and the findings for a run they chose not to start."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from ..burnin.budget import Skipped
from ..config import from_mapping
from ..model import Finding, Status
from ..probes import commands
from .base import COMMON_SETTINGS, CheckContext, ok

T = TypeVar("T")
Runner = Callable[..., commands.CommandResult]

#: Keys the runner puts into a check's settings besides COMMON_SETTINGS.
RUNNER_KEYS = frozenset({"deadline"})


def load_settings(cls: type[T], ctx: CheckContext, check: str) -> T:
    """``[checks.<check>]`` as ``cls``; errors name ``checks.<check>.<key>``."""
    data = {k: v for k, v in ctx.settings.items() if k not in COMMON_SETTINGS | RUNNER_KEYS}
    return from_mapping(cls, data, path=ctx.config_path, prefix=f"checks.{check}")


def fake_configured() -> bool:
    """A fake NVML or engine scenario is set (lab, tests): ``auto`` means fake."""
    return bool(
        os.environ.get("SLURM_HOOKS_NVML_SCENARIO") or os.environ.get("SLURM_HOOKS_ENGINE_SCENARIO")
    )


def on_devices(run_cmd: Runner, devices: tuple[int, ...] | None) -> Runner:
    """``run_cmd`` limited to ``devices`` through CUDA_VISIBLE_DEVICES; all
    GPUs (and no ``env`` argument at all) when none are named."""
    if not devices:
        return run_cmd
    env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, devices))}

    def _run(argv: list[str], **kw: Any) -> commands.CommandResult:
        return run_cmd(argv, env=env, **kw)

    return _run


def skipped_findings(check: str, skipped: Skipped) -> list[Finding]:
    """Not applicable is OK; skipped for want of time is UNKNOWN (the node
    was not judged)."""
    if skipped.reason.startswith("not applicable"):
        return [ok(check, skipped.reason)]
    return [
        Finding(check=check, status=Status.UNKNOWN, code="CHECK_SKIPPED", message=skipped.reason)
    ]
