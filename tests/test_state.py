"""State store: atomic writes, locks, crash leftovers, history round trip."""

from __future__ import annotations

import json
import multiprocessing
import os
from datetime import UTC, datetime, timedelta

import pytest

from slurm_hooks.core.errors import StateError
from slurm_hooks.core.history import FaultEvent
from slurm_hooks.decide.breaker import Trip
from slurm_hooks.store.state import BreakerLatch, StateStore, atomic_write_json

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def test_history_round_trip(tmp_path):
    st = StateStore(tmp_path)
    st.record_faults("n1", [FaultEvent(NOW, "XID79", "gpu3", "drain", "7f3a2c1b")])
    st.set_open_incident("n1", "7f3a2c1b")
    st.record_acceptance("n1", NOW + timedelta(hours=1), passed=True)
    st.record_acceptance("n1", NOW + timedelta(hours=2), passed=False)
    h = StateStore(tmp_path).history("n1")  # a new process sees the same
    assert h.faults == (FaultEvent(NOW, "XID79", "gpu3", "drain", "7f3a2c1b"),)
    assert h.open_incident == "7f3a2c1b"
    assert h.acceptance_passes == (NOW + timedelta(hours=1),)
    st.record_resume("n1", NOW + timedelta(hours=3), "7f3a2c1b")
    h = st.history("n1")
    assert h.open_incident is None and h.resumes == (NOW + timedelta(hours=3),)


def test_cursor_and_unknown_node(tmp_path):
    st = StateStore(tmp_path)
    assert st.get_cursor("n9", "xid") is None and st.open_incident("n9") is None
    st.set_cursor("n9", "xid", {"inode": 5, "offset": 100})
    assert st.get_cursor("n9", "xid") == {"inode": 5, "offset": 100}


def test_lists_are_capped(tmp_path):
    st = StateStore(tmp_path)
    st.record_faults("n1", [FaultEvent(NOW, f"X{i}", None) for i in range(700)])
    assert len(st.read_node("n1")["faults"]) == 500
    assert st.read_node("n1")["faults"][-1]["code"] == "X699"


def test_what_users_write_or_cause_never_pushes_the_nodes_own_faults_out(tmp_path):
    """A job's user writes as many hang/straggler records as they like (and
    their processes raise app XIDs at will): those entries are capped apart,
    so the node's XID drain stays in the history REPLACE counts."""
    st = StateStore(tmp_path)
    st.record_faults("n1", [FaultEvent(NOW, "XID79", "gpu3", "drain", "7f3a2c1b")])
    forged = [FaultEvent(NOW, "SLOW", f"job:7/{i}", "log", None, False, "mallory")
              for i in range(600)]  # fmt: skip
    raised = [FaultEvent(NOW, "XID13", "gpu0", "log", None, True, "mallory") for _ in range(300)]
    full = [FaultEvent(NOW, "SCRATCH_FULL", None, "drain", "a1b2c3d4") for _ in range(10)]
    for chunk in (forged[:300], raised, forged[300:], full):
        st.record_faults("n1", chunk)
    faults = st.history("n1").faults
    assert faults[0] == FaultEvent(NOW, "XID79", "gpu3", "drain", "7f3a2c1b")
    assert len(faults) == 501
    assert faults[-1].code == "SCRATCH_FULL"
    # Of the 910 entries by users, the newest 500: 190 XID13s, the last 300 SLOWs, 10 drains.
    assert [f.code for f in faults[1:]] == ["XID13"] * 190 + ["SLOW"] * 300 + ["SCRATCH_FULL"] * 10
    assert faults[191].component == "job:7/300"
    st.record_faults("n1", [FaultEvent(NOW, f"X{i}", None) for i in range(600)])
    codes = [f.code for f in st.history("n1").faults]
    assert len(codes) == 1000 and "XID79" not in codes and codes[-1] == "X599"


def test_crash_during_write_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "nodes" / "n1.json"
    atomic_write_json(path, {"v": 1})

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(StateError, match="disk full"):  # typed, never a raw OSError
        atomic_write_json(path, {"v": 2})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in path.parent.iterdir()] == ["n1.json"]  # temp file cleaned


def test_corrupt_file_is_moved_aside_not_fatal(tmp_path):
    st = StateStore(tmp_path)
    st.node_path("n1").parent.mkdir(parents=True)
    st.node_path("n1").write_text('{"faults": [')  # a torn write from a lying disk
    assert st.read_node("n1") == {"node": "n1"}
    assert any(p.name.startswith("n1.json.corrupt-") for p in st.node_path("n1").parent.iterdir())


def test_bad_names_are_refused(tmp_path):
    with pytest.raises(StateError):
        StateStore(tmp_path).node_path("../etc/passwd")


def _add_faults(root: str, n: int) -> None:
    st = StateStore(root)
    for i in range(n):
        st.record_faults("n1", [FaultEvent(NOW, f"X{os.getpid()}_{i}", None)])


def test_concurrent_writers_lose_nothing(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_add_faults, args=(str(tmp_path), 40)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert all(p.exitcode == 0 for p in procs)
    assert len(StateStore(tmp_path).read_node("n1")["faults"]) == 160


def test_lock_times_out(tmp_path):
    st = StateStore(tmp_path)
    with st.lock("x"), pytest.raises(StateError, match="timed out"):
        with StateStore(tmp_path).lock("x", timeout=0.2):
            pass


def test_incident_journal(tmp_path):
    st = StateStore(tmp_path)
    st.write_incident({"incident": "abc12345", "node": "n1", "jobs_done": False})
    st.write_incident({"incident": "def12345", "node": "n2", "jobs_done": True})
    with st.incident_lock("abc12345"):
        st.update_incident("abc12345", lambda d: d.update(status="drained"))
    assert st.read_incident("abc12345")["status"] == "drained"
    assert [d["incident"] for d in st.incidents(pending_only=True)] == ["abc12345"]
    assert [d["incident"] for d in st.incidents("n2")] == ["def12345"]
    with pytest.raises(StateError):
        st.update_incident("nope0000", lambda d: None)


def test_breaker_latch(tmp_path):
    latch = BreakerLatch(tmp_path / "shared" / "breaker.json")
    assert latch.read() == {}
    t = Trip("gpu", NOW, "g7", 5, 5)
    assert latch.trip(t) is True
    assert latch.trip(Trip("gpu", NOW, "g8", 6, 5)) is False  # first trip kept
    assert BreakerLatch(latch.path).read() == {"gpu": t}  # every reader sees it
    assert latch.reset("cpu") == []
    assert latch.reset() == ["gpu"] and latch.read() == {}
