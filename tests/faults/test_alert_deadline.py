"""Alerts outside an incident's journal (node resumed, breaker tripped) are
sent off the critical path: a webhook that hangs does not hold up the resume
or the breaker decision, and the alert still goes out (and is audited) once
the sink answers, within its total deadline.  No lab: the fake Slurm of
test_actions."""

from __future__ import annotations

import threading
from datetime import timedelta

from test_actions import Clock, FakeSlurm, xid79

from slurm_hooks.act import alerts
from slurm_hooks.act.engine import Engine
from slurm_hooks.act.notify import Notifier
from slurm_hooks.decide import DecisionKind, PolicyConfig
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import StateStore


class HangingSink:
    """A webhook that does not answer until the test lets it (20 s at most)."""

    name = "hang"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: list[str] = []
        self.finished: list[str] = []

    def send(self, alert):  # type: ignore[no-untyped-def]
        self.started.append(alert.kind)
        self.release.wait(20)
        self.finished.append(alert.kind)


def make(tmp_path, sink, policy):  # type: ignore[no-untyped-def]
    return Engine(
        FakeSlurm(), policy, StateStore(tmp_path / "state"), AuditLog(tmp_path / "audit.jsonl"),
        Notifier([sink]), clock=Clock(), spawn=None,
    )  # fmt: skip


def notified(tmp_path, kind: str) -> list[dict]:  # type: ignore[type-arg]
    return [
        e for e in AuditLog(tmp_path / "audit.jsonl").entries()
        if e["action"] == "notify" and e.get("kind") == kind
    ]  # fmt: skip


def test_hanging_webhook_does_not_delay_the_resume(tmp_path, monkeypatch):
    monkeypatch.setattr(alerts, "INLINE_WAIT_S", 0.2)
    sink = HangingSink()
    sink.release.set()  # the node_drained alert goes through
    eng = make(tmp_path, sink, PolicyConfig(grace_seconds=0))
    (d,) = eng.handle("n1", [xid79()])
    assert alerts.wait_background(20)
    sink.release.clear()
    eng.state.record_acceptance("n1", eng.clock() + timedelta(seconds=1))
    r = eng.try_resume("n1")
    # Returned, the node is back in service, while the webhook still hangs.
    assert r.kind is DecisionKind.RESUME and sink.finished.count("node_resumed") == 0
    assert not eng.slurm.nodes["n1"].drained
    assert sink.started.count("node_resumed") == 1
    sink.release.set()
    assert alerts.wait_background(20)
    assert sink.finished.count("node_resumed") == 1
    assert [e["outcome"] for e in notified(tmp_path, "node_resumed")] == ["sent"]


def test_hanging_webhook_does_not_delay_the_breaker_decision(tmp_path, monkeypatch):
    monkeypatch.setattr(alerts, "INLINE_WAIT_S", 0.2)
    sink = HangingSink()
    sink.release.set()
    eng = make(tmp_path, sink, PolicyConfig(grace_seconds=0, breaker_max_share=0.2,
                                            breaker_max_nodes=2))  # fmt: skip
    for n in ("n2", "n3"):
        assert eng.handle(n, [xid79()])[0].kind is DecisionKind.DRAIN
    assert alerts.wait_background(20)
    sink.release.clear()
    (d,) = eng.handle("n4", [xid79()])
    assert d.kind is DecisionKind.BREAKER_TRIPPED
    assert eng.latch.read(), "the trip is latched before the alert is delivered"
    assert sink.started.count("breaker_tripped") == 1 and "breaker_tripped" not in sink.finished
    # The next decision is not held up either: the latch already says tripped.
    assert eng.handle("n5", [xid79()])[0].kind is DecisionKind.BREAKER_TRIPPED
    sink.release.set()
    assert alerts.wait_background(20)
    assert sink.finished.count("breaker_tripped") == 1
    assert [e["outcome"] for e in notified(tmp_path, "breaker_tripped")] == ["sent"]


def test_background_send_is_bounded_at_exit(tmp_path, monkeypatch):
    """wait_background (run at process exit) gives up at the deadline."""
    monkeypatch.setattr(alerts, "INLINE_WAIT_S", 0.0)
    sink = HangingSink()
    from slurm_hooks.act.notify.base import Alert

    done = alerts.send_bounded(Notifier([sink]), Alert("node_resumed", "x"), lambda d: None,
                               wait_s=0.0, deadline_s=0.3)  # fmt: skip
    assert done is False
    assert alerts.wait_background() is False  # the sink still hangs after its 0.3 s
    assert sink.finished == []
    sink.release.set()
