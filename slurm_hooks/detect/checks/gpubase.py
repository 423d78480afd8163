"""What every NVML check shares: walk the GPUs, keep per-GPU errors apart.

A GPU check gathers one value per GPU.  An NVML error on one GPU (a lost
GPU, an error raised mid-check) becomes an UNKNOWN finding for that GPU
only; the other GPUs are still judged, and the runner still runs the other
checks.  Which GPU is lost is ``gpu_lost``'s job to report as a FAIL; the
other checks only say they could not look.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from slurm_hooks.core.model import Component, Finding, Phase, Status
from slurm_hooks.core.record import field, record
from slurm_hooks.detect.checks.base import CheckContext, Problem, ok
from slurm_hooks.detect.checks.registry import CHECKS, NO_GPUS, not_applicable
from slurm_hooks.detect.probes.nvml import (
    ERROR_FUNCTION_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    NvmlSession,
    error_name,
    is_nvml_error,
)
from slurm_hooks.detect.profiles import Profile, as_profile

_default_session: NvmlSession | None = None
_default_lock = threading.Lock()


def nvml_session(ctx: CheckContext) -> NvmlSession:
    """The run's shared session (injected as service ``nvml``), else one per
    process: ``nvmlInit`` must happen once, not once per check."""
    global _default_session
    if "nvml" in ctx.services:
        return ctx.services["nvml"]
    with _default_lock:
        if _default_session is None:
            _default_session = NvmlSession()
        return _default_session


@record
class GpuSample:
    component: Component
    value: Any = None
    error: BaseException | None = None


@record
class GpuData:
    samples: tuple[GpuSample, ...] = ()
    node: Any = None
    skipped: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def nvml_unknown(check: str, comp: Component, exc: BaseException) -> Finding:
    name = error_name(exc)
    hint = " (gpu_lost reports it)" if name in ("GPU_IS_LOST", "UNKNOWN") else ""
    return Finding(
        check=check,
        status=Status.UNKNOWN,
        code="CHECK_UNKNOWN",
        message=f"could not run on {comp.short()}: NVML {name}: {exc}{hint}",
        component=comp,
        values={"nvml_error": name},
    )


class GpuCheck:
    """Base for per-GPU NVML checks; subclasses fill in the hooks."""

    name: ClassVar[str]
    phases: ClassVar[frozenset[Phase]]
    #: The check's ``[checks.<name>]`` dataclass; None: only enabled/timeout_s/phases.
    settings_class: ClassVar[type | None] = None

    # -- hooks ------------------------------------------------------------
    def skip_reason(self, profile: Profile, ctx: CheckContext) -> str | None:
        """Why this check does not apply to this node (None: it does): the
        registry's ``skip_when`` (which the runner reads without importing
        the check), else "profile expects no GPUs" for an unregistered check."""
        spec = CHECKS.get(self.name)
        return not_applicable(spec.skip_when if spec is not None else (NO_GPUS,), profile)

    def gather_gpu(self, nvml: Any, handle: Any, ctx: CheckContext) -> Any:
        raise NotImplementedError

    def gather_node(self, nvml: Any, ctx: CheckContext) -> Any:
        return None

    def judge_gpu(self, comp: Component, value: Any, ctx: CheckContext) -> Sequence[Finding]:
        """Problems only; an empty list means this GPU is fine."""
        raise NotImplementedError

    def judge_node(self, data: GpuData, ctx: CheckContext) -> Sequence[Finding]:
        return []

    def on_gpu_error(self, sample: GpuSample, ctx: CheckContext) -> Finding:
        assert sample.error is not None
        return nvml_unknown(self.name, sample.component, sample.error)

    def ok_values(self, data: GpuData) -> dict[str, Any]:
        return {"gpus": len(data.samples)}

    def gpu_finding(
        self,
        problem: Problem,
        comp: Component,
        detail: str,
        values: Mapping[str, Any] | None = None,
    ) -> Finding:
        """``problem`` on one GPU, worded as every per-GPU finding is: the
        GPU's short name first (``gpu3: ...``), then ``detail``."""
        return problem.finding(self.name, f"{comp.short()}: {detail}", comp, values)

    # -- contract ---------------------------------------------------------
    def gather(self, ctx: CheckContext) -> GpuData:
        reason = self.skip_reason(as_profile(ctx.profile), ctx)
        if reason:
            return GpuData(skipped=reason)
        session = nvml_session(ctx)
        nvml = session.nvml
        samples = []
        for i in range(session.device_count()):
            comp = session.identity(i)
            try:
                value = self.gather_gpu(nvml, session.handle(i), ctx)
            except Exception as exc:
                if not is_nvml_error(exc):
                    raise
                samples.append(GpuSample(comp, error=exc))
                continue
            samples.append(GpuSample(comp, value))
        return GpuData(tuple(samples), node=self.gather_node(nvml, ctx))

    def judge(self, data: GpuData, ctx: CheckContext) -> list[Finding]:
        if data.skipped:
            return [ok(self.name, f"not applicable: {data.skipped}")]
        findings: list[Finding] = []
        for s in data.samples:
            if s.error is not None:
                findings.append(self.on_gpu_error(s, ctx))
            else:
                findings.extend(self.judge_gpu(s.component, s.value, ctx))
        findings.extend(self.judge_node(data, ctx))
        if not findings:
            n = len(data.samples)
            findings.append(
                ok(self.name, f"{n} GPU{'s' if n != 1 else ''} ok", **self.ok_values(data))
            )
        return findings


def not_supported(exc: BaseException) -> bool:
    """NVML_ERROR_NOT_SUPPORTED: the feature does not exist on this GPU."""
    return is_nvml_error(exc, ERROR_NOT_SUPPORTED)


def call_optional(fn: Any, *args: Any) -> Any:
    """``fn(*args)``, or None when NVML says NOT_SUPPORTED."""
    try:
        return fn(*args)
    except Exception as exc:
        if not_supported(exc):
            return None
        raise


def clock_event_reasons(nvml: Any, handle: Any) -> int:
    """The clock event (throttle) reason bits.  ``ClocksEventReasons`` is the
    current name; drivers and pynvml releases before R535 only have
    ``ClocksThrottleReasons`` (same bits), which later ones deprecate."""
    fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if fn is not None:
        try:
            return int(fn(handle))
        except Exception as exc:
            if not is_nvml_error(exc, ERROR_FUNCTION_NOT_FOUND):
                raise
    return int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))
