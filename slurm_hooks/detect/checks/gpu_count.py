"""GPU count and model against the profile, and whether NVML starts at all.

This is the one GPU check that turns an ``nvmlInit`` failure into a
finding: on a node whose profile expects GPUs, a driver that is not loaded
or an NVML/kernel-module version mismatch (a driver upgraded without a
reboot) means no job can use the GPUs.  The other GPU checks report such a
node UNKNOWN, so the fault is counted once.
"""

from __future__ import annotations

from typing import ClassVar

from slurm_hooks.core.model import Action, Component, Finding, Phase, Status
from slurm_hooks.core.record import record
from slurm_hooks.detect.checks.base import CheckContext, Problem, ok, unknown
from slurm_hooks.detect.checks.gpubase import nvml_session
from slurm_hooks.detect.checks.registry import CHECKS
from slurm_hooks.detect.probes.nvml import (
    ERROR_DRIVER_NOT_LOADED,
    ERROR_LIB_RM_VERSION_MISMATCH,
    error_name,
    is_nvml_error,
)
from slurm_hooks.detect.profiles import as_profile

ALL_PHASES = frozenset(Phase)

#: nvmlInit errors a reboot fixes: the kernel module and the user-space
#: library disagree, or the module did not load.
_REBOOT_INIT_ERRORS = (ERROR_DRIVER_NOT_LOADED, ERROR_LIB_RM_VERSION_MISMATCH)

NVML_INIT_REBOOT = Problem("NVML_INIT", Status.FAIL, Action.REBOOT)
NVML_INIT_DRAIN = Problem("NVML_INIT", Status.FAIL, Action.DRAIN)
GPU_COUNT_FAIL = Problem("GPU_COUNT", Status.FAIL, Action.REBOOT)
GPU_COUNT_WARN = Problem("GPU_COUNT", Status.WARN, Action.NONE)
GPU_MODEL = Problem("GPU_MODEL", Status.WARN, Action.NONE)


@record
class CountData:
    count: int | None = None
    names: tuple[str | None, ...] = ()
    init_error: BaseException | None = None
    skipped: str | None = None


class GpuCountCheck:
    name: ClassVar[str] = "gpu_count"
    settings_class: ClassVar[type | None] = None
    phases: ClassVar[frozenset[Phase]] = ALL_PHASES

    def gather(self, ctx: CheckContext) -> CountData:
        reason = CHECKS[self.name].not_applicable(as_profile(ctx.profile))
        if reason:
            return CountData(skipped=reason)
        session = nvml_session(ctx)
        try:
            nvml = session.nvml
        except Exception as exc:  # noqa: BLE001 - judged below
            return CountData(init_error=exc)
        count = session.device_count()
        names: list[str | None] = []
        for i in range(count):
            try:
                names.append(str(nvml.nvmlDeviceGetName(session.handle(i))))
            except Exception as exc:
                if not is_nvml_error(exc):
                    raise
                names.append(None)  # gpu_lost reports why
        return CountData(count=count, names=tuple(names))

    def judge(self, data: CountData, ctx: CheckContext) -> list[Finding]:
        profile = as_profile(ctx.profile)
        if data.skipped:
            return [ok(self.name, f"not applicable: {data.skipped}")]
        expected = profile.gpu_count
        if data.init_error is not None:
            err = data.init_error
            if expected is None:
                return [unknown(self.name, f"NVML did not start: {err}")]
            init = NVML_INIT_REBOOT if is_nvml_error(err, *_REBOOT_INIT_ERRORS) else NVML_INIT_DRAIN
            message = (
                f"NVML did not start ({error_name(err)}: {err}) but the profile "
                f"expects {expected} GPUs"
            )
            values = {"expected": expected, "nvml_error": error_name(err)}
            return [init.finding(self.name, message, values=values)]
        findings: list[Finding] = []
        count = data.count or 0
        counts = {"count": count, "expected": expected}
        if expected is not None and count < expected:
            message = f"NVML sees {count} GPUs, profile {profile.name!r} expects {expected}"
            findings.append(GPU_COUNT_FAIL.finding(self.name, message, values=counts))
        elif expected is not None and count > expected:
            message = (
                f"NVML sees {count} GPUs, more than the {expected} profile "
                f"{profile.name!r} expects: wrong profile?"
            )
            findings.append(GPU_COUNT_WARN.finding(self.name, message, values=counts))
        if profile.gpu_model:
            want = profile.gpu_model.lower()
            for i, name in enumerate(data.names):
                if name is not None and want not in name.lower():
                    message = (
                        f"gpu{i} is {name!r}, profile {profile.name!r} expects "
                        f"{profile.gpu_model!r}: wrong profile?"
                    )
                    values = {"model": name, "expected": profile.gpu_model}
                    gpu = Component("gpu", index=i)
                    findings.append(GPU_MODEL.finding(self.name, message, gpu, values))
        if not findings:
            models = sorted({n for n in data.names if n})
            findings.append(
                ok(self.name, f"{count} GPUs ({', '.join(models) or 'none'})", count=count)
            )
        return findings
