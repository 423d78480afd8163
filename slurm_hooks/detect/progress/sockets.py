"""A rank's TCP connections to its peers that stopped being acknowledged.

A network partition leaves every rank of a job alive and, where the
collective library busy-polls (MPI, NCCL's proxy threads, gloo), busy: CPU
time says nothing.  The kernel does see it: a connection whose sent data
gets no acknowledgement retransmits with a growing timeout, and
``/proc/PID/net/tcp`` counts the unanswered retransmission timeouts of each
socket (``retrnsmt``, the ``icsk_retransmits`` of the connection; it falls
back to 0 as soon as an acknowledgement arrives).  Healthy traffic recovers
a lost segment within a few timeouts; a connection still retransmitting a
look later, and a look after that, has had no answer from its peer for as
long.

Which sockets are a rank's: the ``socket:[INODE]`` links in
``/proc/PID/fd`` of its task (the process that opened the collective's
connections; its threads share that table), at most :data:`MAX_FDS` of
them.  Which connections count: ESTABLISHED, the retransmission timer
running, at least :data:`MIN_RETRANSMITS` unanswered timeouts, and a peer
on one of this node's own networks (on-link: a node of the cluster, as
the job's peers are; a service reached through a gateway - an experiment
tracker, an object store - is not the job's collective and never counts).

What it cannot see: traffic that has no TCP socket (RDMA: NCCL or MPI over
InfiniBand or RoCE), and a peer that answers at TCP level but no longer
sends (its kernel acknowledges for it).  Those stay with the other signals
(docs/progress.md).

This is the job's evidence, not the node's: the owner can cause it (a
connection to a host of the subnet that is down), so it reports, or
requeues a job that opted in; it never drains a node.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: fd links read per rank at most (a rank of NCCL opens a few hundred).
MAX_FDS = 4096
#: Unanswered retransmission timeouts before a connection counts (about
#: 1.4 s of silence at the 200 ms minimum timeout; they double each time).
MIN_RETRANSMITS = 3
#: Bytes of one ``/proc/PID/net/tcp*`` table read at most.
MAX_TABLE_BYTES = 8 << 20


@dataclass(frozen=True)
class Unacked:
    """One connection of a rank that its peer stopped acknowledging."""

    #: ``ADDRESS:PORT`` of the peer.
    peer: str
    #: Unanswered retransmission timeouts so far.
    retransmits: int
    #: Bytes sent and not acknowledged.
    queued: int


def socket_inodes(pid: int, proc: str = "/proc", limit: int = MAX_FDS) -> set[int]:
    """Inodes of the sockets ``pid`` holds (empty: none, or gone)."""
    out: set[int] = set()
    try:
        names = os.listdir(f"{proc}/{pid}/fd")
    except OSError:
        return out
    for name in names[:limit]:
        try:
            target = os.readlink(f"{proc}/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            digits = target[8:-1]
            if digits.isdigit():
                out.add(int(digits))
    return out


def _address(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``0100007F`` (IPv4, little-endian) or 32 hex digits (IPv6, four
    little-endian words) as an address."""
    try:
        raw = bytes.fromhex(hex_addr)
    except ValueError:
        return None
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1])
    if len(raw) == 16:
        words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
        six = ipaddress.IPv6Address(words)
        return six.ipv4_mapped or six
    return None


#: A row of ``/proc/net/tcp`` or ``tcp6`` in the ESTABLISHED state (``01``)
#: whose retransmission timer runs (``tr`` ``01``): remote address, bytes
#: queued, unanswered timeouts, inode (``sl local rem st tx:rx tr:when
#: retrnsmt uid timeout inode ...``).  One scan of the node's table per
#: pass; nearly every row fails at ``st`` or ``tr``.
_ROW = re.compile(
    r"^\s*\d+: [0-9A-F]+:[0-9A-F]{4} ([0-9A-F]+):([0-9A-F]{4}) 01 ([0-9A-F]{8}):[0-9A-F]{8} "
    r"01:[0-9A-F]{8} ([0-9A-F]{8}) +\d+ +\d+ (\d+) ",
    re.MULTILINE,
)


def parse_table(text: str, inodes: set[int] | None = None) -> dict[int, tuple[str, int, int]]:
    """Inode -> (peer, retransmits, unacknowledged bytes) for the rows
    (of ``inodes``; None: all) that are ESTABLISHED with the retransmission
    timer running."""
    out: dict[int, tuple[str, int, int]] = {}
    for m in _ROW.finditer(text):
        inode = int(m.group(5))
        if inodes is not None and inode not in inodes:
            continue
        addr = _address(m.group(1))
        if addr is None:
            continue
        out[inode] = (f"{addr}:{int(m.group(2), 16)}", int(m.group(4), 16), int(m.group(3), 16))
    return out


def on_link(peer: str, networks: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    """Whether ``peer`` (``ADDRESS:PORT``) is on one of ``networks``."""
    host = peer.rsplit(":", 1)[0]
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(addr.version == n.version and addr in n for n in networks)


def local_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """This node's own networks (every interface's address and netmask,
    loopback included: a lab's nodes share one host)."""
    import psutil

    nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if not a.netmask:
                continue
            try:
                nets.append(
                    ipaddress.ip_network(f"{a.address.split('%')[0]}/{a.netmask}", strict=False)
                )
            except ValueError:
                continue
    return nets


@dataclass
class SocketLook:
    """One pass's view of the ranks' peer connections.  The node's table is
    read and scanned once per network namespace; a rank's fds are listed
    only when that table holds a connection that qualifies (nearly never:
    the usual pass costs one table scan, measured in docs/progress.md)."""

    proc: str = "/proc"
    networks: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network] | None = None

    def __post_init__(self) -> None:
        self._found: dict[str, dict[int, Unacked]] = {}

    def _candidates(self, pid: int) -> dict[int, Unacked]:
        """Inode -> connection, for the connections of ``pid``'s network
        namespace to on-link peers with enough unanswered timeouts."""
        try:
            ns = os.readlink(f"{self.proc}/{pid}/ns/net")
        except OSError:
            ns = ""
        if ns not in self._found:
            text = ""
            for name in ("tcp", "tcp6"):
                try:
                    with open(f"{self.proc}/{pid}/net/{name}", "rb") as fh:
                        text += fh.read(MAX_TABLE_BYTES).decode("ascii", errors="replace")
                except OSError:
                    continue
            rows = {i: r for i, r in parse_table(text).items() if r[1] >= MIN_RETRANSMITS}
            if rows and self.networks is None:
                self.networks = local_networks()
            self._found[ns] = {i: Unacked(peer, n, q) for i, (peer, n, q) in rows.items()
                               if on_link(peer, self.networks or ())}  # fmt: skip
        return self._found[ns]

    def unacked(self, pids: Iterable[int]) -> dict[int, tuple[Unacked, ...]]:
        """Pid -> its connections to on-link peers that have retransmitted
        :data:`MIN_RETRANSMITS` times or more without an answer (pids with
        none left out)."""
        out: dict[int, tuple[Unacked, ...]] = {}
        for pid in pids:
            found = self._candidates(pid)
            if not found:
                continue
            mine = sorted((found[i] for i in socket_inodes(pid, self.proc) if i in found),
                          key=lambda u: u.peer)  # fmt: skip
            if mine:
                out[pid] = tuple(mine)
        return out
