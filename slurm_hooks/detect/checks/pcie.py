"""PCIe link trained below what the GPU and the profile support.

A narrower link (x8 instead of x16) is a seating, riser or retimer fault
and halves host<->GPU bandwidth: FAIL.  The link *generation* is different:
GPUs lower it on purpose while idle to save power, so a lower current
generation is only reported (WARN by default) while NVML says the GPU is
not idle.  A maximum below the profile's means the platform cannot train
the expected link at all.
"""

from __future__ import annotations

from typing import Any, ClassVar

from slurm_hooks.core.model import Action, Component, Finding, Phase, Status
from slurm_hooks.core.record import record
from slurm_hooks.detect.checks.base import CheckContext, Problem
from slurm_hooks.detect.checks.gpubase import GpuCheck, clock_event_reasons
from slurm_hooks.detect.probes.nvml import is_nvml_error
from slurm_hooks.detect.profiles import as_profile

PCIE_DOWNTRAINED_FAIL = Problem("PCIE_DOWNTRAINED", Status.FAIL, Action.DRAIN)
PCIE_DOWNTRAINED_WARN = Problem("PCIE_DOWNTRAINED", Status.WARN, Action.NONE)


@record
class Settings:
    #: Status for a busy GPU whose link generation is below its maximum: FAIL, WARN or OK.
    gen_below_max: str = "WARN"

    def validate(self) -> None:
        if self.gen_below_max not in ("FAIL", "WARN", "OK"):
            raise ValueError(f"gen_below_max must be FAIL, WARN or OK, got {self.gen_below_max!r}")


class PcieCheck(GpuCheck):
    name: ClassVar[str] = "pcie"
    settings_class: ClassVar[type | None] = Settings
    phases: ClassVar[frozenset[Phase]] = frozenset({Phase.HEALTHCHECK, Phase.ACCEPTANCE})

    def gather_gpu(self, nvml: Any, handle: Any, ctx: CheckContext) -> dict[str, Any]:
        value: dict[str, Any] = {
            "gen": int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
            "max_gen": int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
            "width": int(nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
            "max_width": int(nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)),
        }
        try:
            reasons = clock_event_reasons(nvml, handle)
            value["idle"] = bool(reasons & nvml.nvmlClocksThrottleReasonGpuIdle)
        except Exception as exc:
            if not is_nvml_error(exc):
                raise
            value["idle"] = None
        return value

    def judge_gpu(self, comp: Component, value: Any, ctx: CheckContext) -> list[Finding]:
        profile = as_profile(ctx.profile)
        s = ctx.settings_as(Settings, self.name)
        want_width = max(value["max_width"], profile.pcie_width or 0)
        want_gen = profile.pcie_gen
        link = f"gen{value['gen']} x{value['width']}"
        findings = []
        if value["width"] < want_width:
            detail = f"PCIe link x{value['width']}, expected x{want_width} ({link})"
            findings.append(self.gpu_finding(PCIE_DOWNTRAINED_FAIL, comp, detail, value))
        if want_gen is not None and value["max_gen"] < want_gen:
            detail = (
                f"PCIe max generation {value['max_gen']}, profile expects "
                f"gen{want_gen}: check BIOS link settings and riser"
            )
            findings.append(self.gpu_finding(PCIE_DOWNTRAINED_FAIL, comp, detail, value))
        elif value["gen"] < value["max_gen"] and value["idle"] is False and s.gen_below_max != "OK":
            slow = PCIE_DOWNTRAINED_FAIL if s.gen_below_max == "FAIL" else PCIE_DOWNTRAINED_WARN
            detail = f"busy GPU at PCIe gen{value['gen']}, max gen{value['max_gen']}"
            findings.append(self.gpu_finding(slow, comp, detail, value))
        return findings
