"""Whether the node has an NVIDIA device at all, from one procfs read.

A node whose profile does not say how many GPUs it has (no profile, or one
without ``gpu_count``) would otherwise load NVML on every run to find out,
and on a CPU-only node report every GPU check UNKNOWN ("NVML Shared Library
Not Found"), which then starts the remediation engine on a healthy node.
``/proc/bus/pci/devices`` lists every PCI device the kernel found, whether
or not a driver is bound (linux ``drivers/pci/proc.c``, ``show_device``:
``"%02x%02x\\t%04x%04x\\t%x"`` bus, devfn, vendor, device, irq), so a GPU
whose driver failed to load is still there: only a node with no NVIDIA
device (vendor 0x10de: GPUs, NVSwitches) is told apart.
"""

from __future__ import annotations

import os

PROC_PCI_DEVICES = "/proc/bus/pci/devices"
#: Signs of a loaded NVIDIA driver: with either, a GPU may be there whatever
#: the PCI list shows (a container or sandbox may show a partial list).
NVIDIA_DRIVER_PATHS = ("/proc/driver/nvidia/gpus", "/dev/nvidiactl")
#: PCI vendor id of NVIDIA (pci.ids).
NVIDIA_VENDOR = 0x10DE


def vendor_present(vendor: int, path: str = PROC_PCI_DEVICES) -> bool | None:
    """True when a device of ``vendor`` is on the PCI bus, False when none
    is, None when the list cannot be read (no procfs, masked in a
    container): the caller then cannot rule a device out."""
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    want = f"{vendor:04x}"
    seen = False
    for line in text.splitlines():
        fields = line.split("\t", 2)
        if len(fields) < 2 or len(fields[1]) != 8:
            continue
        seen = True
        if fields[1][:4].lower() == want:
            return True
    # An empty or unparsable list proves nothing.
    return False if seen else None


def driver_present(paths: tuple[str, ...] = NVIDIA_DRIVER_PATHS) -> bool:
    """True when the NVIDIA kernel driver shows itself (one ``stat`` each)."""
    return any(os.path.exists(p) for p in paths)
