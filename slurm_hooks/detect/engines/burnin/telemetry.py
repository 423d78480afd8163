"""Temperature and SM clock sampling through NVML while a burn-in runs.

Optional by design: no NVML (container without the library, a fake without
these calls) means no telemetry, never a failed burn-in.  The NVML module is
passed in (pynvml or the fake behind the same interface).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)


class NvmlSampler:
    """Polls temperature and SM clock of ``indices`` every ``interval`` s
    in a daemon thread; use as a context manager around the burn."""

    def __init__(
        self, nvml: Any, indices: Sequence[int], interval: float = 1.0, *, manage_init: bool = True
    ):
        self._nvml = nvml
        #: False when NVML belongs to a shared, already initialised session.
        self._manage_init = manage_init
        self._indices = list(indices)
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.temps: dict[int, list[int]] = {i: [] for i in self._indices}
        self.clocks: dict[int, list[int]] = {i: [] for i in self._indices}
        self._handles: dict[int, Any] = {}

    def _init(self) -> bool:
        try:
            if self._manage_init:
                self._nvml.nvmlInit()
            for i in self._indices:
                self._handles[i] = self._nvml.nvmlDeviceGetHandleByIndex(i)
            return True
        except Exception as exc:  # noqa: BLE001 - telemetry is best effort
            log.debug("NVML telemetry unavailable: %s", exc)
            return False

    def sample_once(self) -> None:
        nv = self._nvml
        for i, h in self._handles.items():
            try:
                self.temps[i].append(int(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)))
            except Exception as exc:  # noqa: BLE001
                log.debug("no temperature for gpu%s: %s", i, exc)
            try:
                self.clocks[i].append(int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)))
            except Exception as exc:  # noqa: BLE001
                log.debug("no SM clock for gpu%s: %s", i, exc)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample_once()
            self._stop.wait(self._interval)

    def __enter__(self) -> NvmlSampler:
        if self._init():
            self._thread = threading.Thread(target=self._loop, name="burnin-nvml", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self._interval + 1)
        if self._handles and self._manage_init:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass


def default_nvml() -> Any | None:
    """pynvml if importable, else None."""
    try:
        import pynvml  # noqa: PLC0415 - lazy on purpose
    except ImportError:
        return None
    return pynvml
