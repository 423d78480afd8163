"""Audit log: one JSON object per line, concurrent appenders never interleave."""

from __future__ import annotations

import json
import multiprocessing
from datetime import UTC, datetime

from slurm_hooks.store.audit import AuditLog


def test_record_fields(tmp_path):
    a = AuditLog(tmp_path / "a" / "audit.jsonl", actor="t",
                 clock=lambda: datetime(2024, 5, 1, tzinfo=UTC))  # fmt: skip
    e = a.record("drain", node="n1", incident="7f3a2c1b", why="XID79 gpu3", job=None)
    assert e["ts"] == "2024-05-01T00:00:00+00:00" and e["actor"] == "t"
    (line,) = (tmp_path / "a" / "audit.jsonl").read_text().splitlines()
    got = json.loads(line)
    assert got["action"] == "drain" and got["node"] == "n1" and "job" not in got


def _write(path: str, tag: str) -> None:
    a = AuditLog(path)
    for i in range(300):
        a.record("signal", node=tag, job=str(i), why="x" * 2000)


def test_concurrent_appenders_do_not_interleave(tmp_path):
    path = tmp_path / "audit.jsonl"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_write, args=(str(path), f"n{i}")) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    lines = path.read_text().splitlines()
    assert len(lines) == 1200
    assert all(json.loads(line)["why"] == "x" * 2000 for line in lines)


def test_unwritable_log_never_raises(tmp_path):
    (tmp_path / "f").write_text("")
    a = AuditLog(tmp_path / "f" / "audit.jsonl")  # parent is a file
    assert a.record("drain", node="n1")["node"] == "n1"


def test_entries_skip_broken_lines(tmp_path):
    path = tmp_path / "audit.jsonl"
    a = AuditLog(path)
    a.record("drain", node="n1")
    with path.open("a") as fh:
        fh.write("{not json\n")
    a.record("resume", node="n1")
    assert [e["action"] for e in a.entries()] == ["drain", "resume"]
