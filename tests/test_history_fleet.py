"""The fleet's history (issue 17, "a fleet, not a node"): every host appends a
copy of its audit records to ``<[general] audit_dir>/<node>.jsonl``, and
``slurm-hooks history`` merges every node's file by time; an admin command
run on another host lands in the node's file; our reasons in Slurm are the
record every host has (docs/history.md)."""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from test_actions import T0, Clock, FakeSlurm, Recorder, xid79

from slurm_hooks.act.engine import Engine
from slurm_hooks.act.notify import Notifier
from slurm_hooks.cli import history_report as hist
from slurm_hooks.core import config as config_mod
from slurm_hooks.core.errors import ConfigError
from slurm_hooks.core.model import NodeState
from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.decide import DecisionKind, PolicyConfig
from slurm_hooks.store import audit as audit_mod
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import StateStore


def _history(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slurm_hooks", "history", *args],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def _host_engine(root: Path, host: str, slurm: FakeSlurm, shared: Path, clock: Clock) -> Engine:
    """An engine as it runs on ``host``: its own state dir and local log."""
    d = root / host
    audit = AuditLog(d / "audit.jsonl", actor=f"slurm-hooks/{host}", clock=clock,
                     shared_dir=shared, host=host)  # fmt: skip
    return Engine(
        slurm, PolicyConfig(grace_seconds=0), StateStore(d / "state"), audit,
        Notifier([Recorder()]), clock=clock, spawn=None, actor=f"slurm-hooks/{host}",
    )  # fmt: skip


def _two_nodes_and_an_admin(tmp_path: Path) -> Path:
    """XID 79 on n1 (seen on n1), XID 79 on n2 a minute later (seen on n2),
    then an admin on host "admin1" resumes n1."""
    shared = tmp_path / "shared"
    shared.mkdir()
    slurm, clock = FakeSlurm(), Clock()
    _host_engine(tmp_path, "n1", slurm, shared, clock).handle("n1", [xid79()])
    clock.now += timedelta(minutes=1)
    _host_engine(tmp_path, "n2", slurm, shared, clock).handle("n2", [xid79(5)])
    clock.now += timedelta(minutes=9)
    admin = _host_engine(tmp_path, "admin1", slurm, shared, clock)
    d = admin.try_resume("n1", human=True, skip_acceptance=True)
    assert d.kind is DecisionKind.RESUME
    return shared


def test_history_merges_every_node_file_of_the_shared_dir(tmp_path: Path) -> None:
    shared = _two_nodes_and_an_admin(tmp_path)
    assert sorted(p.name for p in shared.iterdir()) == ["n1.jsonl", "n2.jsonl"]
    # the admin's resume is in n1's file, not in a file of the admin host
    n1 = [json.loads(line) for line in (shared / "n1.jsonl").read_text().splitlines()]
    (resume,) = [e for e in n1 if e["action"] == "resume"]
    assert resume["actor"] == "slurm-hooks/admin1"

    r = _history("--audit-dir", str(shared), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [i["nodes"] for i in doc["incidents"]] == [["n1"], ["n2"]]
    first, second = doc["incidents"]
    assert not first["open"] and "resumed" in first["milestones_s"]
    assert second["open"] and first["start"] < second["start"]
    assert doc["slurm"] == "not asked" and len(doc["audit_files"]) == 2

    one = _history("n2", "--audit-dir", str(shared), "--json")
    assert [i["nodes"] for i in json.loads(one.stdout)["incidents"]] == [["n2"]]
    since = (T0 + timedelta(minutes=5)).isoformat()
    r = _history("--audit-dir", str(shared), "--since", since, "--open")
    assert r.returncode == 0 and "n2" in r.stdout and "n1" not in r.stdout
    assert max(map(len, r.stdout.splitlines())) <= 80
    wide = _history("--audit-dir", str(shared), "--wide")
    assert wide.returncode == 0 and wide.stdout.count("incident ") == 2


def test_local_and_shared_copies_are_read_once(tmp_path: Path) -> None:
    """A host reading its own log and the shared dir sees each record once."""
    shared = tmp_path / "shared"
    shared.mkdir()
    state = tmp_path / "state"
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[general]\nstate_dir = "{state}"\naudit_dir = "{shared}"\n')
    slurm, clock = FakeSlurm(), Clock()
    loaded = config_mod.load(cfg)
    eng = Engine.from_config(loaded, slurm=slurm, spawn=None, clock=clock)
    assert eng.audit.shared_dir == shared  # the engine of every host writes both
    eng.handle("n3", [xid79()])
    local = (state / "audit.jsonl").read_text().splitlines()
    assert local == (shared / "n3.jsonl").read_text().splitlines()

    r = _history("--no-slurm", "--json", env={"SLURM_HOOKS_CONFIG": str(cfg)})
    assert r.returncode == 0, r.stderr
    (inc,) = json.loads(r.stdout)["incidents"]
    assert len(inc["events"]) == len(local)


@pytest.mark.parametrize("node", ["../../evil", "n1/../../x", ".hidden", "a b", "n1\n", ""])
def test_hostile_node_names_never_become_paths(tmp_path: Path, node: str) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    a = AuditLog(tmp_path / "local" / "audit.jsonl", shared_dir=shared, host="h1")
    a.record("drain", node=node)
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["audit.jsonl"]
    assert not list(shared.iterdir())  # kept in the local log only
    assert json.loads((tmp_path / "local" / "audit.jsonl").read_text())["node"] == node


def test_records_about_no_node_go_to_the_host_file(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    AuditLog(tmp_path / "a.jsonl", shared_dir=shared, host="admin1").record(
        "breaker_reset", partition="gpu"
    )
    assert json.loads((shared / "admin1.jsonl").read_text())["action"] == "breaker_reset"


def test_missing_shared_dir_is_not_created_and_nothing_is_lost(tmp_path: Path) -> None:
    """An unmounted share must not turn into a local directory of the same
    name (the records would hide under the mount later)."""
    shared = tmp_path / "mnt" / "audit"
    a = AuditLog(tmp_path / "audit.jsonl", shared_dir=shared)
    a.record("drain", node="n1")
    assert not (tmp_path / "mnt").exists()
    assert json.loads((tmp_path / "audit.jsonl").read_text())["node"] == "n1"
    # history from the config: the local log, and a note that the share is away
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[general]\nstate_dir = "{tmp_path}"\naudit_dir = "{shared}"\n')
    r = _history("--no-slurm", env={"SLURM_HOOKS_CONFIG": str(cfg)})
    assert r.returncode == 0 and "shared logs not shown" in r.stderr


def test_symlink_in_the_shared_dir_is_not_followed(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (shared / "n1.jsonl").symlink_to(victim)
    AuditLog(tmp_path / "audit.jsonl", shared_dir=shared).record("drain", node="n1")
    assert victim.read_text() == "keep\n"
    assert (tmp_path / "audit.jsonl").read_text().count("drain") == 1


def test_a_fifo_in_a_nodes_file_place_holds_up_nothing(tmp_path: Path) -> None:
    """A FIFO where a node's file belongs would block the writer's open (a
    record waiting out the whole shared timeout, a thread stuck) and the
    reader's: neither opens one."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.mkfifo(shared / "n1.jsonl")
    a = AuditLog(tmp_path / "audit.jsonl", shared_dir=shared, shared_timeout_s=30.0)
    started = time.monotonic()
    a.record("drain", node="n1")
    assert time.monotonic() - started < 5.0
    assert (tmp_path / "audit.jsonl").read_text().count("drain") == 1
    with pytest.raises(hist.HistoryError, match="not a regular file"):
        hist.read_fleet([shared / "n1.jsonl"])
    assert hist.shared_bases(shared) == []  # not a regular file: not a node's log


def test_a_shared_dir_any_user_may_write_is_neither_written_nor_read(tmp_path: Path) -> None:
    """In a directory any user may write (sticky or not), a user could make
    the file of a node that has none yet and write records in our name."""
    shared = tmp_path / "shared"
    shared.mkdir()
    forged = {"ts": "2026-12-06T10:00:00+00:00", "action": "resume", "node": "n9",
              "actor": "admin:alice", "why": "checked by hand"}  # fmt: skip
    (shared / "n9.jsonl").write_text(json.dumps(forged) + "\n")
    os.chmod(shared, 0o1777)
    AuditLog(tmp_path / "audit.jsonl", shared_dir=shared).record("drain", node="n1")
    assert not (shared / "n1.jsonl").exists()
    assert (tmp_path / "audit.jsonl").read_text().count("drain") == 1  # nothing lost
    with pytest.raises(hist.HistoryError, match="any user may write it"):
        hist.shared_bases(shared)
    os.chmod(shared, 0o755)
    assert [p.name for p in hist.shared_bases(shared)] == ["n9.jsonl"]


def test_a_hung_shared_filesystem_never_holds_up_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    monkeypatch.setattr(audit_mod, "_append_locked", lambda *a: release.wait(60))
    a = AuditLog(tmp_path / "audit.jsonl", shared_dir=tmp_path, shared_timeout_s=0.2)
    caller = threading.Thread(target=a.record, args=("drain",), kwargs={"node": "n1"})
    caller.start()
    caller.join(30)
    hung = caller.is_alive()
    release.set()
    assert not hung  # record() came back while the share still hung
    assert "drain" in (tmp_path / "audit.jsonl").read_text()


def _hold_lock(path: str, ready, stop) -> None:  # type: ignore[no-untyped-def]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o640)
    fcntl.lockf(fd, fcntl.LOCK_EX)
    ready.set()
    stop.wait(60)


def test_a_lock_held_elsewhere_delays_but_never_drops_the_record(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    ready, stop = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(str(tmp_path / "n1.jsonl"), ready, stop))
    holder.start()
    try:
        assert ready.wait(30)
        AuditLog(tmp_path / "l" / "audit.jsonl", shared_dir=tmp_path, shared_timeout_s=1.0).record(
            "drain", node="n1"
        )
        assert json.loads((tmp_path / "n1.jsonl").read_text())["action"] == "drain"
    finally:
        stop.set()
        holder.join(30)


def _write_shared(shared: str, local: str) -> None:
    a = AuditLog(local, shared_dir=shared)
    for i in range(200):
        a.record("signal", node="n1", job=str(i), why="x" * 2000)


def test_writers_of_many_hosts_do_not_interleave_in_a_node_file(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(target=_write_shared, args=(str(tmp_path), str(tmp_path / f"h{i}.log")))
        for i in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    lines = (tmp_path / "n1.jsonl").read_text().splitlines()
    assert len(lines) == 800 and all(json.loads(ln)["why"] == "x" * 2000 for ln in lines)


def test_slurm_reasons_become_open_incidents() -> None:
    ours = format_reason(DrainReason("XID79", "cafe0001", "GPU has fallen off the bus", "gpu3"))
    lend = format_reason(DrainReason("LEND", "beef0002", "lent to kubernetes"))
    nodes = [
        NodeState("n1", "idle", frozenset({"DRAIN"}), ours, "root", T0),
        NodeState("n2", "idle", frozenset({"DRAIN"}), lend, "root", T0),
        NodeState("n3", "idle", frozenset({"DRAIN"}), "NHC: check_hw_gpu failed", "root", T0),
        NodeState("n4", "idle", frozenset({"DRAIN"}), "slurm-hooks/1 XID79 broken", "root", T0),
        NodeState("n5", "idle"),
    ]
    (ev,) = hist.slurm_events(nodes, T0 + timedelta(hours=1))
    assert (ev.node, ev.incident, ev.code, ev.ts) == ("n1", "cafe0001", "XID79", T0)
    assert ev.why == "gpu3 GPU has fallen off the bus" and ev.actor == "slurm (root)"
    (inc,) = hist.build_incidents(hist.merge_slurm([], [ev])).incidents
    assert inc.resolved is None and inc.sources == ("slurm",)
    # an incident the logs already have keeps the logs' timeline
    logged = hist.Event(T0, "drain", "drained", "n1", "cafe0001")
    assert hist.merge_slurm([logged], [ev]) == [logged]


def test_audit_dir_must_be_absolute(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('[general]\naudit_dir = "shared/audit"\n')
    with pytest.raises(ConfigError, match="audit_dir"):
        config_mod.load(cfg)
