"""Stalled controller, broken state dir, trickling webhook, floods (real lab).

* slurmctld SIGSTOPped while the fault is detected: acting fails, the XID
  cursor is not committed; after SIGCONT the next pass reads the same line
  again and drains the node.
* the state dir read-only, or on a full 64 KiB tmpfs: the node is drained
  anyway (the journal is not written; logged and counted).
* a webhook that trickles a byte every 2 s: the job's checkpoint signal is
  sent before the alert, and the alert gives up at its total deadline.
* an XID 79 flood on a node already drained by us: no Slurm call and no
  audit line per repeat.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from faults.conftest import MATRIX
from slurm_hooks.act.engine import Engine
from slurm_hooks.act.notify import Notifier
from slurm_hooks.act.notify.webhook import NotifyError, WebhookSink
from slurm_hooks.core.errors import SlurmHooksError
from slurm_hooks.core.model import Action, Component, Finding, Status
from slurm_hooks.core.reason import try_parse_reason
from slurm_hooks.decide import DecisionKind, PolicyConfig
from slurm_hooks.detect.xid.commit import deferred
from slurm_hooks.detect.xid.rules import evaluate
from slurm_hooks.detect.xid.source import FileSource, scan_new
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import StateStore

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

XID79 = Finding(
    "xid", Status.FAIL, "XID79", "GPU has fallen off the bus", Component("gpu", 0),
    Action.RESET_GPU,
)  # fmt: skip


class Counting:
    """The real client, counting every call (reads and writes)."""

    def __init__(self, inner):  # type: ignore[no-untyped-def]
        self.inner = inner
        self.calls = 0

    def __getattr__(self, name):  # type: ignore[no-untyped-def]
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*a, **k):  # type: ignore[no-untyped-def]
            self.calls += 1
            return attr(*a, **k)

        return call


def engine(client, state: Path, **kw) -> Engine:  # type: ignore[no-untyped-def]
    return Engine(
        client,
        PolicyConfig(grace_seconds=30, breaker_max_share=1.0, breaker_max_nodes=4),
        StateStore(state),
        AuditLog(state.parent / "audit.jsonl"),
        kw.pop("notifier", Notifier()),
        spawn=None,
        **kw,
    )


def xid_line(node: str) -> str:
    t = datetime.now()
    return (
        f"{t:%b} {t.day:2d} {t:%H:%M:%S} {node} kernel: [ 5123.456789] NVRM: Xid "
        f"(PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    )


def ctld_pid(lab) -> int:  # type: ignore[no-untyped-def]
    return int((lab.base_dir / "run" / "slurmctld.pid").read_text().split()[0])


def test_slurmctld_stopped_during_detection_fault_acted_on_after(lab, tmp_path):  # type: ignore[no-untyped-def]
    lab.reset()
    node = lab.node_names[0]
    log = tmp_path / "kern.log"
    log.write_text(xid_line(node))
    state = tmp_path / "state"
    source = FileSource(str(log))

    def one_pass(client) -> list:  # type: ignore[no-untyped-def]
        """What a hook does: scan, then act; commit only after acting."""
        with deferred() as pending:
            scan = scan_new(source, str(state))
            findings = evaluate(scan.aggregates, now=time.time())
            decisions = engine(client, state).handle(node, findings)
            pending.commit()
            return decisions

    pid = ctld_pid(lab)
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(SlurmHooksError):
            one_pass(lab.client(timeout=2.0, retries=0))
    finally:
        os.kill(pid, signal.SIGCONT)
    lab.wait_for(lambda: lab.client().get_node(node) is not None, 30, what="slurmctld back")
    decisions = one_pass(lab.client())
    assert [d.kind for d in decisions] == [DecisionKind.DRAIN]
    current = lab.client().get_node(node)
    assert current.drained and try_parse_reason(current.reason) is not None
    assert one_pass(lab.client()) == []  # committed now: not found a third time
    MATRIX.append(("SIGSTOP ctld", "hook", "detect+act", "not acted while stopped; drained after"))
    lab.reset()


@contextlib.contextmanager
def mounted(path: Path, *opts: str):  # type: ignore[no-untyped-def]
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", *opts, str(path)], check=True, timeout=10)  # noqa: S603, S607
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, timeout=10)  # noqa: S603, S607


@pytest.mark.parametrize("how", ["read-only", "full"])
def test_node_drained_when_state_dir_is_broken(lab, tmp_path, how):  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    lab.reset()
    node = lab.node_names[1]
    state = tmp_path / "state"
    with mounted(state, "-t", "tmpfs", "-o", "size=64k", "tmpfs"):
        if how == "full":
            with contextlib.suppress(OSError), open(state / "filler", "wb") as f:
                while True:
                    f.write(b"x" * 4096)
                    f.flush()
        else:
            subprocess.run(["mount", "-o", "remount,ro", str(state)], check=True, timeout=10)  # noqa: S603, S607
        (d,) = engine(lab.client(), state).handle(node, [XID79])
        assert d.kind is DecisionKind.DRAIN
        current = lab.client().get_node(node)
        ours = try_parse_reason(current.reason)
        assert current.drained and ours is not None and ours.incident == d.incident
    MATRIX.append(("state dir", "hook", how, "node drained (journal not written, logged+counted)"))
    lab.reset()


class Trickler:
    """An HTTP server that answers one byte every ``every`` seconds."""

    def __init__(self, every: float = 2.0):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.every = every
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            conn.recv(65536)
            for ch in b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok":
                if self.stop.wait(self.every):
                    return
                conn.sendall(bytes([ch]))

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def test_trickling_webhook_is_cut_at_its_deadline():
    t = Trickler()
    try:
        from slurm_hooks.act.notify.base import Alert

        sink = WebhookSink(t.url, timeout=3.0, retries=0, deadline=4.0)
        t0 = time.monotonic()
        with pytest.raises(NotifyError, match="deadline"):
            sink.send(Alert("node_drained", "x", node="n1"))
        took = time.monotonic() - t0
        assert took < 6.0, took
    finally:
        t.close()
    MATRIX.append(
        ("webhook", "hook", "trickle 1B/2s", f"alert cut after {took:.1f}s (deadline 4s)")
    )


def test_flood_on_drained_node_makes_no_slurm_call(lab, tmp_path):  # type: ignore[no-untyped-def]
    lab.reset()
    node = lab.node_names[2]
    state = tmp_path / "state"
    client = Counting(lab.client())
    (d,) = engine(client, state).handle(node, [XID79])
    assert d.kind is DecisionKind.DRAIN
    audit = AuditLog(state.parent / "audit.jsonl")
    lines, calls = len(list(audit.entries())), client.calls
    for _ in range(200):
        (r,) = engine(client, state).handle(node, [XID79])
        assert r.kind is DecisionKind.ALREADY_HANDLED
    assert client.calls == calls, f"{client.calls - calls} Slurm calls for 200 repeats"
    assert len(list(audit.entries())) == lines
    repeats = StateStore(state).read_node(node)["drained_for"]["repeats"]
    assert repeats == {"XID79": 200}
    MATRIX.append(("flood", "hook", "200 x XID79", "0 Slurm calls, 0 audit lines, counted 200"))
    lab.reset()
