"""NVML access: a backend chosen by name, ``pynvml`` unless configured otherwise.

Checks never import ``pynvml`` themselves.  They get an :class:`NvmlSession`
from the check context, which loads the backend on first use (a CPU node
that expects no GPU never pays for the import), calls ``nvmlInit`` once per
process and caches device handles and identities.  Whatever a backend
returns has the pynvml module's interface (function names, constants,
``NVMLError_*`` classes), so probe code runs unchanged against all of them.

``[checks] nvml`` names the backend: ``pynvml`` (built in, the default), or
the name of an entry point in the ``slurm_hooks.nvml`` group, e.g. the lab's
``lab:fake`` (scenario-driven, ``[checks] nvml_scenario``).  The product never
switches to a fake by itself: no environment variable, no "auto".
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from slurm_hooks.core.errors import ConfigError, NvmlError
from slurm_hooks.core.model import Component
from slurm_hooks.detect.probes.driver_gpus import PROC_GPUS, read_gpu_information

log = logging.getLogger(__name__)

#: The entry-point group other distributions register NVML backends in.
#: An entry point names a callable ``backend(scenario: str | None)`` that
#: returns a pynvml-like object.
PLUGIN_GROUP = "slurm_hooks.nvml"
DEFAULT_BACKEND = "pynvml"

# nvmlReturn_t values from nvml.h: part of NVML's C ABI, so fixed; copied
# here so that judging an error never needs pynvml imported.
ERROR_UNINITIALIZED = 1
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_DRIVER_NOT_LOADED = 9
ERROR_TIMEOUT = 10
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_CORRUPTED_INFOROM = 14
ERROR_GPU_IS_LOST = 15
ERROR_RESET_REQUIRED = 16
ERROR_LIB_RM_VERSION_MISMATCH = 18
ERROR_ARGUMENT_VERSION_MISMATCH = 25
ERROR_NOT_READY = 27
ERROR_UNKNOWN = 999

_ERROR_NAMES = {
    v: k.removeprefix("ERROR_") for k, v in dict(globals()).items() if k.startswith("ERROR_")
}
#: ``NVML_DEVICE_MIG_ENABLE`` (nvml.h): a GPU's MIG mode, enabled.
_MIG_ENABLE = 1


def _pynvml(scenario: str | None = None) -> Any:
    """The real library (nvidia-ml-py)."""
    if scenario:
        raise ConfigError(
            "nvml_scenario is read only by a fake NVML backend; the real one is 'pynvml'",
            key="checks.nvml_scenario",
        )
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlError(f"nvidia-ml-py (pynvml) is not installed: {exc}") from exc
    return pynvml


#: Built-in backends by name; other names are entry points (PLUGIN_GROUP).
BACKENDS: dict[str, Callable[..., Any]] = {DEFAULT_BACKEND: _pynvml}


def load_nvml(
    backend: str = DEFAULT_BACKEND, scenario: str | os.PathLike[str] | None = None
) -> Any:
    """The NVML module of backend ``backend`` (``pynvml``, or a plug-in such as
    the lab's ``lab:fake``, which reads ``scenario``).  Entry points are
    scanned only for a name that is not built in."""
    chosen = os.fspath(scenario) if scenario else None
    if backend == DEFAULT_BACKEND:
        return _pynvml(chosen)
    log.debug("nvml: backend=%s scenario=%s", backend, chosen)
    return resolve_backend(backend)(chosen)


def resolve_backend(backend: str) -> Callable[..., Any]:
    """The factory of NVML backend ``backend``; ConfigError (``checks.nvml``)
    when no such backend is installed.  Scans entry points for a name that is
    not built in."""
    if backend in BACKENDS:
        return BACKENDS[backend]
    from slurm_hooks.core.plugins import resolve

    return resolve(PLUGIN_GROUP, backend, BACKENDS, key="checks.nvml")


class NvmlSession:
    """One process's use of NVML: lazy load, ``nvmlInit`` once, cached handles.

    A failed ``nvmlInit`` is remembered and re-raised to every caller, so
    twenty checks do not retry a missing driver twenty times.  Thread-safe:
    the runner runs each check in its own thread.
    """

    def __init__(
        self,
        *,
        backend: str = DEFAULT_BACKEND,
        scenario: str | os.PathLike[str] | None = None,
        nvml: Any = None,
        proc_gpus: str = PROC_GPUS,
    ):
        self._backend = backend
        self._scenario = scenario
        self._factory: Callable[..., Any] | None = None
        if nvml is None and backend != DEFAULT_BACKEND:
            # Resolved now, not at first use: a backend that is not installed
            # is a configuration error of the whole run (the hook reports it
            # and fails open), never an NVML failure that drains the node.
            self._factory = resolve_backend(backend)
        self._proc_gpus = proc_gpus
        self._proc: list[tuple[str, str | None]] | None = None
        self._nvml = nvml
        self._lock = threading.RLock()
        self._initialized = False
        self._init_error: BaseException | None = None
        self._handles: dict[int, Any] = {}
        self._identities: dict[int, Component] = {}

    @property
    def backend(self) -> str:
        """The configured backend's name (``pynvml``, ``lab:fake``, ...)."""
        return self._backend

    @property
    def scenario(self) -> str | None:
        """The scenario file handed to a fake backend, None for real NVML."""
        return None if self._scenario is None else os.fspath(self._scenario)

    @property
    def loaded(self) -> bool:
        return self._initialized

    @property
    def nvml(self) -> Any:
        """The initialised library; raises the original load/init error."""
        with self._lock:
            if self._initialized:
                return self._nvml
            if self._init_error is not None:
                raise self._init_error
            try:
                if self._nvml is None and self._factory is not None:
                    self._nvml = self._factory(self.scenario)
                elif self._nvml is None:
                    self._nvml = load_nvml(self._backend, self._scenario)
                self._nvml.nvmlInit()
            except BaseException as exc:
                self._init_error = exc
                log.warning("nvml: init failed: %s: %s", type(exc).__name__, exc)
                raise
            self._initialized = True
            return self._nvml

    def device_count(self) -> int:
        return int(self.nvml.nvmlDeviceGetCount())

    def handle(self, index: int) -> Any:
        """Handle of GPU ``index``; raises NVMLError (e.g. GPU is lost) uncached."""
        nvml = self.nvml
        with self._lock:
            if index in self._handles:
                return self._handles[index]
        h = nvml.nvmlDeviceGetHandleByIndex(index)
        with self._lock:
            self._handles[index] = h
        return h

    def identity(self, index: int) -> Component:
        """GPU ``index`` as a Component with UUID and PCI bus id where NVML
        can still tell them; never raises (a lost GPU is still ``gpu3``)."""
        with self._lock:
            if index in self._identities:
                return self._identities[index]
        uuid = pci = None
        complete = True
        try:
            h = self.handle(index)
            nvml = self.nvml
            try:
                uuid = str(nvml.nvmlDeviceGetUUID(h))
            except Exception:  # noqa: BLE001 - identity is best effort
                complete = False
            try:
                pci = _text(nvml.nvmlDeviceGetPciInfo(h).busId)
            except Exception:  # noqa: BLE001
                complete = False
        except Exception:  # noqa: BLE001
            complete = False
        if not complete:
            # A lost GPU answers nothing; the driver's procfs still names it.
            # NVML numbers GPUs in PCI bus order, as the procfs listing sorts.
            proc = self._procfs()
            if index < len(proc):
                pci = pci or proc[index][0]
                uuid = uuid or proc[index][1]
        comp = Component("gpu", index=index, uuid=uuid, pci=pci)
        if complete:
            with self._lock:
                self._identities[index] = comp
        return comp

    def mig_enabled(self) -> tuple[int, ...]:
        """The GPUs whose current MIG mode is enabled (``nvmlDeviceGetMigMode``),
        in NVML's numbering.  A GPU without MIG (NotSupported), or one that
        cannot answer, counts as not: this is read to keep whole-GPU engines
        off MIG GPUs, and a lost GPU is the other checks' to report.  Raises
        what ``nvml`` raises when NVML cannot start."""
        nvml = self.nvml
        out = []
        for index in range(self.device_count()):
            try:
                handle = self.handle(index)
            except Exception as exc:
                if not is_nvml_error(exc):
                    raise
                log.debug("nvml: MIG mode of GPU %d: %s", index, error_name(exc))  # lost: not MIG
                continue
            if mig_mode_enabled(nvml, handle):
                out.append(index)
        return tuple(out)

    def _procfs(self) -> list[tuple[str, str | None]]:
        if self._proc is None:
            self._proc = read_proc_gpus(self._proc_gpus)
        return self._proc

    def close(self) -> None:
        """``nvmlShutdown`` if we initialised; errors are logged, not raised."""
        with self._lock:
            if not self._initialized:
                return
            self._initialized = False
            self._handles.clear()
            self._identities.clear()
            try:
                self._nvml.nvmlShutdown()
            except Exception as exc:  # noqa: BLE001 - shutting down anyway
                log.debug("nvml: shutdown failed: %s", exc)


def read_proc_gpus(root: str = PROC_GPUS) -> list[tuple[str, str | None]]:
    """(bus id in NVML's 8-digit-domain form, UUID) per GPU the kernel module
    knows, in PCI order, from ``<root>/<bus>/information`` ("GPU UUID:",
    "Bus Location:" lines)."""
    out: list[tuple[str, str | None]] = []
    for entry, fields in read_gpu_information(root):
        bus = fields.get("Bus Location", entry)
        domain, _, rest = bus.partition(":")
        bus_id = f"{int(domain, 16):08X}:{rest.upper()}" if rest else bus.upper()
        out.append((bus_id, fields.get("GPU UUID") or None))
    return out


def _text(value: Any) -> str:
    """pynvml returns str from its structures on Python 3, but be liberal."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def error_name(exc: BaseException) -> str:
    """``NVMLError_GpuIsLost`` -> ``GPU_IS_LOST``-style name for messages and values."""
    value = getattr(exc, "value", None)
    if isinstance(value, int) and is_nvml_error(exc):
        return return_name(value)
    return type(exc).__name__


def return_name(value: int) -> str:
    """An nvmlReturn_t as a name: 0 -> ``SUCCESS``, 15 -> ``GPU_IS_LOST``."""
    if value == 0:
        return "SUCCESS"
    return _ERROR_NAMES.get(value, f"ERROR_{value}")


#: ``nvmlValueType_t`` (index) -> the member of ``nvmlValue_t`` that holds it (nvml.h).
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def field_results(
    nvml: Any, handle: Any, fields: Sequence[int | tuple[int, int]]
) -> list[tuple[int, float | int | None]]:
    """``nvmlDeviceGetFieldValues``: many fields of one GPU in one query
    (``(field, scopeId)`` pairs where a field is scoped, e.g. by NVLink),
    as ``(nvmlReturn, value)`` per field: NVML fills each entry with its
    own status (value None unless it is SUCCESS).  The call itself raises
    as any NVML call (FUNCTION_NOT_FOUND on a driver that predates it)."""
    out: list[tuple[int, float | int | None]] = []
    for entry in nvml.nvmlDeviceGetFieldValues(handle, list(fields)):
        ret = int(entry.nvmlReturn)
        value = getattr(entry.value, _VALUE_MEMBERS[int(entry.valueType)]) if ret == 0 else None
        out.append((ret, value))
    return out


def mig_mode_enabled(nvml: Any, handle: Any) -> bool:
    """Whether a GPU's current MIG mode is enabled (``nvmlDeviceGetMigMode``);
    False where NVML cannot say (NotSupported before Ampere, a lost GPU)."""
    try:
        return bool(nvml.nvmlDeviceGetMigMode(handle)[0] == _MIG_ENABLE)
    except Exception as exc:
        if not is_nvml_error(exc):
            raise
        log.debug("nvml: no MIG mode: %s", error_name(exc))
        return False


def is_nvml_error(exc: BaseException, *codes: int) -> bool:
    """True if ``exc`` is an NVMLError, optionally with one of ``codes``.
    Works for the real module and the fake alike (the fake raises pynvml's
    own classes), and without importing pynvml when it is absent."""
    value = getattr(exc, "value", None)
    if not isinstance(value, int) or not type(exc).__name__.startswith("NVMLError"):
        return False
    return not codes or value in codes
