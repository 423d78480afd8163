"""``slurm-hooks history`` as an operator runs it (a subprocess), on an audit
log written by the real engine: acceptance runs are shown, ``--wide`` keeps
one line per event, ``--json`` carries both (issue 17)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from test_actions import Clock, FakeSlurm, Recorder, xid79

from slurm_hooks.act.engine import Engine
from slurm_hooks.act.notify import Notifier
from slurm_hooks.decide import DecisionKind, PolicyConfig
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import StateStore

LONG = "burnin ok; nccl busbw 181.3 GB/s of 180 expected on 8 GPUs; ib ok; ecc ok; " * 2


def _engine_log(tmp_path: Path) -> Path:
    """An XID 79 on n1, a failed then a passed acceptance that resumes it,
    and an acceptance of n5 (a new node) outside any incident."""
    audit = tmp_path / "audit.jsonl"
    slurm, clock = FakeSlurm(), Clock()
    eng = Engine(
        slurm, PolicyConfig(grace_seconds=0), StateStore(tmp_path / "state"), AuditLog(audit),
        Notifier([Recorder()]), clock=clock, spawn=None,
    )  # fmt: skip
    (d,) = eng.handle("n1", [xid79()])
    clock.now += timedelta(minutes=5)
    assert eng.record_acceptance("n1", False, detail="burnin GPU_BURN_FAIL gpu3") is None
    clock.now += timedelta(minutes=5)
    assert eng.record_acceptance("n1", True, detail=LONG).kind is DecisionKind.RESUME
    assert eng.record_acceptance("n5", True, detail="new node burn-in") is None
    return audit


def _history(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slurm_hooks", "history", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_history_shows_acceptance_runs_fits_80_and_wide(tmp_path: Path) -> None:
    audit = _engine_log(tmp_path)
    r = _history("--audit-log", str(audit))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(map(len, lines)) <= 80, r.stdout
    text = r.stdout
    incident_block = text.split("acceptance runs outside an incident:")[0]
    assert "acceptance" in incident_block and "failed burnin GPU_BURN_FAIL gpu3" in incident_block
    assert "passed" in incident_block
    # the long explanation is wrapped, not cut
    assert "ecc ok; burnin ok" in " ".join(text.split()) and "..." not in text
    assert "n5" in text.split("acceptance runs outside an incident:")[1]

    wide = _history("--audit-log", str(audit), "--wide")
    assert wide.returncode == 0
    (long_line,) = [ln for ln in wide.stdout.splitlines() if "181.3" in ln]
    assert len(long_line) > 80 and long_line.rstrip().endswith("ecc ok;")


def test_history_json_has_acceptance(tmp_path: Path) -> None:
    audit = _engine_log(tmp_path)
    r = _history("--audit-log", str(audit), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (inc,) = doc["incidents"]
    acc = [e for e in inc["events"] if e["action"] == "acceptance"]
    assert [e["outcome"] for e in acc] == ["failed", "passed"]
    assert "accepted" in inc["milestones_s"] and not inc["open"]
    assert inc["milestones_s"]["accepted"] <= inc["milestones_s"]["resumed"]
    (run,) = doc["acceptance_runs"]
    assert run["node"] == "n5" and run["outcome"] == "passed"
    # --open drops closed incidents and the loose runs alike
    r = _history("--audit-log", str(audit), "--json", "--open")
    assert json.loads(r.stdout)["incidents"] == [] and json.loads(r.stdout)["acceptance_runs"] == []
