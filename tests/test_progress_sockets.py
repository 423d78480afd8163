"""Issue 30, the partition: a rank whose TCP connection to a peer stopped
being acknowledged (``detect/progress/sockets.py``) is a hang whatever its
CPU shows, told to the owner and the admins, never a drain.  The kernel's
side is in tests/test_progress_sockets_kernel.py (a real connection cut on
the loopback)."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

from slurm_hooks.core.model import Provenance
from slurm_hooks.decide import DecisionKind
from slurm_hooks.detect.progress import sockets
from slurm_hooks.detect.progress.activity import JobActivity, RankSample
from slurm_hooks.detect.progress.judge import HangSettings, Verdict, judge_hang
from tests.test_progress_signals import _pass, _procs

#: ``/proc/net/tcp`` on the development machine (Linux 6.x), a connection
#: from port 40846 to 46082 on the loopback whose peer's packets are dropped
#: (``tc`` blackhole): 5000 bytes queued, the retransmission timer running
#: (``01``), the fourth unanswered timeout (``00000004``); its peer's socket
#: and the listener beside it.
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   6: 0100007F:B402 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 11760717 1 000000007edb5c68 100 0 0 10 0
  40: 0100007F:9F8E 0100007F:B402 01 00001388:00000000 01:000000C4 00000004     0        0 11760718 2 00000000c20ace88 320 0 0 1 -1
 486: 0100007F:B402 0100007F:9F8E 01 00000000:00000000 00:00000000 00000000     0        0 11760719 1 00000000393702a2 20 0 0 10 -1
"""
#: ``/proc/net/tcp6``: an IPv4-mapped peer and a plain IPv6 one (fd00::7).
TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0000000000000000FFFF00000100007F:B403 0000000000000000FFFF00000100007F:B404 01 00000010:00000000 01:00000010 00000005     0        0 900 1 0 20 4 30 10 -1
   1: 000000FD000000000000000001000000:B405 000000FD000000000000000007000000:B406 01 00000020:00000000 01:00000010 00000007     0        0 901 1 0 20 4 30 10 -1
"""
LO = [ipaddress.ip_network("127.0.0.0/8")]


def test_the_table_row_of_a_cut_connection() -> None:
    rows = sockets.parse_table(TCP, {11760717, 11760718, 11760719})
    assert rows == {11760718: ("127.0.0.1:46082", 4, 5000)}  # the listener and the peer: no timer
    assert sockets.parse_table(TCP, {11760719}) == {}
    assert sockets.parse_table("garbage\n 1: x y 01 z\n", {1}) == {}


def test_ipv6_rows_and_mapped_addresses() -> None:
    rows = sockets.parse_table(TCP6, {900, 901})
    assert rows[900] == ("127.0.0.1:46084", 5, 16)
    assert rows[901][0] == "fd00::7:46086"


def test_only_peers_on_this_nodes_networks_count() -> None:
    assert sockets.on_link("127.0.0.1:46082", LO)
    assert not sockets.on_link("52.1.2.3:443", LO)
    assert not sockets.on_link("fd00::7:1", LO)
    assert sockets.on_link("fd00::7:1", [ipaddress.ip_network("fd00::/64")])
    assert not sockets.on_link("nonsense", LO)
    assert any(n.version == 4 and ipaddress.ip_address("127.0.0.1") in n
               for n in sockets.local_networks())  # fmt: skip


def _socket_proc(proc: Path, pid: int, inode: int, table: str = TCP) -> None:
    fd = proc / str(pid) / "fd"
    fd.mkdir(parents=True, exist_ok=True)
    os.symlink(f"socket:[{inode}]", fd / "7")
    os.symlink("/dev/null", fd / "0")
    (proc / str(pid) / "net").mkdir(exist_ok=True)
    (proc / str(pid) / "net" / "tcp").write_text(table)
    (proc / str(pid) / "ns").mkdir(exist_ok=True)
    if not (proc / str(pid) / "ns" / "net").is_symlink():
        os.symlink("net:[4026531840]", proc / str(pid) / "ns" / "net")


def test_a_ranks_sockets_are_read_from_its_fds(tmp_path: Path) -> None:
    _socket_proc(tmp_path, 4201, 11760718)
    _socket_proc(tmp_path, 4200, 11760719)
    look = sockets.SocketLook(str(tmp_path), networks=LO)
    assert sockets.socket_inodes(4201, str(tmp_path)) == {11760718}
    found = look.unacked([4200, 4201, 9999])
    assert found == {4201: (sockets.Unacked("127.0.0.1:46082", 4, 5000),)}
    far = sockets.SocketLook(str(tmp_path), networks=[ipaddress.ip_network("10.0.0.0/8")])
    assert far.unacked([4201]) == {}  # a peer through a gateway: not the job's collective


def _busy(act: JobActivity, t: float, cut: bool) -> None:
    peer = ("127.0.0.1:46082 (4 retransmissions, 5000 bytes)",) if cut else ()
    act.update({0: RankSample(100, t, ("R",)), 1: RankSample(101, t, ("R",), unacked=peer)}, t)


def test_a_busy_rank_whose_peer_stopped_answering_is_a_hang_after_unacked_s() -> None:
    s = HangSettings(hang_s=900.0, unacked_s=120.0)
    act = JobActivity(first_seen=0.0)
    for t in range(0, 200, 5):
        _busy(act, float(t), cut=False)
    for t in range(200, 320, 5):  # both ranks spin (CPU busy) from the cut on
        _busy(act, float(t), cut=True)
    views, procs = act.views("n1", 0), act.procs()
    v = judge_hang("7", views, procs, 315.0, s, unacked=act.unacked())
    assert v.verdict is Verdict.HEALTHY, v.explanation  # 115 s: not yet
    _busy(act, 320.0, cut=True)
    v = judge_hang("7", act.views("n1", 0), act.procs(), 320.0, s, unacked=act.unacked())
    assert v.verdict is Verdict.HANG and v.rank == 1 and v.trusted is None
    assert "127.0.0.1:46082" in v.explanation and "120s" in v.explanation
    # Acknowledged again (healed): the count starts over.
    _busy(act, 325.0, cut=False)
    _busy(act, 330.0, cut=True)
    assert act.unacked() == {1: (330.0, "127.0.0.1:46082 (4 retransmissions, 5000 bytes)")}
    v = judge_hang("7", act.views("n1", 0), act.procs(), 330.0, s, unacked=act.unacked())
    assert v.verdict is Verdict.HEALTHY


def test_not_before_the_first_step_allowance() -> None:
    s = HangSettings(first_step_allowance_s=60.0, unacked_s=10.0)
    act = JobActivity(first_seen=0.0)
    for t in range(0, 40, 5):
        _busy(act, float(t), cut=True)
    v = judge_hang("7", act.views("n1", 0), act.procs(), 35.0, s, unacked=act.unacked())
    assert v.verdict is Verdict.HEALTHY


def test_the_watchers_pass_tells_the_owner_and_drains_nothing(tmp_path: Path) -> None:
    """Job 77's two ranks busy on n1 throughout; rank 3's task holds a
    connection its peer stopped acknowledging: reported (the owner's
    evidence: USER_PROCESS) naming rank 3 and the peer, ``unacked_s``
    after the first look that saw it; no drain."""
    p, engine, now, proc = _pass(tmp_path)
    tick = os.sysconf("SC_CLK_TCK")
    decisions = []
    for k in range(60):
        _procs(proc, 5 * k * tick)  # both ranks a core each: busy
        if k == 20:
            _socket_proc(proc, 4201, 11760718)
        now[0] = 1000.0 + 5 * k
        decisions += p.run()
        if decisions:
            break
    [d] = decisions
    assert now[0] == 1000.0 + 5 * 20 + p.s.unacked_s
    assert d.kind is DecisionKind.REPORT_JOB
    assert d.findings[0].provenance == (Provenance.USER_PROCESS,)
    assert d.findings[0].values["rank"] == 3
    [alert] = engine.alerts
    assert "127.0.0.1:46082" in alert.text and "no node drained" in alert.text
