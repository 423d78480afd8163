"""A network partition between the lab's ranks, on the loopback.

Every lab node is 127.0.0.1, so two ranks on two lab nodes talk TCP over
``lo`` (Open MPI's ``btl_tcp_if_include=lo``): a partition between them
cannot cut an interface or a route without cutting the whole lab (slurmctld,
slurmd, munge).  What can be cut is the ranks' own TCP connections: the job
pins Open MPI's listening ports to a small aligned range
(``OMPI_MCA_btl_tcp_port_min_v4`` and ``_range_v4``) and every packet to or
from that range is dropped, both ways, while both ranks stay alive and keep
their sockets: what a switch or a cable that goes dark does.

The kernel this was built on has no netem, prio or ingress qdisc, and no
nft or iptables in user space; it has HTB, the u32 classifier and the
``blackhole`` qdisc.  So: an HTB root on ``lo`` whose default is 0 (every
unclassified packet goes out directly, unshaped: the rest of the host's
loopback traffic is not touched), one class whose leaf is a blackhole, and
two u32 filters (destination port, source port in the range) into it.

The partition is always undone (a context manager), and it refuses to
replace a root qdisc it did not put there: ``lo`` is the whole host's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from slurm_hooks.detect.probes.commands import run

log = logging.getLogger(__name__)

DEVICE = "lo"
#: The handle of our root qdisc: ``tc qdisc show`` names it, so a leftover
#: of an interrupted run is recognised as ours and removed.
ROOT_HANDLE = "1de1:"
CLASS_ID = "1de1:2"
LEAF_HANDLE = "1de2:"


class PartitionError(RuntimeError):
    """The partition cannot be set up here (no tc, a qdisc not ours on lo,
    a kernel without HTB, u32 or blackhole)."""


@dataclass(frozen=True)
class PortRange:
    """``count`` ports from ``first``: a power of two, ``first`` aligned to
    it, so one u32 mask matches the range exactly."""

    first: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or self.count & (self.count - 1):
            raise ValueError(f"port count {self.count} is not a power of two")
        if self.first % self.count or not 0 < self.first <= 65536 - self.count:
            raise ValueError(f"ports {self.first}+{self.count} are not an aligned range")

    @property
    def mask(self) -> str:
        return f"0x{0xFFFF & ~(self.count - 1):04x}"

    def mpi_env(self) -> dict[str, str]:
        """Open MPI's settings that make a job's TCP transport listen here."""
        return {
            "OMPI_MCA_btl_tcp_port_min_v4": str(self.first),
            "OMPI_MCA_btl_tcp_port_range_v4": str(self.count),
        }


def _tc(*args: str, check: bool = True) -> str:
    res = run(["tc", *args], timeout=10, check=False)
    if check and not res.ok:
        raise PartitionError(f"tc {' '.join(args)}: rc {res.rc}: {res.stderr.strip()}")
    return res.stdout


def _root_qdisc() -> str:
    out = _tc("qdisc", "show", "dev", DEVICE)
    return next((line for line in out.splitlines() if " root " in f" {line} "), "")


def heal() -> bool:
    """Remove our qdisc from ``lo`` if it is there (True when it was)."""
    if f" {ROOT_HANDLE} " not in f" {_root_qdisc()} ":
        return False
    _tc("qdisc", "del", "dev", DEVICE, "root")
    log.info("partition on %s removed", DEVICE)
    return True


def parse_dropped(tc_stats: str) -> int:
    """Packets our blackhole dropped, from ``tc -s qdisc show`` (0 when it
    is not there)."""
    lines = tc_stats.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"qdisc blackhole {LEAF_HANDLE}") and i + 1 < len(lines):
            words = lines[i + 1].replace(",", " ").replace("(", " ").split()
            if "dropped" in words:
                return int(words[words.index("dropped") + 1])
    return 0


def dropped_packets() -> int:
    """Packets the partition has dropped so far (0 when none is set)."""
    return parse_dropped(_tc("-s", "qdisc", "show", "dev", DEVICE, check=False))


def cut(ports: PortRange) -> None:
    """Drop every packet to or from ``ports`` on ``lo`` until :func:`heal`."""
    heal()  # a leftover of an interrupted run of ours
    root = _root_qdisc()
    if root and not root.startswith("qdisc noqueue"):
        raise PartitionError(f"{DEVICE} already has a root qdisc not ours: {root!r}")
    try:
        _tc("qdisc", "add", "dev", DEVICE, "root", "handle", ROOT_HANDLE, "htb")
        _tc("class", "add", "dev", DEVICE, "parent", ROOT_HANDLE, "classid", CLASS_ID,
            "htb", "rate", "1gbit")  # fmt: skip
        _tc("qdisc", "add", "dev", DEVICE, "parent", CLASS_ID, "handle", LEAF_HANDLE, "blackhole")
        for field in ("dport", "sport"):
            _tc("filter", "add", "dev", DEVICE, "parent", ROOT_HANDLE, "protocol", "ip",
                "prio", "1", "u32", "match", "ip", field, str(ports.first), ports.mask,
                "flowid", CLASS_ID)  # fmt: skip
    except Exception:
        heal()
        raise
    log.info("partition on %s: ports %d-%d dropped", DEVICE, ports.first,
             ports.first + ports.count - 1)  # fmt: skip


@contextmanager
def partitioned(ports: PortRange) -> Iterator[None]:
    """The partition for the ``with`` block; undone however the block ends."""
    cut(ports)
    try:
        yield
    finally:
        heal()
