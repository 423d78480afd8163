"""Intra-node NCCL all-reduce bandwidth check (prolog and acceptance).

``[checks.nccl]`` settings (all optional)::

    engine = "auto"              # auto | nccl-tests | torch | a plug-in's name ("lab:fake")
    all_reduce_perf = "all_reduce_perf"
    min_bytes = "32M"
    max_bytes = "512M"           # prolog sweep; acceptance uses acceptance_max_bytes
    acceptance_max_bytes = "8G"
    iters = 20
    busbw_floor_gbps = 400       # overrides the profile's nccl_min_busbw_gbps
    floor_fail_fraction = 0.85
    large_min_bytes = 268435456  # rows judged for bandwidth
    expected_s = 15              # how long a prolog run takes here, for the budget
    acceptance_expected_s = 60
    devices = [0, 1, 2, 3]       # only these GPUs; default all (profile gpu_count)
    scenario = "engine.toml"     # read by a plug-in engine (the lab's fake)

``auto``: nccl-tests when installed, else torch.distributed when torch is
installed, else UNKNOWN; never a fake.  Any other name is an engine of the
``slurm_hooks.engines`` entry-point group (``detect.engines.registry``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

from slurm_hooks.core.model import Finding, Phase
from slurm_hooks.detect.checks import _engine_check
from slurm_hooks.detect.checks.base import CheckContext
from slurm_hooks.detect.engines.burnin.budget import Skipped, budget_shortfall, command_timeout
from slurm_hooks.detect.engines.nccl.judge import NcclThresholds, judge_nccl, thresholds_from
from slurm_hooks.detect.engines.nccl.model import NcclRun
from slurm_hooks.detect.probes import commands

log = logging.getLogger(__name__)

#: Built-in engine names; any other is looked up in the engine registry.
ENGINES = ("auto", "nccl-tests", "torch")


@dataclass(frozen=True)
class NcclSettings:
    #: "auto" (nccl-tests when all_reduce_perf is on PATH, else
    #: torch.distributed when torch is importable, else UNKNOWN), "nccl-tests",
    #: "torch", or the name of a plug-in engine (entry-point group
    #: ``slurm_hooks.engines``, e.g. the lab's "lab:fake").
    engine: str = "auto"
    #: nccl-tests' all_reduce_perf binary: a name looked up on PATH, or an
    #: absolute path.  Run as one process driving every GPU (``-g``).
    all_reduce_perf: str = "all_reduce_perf"
    #: Smallest message of the sweep, as nccl-tests reads sizes (K/M/G are
    #: powers of 1024); sizes double up to the maximum.
    min_bytes: str = "32M"
    #: The prolog's sweep: 32M..512M still has two rows at or above
    #: large_min_bytes to judge; acceptance sweeps to acceptance_max_bytes.
    max_bytes: str = "512M"
    #: Largest message of the acceptance sweep (same size syntax).
    acceptance_max_bytes: str = "8G"
    #: Timed iterations per message size (``-n``).
    iters: int = 20
    #: Untimed warm-up iterations per message size (``-w``).
    warmup: int = 5
    #: Healthy bus bandwidth floor, GB/s, for the median of the large-message
    #: rows; overrides the profile's nccl_min_busbw_gbps.  Unset (and no
    #: profile floor): bandwidth is reported, not judged.
    busbw_floor_gbps: float | None = None
    #: Below the floor is WARN; below floor * this fraction is FAIL (drain).
    #: In (0, 1].
    floor_fail_fraction: float = NcclThresholds.floor_fail_fraction
    #: Bytes (an integer, not a size string): rows at or above this size are
    #: judged for bandwidth; with none, the largest size's rows.
    large_min_bytes: int = NcclThresholds.large_min_bytes
    #: Seconds a prolog run may take (process start, CUDA and NCCL init on
    #: every GPU, the short sweep), asked of the budget before starting.
    expected_s: float = 15.0
    #: The same for the acceptance sweep.  Either run is killed after three
    #: times its expected seconds (sooner when the deadline or timeout_s is nearer).
    acceptance_expected_s: float = 60.0
    #: Only these GPU indices (one rank each, through CUDA_VISIBLE_DEVICES
    #: for nccl-tests); unset or empty: every GPU (the profile's gpu_count,
    #: else NVML's count).
    devices: tuple[int, ...] | None = None
    #: Scenario file handed to a plug-in engine (the lab's fake reads
    #: TOML/JSON); relative to the config file.  Built-in engines ignore it.
    scenario: str | None = None

    def validate(self) -> None:
        _engine_check.validate_engine(self.engine, ENGINES, key="checks.nccl.engine")


def load_settings(ctx: CheckContext, check: str) -> NcclSettings:
    return _engine_check.load_settings(NcclSettings, ctx, check)


def choose_engine(s: NcclSettings, ctx: CheckContext | None = None) -> str | None:
    return _engine_check.choose_engine(s.engine, s.all_reduce_perf, "nccl-tests")


def _gpu_count(ctx: CheckContext, s: NcclSettings) -> int | None:
    if s.devices:
        return len(s.devices)
    n = ctx.profile.get("gpu_count")
    if n:
        return int(n)
    try:
        from slurm_hooks.detect.checks.gpubase import nvml_session

        return nvml_session(ctx).device_count()
    except Exception as exc:  # noqa: BLE001
        log.debug("no GPU count from NVML: %s", exc)
        return None


class NcclCheck:
    name: ClassVar[str] = "nccl"
    settings_class: ClassVar[type] = NcclSettings
    phases: ClassVar[frozenset[Phase]] = frozenset({Phase.PROLOG, Phase.ACCEPTANCE})

    def gather(self, ctx: CheckContext) -> NcclRun | Skipped:
        s = load_settings(ctx, self.name)
        engine = _engine_check.pick_engine(
            ctx, s.engine, s.all_reduce_perf, "nccl-tests", "all-reduce"
        )
        if isinstance(engine, Skipped):
            return engine
        acceptance = ctx.phase is Phase.ACCEPTANCE
        expected = s.acceptance_expected_s if acceptance else s.expected_s
        short = budget_shortfall(ctx, expected)
        if short:
            return Skipped(short)
        timeout = command_timeout(ctx, 3 * expected)
        run = self._run(ctx, s, engine, timeout, acceptance)
        if isinstance(run, NcclRun) and run.killed_after is not None and timeout < 3 * expected:
            # Killed by the time the phase had left, before the run's own
            # limit: the checks before it took that time (which a node's
            # users can stretch), not this node's fabric.  Not judged.
            return Skipped(f"cut at {timeout:g}s by the phase's time left, short of the run's "
                           f"{3 * expected:g}s: not judged")  # fmt: skip
        return run

    def _run(
        self, ctx: CheckContext, s: NcclSettings, engine: str, timeout: float, acceptance: bool
    ) -> NcclRun:
        max_bytes = s.acceptance_max_bytes if acceptance else s.max_bytes
        ngpus = _gpu_count(ctx, s)
        if engine not in ENGINES:
            from slurm_hooks.detect.engines.nccl.engines import parse_size

            eng, req = _engine_check.plugin_engine(
                ctx, self.name, engine, s.scenario, ngpus or 8, s.devices
            )
            return eng.all_reduce(req, parse_size(s.min_bytes), parse_size(max_bytes))
        if ngpus is None:
            raise RuntimeError("cannot tell how many GPUs to test (no profile gpu_count, no NVML)")
        if engine == "nccl-tests":
            from slurm_hooks.detect.engines.nccl.engines import all_reduce_argv, run_all_reduce_perf

            argv = all_reduce_argv(
                s.all_reduce_perf,
                ngpus=ngpus,
                min_bytes=s.min_bytes,
                max_bytes=max_bytes,
                iters=s.iters,
                warmup=s.warmup,
                timeout_s=max(5, int(timeout) - 2),
            )
            run_cmd = ctx.services.get("run", commands.run)
            return run_all_reduce_perf(
                argv, timeout=timeout, run=_engine_check.on_devices(run_cmd, s.devices)
            )
        from slurm_hooks.detect.engines.nccl.engines import (
            TorchNcclConfig,
            parse_size,
            run_torch_all_reduce,
        )

        cfg = TorchNcclConfig(
            min_bytes=parse_size(s.min_bytes),
            max_bytes=parse_size(max_bytes),
            iters=s.iters,
            warmup=s.warmup,
            timeout_s=timeout,
            devices=s.devices,
        )
        return run_torch_all_reduce(cfg)

    def judge(self, data: NcclRun | Skipped, ctx: CheckContext) -> list[Finding]:
        if isinstance(data, Skipped):
            return _engine_check.skipped_findings(self.name, data)
        settings = {k: v for k, v in ctx.settings.items() if v is not None}
        return judge_nccl(data, thresholds_from(ctx.profile, settings), check=self.name)
