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
from typing import Any

from slurm_hooks.core.record import record
from slurm_hooks.detect.probes.driver_gpus import PROC_GPUS, read_gpu_information

log = logging.getLogger(__name__)

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


#: A MIG instance the driver names after the bus id: ``PCI:0000:01:00 GPU-I:05``.
_MIG_RE = re.compile(r"\bGPU-I:(?P<gi>[0-9]{1,3})\b", re.ASCII)


def split_mig(raw: str) -> tuple[str, int | None]:
    """``("0000:01:00", 5)`` from ``"0000:01:00 GPU-I:05"``: the bus id that
    names the physical GPU, and the MIG GPU instance if the driver printed
    one.  Anything else passes through unchanged with no instance."""
    head, _, tail = raw.strip().partition(" ")
    m = _MIG_RE.search(tail)
    return (head, int(m["gi"])) if m else (raw, None)


@record
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
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            pci = normalise_pci(nvml.nvmlDeviceGetPciInfo(handle).busId)
            uuid = nvml.nvmlDeviceGetUUID(handle)
        except Exception as exc:  # noqa: BLE001 - a lost GPU must not hide its siblings
            log.info("NVML cannot name GPU %d error=%s", i, exc)
            continue
        if isinstance(uuid, bytes):
            uuid = uuid.decode("ascii", errors="replace")
        if pci:
            out[pci] = GpuRef(pci=pci, index=i, uuid=uuid)
    return out


#: The last GPU map NVML gave while every GPU answered, kept in the state dir:
#: a GPU that fell off the bus (XID 79) can no longer be named by NVML, and
#: its bus id alone is a poor thing to put in a drain reason.
KNOWN_GPUS_FILE = "gpu-map.json"
#: Refresh the kept map at most this often (seconds) when nothing changed.
KNOWN_GPUS_REFRESH_S = 600.0


def load_known(state_dir: str) -> dict[str, GpuRef]:
    from slurm_hooks.detect.xid.cursor import load_json, state_path

    data = load_json(state_path(state_dir, KNOWN_GPUS_FILE))
    out: dict[str, GpuRef] = {}
    if isinstance(data, dict) and isinstance(data.get("gpus"), list):
        for g in data["gpus"]:
            if isinstance(g, dict) and isinstance(g.get("pci"), str):
                idx = g.get("index")
                out[g["pci"]] = GpuRef(
                    g["pci"], idx if isinstance(idx, int) else None, g.get("uuid")
                )
    return out


def remember(state_dir: str, nvml: Any, *, now: float) -> dict[str, GpuRef] | None:
    """Keep NVML's map when every GPU answered and it changed (or is old);
    returns the map kept, None when nothing was written."""

    from slurm_hooks.detect.xid.cursor import state_path, write_json_atomic

    path = state_path(state_dir, KNOWN_GPUS_FILE)
    try:
        count = int(nvml.nvmlDeviceGetCount())
        current = gpus_from_nvml(nvml)
    except Exception as exc:  # noqa: BLE001 - best effort, never fails a check
        log.debug("cannot read the GPU map error=%s", exc)
        return None
    if not current or len(current) != count:
        return None  # some GPU did not answer: keep the last complete map
    try:
        fresh = now - os.stat(path).st_mtime < KNOWN_GPUS_REFRESH_S
    except OSError:
        fresh = False
    if fresh and load_known(state_dir) == current:
        return None
    write_json_atomic(
        path, {"gpus": [{"pci": g.pci, "index": g.index, "uuid": g.uuid} for g in current.values()]}
    )
    return current


def gpus_from_procfs(root: str = PROC_GPUS) -> dict[str, GpuRef]:
    """Bus id -> GpuRef from ``<root>/<bus id>/information``.  The index is
    the GPU's place in bus order, NVML's number for it, and not its
    ``Device Minor``: the two differ on some hosts, and a GPU that fell off
    the bus must be named (and later reset) by the number NVML gave it while
    it answered."""
    out: dict[str, GpuRef] = {}
    for place, (entry, fields) in enumerate(read_gpu_information(root)):
        pci = normalise_pci(entry)
        if pci is not None:
            out[pci] = GpuRef(pci=pci, index=place, uuid=fields.get("GPU UUID") or None)
    return out


def gpu_map(
    nvml: Any | None = None, proc_root: str = PROC_GPUS, known: Mapping[str, GpuRef] | None = None
) -> dict[str, GpuRef]:
    """Bus id -> GpuRef: what NVML names now, completed by procfs and by the
    last map kept while every GPU answered (``known``).  Never raises: a GPU
    nobody can name is named by its bus id alone."""
    found: dict[str, GpuRef] = {}
    if nvml is not None:
        try:
            found = gpus_from_nvml(nvml)
        except Exception as exc:  # noqa: BLE001 - any NVML failure falls back to procfs
            log.info("NVML GPU map failed, using procfs error=%s", exc)
    out = {**(known or {}), **gpus_from_procfs(proc_root), **found}
    return out


def lookup(pci: str | None, gpus: Mapping[str, GpuRef]) -> GpuRef | None:
    """The GPU at ``pci``.  XID lines print ``bus:device`` without a function,
    which normalises to ``.0``: that is the GPU's function on every board."""
    if pci is None:
        return None
    return gpus.get(pci)
