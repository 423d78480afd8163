"""Per-process GPU utilisation: which processes kept a GPU busy since the last look.

NVML keeps a short history of utilisation samples per process
(``nvmlDeviceGetProcessUtilization(handle, lastSeenTimeStamp)``: the
samples newer than the timestamp, microseconds; NOT_FOUND when there are
none).  One call per GPU per look.  Best effort: a GPU that does not answer
(its own evidence, ``gpu_view``) or a driver without the call gives no
samples, never an error: a zero-touch look goes on with CPU time alone.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

#: GPUs looked at at most.
MAX_GPUS = 64


class GpuProcesses:
    """Highest SM or memory utilisation per pid since the previous look."""

    def __init__(self, session: Any):
        self.session = session
        self._since = 0

    def __call__(self) -> dict[int, int]:
        from slurm_hooks.detect.probes.nvml import ERROR_NOT_FOUND, is_nvml_error

        out: dict[int, int] = {}
        try:
            nvml = self.session.nvml
            count = min(int(self.session.device_count()), MAX_GPUS)
        except Exception as exc:  # noqa: BLE001 - NVML raises its own classes; see the docstring
            log.debug("no per-process GPU view: %s", exc)
            return out
        newest = self._since
        for i in range(count):
            try:
                samples = nvml.nvmlDeviceGetProcessUtilization(self.session.handle(i), self._since)
            except Exception as exc:  # noqa: BLE001 - see the docstring
                if not is_nvml_error(exc, ERROR_NOT_FOUND):
                    log.debug("gpu%d: no process utilisation: %s", i, exc)
                continue
            for s in samples:
                pid, stamp = int(s.pid), int(s.timeStamp)
                out[pid] = max(out.get(pid, 0), int(s.smUtil), int(s.memUtil))
                newest = max(newest, stamp)
        self._since = newest
        return out
