"""PCI bus ids: one normal form, and the GPU (index, UUID) behind each.

The driver prints bus ids four ways (``PCI:0000:3b:00``, ``0000:3b:00``,
``0000:3b:00.0``, NVML's ``00000000:3B:00.0``); drain reasons, alerts and
the NVML check must agree on one, so everything goes through
:func:`normalise_pci`: ``domain:bus:device.function``, lower case, domain at
least four hex digits (``0000:3b:00.0``).

Index and UUID come from NVML when a module is given (pynvml or the fake
from ``probes.fake_nvml``), else from ``/proc/driver/nvidia/gpus``; both are
read only when asked, so the scan path costs nothing extra.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

PROC_GPUS = "/proc/driver/nvidia/gpus"

_PCI_RE = re.compile(
    r"^(?:PCI:)?(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})"
    r"(?:\.(?P<fn>[0-7]))?$"
)


def normalise_pci(raw: str | bytes | None) -> str | None:
    """``0000:3b:00.0`` from any form the driver or NVML prints; None if
    ``raw`` is not a bus id at all (redacted, garbage)."""
    if raw is None:
        return None
    if isinstance(raw, bytes):
        raw = raw.decode("ascii", errors="replace")
    m = _PCI_RE.match(raw.strip())
    if m is None:
        return None
    dom = int(m["dom"], 16) if m["dom"] else 0
    return f"{dom:04x}:{int(m['bus'], 16):02x}:{int(m['dev'], 16):02x}.{int(m['fn'] or 0)}"


@dataclass(frozen=True)
class GpuRef:
    """A GPU as findings name it."""

    pci: str
    index: int | None = None
    uuid: str | None = None


def gpus_from_nvml(nvml: Any) -> dict[str, GpuRef]:
    """Bus id -> GpuRef through an NVML module (pynvml or a fake with the same
    function names).  The caller has already called ``nvmlInit``."""
    out: dict[str, GpuRef] = {}
    for i in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        pci = normalise_pci(nvml.nvmlDeviceGetPciInfo(handle).busId)
        uuid = nvml.nvmlDeviceGetUUID(handle)
        if isinstance(uuid, bytes):
            uuid = uuid.decode("ascii", errors="replace")
        if pci:
            out[pci] = GpuRef(pci=pci, index=i, uuid=uuid)
    return out


def gpus_from_procfs(root: str = PROC_GPUS) -> dict[str, GpuRef]:
    """Bus id -> GpuRef from ``<root>/<bus id>/information``.  The index is
    the ``Device Minor`` (``/dev/nvidiaN``, what gres.conf names), which
    matches NVML's index on the usual PCI-ordered systems."""
    out: dict[str, GpuRef] = {}
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return out
    for entry in entries:
        pci = normalise_pci(entry)
        if pci is None:
            continue
        uuid: str | None = None
        minor: int | None = None
        try:
            with open(
                os.path.join(root, entry, "information"), encoding="utf-8", errors="replace"
            ) as f:
                for line in f:
                    key, sep, value = line.partition(":")
                    if not sep:
                        continue
                    key, value = key.strip(), value.strip()
                    if key == "GPU UUID":
                        uuid = value or None
                    elif key == "Device Minor" and value.isdigit():
                        minor = int(value)
        except OSError as exc:
            log.debug("cannot read GPU information pci=%s error=%s", pci, exc)
        out[pci] = GpuRef(pci=pci, index=minor, uuid=uuid)
    return out


def gpu_map(nvml: Any | None = None, proc_root: str = PROC_GPUS) -> dict[str, GpuRef]:
    """Bus id -> GpuRef: NVML when a module is given and answers, else procfs.
    Never raises: an unknown GPU is named by its bus id alone."""
    if nvml is not None:
        try:
            found = gpus_from_nvml(nvml)
            if found:
                return found
        except Exception as exc:  # noqa: BLE001 - any NVML failure falls back to procfs
            log.info("NVML GPU map failed, using procfs error=%s", exc)
    return gpus_from_procfs(proc_root)


def lookup(pci: str | None, gpus: Mapping[str, GpuRef]) -> GpuRef | None:
    """The GPU at ``pci``.  XID lines print ``bus:device`` without a function,
    which normalises to ``.0``: that is the GPU's function on every board."""
    if pci is None:
        return None
    return gpus.get(pci)
