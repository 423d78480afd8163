"""A scenario-driven stand-in for ``pynvml`` on machines without a GPU.

NVML is the one boundary we cannot run here, so this fake mirrors the real
module as closely as the checks can observe it:

* the same function names and argument order, the same return types (it
  returns pynvml's own ``nvmlPciInfo_t``, ``c_nvmlMemory_t`` and fabric-info
  structures, so ``.busId`` reads back as ``str`` exactly as with a driver);
* the same constants and exception classes: everything that is not a
  function is looked up on the installed ``pynvml`` module, and errors are
  raised as ``pynvml.NVMLError(code)``, which pynvml maps to its own
  ``NVMLError_GpuIsLost``-style subclasses, so ``except`` clauses written
  for the real library catch the fake's errors;
* the same life cycle: calls before ``nvmlInit`` raise Uninitialized, an
  unknown link or GPU index raises InvalidArgument, a function the fake
  does not model raises FunctionNotFound (as an old driver would).

The scenario file (TOML or JSON) is re-read whenever its mtime or size
changes, so a demo can inject a fault while a watcher is running.  Format,
with every key optional::

    preset = "h100-sxm5-80gb"        # GPU model defaults (see PRESETS)
    driver_version = "550.54.15"
    cuda_driver_version = 12040
    gpu_count = 8
    [defaults]                       # applied to every GPU, then [gpu.N]
    temperature = 34
    [gpu.3]
    lost = true                      # every call on it raises GPU_IS_LOST (XID 79);
                                     # "handle" / "queries": only that side fails
    ecc = { volatile_uncorrected = 2 }
    remap = { pending = true, unc = 1 }
    pcie = { gen = 4, width = 8 }
    nvlink_down = [2, 5]
    nvlink_errors = { "0" = { replay = 10, crc_flit = 4 } }
    throttle = ["hw_slowdown", "hw_power_brake"]
    fabric = { state = "not_started" }        # or "not_supported"
    mig = true                       # MIG mode enabled; "not_supported": a GPU without MIG
    errors = [{ function = "nvmlDeviceGetTotalEccErrors", error = "GPU_IS_LOST" }]
    [[errors]]                       # not tied to one GPU
    function = "nvmlInit"
    error = "DRIVER_NOT_LOADED"

See ``tests/data/nvml/README.md`` for every key.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import threading
import time
import tomllib
from collections.abc import Mapping
from ctypes import Structure
from typing import Any

import pynvml

from slurm_hooks.core.errors import ConfigError, NvmlError
from slurm_hooks.core.record import record

log = logging.getLogger(__name__)

#: Per-model defaults: what ``nvidia-smi -q`` reports on DGX/HGX systems.
#: Bus ids are those of the DGX A100 / DGX H100 baseboards.
PRESETS: dict[str, dict[str, Any]] = {
    "a100-sxm4-80gb": {
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_total_mib": 81920,
        "pci_device_id": 0x20B210DE,
        "pci_subsystem_id": 0x147F10DE,
        "pcie": {"max_gen": 4, "max_width": 16, "gen": 4, "width": 16},
        "nvlinks": 12,
        "fabric": "not_supported",
        "retired_pages_pending": "not_supported",
        "bus_ids": ["07", "0F", "47", "4E", "87", "90", "B7", "BD"],
    },
    "h100-sxm5-80gb": {
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total_mib": 81559,
        "pci_device_id": 0x233010DE,
        "pci_subsystem_id": 0x16C110DE,
        "pcie": {"max_gen": 5, "max_width": 16, "gen": 5, "width": 16},
        "nvlinks": 18,
        "fabric": {"state": "completed", "status": "SUCCESS"},
        "retired_pages_pending": "not_supported",
        "bus_ids": ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"],
    },
    "h200-sxm-141gb": {
        "name": "NVIDIA H200",
        "memory_total_mib": 143771,
        "pci_device_id": 0x233510DE,
        "pci_subsystem_id": 0x18BE10DE,
        "pcie": {"max_gen": 5, "max_width": 16, "gen": 5, "width": 16},
        "nvlinks": 18,
        "fabric": {"state": "completed", "status": "SUCCESS"},
        "retired_pages_pending": "not_supported",
        "bus_ids": ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"],
    },
}

THROTTLE_BITS: dict[str, int] = {
    "gpu_idle": pynvml.nvmlClocksThrottleReasonGpuIdle,
    "applications_clocks": pynvml.nvmlClocksThrottleReasonApplicationsClocksSetting,
    "sw_power_cap": pynvml.nvmlClocksThrottleReasonSwPowerCap,
    "hw_slowdown": pynvml.nvmlClocksThrottleReasonHwSlowdown,
    "sync_boost": pynvml.nvmlClocksThrottleReasonSyncBoost,
    "sw_thermal": pynvml.nvmlClocksThrottleReasonSwThermalSlowdown,
    "hw_thermal": pynvml.nvmlClocksThrottleReasonHwThermalSlowdown,
    "hw_power_brake": pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown,
    "display_clock": pynvml.nvmlClocksThrottleReasonDisplayClockSetting,
}

FABRIC_STATES = {
    "not_supported": pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED,
    "not_started": pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED,
    "in_progress": pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS,
    "completed": pynvml.NVML_GPU_FABRIC_STATE_COMPLETED,
}

NVLINK_COUNTERS = {
    "replay": pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
    "recovery": pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,
    "crc_flit": pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
    "crc_data": pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
    "ecc_data": pynvml.NVML_NVLINK_ERROR_DL_ECC_DATA,
}
_NVLINK_COUNTER_NAMES = {v: k for k, v in NVLINK_COUNTERS.items()}
#: Field id -> (counter, link) for NVML's per-link NVLink error counter
#: fields (``NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L0`` ... ``_L11``): the
#: same counters ``nvmlDeviceGetNvLinkErrorCounter`` reads.
NVLINK_FIELDS: dict[int, tuple[str, int]] = {
    getattr(pynvml, f"NVML_FI_DEV_NVLINK_{prefix}_ERROR_COUNT_L{link}"): (name, link)
    for name, prefix in (
        ("replay", "REPLAY"),
        ("recovery", "RECOVERY"),
        ("crc_flit", "CRC_FLIT"),
        ("crc_data", "CRC_DATA"),
    )
    for link in range(12)
}
#: Field id -> counter for the NVLink fields scoped by link (``scopeId``).
NVLINK_SCOPED_FIELDS: dict[int, str] = {
    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY: "replay",
    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: "recovery",
}

_GPU_KEYS = {
    "name",
    "uuid",
    "serial",
    "pci_bus_id",
    "pci_device_id",
    "pci_subsystem_id",
    "memory_total_mib",
    "memory_used_mib",
    "pcie",
    "nvlinks",
    "nvlink_down",
    "nvlink_errors",
    "temperature",
    "persistence",
    "ecc",
    "retired_pages_pending",
    "remap",
    "throttle",
    "fabric",
    "mig",
    "lost",
    "unknown_error",
    "reset_required",
    "resettable",
    "processes",
    "process_utilization",
    "errors",
    "bus_ids",
}
_TOP_KEYS = {
    "description",
    "preset",
    "driver_version",
    "cuda_driver_version",
    "nvml_version",
    "gpu_count",
    "defaults",
    "gpu",
    "errors",
}


def error_code(spec: int | str) -> int:
    """``"GPU_IS_LOST"``, ``"NVML_ERROR_GPU_IS_LOST"`` or ``15`` -> 15."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        return spec
    name = str(spec).upper()
    if not name.startswith("NVML_ERROR_"):
        name = "NVML_ERROR_" + name
    value = getattr(pynvml, name, None)
    if not isinstance(value, int):
        raise ValueError(f"unknown NVML error {spec!r}")
    return value


def _raise(code: int) -> None:
    raise pynvml.NVMLError(code)


@record
class FakeHandle:
    """Opaque like ``c_nvmlDevice_t``; only the fake looks inside."""

    index: int


@record
class _ErrorRule:
    function: str
    code: int
    gpu: int | None = None
    link: int | None = None


class Scenario:
    """A parsed scenario: driver facts, GPUs (dicts), error rules."""

    def __init__(self, data: Mapping[str, Any], *, source: str = "<scenario>"):
        self.source = source
        unknown = sorted(set(data) - _TOP_KEYS)
        if unknown:
            self._fail(unknown[0], f"unknown key (known: {', '.join(sorted(_TOP_KEYS))})")
        preset_name = data.get("preset")
        preset: dict[str, Any] = {}
        if preset_name is not None:
            if preset_name not in PRESETS:
                self._fail(
                    "preset", f"unknown preset {preset_name!r} (known: {', '.join(PRESETS)})"
                )
            preset = copy.deepcopy(PRESETS[preset_name])
        self.driver_version = str(data.get("driver_version", "550.54.15"))
        self.cuda_driver_version = int(data.get("cuda_driver_version", 12040))
        self.nvml_version = str(data.get("nvml_version", "12.550.54.15"))
        defaults = dict(data.get("defaults", {}))
        self._check_gpu_keys(defaults, "defaults")
        overrides = data.get("gpu", {})
        if not isinstance(overrides, Mapping):
            self._fail("gpu", "expected a table of GPU index -> settings")
        count = data.get("gpu_count")
        if count is None:
            count = max((int(k) + 1 for k in overrides), default=0)
        if not isinstance(count, int) or count < 0:
            self._fail("gpu_count", f"expected a non-negative integer, got {count!r}")
        base = {**preset, **defaults}
        bus_ids = list(base.pop("bus_ids", []))
        self.gpus: list[dict[str, Any]] = []
        for i in range(count):
            gpu = copy.deepcopy(base)
            extra = overrides.get(str(i), {})
            self._check_gpu_keys(extra, f"gpu.{i}")
            for key, value in extra.items():
                if isinstance(value, Mapping) and isinstance(gpu.get(key), Mapping):
                    gpu[key] = {**gpu[key], **value}
                else:
                    gpu[key] = copy.deepcopy(value)
            gpu.pop("bus_ids", None)
            bus = bus_ids[i] if i < len(bus_ids) else f"{0x18 + 0x10 * i:02X}"
            gpu.setdefault("pci_bus_id", f"00000000:{bus}:00.0")
            gpu.setdefault("uuid", _fake_uuid(i, gpu["pci_bus_id"]))
            gpu.setdefault("name", "NVIDIA A100-SXM4-80GB")
            gpu["_errors"] = [
                self._rule(e, f"gpu.{i}.errors[{n}]", gpu=i)
                for n, e in enumerate(gpu.pop("errors", []))
            ]
            self.gpus.append(gpu)
        for i in overrides:
            if not str(i).isdigit() or int(i) >= count:
                self._fail(f"gpu.{i}", f"no such GPU (gpu_count = {count})")
        self.errors = [
            self._rule(e, f"errors[{n}]", gpu=e.get("gpu") if isinstance(e, Mapping) else None)
            for n, e in enumerate(data.get("errors", []))
        ]

    def _fail(self, key: str, message: str) -> None:
        raise NvmlError(f"{self.source}:{key}: {message}")

    def _check_gpu_keys(self, table: Any, where: str) -> None:
        if not isinstance(table, Mapping):
            self._fail(where, "expected a table")
        unknown = sorted(set(table) - _GPU_KEYS)
        if unknown:
            self._fail(
                f"{where}.{unknown[0]}", f"unknown key (known: {', '.join(sorted(_GPU_KEYS))})"
            )

    def _rule(self, spec: Any, where: str, gpu: int | None) -> _ErrorRule:
        if not isinstance(spec, Mapping) or "function" not in spec or "error" not in spec:
            self._fail(where, "expected { function = ..., error = ... }")
        try:
            code = error_code(spec["error"])
        except ValueError as exc:
            self._fail(f"{where}.error", str(exc))
        link = spec.get("link")
        return _ErrorRule(str(spec["function"]), code, gpu, int(link) if link is not None else None)


def _fake_uuid(index: int, bus: str) -> str:
    try:
        # CPython's built-in SHA-1: the same digest as hashlib's, without
        # loading OpenSSL (~3 ms of a health check on the fake).
        from _sha1 import sha1
    except ImportError:  # a build without it
        from hashlib import sha1

    h = sha1(f"{bus}/{index}".encode()).hexdigest()  # noqa: S324 - not security
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def read_scenario(path: str) -> Scenario:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise NvmlError(f"{path}: cannot read NVML scenario: {exc}") from exc
    try:
        if path.endswith(".json"):
            data = json.loads(raw)
        else:
            data = tomllib.loads(raw.decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise NvmlError(f"{path}: invalid NVML scenario: {exc}") from exc
    if not isinstance(data, Mapping):
        raise NvmlError(f"{path}: invalid NVML scenario: top level must be a table")
    return Scenario(data, source=path)


class FakeNvml:
    """pynvml's interface, backed by a scenario file or a ``Scenario``."""

    def __init__(self, scenario: str | os.PathLike[str] | Scenario | Mapping[str, Any]):
        self._lock = threading.RLock()
        self._path: str | None = None
        self._stamp: tuple[int, int] | None = None
        if isinstance(scenario, Scenario):
            self._scenario = scenario
        elif isinstance(scenario, Mapping):
            self._scenario = Scenario(scenario)
        else:
            self._path = os.fspath(scenario)
            self._stamp = self._stat()
            self._scenario = read_scenario(self._path)
        self._refcount = 0
        #: Every NVML function called, in order (tests assert on it).
        self.calls: list[str] = []

    # -- plumbing ---------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        """Constants, structures and error classes come from real pynvml; an
        NVML function we do not model raises FunctionNotFound like an old
        driver lacking the symbol."""
        value = getattr(pynvml, name)
        if name.startswith("nvml") and callable(value) and not isinstance(value, type):

            def missing(*args: Any, **kwargs: Any) -> Any:
                self._enter(name, None)
                log.debug("fake nvml: %s not modelled", name)
                _raise(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

            return missing
        return value

    def _stat(self) -> tuple[int, int] | None:
        assert self._path is not None
        try:
            st = os.stat(self._path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _current(self) -> Scenario:
        """The scenario, re-read if the file changed.  A half-written or
        broken file keeps the previous scenario (logged), as a demo edits
        files while a watcher runs."""
        if self._path is None:
            return self._scenario
        stamp = self._stat()
        if stamp != self._stamp:
            try:
                self._scenario = read_scenario(self._path)
                self._stamp = stamp
                log.info("fake nvml: reloaded scenario %s", self._path)
            except NvmlError as exc:
                log.warning("fake nvml: keeping previous scenario: %s", exc)
        return self._scenario

    def _enter(self, function: str, gpu: int | None, link: int | None = None) -> Scenario:
        with self._lock:
            self.calls.append(function)
            sc = self._current()
            if self._refcount <= 0 and function not in ("nvmlInit", "nvmlInitWithFlags"):
                _raise(pynvml.NVML_ERROR_UNINITIALIZED)
        rules = sc.errors
        if gpu is not None and 0 <= gpu < len(sc.gpus) and sc.gpus[gpu]["_errors"]:
            rules = [*rules, *sc.gpus[gpu]["_errors"]]
        for rule in rules:
            if rule.function != function:
                continue
            if rule.gpu is not None and rule.gpu != gpu:
                continue
            if rule.link is not None and rule.link != link:
                continue
            _raise(rule.code)
        return sc

    def _gpu(self, function: str, handle: Any, link: int | None = None) -> dict[str, Any]:
        if not isinstance(handle, FakeHandle):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        sc = self._enter(function, handle.index, link)
        if handle.index >= len(sc.gpus):
            # The GPU vanished from the scenario after we handed out a handle.
            _raise(pynvml.NVML_ERROR_GPU_IS_LOST)
        gpu = sc.gpus[handle.index]
        if gpu.get("lost") in (True, "queries"):
            # Real NVML fails every call on a GPU that fell off the bus, also
            # through a handle taken before it fell (a watcher's long session).
            _raise(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    @staticmethod
    def _not_supported(value: Any) -> bool:
        return value == "not_supported"

    # -- life cycle -------------------------------------------------------
    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        self._enter("nvmlInit", None)
        with self._lock:
            self._refcount += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown", None)
        with self._lock:
            self._refcount = max(0, self._refcount - 1)

    # -- system -----------------------------------------------------------
    def nvmlSystemGetDriverVersion(self) -> str:
        return self._enter("nvmlSystemGetDriverVersion", None).driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self._enter("nvmlSystemGetCudaDriverVersion", None).cuda_driver_version

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self._enter("nvmlSystemGetCudaDriverVersion_v2", None).cuda_driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        return self._enter("nvmlSystemGetNVMLVersion", None).nvml_version

    def nvmlDeviceGetCount(self) -> int:
        return len(self._enter("nvmlDeviceGetCount", None).gpus)

    # -- handles ----------------------------------------------------------
    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        sc = self._enter("nvmlDeviceGetHandleByIndex", index)
        if not 0 <= index < len(sc.gpus):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = sc.gpus[index]
        if gpu.get("lost") in (True, "handle"):
            _raise(pynvml.NVML_ERROR_GPU_IS_LOST)
        if gpu.get("unknown_error"):
            _raise(pynvml.NVML_ERROR_UNKNOWN)
        if gpu.get("reset_required"):
            _raise(pynvml.NVML_ERROR_RESET_REQUIRED)
        return FakeHandle(index)

    def _handle_where(self, function: str, key: str, value: str) -> FakeHandle:
        sc = self._enter(function, None)
        for i, gpu in enumerate(sc.gpus):
            if str(gpu.get(key, "")).lower() == value.lower():
                return self.nvmlDeviceGetHandleByIndex(i)
        _raise(pynvml.NVML_ERROR_NOT_FOUND)
        raise AssertionError("unreachable")

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> FakeHandle:
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        return self._handle_where("nvmlDeviceGetHandleByUUID", "uuid", text)

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str | bytes) -> FakeHandle:
        text = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
        return self._handle_where("nvmlDeviceGetHandleByPciBusId", "pci_bus_id", text)

    # -- identity ---------------------------------------------------------
    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        self._gpu("nvmlDeviceGetIndex", handle)
        return int(handle.index)

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return str(self._gpu("nvmlDeviceGetName", handle)["name"])

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return str(self._gpu("nvmlDeviceGetUUID", handle)["uuid"])

    def nvmlDeviceGetSerial(self, handle: Any) -> str:
        gpu = self._gpu("nvmlDeviceGetSerial", handle)
        return str(gpu.get("serial", f"16523210{handle.index:05d}"))

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return self._pci_info("nvmlDeviceGetPciInfo", handle)

    def nvmlDeviceGetPciInfo_v3(self, handle: Any) -> Any:
        return self._pci_info("nvmlDeviceGetPciInfo_v3", handle)

    def _pci_info(self, function: str, handle: Any) -> Any:
        gpu = self._gpu(function, handle)
        bus_id = str(gpu["pci_bus_id"]).upper()
        domain, bus, rest = bus_id.split(":")
        device = rest.split(".")[0]
        info = pynvml.nvmlPciInfo_t()
        info.busId = bus_id.encode()
        info.busIdLegacy = f"{int(domain, 16):04X}:{bus}:{rest}".encode()
        info.domain = int(domain, 16)
        info.bus = int(bus, 16)
        info.device = int(device, 16)
        info.pciDeviceId = int(gpu.get("pci_device_id", 0x20B210DE))
        info.pciSubSystemId = int(gpu.get("pci_subsystem_id", 0))
        return info

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        total = int(gpu.get("memory_total_mib", 81920)) * 1024 * 1024
        used = int(gpu.get("memory_used_mib", 0)) * 1024 * 1024
        if version:
            mem = pynvml.c_nvmlMemory_v2_t()
            mem.version = version
            mem.reserved = 0
        else:
            mem = pynvml.c_nvmlMemory_t()
        mem.total, mem.used, mem.free = total, used, total - used
        return mem

    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int:
        gpu = self._gpu("nvmlDeviceGetPersistenceMode", handle)
        enabled = gpu.get("persistence", True)
        return pynvml.NVML_FEATURE_ENABLED if enabled else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        """[current, pending] as pynvml returns them; a GPU without MIG
        (before Ampere) raises NotSupported."""
        mig = self._gpu("nvmlDeviceGetMigMode", handle).get("mig", False)
        if self._not_supported(mig):
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if mig else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    # -- memory errors ----------------------------------------------------
    def nvmlDeviceGetEccMode(self, handle: Any) -> list[int]:
        ecc = self._gpu("nvmlDeviceGetEccMode", handle).get("ecc", {})
        if self._not_supported(ecc):
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        on = pynvml.NVML_FEATURE_ENABLED if ecc.get("enabled", True) else 0
        return [on, on]

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:
        ecc = self._gpu("nvmlDeviceGetTotalEccErrors", handle).get("ecc", {})
        if self._not_supported(ecc) or not ecc.get("enabled", True):
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        kind = {
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED: "corrected",
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED: "uncorrected",
        }.get(error_type)
        scope = {pynvml.NVML_VOLATILE_ECC: "volatile", pynvml.NVML_AGGREGATE_ECC: "aggregate"}.get(
            counter_type
        )
        if kind is None or scope is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        value = int(ecc.get(f"{scope}_{kind}", 0))
        if scope == "aggregate":
            value = max(value, int(ecc.get(f"volatile_{kind}", 0)))
        return value

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:
        gpu = self._gpu("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        pending = gpu.get("retired_pages_pending", False)
        if self._not_supported(pending):
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.NVML_FEATURE_ENABLED if pending else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        remap = self._gpu("nvmlDeviceGetRemappedRows", handle).get("remap", {})
        if self._not_supported(remap):
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return (
            int(remap.get("corr", 0)),
            int(remap.get("unc", 0)),
            int(bool(remap.get("pending", False))),
            int(bool(remap.get("failure", False))),
        )

    # -- PCIe -------------------------------------------------------------
    def _pcie(self, function: str, handle: Any, key: str, default: int) -> int:
        pcie = self._gpu(function, handle).get("pcie", {})
        if key in ("gen", "width"):
            return int(pcie.get(key, pcie.get(f"max_{key}", default)))
        return int(pcie.get(key, default))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return self._pcie("nvmlDeviceGetCurrPcieLinkGeneration", handle, "gen", 4)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self._pcie("nvmlDeviceGetMaxPcieLinkGeneration", handle, "max_gen", 4)

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return self._pcie("nvmlDeviceGetCurrPcieLinkWidth", handle, "width", 16)

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return self._pcie("nvmlDeviceGetMaxPcieLinkWidth", handle, "max_width", 16)

    # -- NVLink -----------------------------------------------------------
    def _link(self, function: str, handle: Any, link: int) -> dict[str, Any]:
        gpu = self._gpu(function, handle, link)
        links = int(gpu.get("nvlinks", 0))
        if links == 0:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < links:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        gpu = self._link("nvmlDeviceGetNvLinkState", handle, link)
        down = {int(x) for x in gpu.get("nvlink_down", [])}
        return pynvml.NVML_FEATURE_DISABLED if link in down else pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: Any, link: int, counter: int) -> int:
        gpu = self._link("nvmlDeviceGetNvLinkErrorCounter", handle, link)
        name = _NVLINK_COUNTER_NAMES.get(counter)
        if name is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        per_link = gpu.get("nvlink_errors", {}).get(str(link), {})
        value = per_link.get(name, 0)
        if self._not_supported(value):
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(value)

    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: list[Any]) -> Any:
        """pynvml's signature and return: an array of ``c_nvmlFieldValue_t``
        (``fieldIds`` items are field ids or ``(field, scopeId)`` pairs),
        each entry with its own ``nvmlReturn``, as NVML fills them: a field
        the fake does not model, or a counter the scenario marks
        not_supported, is NOT_SUPPORTED; a link the GPU lacks is
        INVALID_ARGUMENT.  Modelled: the NVLink error counters, per link
        (links 0-11) and scoped by link (replay, recovery), and the link
        state scoped by link (NVML_FI_DEV_NVLINK_GET_STATE)."""
        gpu = self._gpu("nvmlDeviceGetFieldValues", handle)
        stamp = time.time_ns() // 1000
        entries = []
        for fid in fieldIds:
            field, scope = fid if isinstance(fid, tuple) else (fid, 0)
            ret, value = self._field(gpu, int(field), int(scope))
            entries.append(
                pynvml.c_nvmlFieldValue_t(
                    field,
                    scope,
                    stamp,
                    0,  # latencyUsec
                    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                    ret,
                    pynvml.c_nvmlValue_t(ullVal=value),
                )
            )
        return (pynvml.c_nvmlFieldValue_t * len(entries))(*entries)

    def _field(self, gpu: dict[str, Any], field: int, scope: int) -> tuple[int, int]:
        """(nvmlReturn, value) of one field of ``gpu``."""
        if field == pynvml.NVML_FI_DEV_NVLINK_GET_STATE:
            return self._link_state_field(gpu, scope)
        if field in NVLINK_FIELDS:
            name, link = NVLINK_FIELDS[field]
        elif field in NVLINK_SCOPED_FIELDS:
            name, link = NVLINK_SCOPED_FIELDS[field], scope
        else:
            return pynvml.NVML_ERROR_NOT_SUPPORTED, 0
        links = int(gpu.get("nvlinks", 0))
        if links == 0:
            return pynvml.NVML_ERROR_NOT_SUPPORTED, 0
        if link >= links:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT, 0
        value = gpu.get("nvlink_errors", {}).get(str(link), {}).get(name, 0)
        if self._not_supported(value):
            return pynvml.NVML_ERROR_NOT_SUPPORTED, 0
        return pynvml.NVML_SUCCESS, int(value)

    @staticmethod
    def _link_state_field(gpu: dict[str, Any], link: int) -> tuple[int, int]:
        """NVML_FI_DEV_NVLINK_GET_STATE of ``link``: the NVML_NVLINK_STATE_*
        value the scenario's ``nvlink_down`` gives it."""
        links = int(gpu.get("nvlinks", 0))
        if links == 0:
            return pynvml.NVML_ERROR_NOT_SUPPORTED, 0
        if not 0 <= link < links:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT, 0
        down = {int(x) for x in gpu.get("nvlink_down", [])}
        state = (
            pynvml.NVML_NVLINK_STATE_INACTIVE if link in down else pynvml.NVML_NVLINK_STATE_ACTIVE
        )
        return pynvml.NVML_SUCCESS, state

    # -- clocks and thermals ----------------------------------------------
    def _reasons(self, function: str, handle: Any) -> int:
        spec = self._gpu(function, handle).get("throttle", ["gpu_idle"])
        if isinstance(spec, int):
            return spec
        mask = 0
        for name in spec:
            if name not in THROTTLE_BITS:
                raise NvmlError(
                    f"unknown throttle reason {name!r} (known: {', '.join(THROTTLE_BITS)})"
                )
            mask |= THROTTLE_BITS[name]
        return mask

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._reasons("nvmlDeviceGetCurrentClocksEventReasons", handle)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._reasons("nvmlDeviceGetCurrentClocksThrottleReasons", handle)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperature", handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(gpu.get("temperature", 33))

    def nvmlDeviceGetTemperatureV(
        self, handle: Any, sensor: int, version: int | None = None
    ) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperatureV", handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(gpu.get("temperature", 33))

    # -- repair (slurm_hooks.detect.probes.gpu_reset) --------------------
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        """The scenario GPU's ``processes`` (PIDs; default none)."""
        from types import SimpleNamespace

        gpu = self._gpu("nvmlDeviceGetComputeRunningProcesses", handle)
        return [SimpleNamespace(pid=int(p), usedGpuMemory=0) for p in gpu.get("processes") or []]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[Any]:
        """None: a data-centre GPU runs no graphics (NVML answers an empty list)."""
        self._gpu("nvmlDeviceGetGraphicsRunningProcesses", handle)
        return []

    def nvmlDeviceGetProcessUtilization(self, handle: Any, timeStamp: int) -> list[Any]:  # noqa: N802, N803 - pynvml's names
        """The scenario GPU's ``process_utilization`` (``{pid = sm_util}`` or
        ``{pid = {sm = .., mem = ..}}``) as pynvml's own sample structures,
        stamped now; NOT_FOUND when there are none newer than ``timeStamp``
        (what NVML answers for an idle GPU)."""
        import time

        gpu = self._gpu("nvmlDeviceGetProcessUtilization", handle)
        stamp = max(int(time.time() * 1e6), int(timeStamp) + 1)
        out = []
        for pid, util in (gpu.get("process_utilization") or {}).items():
            sm, mem = (
                (util.get("sm", 0), util.get("mem", 0)) if isinstance(util, dict) else (util, 0)
            )
            out.append(
                pynvml.c_nvmlProcessUtilizationSample_t(int(pid), stamp, int(sm), int(mem), 0, 0)
            )
        if not out:
            _raise(pynvml.NVML_ERROR_NOT_FOUND)
        return out

    def reset_gpu(self, index: int) -> None:
        """What ``nvidia-smi -r -i INDEX`` does, for the lab: a GPU marked
        ``resettable`` comes back healthy (``lost``, ``reset_required``,
        ``unknown_error`` cleared in the scenario file); one that is not keeps
        its fault.  Each reset is a line in ``<scenario>.resets``."""
        self._enter("reset_gpu", index)
        if self._path is None:
            return
        with open(self._path + ".resets", "a") as f:
            f.write(f"{index}\n")
        with open(self._path) as f:
            data = json.load(f)
        gpu = (data.get("gpu") or {}).get(str(index))
        if not isinstance(gpu, dict) or not gpu.get("resettable"):
            return
        for key in ("lost", "reset_required", "unknown_error", "resettable", "processes"):
            gpu.pop(key, None)
        tmp = self._path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, self._path)

    # -- fabric -----------------------------------------------------------
    def nvmlDeviceGetGpuFabricInfo(self, handle: Any, info: Any) -> int:
        return self._fabric("nvmlDeviceGetGpuFabricInfo", handle, info)

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, info: Any) -> int:
        return self._fabric("nvmlDeviceGetGpuFabricInfoV", handle, info)

    def _fabric(self, function: str, handle: Any, info: Any) -> int:
        fabric = self._gpu(function, handle).get("fabric", "not_supported")
        if self._not_supported(fabric):
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        # Real pynvml callers pass byref(struct); accept the struct too.
        struct = getattr(info, "_obj", info)
        if not isinstance(struct, Structure):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        fields = {f[0] for f in struct._fields_}
        if "version" in fields and struct.version not in _FABRIC_VERSIONS:
            _raise(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        state = fabric.get("state", "completed")
        struct.state = FABRIC_STATES[state] if isinstance(state, str) else int(state)
        status = fabric.get("status", "SUCCESS")
        struct.status = (
            pynvml.NVML_SUCCESS if str(status).upper() == "SUCCESS" else error_code(status)
        )
        struct.cliqueId = int(fabric.get("clique_id", 32766)) if "cliqueId" in fields else 0
        if "healthMask" in fields:
            struct.healthMask = int(fabric.get("health_mask", 0))
        if "healthSummary" in fields:
            summary = fabric.get("health_summary", "healthy")
            struct.healthSummary = _HEALTH_SUMMARY.get(summary, summary)
        return pynvml.NVML_SUCCESS


_FABRIC_VERSIONS = {
    v
    for v in (
        getattr(pynvml, "nvmlGpuFabricInfo_v2", None),
        getattr(pynvml, "nvmlGpuFabricInfo_v3", None),
    )
    if v is not None
}

_HEALTH_SUMMARY: dict[str, int] = {
    "not_supported": getattr(pynvml, "NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED", 0),
    "healthy": getattr(pynvml, "NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY", 1),
    "unhealthy": getattr(pynvml, "NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY", 2),
    "limited_capacity": getattr(pynvml, "NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY", 3),
}


def backend(scenario: str | None = None) -> FakeNvml:
    """The ``lab:fake`` NVML backend (entry point ``slurm_hooks.nvml``):
    ``[checks] nvml = "lab:fake"`` with ``nvml_scenario = FILE``."""
    if not scenario:
        raise ConfigError(
            "the lab:fake NVML backend needs a scenario file", key="checks.nvml_scenario"
        )
    log.debug("nvml: fake scenario=%s", scenario)
    return FakeNvml(scenario)
