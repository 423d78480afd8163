"""NVSwitch fabric state as NVML reports it (Hopper and later).

On NVSwitch systems the fabric manager must finish training the fabric
before CUDA can run ("system not yet initialized").  NVML reports per GPU a
state (not started, in progress, completed) and, once completed, a status
(an nvmlReturn_t) and a health summary.  NOT_SUPPORTED, from the call or as
the state, means the GPU has no NVML-visible fabric (PCIe cards, A100):
not applicable, unless the profile says a fabric manager is expected.
"""

from __future__ import annotations

from typing import Any, ClassVar

from slurm_hooks.core.model import Action, Component, Finding, Phase, Status
from slurm_hooks.detect.checks.base import CheckContext, Problem, unknown
from slurm_hooks.detect.checks.gpubase import GpuCheck, not_supported
from slurm_hooks.detect.probes.nvml import (
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_FUNCTION_NOT_FOUND,
    is_nvml_error,
    return_name,
)
from slurm_hooks.detect.profiles import as_profile

STATE_NAMES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
HEALTH_NAMES = {0: "not_supported", 1: "healthy", 2: "unhealthy", 3: "limited_capacity"}
FABRIC_FAIL = Problem("FABRIC_MANAGER", Status.FAIL, Action.DRAIN)
FABRIC_WARN = Problem("FABRIC_MANAGER", Status.WARN, Action.NONE)


def read_fabric_info(nvml: Any, handle: Any) -> dict[str, Any] | None:
    """State, status and health through the newest API this pynvml and driver
    offer: ``GetGpuFabricInfoV`` (v3, then v2 struct), else the original
    ``GetGpuFabricInfo``.  None: NVML reports no fabric for this GPU."""
    from ctypes import byref

    attempts = []
    fn_v = getattr(nvml, "nvmlDeviceGetGpuFabricInfoV", None)
    if fn_v is not None:
        for cls_name in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t"):
            cls = getattr(nvml, cls_name, None)
            if cls is not None:
                attempts.append((fn_v, cls))
    fn = getattr(nvml, "nvmlDeviceGetGpuFabricInfo", None)
    cls = getattr(nvml, "c_nvmlGpuFabricInfo_t", None)
    if fn is not None and cls is not None:
        attempts.append((fn, cls))
    last: BaseException | None = None
    for func, struct_cls in attempts:
        info = struct_cls()
        try:
            func(handle, byref(info))
        except Exception as exc:
            if not_supported(exc):
                return None
            if is_nvml_error(exc, ERROR_FUNCTION_NOT_FOUND, ERROR_ARGUMENT_VERSION_MISMATCH):
                last = exc
                continue
            raise
        fields = {f[0] for f in info._fields_}
        return {
            "state": int(info.state),
            "status": int(info.status),
            "health_summary": int(info.healthSummary) if "healthSummary" in fields else None,
        }
    if last is not None:
        raise last
    return None  # this pynvml predates fabric info


class FabricCheck(GpuCheck):
    name: ClassVar[str] = "fabric"
    phases: ClassVar[frozenset[Phase]] = frozenset(
        {Phase.HEALTHCHECK, Phase.PROLOG, Phase.ACCEPTANCE}
    )

    # Not applicable with fabric_manager = false or gpu_count = 0: ``skip_when`` in
    # checks/registry.py, read by the runner before this module is imported.

    def gather_gpu(self, nvml: Any, handle: Any, ctx: CheckContext) -> dict[str, Any] | None:
        return read_fabric_info(nvml, handle)

    def judge_gpu(self, comp: Component, value: Any, ctx: CheckContext) -> list[Finding]:
        required = as_profile(ctx.profile).fabric_manager is True
        if value is None or value["state"] == 0:
            if required:
                return [
                    unknown(
                        self.name,
                        "NVML reports no fabric state but the profile expects "
                        "a fabric manager (driver too old?)",
                        comp,
                    )
                ]
            return []
        state = STATE_NAMES.get(value["state"], str(value["state"]))
        health = HEALTH_NAMES.get(value["health_summary"] or 0, "not_supported")
        values = {"state": state, "status": return_name(value["status"]), "health": health}
        if state == "in_progress":
            return [self.gpu_finding(FABRIC_WARN, comp, "fabric training in progress", values)]
        if state != "completed":
            detail = f"fabric state {state}: is nvidia-fabricmanager running?"
            return [self.gpu_finding(FABRIC_FAIL, comp, detail, values)]
        if value["status"] != 0:
            detail = f"fabric registration failed: {values['status']}"
            return [self.gpu_finding(FABRIC_FAIL, comp, detail, values)]
        if health == "unhealthy":
            return [self.gpu_finding(FABRIC_FAIL, comp, "fabric health unhealthy", values)]
        if health == "limited_capacity":
            return [self.gpu_finding(FABRIC_WARN, comp, "fabric at limited capacity", values)]
        return []
