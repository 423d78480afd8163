"""GPU burn-in check (prolog and acceptance).

``[checks.burnin]`` settings (all optional)::

    engine = "auto"          # auto | gpu_burn | torch | a plug-in's name ("lab:fake")
    duration_s = 5           # prolog burn; acceptance uses acceptance_duration_s
    acceptance_duration_s = 60
    gpu_burn = "gpu_burn"    # binary (PATH or absolute); gpu_burn_dir holds compare.ptx
    gpu_burn_args = []       # e.g. ["-tc"]
    size = 8192              # torch: matrix side
    dtypes = ["bf16", "fp32"]
    warn_below_median = 0.10 # vs siblings' median
    fail_below_median = 0.20
    tflops_floor = 45.0      # overrides the profile's burnin_min_tflops (fp32)
    devices = [0, 1]         # only these GPUs (e.g. the job's); default all
    scenario = "engine.toml" # read by a plug-in engine (the lab's fake)

``auto`` picks gpu_burn when installed (starts fast, reference tool), else
torch when installed, else reports UNKNOWN; it never picks a fake.  Any other
name is an engine of the ``slurm_hooks.engines`` entry-point group
(``detect.engines.registry``), such as the lab's ``lab:fake``.  A burn that cannot
finish inside the hook's deadline is not started (UNKNOWN "skipped: budget").
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import ClassVar

from slurm_hooks.core.bounds import require_positive
from slurm_hooks.core.model import Finding, Phase
from slurm_hooks.detect.checks import _engine_check
from slurm_hooks.detect.checks.base import CheckContext
from slurm_hooks.detect.engines.burnin.budget import Skipped, budget_shortfall, command_timeout
from slurm_hooks.detect.engines.burnin.judge import BurninThresholds, judge_burnin, thresholds_from
from slurm_hooks.detect.engines.burnin.model import BurninRun, GpuBurnin
from slurm_hooks.detect.probes import commands

log = logging.getLogger(__name__)

#: Built-in engine names; any other is looked up in the engine registry.
ENGINES = ("auto", "gpu_burn", "torch")


@dataclass(frozen=True)
class BurninSettings:
    #: "auto" (gpu_burn when on PATH, else torch when importable, else
    #: UNKNOWN), "gpu_burn", "torch", or the name of a plug-in engine
    #: (entry-point group ``slurm_hooks.engines``, e.g. the lab's "lab:fake").
    engine: str = "auto"
    #: The prolog's burn: short, so that with NCCL it fits [prolog] budget_s
    #: (docs/prolog.md); acceptance burns acceptance_duration_s.  gpu_burn
    #: (and plug-in engines) take whole seconds: a fraction is rounded up
    #: (0.5 burns 1 s), and the budget is asked for the rounded time.
    duration_s: float = 5.0
    #: Seconds of burn during acceptance (rounded up the same way).
    acceptance_duration_s: float = 60.0
    #: The gpu_burn binary: a name looked up on PATH, or an absolute path.
    gpu_burn: str = "gpu_burn"
    #: Working directory for gpu_burn, where it finds ``compare.ptx``;
    #: unset: the directory of the gpu_burn binary (a build keeps it there),
    #: never the caller's (a compare.ptx a user left in /tmp would run as
    #: root on the GPUs and decide the error count).
    gpu_burn_dir: str | None = None
    #: Extra gpu_burn options placed before the duration, e.g. ``["-tc"]``
    #: (tensor cores: measured as tf32) or ``["-d"]`` (doubles: fp64).
    gpu_burn_args: tuple[str, ...] = ()
    #: torch engine only: side of the square matrices multiplied.
    size: int = 8192
    #: torch engine only: precisions burned one after another ("bf16", "fp16",
    #: "fp32"), each for an equal share of the duration; the first one is the
    #: figure compared between sibling GPUs.  fp32 runs with TF32 off.
    dtypes: tuple[str, ...] = ("bf16", "fp32")
    #: Seconds on top of the burn: start-up (torch import, CUDA init), teardown.
    overhead_s: float | None = None
    #: Only these GPU indices (through CUDA_VISIBLE_DEVICES for gpu_burn;
    #: findings keep the node's numbering); unset or empty: every GPU.
    devices: tuple[int, ...] | None = None
    #: WARN when a GPU's TFLOP/s is this fraction below the median of the
    #: other GPUs on the node (0.10: under 90 % of it).
    warn_below_median: float = BurninThresholds.warn_below_median
    #: FAIL (drain) when a GPU is this fraction below that median; must be
    #: at least warn_below_median and below 1.
    fail_below_median: float = BurninThresholds.fail_below_median
    #: The sibling comparison is made only when at least this many *other*
    #: GPUs produced a figure.
    min_siblings: int = BurninThresholds.min_siblings
    #: Below a TFLOP/s floor is WARN; below floor * this fraction is FAIL
    #: (drain).  In (0, 1].
    floor_fail_fraction: float = BurninThresholds.floor_fail_fraction
    #: Per-GPU fp32 TFLOP/s floor; overrides the profile's burnin_min_tflops.
    #: A floor is judged only for a precision the engine measured.  Unset:
    #: the profile's.
    tflops_floor: float | None = None
    #: Per-GPU bf16 TFLOP/s floor (torch engine); overrides the profile's
    #: ``extra.burnin_min_tflops_bf16``.
    tflops_floor_bf16: float | None = None
    #: Per-GPU fp16 TFLOP/s floor (torch engine); overrides the profile's
    #: ``extra.burnin_min_tflops_fp16``.
    tflops_floor_fp16: float | None = None
    #: Per-GPU tf32 TFLOP/s floor (gpu_burn with ``-tc``); overrides the
    #: profile's ``extra.burnin_min_tflops_tf32``.
    tflops_floor_tf32: float | None = None
    #: Per-GPU fp64 TFLOP/s floor (gpu_burn with ``-d``); overrides the
    #: profile's ``extra.burnin_min_tflops_fp64``.
    tflops_floor_fp64: float | None = None
    #: WARN (no drain) when a GPU got hotter than this (deg C) during the burn;
    #: unset: the profile's gpu_temp_warn_c, and not judged when that is unset too.
    max_temp_c: float | None = None
    #: Scenario file handed to a plug-in engine (the lab's fake reads
    #: TOML/JSON); relative to the config file.  Built-in engines ignore it.
    scenario: str | None = None

    def validate(self) -> None:
        _engine_check.validate_engine(self.engine, ENGINES, key="checks.burnin.engine")
        require_positive(self, "duration_s", "acceptance_duration_s")
        for d in self.dtypes:
            if d not in ("bf16", "fp16", "fp32"):
                raise ValueError(f"dtypes: unknown precision {d!r} (bf16, fp16, fp32)")


def load_settings(ctx: CheckContext, check: str) -> BurninSettings:
    return _engine_check.load_settings(BurninSettings, ctx, check)


def choose_engine(s: BurninSettings, ctx: CheckContext | None = None) -> str | None:
    return _engine_check.choose_engine(s.engine, s.gpu_burn, "gpu_burn")


#: Seconds on top of the burn per engine; a plug-in engine gets PLUGIN_OVERHEAD.
_OVERHEAD = {"gpu_burn": 6.0, "torch": 20.0}
PLUGIN_OVERHEAD = 1.0


def _remap(run: BurninRun, devices: tuple[int, ...] | None) -> BurninRun:
    """Engines started with CUDA_VISIBLE_DEVICES number GPUs 0..k-1; give
    findings the node's own indices back."""
    if not devices:
        return run
    gpus = tuple(
        replace(g, index=devices[g.index]) if g.index < len(devices) else g for g in run.gpus
    )
    return replace(run, gpus=gpus)


def _only(run: BurninRun, devices: tuple[int, ...] | None, engine: str) -> BurninRun:
    """A plug-in engine's run with only the GPUs it was given: one that
    reports another GPU (another job's, on a shared node) has no say in this
    check, and the site hears that its engine ignored ``devices``."""
    if not devices:
        return run
    mine = tuple(g for g in run.gpus if g.index in devices)
    if len(mine) < len(run.gpus):
        others = sorted({g.index for g in run.gpus} - set(devices))
        log.warning("burn-in engine %s reported GPUs %s, not given to it: left out", engine, others)
        return replace(run, gpus=mine)
    return run


class BurninCheck:
    name: ClassVar[str] = "burnin"
    settings_class: ClassVar[type] = BurninSettings
    phases: ClassVar[frozenset[Phase]] = frozenset({Phase.PROLOG, Phase.ACCEPTANCE})

    def gather(self, ctx: CheckContext) -> BurninRun | Skipped:
        s = load_settings(ctx, self.name)
        engine = _engine_check.pick_engine(ctx, s.engine, s.gpu_burn, "gpu_burn", "burn-in")
        if isinstance(engine, Skipped):
            return engine
        duration = s.acceptance_duration_s if ctx.phase is Phase.ACCEPTANCE else s.duration_s
        plugin = engine not in ENGINES
        if engine == "gpu_burn" or plugin:
            duration = math.ceil(duration)  # whole seconds; never 0 for 0.5
        overhead = (
            s.overhead_s if s.overhead_s is not None else _OVERHEAD.get(engine, PLUGIN_OVERHEAD)
        )
        short = budget_shortfall(ctx, duration + overhead)
        if short:
            return Skipped(short)
        timeout = command_timeout(ctx, duration + overhead + 30.0)
        run_cmd = ctx.services.get("run", commands.run)
        log.info("burn-in engine=%s duration=%ss", engine, duration)
        if plugin:
            count = len(s.devices) if s.devices else int(ctx.profile.get("gpu_count") or 8)
            eng, req = _engine_check.plugin_engine(
                ctx, self.name, engine, s.scenario, count, s.devices
            )
            return _only(eng.burnin(req, int(duration)), s.devices, engine)
        if engine == "gpu_burn":
            from slurm_hooks.detect.engines.burnin.gpu_burn import (
                binary_dir,
                build_argv,
                run_gpu_burn,
            )

            argv = build_argv(s.gpu_burn, int(duration))
            argv = [argv[0], *s.gpu_burn_args, *argv[1:]]
            res = run_gpu_burn(
                argv,
                timeout=timeout,
                cwd=s.gpu_burn_dir or binary_dir(argv[0]),
                expected_gpus=len(s.devices) if s.devices else None,
                run=_engine_check.on_devices(run_cmd, s.devices),
            )
            return _remap(res, s.devices)
        from slurm_hooks.detect.checks.gpubase import nvml_session
        from slurm_hooks.detect.engines.burnin.torch_engine import (
            TorchBurninConfig,
            run_torch_burnin,
        )

        nvml = None
        try:
            nvml = nvml_session(ctx).nvml
        except Exception as exc:  # noqa: BLE001 - telemetry is optional
            log.debug("burn-in without NVML telemetry: %s", exc)
        cfg = TorchBurninConfig(
            duration_s=duration, size=s.size, dtypes=s.dtypes, devices=s.devices
        )
        return run_torch_burnin(cfg, nvml=nvml, nvml_shared=True)

    def judge(self, data: BurninRun | Skipped, ctx: CheckContext) -> list[Finding]:
        if isinstance(data, Skipped):
            return _engine_check.skipped_findings(self.name, data)
        settings = {k: v for k, v in ctx.settings.items() if v is not None}
        t = thresholds_from(ctx.profile, settings)
        return judge_burnin(data, t, check=self.name)


__all__ = ["BurninCheck", "BurninSettings", "GpuBurnin", "choose_engine"]
