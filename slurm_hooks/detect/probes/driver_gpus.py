"""The NVIDIA kernel module's own list of GPUs: ``/proc/driver/nvidia/gpus``.

One directory per GPU, named by its bus id, with an ``information`` file of
``Key: value`` lines (``GPU UUID``, ``Bus Location``, ``Device Minor`` ...).
It answers without NVML, and for a GPU NVML has lost: the NVML session reads
it to name a lost GPU, the XID path to name the GPU behind a bus id.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

PROC_GPUS = "/proc/driver/nvidia/gpus"


def read_gpu_information(root: str = PROC_GPUS) -> list[tuple[str, dict[str, str]]]:
    """(directory name, fields) per GPU under ``root``, in name order; the
    fields are the ``information`` file's ``Key: value`` lines, stripped (a
    key given twice: the last).  No ``root``: an empty list; a file that
    cannot be read keeps the fields read before the error."""
    try:
        entries = sorted(os.listdir(root))
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


def minors_in_bus_order(root: str = PROC_GPUS) -> bool | None:
    """Whether the GPU at each place of PCI bus order is ``/dev/nvidia<that
    place>``: NVML numbers GPUs in bus order, gres.conf's ``File=`` (and so
    Slurm's GPU indices) by device minor, and the two agree only then.  It
    does not always hold: a public report has ``Device Minor: 0`` on the GPU
    nvidia-smi calls 3.  None when it cannot be told (no GPU listed, a minor
    missing)."""
    minors = []
    for _, fields in read_gpu_information(root):  # name order: bus order
        minor = fields.get("Device Minor", "")
        if not minor.isdigit():
            return None
        minors.append(int(minor))
    return minors == list(range(len(minors))) if minors else None
