"""What the engine-driven checks (burnin, nccl, dcgm) share: their settings
less the runner's keys, the choice of the fake engine, GPU selection for a
command, and the findings for a run they chose not to start.

The fake engines are chosen, and fed, from what the run was configured
with, not only from the environment: ``[checks] nvml_scenario`` reaches the
checks as the scenario of the run's NVML session (``services["nvml"]``,
built by ``runner.setup``), and ``[checks.<check>] fake_scenario`` names the
engine scenario.  The environment variables still win, as they do for
``probes.nvml.load_nvml``, so the lab can redirect a configured node."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from slurm_hooks.core.config import from_mapping
from slurm_hooks.core.model import Finding, Status
from slurm_hooks.detect.checks.base import COMMON_SETTINGS, CheckContext, ok
from slurm_hooks.detect.engines.burnin.budget import Skipped
from slurm_hooks.detect.probes import commands

T = TypeVar("T")
Runner = Callable[..., commands.CommandResult]

#: Keys the runner puts into a check's settings besides COMMON_SETTINGS.
RUNNER_KEYS = frozenset({"deadline"})


def load_settings(cls: type[T], ctx: CheckContext, check: str) -> T:
    """``[checks.<check>]`` as ``cls``; errors name ``checks.<check>.<key>``."""
    data = {k: v for k, v in ctx.settings.items() if k not in COMMON_SETTINGS | RUNNER_KEYS}
    return from_mapping(cls, data, path=ctx.config_path, prefix=f"checks.{check}")


ENV_NVML_SCENARIO = "SLURM_HOOKS_NVML_SCENARIO"
ENV_ENGINE_SCENARIO = "SLURM_HOOKS_ENGINE_SCENARIO"


@dataclass(frozen=True)
class FakeScenarios:
    """The scenario files the fake engines read (either may be None)."""

    nvml: str | None = None
    engine: str | None = None

    @property
    def configured(self) -> bool:
        return bool(self.nvml or self.engine)


def session_scenario(ctx: CheckContext | None) -> str | None:
    """The fake-NVML scenario the run's NVML session was built with
    (``[checks] nvml_scenario``, already resolved against the config's
    directory by ``runner.setup``); None for real NVML or no session."""
    if ctx is None:
        return None
    session = ctx.services.get("nvml")
    if session is None:
        return None
    value = getattr(session, "scenario", None)
    if isinstance(value, str | os.PathLike) and os.fspath(value):
        return os.fspath(value)
    return None


def _resolve(path: str | None, config_path: str | None) -> str | None:
    if path and config_path and not os.path.isabs(path):
        return os.path.join(os.path.dirname(config_path), path)
    return path or None


def fake_scenarios(ctx: CheckContext | None, engine_scenario: str | None = None) -> FakeScenarios:
    """Where the fake engines read their scenario: the environment, else the
    run's configuration (the NVML session's scenario; ``engine_scenario``,
    the check's ``fake_scenario`` setting, relative to the config file)."""
    nvml = os.environ.get(ENV_NVML_SCENARIO) or session_scenario(ctx)
    engine = os.environ.get(ENV_ENGINE_SCENARIO) or _resolve(
        engine_scenario, ctx.config_path if ctx is not None else None
    )
    return FakeScenarios(nvml=nvml, engine=engine)


def fake_configured(ctx: CheckContext | None = None, engine_scenario: str | None = None) -> bool:
    """A fake NVML or engine scenario is set (lab, tests), in the environment
    or in the run's configuration: ``auto`` means fake."""
    return fake_scenarios(ctx, engine_scenario).configured


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
