"""Diagnostics are read-only (issue 16 item 4), on the real lab.

After an XID, ``slurm-hooks check``, ``xid scan --since-cursor`` and
``policy explain --live`` leave every byte of the hooks' state dir as it
was (cursors, history, caches, incidents), say the same thing when asked
twice, and the next health check still finds the XID and drains.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from slurm_hooks_lab.hooks import install

from slurm_hooks.core.reason import parse_reason
from slurm_hooks.detect.probes.commands import run

pytestmark = [pytest.mark.slurm]

ROOT = Path(__file__).resolve().parents[1]


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def cli(hooks, node: str, *args: str) -> tuple[int, str]:
    env = {**os.environ, "SLURM_CONF": str(hooks.lab.slurm_conf),
           "SLURM_HOOKS_CONFIG": str(hooks.node(node).config), "SLURMD_NODENAME": node}  # fmt: skip
    res = run([str(ROOT / ".venv/bin/python"), "-m", "slurm_hooks", *args], timeout=120,
              check=False, env=env, cwd=str(ROOT))  # fmt: skip
    return res.rc, res.stdout + res.stderr


def test_check_xid_scan_and_policy_explain_leave_the_hooks_state_alone(fresh_lab):
    lab = fresh_lab
    hooks = install(lab, grace_s=5)
    node = "n2"
    nf = hooks.node(node)
    try:
        shim = str(hooks.shims["healthcheck"])
        assert lab.run_on_node(node, [shim], timeout=60).rc == 0  # the hooks' cursor exists
        hooks.inject_xid(node, 79, gpu=1)
        before = snapshot(nf.state_dir)
        assert any("cursor" in k for k in before)
        for _ in range(2):  # the same answer twice: nothing was consumed
            rc, out = cli(hooks, node, "check", "--node", node, "--only", "xid")
            assert rc == 1 and "XID79" in out, out
            rc, out = cli(hooks, node, "xid", "scan", str(nf.kern_log), "--since-cursor",
                          str(nf.state_dir))  # fmt: skip
            assert rc == 1 and "XID79" in out, out
            rc, out = cli(hooks, node, "policy", "explain", "--xid", "79", "--gpu", "1",
                          "--node", node, "--live")  # fmt: skip
            assert rc == 1 and "DRAIN" in out, out
        assert snapshot(nf.state_dir) == before
        assert not lab.client().get_node(node).drained
        # The next health check still sees the XID and drains.
        assert lab.run_on_node(node, [shim], timeout=60).rc == 1
        state = lab.client().get_node(node)
        assert state.drained and parse_reason(state.reason).code == "XID79"
    finally:
        hooks.finish(reconfigure=False)
