"""One word per breaker state and one exit-code rule across ``status``,
``breaker status`` and ``policy explain --live``; unknown nodes are errors;
node arguments are hostlists.  All as subprocesses against the lab."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.decide.breaker import Trip
from slurm_hooks.store.state import BreakerLatch

pytestmark = [pytest.mark.slurm]


def cli(lab, cfg, *args):
    env = {**os.environ, **lab.env(), "SLURM_HOOKS_CONFIG": str(cfg), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "slurm_hooks", *args],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture
def cfg(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(f'[general]\nstate_dir = "{tmp_path / "state"}"\n')
    return path


def test_breaker_words_and_exit_codes_agree(fresh_lab, cfg, tmp_path):
    lab = fresh_lab
    node = lab.node_names[0]
    st, br = cli(lab, cfg, "status", "--json"), cli(lab, cfg, "breaker", "status", "--json")
    assert (st.returncode, br.returncode) == (0, 0), st.stderr + br.stderr
    assert json.loads(st.stdout)["breaker"] == "armed"
    (row,) = json.loads(br.stdout)["partitions"]
    assert row["state"] == "armed"

    BreakerLatch(tmp_path / "state" / "breaker.json").trip(
        Trip(row["partition"], datetime.now(UTC), node, 1, 1)
    )
    st, br = cli(lab, cfg, "status"), cli(lab, cfg, "breaker", "status")
    pe = cli(lab, cfg, "policy", "explain", "--live", "--xid", "79", "--node", node)
    assert (st.returncode, br.returncode, pe.returncode) == (1, 1, 1), pe.stdout + pe.stderr
    assert "breaker: tripped" in st.stdout
    assert f"{row['partition']}: tripped since" in br.stdout
    assert "BREAKER_TRIPPED" in pe.stdout and "is tripped" in pe.stdout
    for out in (st.stdout, br.stdout, pe.stdout):
        assert not {"open", "closed"} & set(out.lower().replace(";", " ").split())


def test_unknown_nodes_are_errors_and_hostlists_expand(fresh_lab, cfg):
    lab = fresh_lab
    client = lab.client()
    r = cli(lab, cfg, "status", "nosuch")
    assert r.returncode == 2 and "unknown node(s): nosuch" in r.stderr
    assert "in service" not in r.stdout

    a, b = lab.node_names[:2]
    reason = format_reason(DrainReason("XID79", "cafe0001", "GPU has fallen off the bus", "gpu0"))
    client.drain(a, reason)
    client.drain(b, reason)
    spec = f"n[{a[1:]}-{b[1:]}]"
    r = cli(lab, cfg, "resume", f"n[{a[1:]}-{b[1:]},999]", "--force-acceptance-skip")
    assert r.returncode == 2 and "unknown node(s): n999" in r.stderr
    assert client.get_node(a).drained and client.get_node(b).drained  # nothing resumed

    r = cli(lab, cfg, "status", spec)
    assert r.returncode == 1 and a in r.stdout
    r = cli(lab, cfg, "resume", spec, "--force-acceptance-skip")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{a}: resumed" in r.stdout and f"{b}: resumed" in r.stdout
    lab.wait_idle([a, b])
    assert cli(lab, cfg, "status", spec).returncode == 0
