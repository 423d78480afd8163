"""The fleet's history on the real lab (issue 17): an admin host with no audit
log at all sees a node's incident from our reason in Slurm; an admin's
``resume`` run there lands in the node's file of the shared audit dir, which
a third host's ``history`` reads.  The CLI runs as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.slurm.door import SlurmDoor

pytestmark = [pytest.mark.slurm]


def cli(lab, cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    env = {**os.environ, **lab.env(), "SLURM_HOOKS_CONFIG": str(cfg), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "slurm_hooks", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def host_config(tmp_path: Path, host: str, shared: Path | None) -> Path:
    """The config of one host: its own state dir (and so its own local log)."""
    cfg = tmp_path / f"{host}.toml"
    lines = ["[general]", f'state_dir = "{tmp_path / host}"']
    if shared is not None:
        lines.append(f'audit_dir = "{shared}"')
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


def test_fleet_history_from_slurm_and_the_shared_dir(fresh_lab, tmp_path: Path) -> None:
    lab = fresh_lab
    node = lab.node_names[-1]
    shared = tmp_path / "shared"
    shared.mkdir()
    reason = format_reason(DrainReason("XID79", "cafe0417", "GPU has fallen off the bus", "gpu3"))
    SlurmDoor(lab.client()).drain(node, reason)

    # 1. an admin host with no audit log anywhere: Slurm's reason is the record
    bare = host_config(tmp_path, "bare", None)
    r = cli(lab, bare, "history", node, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (inc,) = doc["incidents"]
    assert (inc["incident"], inc["nodes"], inc["code"]) == ("cafe0417", [node], "XID79")
    assert inc["open"] and inc["sources"] == ["slurm"] and doc["slurm"] == "read"
    (ev,) = inc["events"]
    assert ev["stage"] == "drained" and ev["extra"]["reason"] == reason
    assert ev["actor"].startswith("slurm (") and ev["why"] == "gpu3 GPU has fallen off the bus"
    text = cli(lab, bare, "history", "--since", "1h")
    assert text.returncode == 0 and "cafe0417" in text.stdout and node in text.stdout
    assert "[Slurm reason]" in text.stdout and "no audit log here" in text.stderr
    assert max(map(len, text.stdout.splitlines())) <= 80

    # 2. the admin resumes it from "admin1": the record lands in the node's file
    admin = host_config(tmp_path, "admin1", shared)
    r = cli(lab, admin, "resume", node, "--force-acceptance-skip")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not lab.client().get_node(node).drained
    assert [p.name for p in shared.iterdir()] == [f"{node}.jsonl"]
    records = [json.loads(ln) for ln in (shared / f"{node}.jsonl").read_text().splitlines()]
    (resume,) = [e for e in records if e["action"] == "resume"]
    assert resume["incident"] == "cafe0417" and resume["actor"].startswith("cli:")

    # 3. a third host reads the shared dir: the incident, resolved by the admin
    other = host_config(tmp_path, "other", shared)
    r = cli(lab, other, "history", node, "--json")
    assert r.returncode == 0, r.stderr
    (inc,) = json.loads(r.stdout)["incidents"]
    assert inc["incident"] == "cafe0417" and not inc["open"]
    assert inc["sources"] == ["audit"] and "resumed" in inc["milestones_s"]
    assert not (tmp_path / "other" / "audit.jsonl").exists()  # read, not written
    lab.wait_idle([node])
