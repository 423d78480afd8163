"""Reset one GPU (the ``reset`` rung of the repair ladder, ``act/repair.py``).

NVML has no public reset call (nvidia-ml-py exposes none), so the real path
is ``nvidia-smi -r -i INDEX`` through the one subprocess site.  A configured
NVML backend that provides ``reset_gpu(index)`` does it instead (the lab's
fake NVML, ``[checks] nvml = "lab:fake"``: the product never picks a fake by
itself, it follows the configured backend).

A GPU is reset only when no process holds it (``nvmlDeviceGetComputeRunningProcesses``):
``nvidia-smi -r`` would refuse anyway, and a process there means the node is
not empty.  Also reads the GPU's serial and UUID, which the ladder keys on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slurm_hooks.core.errors import SlurmHooksError

log = logging.getLogger(__name__)


class GpuBusy(SlurmHooksError):
    """Processes still hold the GPU: not reset."""


class ResetFailed(SlurmHooksError):
    """The reset could not be done (nvidia-smi failed, no such GPU)."""


@dataclass(frozen=True)
class GpuIdentity:
    index: int
    serial: str | None = None
    uuid: str | None = None


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return str(value) if value else None


def identity(nvml: Any, index: int) -> GpuIdentity:
    """Serial and UUID of GPU ``index`` where NVML can tell (a lost GPU cannot)."""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001 - NVMLError of any kind: unknown identity
        return GpuIdentity(index)
    serial = uuid = None
    try:
        serial = _text(nvml.nvmlDeviceGetSerial(handle))
    except Exception:  # noqa: BLE001, S110 - not every board has a serial
        pass
    try:
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    except Exception:  # noqa: BLE001, S110
        pass
    return GpuIdentity(index, serial, uuid)


def holders(nvml: Any, index: int) -> list[int] | None:
    """PIDs of the processes on GPU ``index``; None when NVML cannot tell
    (no handle: a GPU that needs a reset often has none)."""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception:  # noqa: BLE001 - NVMLError: cannot tell
        return None
    return [int(getattr(p, "pid", 0)) for p in procs or []]


def reset_gpu(
    index: int,
    *,
    nvml: Any = None,
    timeout: float = 120.0,
    run: Callable[..., Any] | None = None,
) -> str:
    """Reset GPU ``index``; returns how (``backend`` or ``nvidia-smi``).
    GpuBusy when processes hold it; ResetFailed when the reset failed."""
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < 1024:
        raise ResetFailed(f"invalid GPU index {index!r}")
    if nvml is not None:
        pids = holders(nvml, index)
        if pids:
            raise GpuBusy(f"GPU {index} is held by process(es) {pids[:5]}; not reset")
        backend_reset = getattr(nvml, "reset_gpu", None)
        if callable(backend_reset):
            try:
                backend_reset(index)
            except Exception as exc:  # noqa: BLE001 - the backend's own error type
                raise ResetFailed(f"GPU {index} reset failed: {exc}") from exc
            return "backend"
    from slurm_hooks.core.errors import CommandError
    from slurm_hooks.detect.probes import commands

    runner = run or commands.run
    try:
        runner(["nvidia-smi", "-r", "-i", str(index)], timeout=timeout)
    except CommandError as exc:
        raise ResetFailed(f"nvidia-smi -r -i {index} failed: {exc}") from exc
    return "nvidia-smi"


__all__ = ["GpuBusy", "GpuIdentity", "ResetFailed", "holders", "identity", "reset_gpu"]
