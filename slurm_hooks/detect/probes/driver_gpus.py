"""The NVIDIA kernel module's own list of GPUs: ``/proc/driver/nvidia/gpus``.

One directory per GPU, named by its bus id, with an ``information`` file of
``Key: value`` lines (``GPU UUID``, ``Bus Location``, ``Device Minor`` ...).
It answers without NVML, and for a GPU NVML has lost: the NVML session reads
it to name a lost GPU, the XID path to name the GPU behind a bus id.
"""

from __future__ import annotations

import logging
import os
import re

log = logging.getLogger(__name__)

PROC_GPUS = "/proc/driver/nvidia/gpus"

#: A directory the driver names after a GPU's bus id (``0000:3b:00.0``).
_BUS_DIR = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", re.ASCII)


def read_gpu_information(root: str = PROC_GPUS) -> list[tuple[str, dict[str, str]]]:
    """(directory name, fields) per GPU under ``root``, in name order, which
    is PCI bus order: a GPU's place in this list is its NVML index, the
    number every drain reason and ``nvidia-smi -i`` use.  Only directories
    named by a bus id count.  The fields are the ``information`` file's
    ``Key: value`` lines, stripped (a key given twice: the last).  No
    ``root``: an empty list; a file that cannot be read keeps the fields
    read before the error."""
    try:
        entries = sorted(e for e in os.listdir(root) if _BUS_DIR.fullmatch(e))
    except OSError:
        return []
    out: list[tuple[str, dict[str, str]]] = []
    for entry in entries:
        fields: dict[str, str] = {}
        path = os.path.join(root, entry, "information")
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    key, sep, value = line.partition(":")
                    if sep:
                        fields[key.strip()] = value.strip()
        except OSError as exc:
            log.debug("cannot read GPU information path=%s error=%s", path, exc)
        out.append((entry, fields))
    return out


def minor_positions(root: str = PROC_GPUS) -> dict[int, int] | None:
    """Device minor (``/dev/nvidiaN``: how gres.conf's ``File=`` names a
    GPU; ``slurm/gpu_order.py`` turns Slurm's indices into files) -> the
    GPU's place in PCI bus order (how NVML, nvidia-smi and CUDA under ``CUDA_DEVICE_ORDER=
    PCI_BUS_ID`` name it).  The two usually agree, not always: public
    reports have ``Device Minor: 0`` on the GPU nvidia-smi calls 3, and
    Slurm's order unlike NVIDIA's on 4x H100 NVL under Slurm 24.11
    (ceems-dev/ceems discussion 513).  None when it cannot be told (no GPU
    listed, a minor missing)."""
    out: dict[int, int] = {}
    for place, (_, fields) in enumerate(read_gpu_information(root)):  # name order: bus order
        minor = fields.get("Device Minor", "")
        if not minor.isdigit():
            return None
        out[int(minor)] = place
    return out or None
