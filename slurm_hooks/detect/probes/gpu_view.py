"""The GPUs as NVML shows them at one moment: the evidence beside a SLOW finding.

Clocks, clock event (throttle) reasons, PCIe link width and NVLink error
counters, per GPU.  Best effort: a field NVML does not answer is left out,
and a broken NVML gives an empty view, never an error (evidence must not
stop a report).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

#: nvmlClockType_t NVML_CLOCK_SM (nvml.h).
CLOCK_SM = 1
#: nvmlNvLinkErrorCounter_t: DL replay, DL recovery, DL CRC flit.
NVLINK_COUNTERS = (0, 1, 2)
MAX_LINKS = 18


def _try(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - NVML raises its own classes; a field is optional
        return None


def gpu_view(session: Any) -> list[dict[str, Any]]:
    """One dict per GPU (index, sm_clock_mhz, throttle, pcie_width, pcie_max_width,
    nvlink_errors)."""
    from slurm_hooks.detect.checks.throttle import REASONS
    from slurm_hooks.detect.probes.nvml import (
        ERROR_GPU_IS_LOST,
        ERROR_TIMEOUT,
        ERROR_UNKNOWN,
        error_name,
        is_nvml_error,
    )

    try:
        nvml = session.nvml
        count = session.device_count()
    except Exception as exc:  # noqa: BLE001 - see the module docstring
        log.info("no NVML view for the evidence: %s", exc)
        # A driver that stopped answering is evidence (docs/security.md);
        # a node without NVML at all is not.
        if is_nvml_error(exc, ERROR_GPU_IS_LOST, ERROR_UNKNOWN, ERROR_TIMEOUT):
            return [{"index": -1, "nvml_error": error_name(exc)}]
        return []
    out = []
    for i in range(count):
        try:
            h = session.handle(i)
            # The memory query reaches the GPU (detect/checks/gpu_lost.py).
            nvml.nvmlDeviceGetMemoryInfo(h)
        except Exception as exc:  # noqa: BLE001 - NVML raises its own classes
            if is_nvml_error(exc, ERROR_GPU_IS_LOST, ERROR_UNKNOWN):
                out.append({"index": i, "lost": error_name(exc)})
            continue
        row: dict[str, Any] = {"index": i}
        clock = getattr(nvml, "nvmlDeviceGetClockInfo", None)
        if clock is not None:
            row["sm_clock_mhz"] = _try(clock, h, CLOCK_SM)
        mask = _try(getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                    or nvml.nvmlDeviceGetCurrentClocksThrottleReasons, h)  # fmt: skip
        if isinstance(mask, int):
            row["throttle"] = [n for n, c in REASONS.items() if mask & int(getattr(nvml, c, 0))]
        row["pcie_width"] = _try(getattr(nvml, "nvmlDeviceGetCurrPcieLinkWidth", None), h)
        row["pcie_max_width"] = _try(getattr(nvml, "nvmlDeviceGetMaxPcieLinkWidth", None), h)
        errs = 0
        counter = getattr(nvml, "nvmlDeviceGetNvLinkErrorCounter", None)
        for link in range(MAX_LINKS) if counter is not None else ():
            got = [_try(counter, h, link, c) for c in NVLINK_COUNTERS]
            if all(g is None for g in got):
                break
            errs += sum(int(g) for g in got if isinstance(g, int))
        row["nvlink_errors"] = errs
        out.append({k: v for k, v in row.items() if v is not None})
    return out


def summary(view: list[dict[str, Any]]) -> str:
    """One short line for a reason or an alert: ``gpu0 1980MHz x16/16 nvl_err=0 thr=hw_slowdown``."""
    parts = []
    for g in view:
        if g.get("nvml_error"):
            parts.append(f"NVML not answering ({g['nvml_error']})")
            continue
        if g.get("lost"):
            parts.append(f"gpu{g['index']} LOST ({g['lost']})")
            continue
        bits = [f"gpu{g['index']}"]
        if g.get("sm_clock_mhz") is not None:
            bits.append(f"{g['sm_clock_mhz']}MHz")
        if g.get("pcie_width") is not None:
            bits.append(f"x{g['pcie_width']}/{g.get('pcie_max_width', '?')}")
        bits.append(f"nvl_err={g.get('nvlink_errors', 0)}")
        thr = [t for t in g.get("throttle", ()) if t != "gpu_idle"]
        if thr:
            bits.append("thr=" + "+".join(thr))
        parts.append(" ".join(bits))
    return "; ".join(parts)
