"""InfiniBand/RoCE port state from sysfs.

The kernel's RDMA core exposes every port under
``/sys/class/infiniband/<dev>/ports/<n>/``; reading those files is what
``ibstat`` does, without the subprocess.  The root is injectable so tests
read recorded trees under ``tests/data/sysfs/`` (the prometheus client's
``/proc``-root idea).
"""

from __future__ import annotations

import logging
import os
import re

from slurm_hooks.core.record import record

log = logging.getLogger(__name__)

IB_CLASS = "class/infiniband"

#: ``state`` values (include/rdma/ib_verbs.h enum ib_port_state).
PORT_ACTIVE = 4
#: ``phys_state`` values (IBTA: 5 = LinkUp).
PHYS_LINK_UP = 5

_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec")
_NUMBERED = re.compile(r"^\s*(\d+)\s*:\s*(\S.*?)\s*$")


@record
class IbPort:
    """One port as sysfs reports it; text fields keep the kernel's words."""

    device: str
    port: int
    state: int | None
    state_text: str
    phys_state: int | None
    phys_state_text: str
    rate_gbps: float | None
    rate_text: str
    link_layer: str

    @property
    def name(self) -> str:
        """``mlx5_0/1``: how admins and our components name a port."""
        return f"{self.device}/{self.port}"

    @property
    def active(self) -> bool:
        return self.state == PORT_ACTIVE and self.phys_state == PHYS_LINK_UP


def parse_numbered(text: str) -> tuple[int | None, str]:
    """``"4: ACTIVE"`` -> ``(4, "ACTIVE")``; anything else -> ``(None, text)``."""
    m = _NUMBERED.match(text)
    if not m:
        return None, text.strip()
    return int(m.group(1)), m.group(2)


def parse_rate(text: str) -> float | None:
    """``"400 Gb/sec (4X NDR)"`` -> ``400.0``; ``"2.5 Gb/sec (1X SDR)"`` -> ``2.5``."""
    m = _RATE.match(text)
    return float(m.group(1)) if m else None


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except OSError as exc:
        # Some drivers return EINVAL for ``rate`` on a port that is down.
        log.debug("sysfs: cannot read %s: %s", path, exc)
        return ""


def read_ib_ports(root: str = "/sys") -> list[IbPort]:
    """Every RDMA port under ``root``, sorted by device then port.  An
    absent class directory (no RDMA driver loaded) is an empty list."""
    base = os.path.join(root, IB_CLASS)
    try:
        devices = sorted(os.listdir(base))
    except FileNotFoundError:
        return []
    ports: list[IbPort] = []
    for dev in devices:
        pdir = os.path.join(base, dev, "ports")
        try:
            numbers = sorted(int(p) for p in os.listdir(pdir) if p.isdigit())
        except OSError:
            continue
        for n in numbers:
            d = os.path.join(pdir, str(n))
            state, state_text = parse_numbered(_read(os.path.join(d, "state")))
            phys, phys_text = parse_numbered(_read(os.path.join(d, "phys_state")))
            rate_text = _read(os.path.join(d, "rate"))
            ports.append(
                IbPort(
                    device=dev,
                    port=n,
                    state=state,
                    state_text=state_text,
                    phys_state=phys,
                    phys_state_text=phys_text,
                    rate_gbps=parse_rate(rate_text),
                    rate_text=rate_text,
                    link_layer=_read(os.path.join(d, "link_layer")) or "InfiniBand",
                )
            )
    return ports
