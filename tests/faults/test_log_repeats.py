"""A log-only XID flood (XID 43: the application's fault) writes one audit
line per code and node per ``repeats.LOG_PERIOD_S``, not one per scan; the
next line carries the count absorbed since.  No lab: test_actions' fake Slurm."""

from __future__ import annotations

from datetime import timedelta

from test_actions import Clock, FakeSlurm

from slurm_hooks.act import repeats
from slurm_hooks.act.engine import Engine
from slurm_hooks.act.notify import Notifier
from slurm_hooks.core.model import Action, Component, Finding, Status
from slurm_hooks.decide import DecisionKind, PolicyConfig
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import StateStore

XID43 = Finding("xid", Status.WARN, "XID43", "GPU stopped processing", Component("gpu", 1),
                Action.NONE)  # fmt: skip


def test_log_only_flood_is_summarised_per_period(tmp_path):
    slurm, clock = FakeSlurm(), Clock()
    eng = Engine(
        slurm, PolicyConfig(grace_seconds=0), StateStore(tmp_path / "state"),
        AuditLog(tmp_path / "audit.jsonl"), Notifier(), clock=clock, spawn=None,
    )  # fmt: skip

    def lines() -> list[dict]:  # type: ignore[type-arg]
        return [e for e in AuditLog(tmp_path / "audit.jsonl").entries() if e.get("code") == "XID43"]

    for _ in range(300):  # 5 scans a second for a minute
        (d,) = eng.handle("n1", [XID43])
        assert d.kind is DecisionKind.LOG
        clock.now += timedelta(seconds=0.19)
    assert len(lines()) == 1 + int(300 * 0.19 // repeats.LOG_PERIOD_S)
    assert slurm.calls == [], "a log-only decision asks Slurm nothing"
    clock.now += timedelta(seconds=repeats.LOG_PERIOD_S)
    eng.handle("n1", [XID43])
    last = lines()[-1]
    total = sum(int(e.get("repeats_since_last") or 0) for e in lines()) + len(lines())
    assert total == 301, "every repeat is counted in some line"
    assert last["repeats_since_last"] > 0
    # Another code is its own line at once.
    other = Finding("xid", Status.WARN, "XID13", "SM warp exception", Component("gpu", 1),
                    Action.NONE)  # fmt: skip
    n = len(list(AuditLog(tmp_path / "audit.jsonl").entries()))
    eng.handle("n1", [other])
    assert len(list(AuditLog(tmp_path / "audit.jsonl").entries())) == n + 1
