"""The kernel's side of the partition signal (``detect/progress/sockets.py``):
a real TCP connection on the loopback whose packets the lab's partition
drops (``tc`` blackhole, slurm_hooks_lab/partition.py) shows in the
process's ``/proc`` as a connection to an on-link peer with unanswered
retransmissions, and stops showing once the peer answers again.

It runs in a network namespace of its own (``unshare --net``): the cut is
that namespace's loopback's, so nothing else on the host (a lab, the
roots' labs, any test's ephemeral port) can meet it.  Root, ``unshare``,
``ip`` and ``tc`` needed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Run inside the new namespace: loopback up, a connection, the cut, what
#: SocketLook sees each 0.2 s, the heal; prints one JSON line.
PROBE = """
import json, os, socket, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from slurm_hooks_lab import partition
from slurm_hooks.detect.progress import sockets
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
ports = partition.PortRange(46080, 16)
srv = socket.socket(); srv.bind(("127.0.0.1", ports.first + 3)); srv.listen(1)
cli = socket.create_connection(("127.0.0.1", ports.first + 3)); conn, _ = srv.accept()
me = os.getpid()
cli.sendall(b"a" * 1000); conn.recv(1000)
out = {"before": sockets.SocketLook().unacked([me]) != {}}
try:
    partition.cut(ports)
except partition.PartitionError as exc:
    print(json.dumps({"skip": str(exc)})); sys.exit(0)
cli.sendall(b"b" * 5000)
end = time.monotonic() + 20
while time.monotonic() < end and not (seen := sockets.SocketLook().unacked([me])):
    time.sleep(0.2)
out["cut"] = [[u.peer, u.retransmits, u.queued] for u in seen.get(me, ())]
partition.heal()
end = time.monotonic() + 30
while time.monotonic() < end and sockets.SocketLook().unacked([me]):
    time.sleep(0.2)
out["healed"] = sockets.SocketLook().unacked([me]) == {}
conn.settimeout(5)
got = b""
while len(got) < 5000:
    got += conn.recv(5000)
out["delivered"] = len(got)
print(json.dumps(out))
"""


def test_a_cut_connection_shows_unanswered_retransmissions_until_healed() -> None:
    if os.geteuid() != 0:
        pytest.skip("root only: a network namespace and tc")
    missing = [t for t in ("unshare", "ip", "tc") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")
    res = subprocess.run(
        ["unshare", "--net", "--", sys.executable, "-c", PROBE, str(ROOT / "lab")],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip
    if res.returncode != 0 and "unshare failed" in res.stderr:
        pytest.skip(f"no network namespace here: {res.stderr.strip()[:200]}")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if "skip" in out:
        pytest.skip(f"no partition on this kernel: {out['skip']}")
    assert out["before"] is False
    [[peer, retransmits, queued]] = out["cut"]
    assert peer == "127.0.0.1:46083" and retransmits >= 3 and queued == 5000
    assert out["healed"] is True and out["delivered"] == 5000
