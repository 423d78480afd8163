"""The lab's RebootProgram (slurm_hooks_lab.reboot): a node "rebooted" twice
in one lab gets a fresh boot time each time.  Its second RebootProgram runs
inside the time namespace of the first "boot", so the host's uptime must be
read back out of it (``host_uptime``); a namespaced /proc/uptime made the
second boot look older than the request and left the node REBOOT_ISSUED."""

from __future__ import annotations

import subprocess
import sys

import pytest
from slurm_hooks_lab.reboot import host_uptime


def _uptime() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def test_host_uptime_outside_a_time_namespace():
    assert abs(host_uptime() - _uptime()) < 2.0


def test_host_uptime_from_inside_a_rebooted_nodes_namespace():
    argv = ["unshare", "--time", "--boottime", "-100", "--",
            sys.executable, "-c",
            "from slurm_hooks_lab.reboot import host_uptime; print(host_uptime())"]  # fmt: skip
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)  # noqa: S603
    except FileNotFoundError:
        pytest.skip("no unshare")
    if res.returncode != 0:
        pytest.skip(f"no time namespaces here: {res.stderr.strip()[:200]}")
    assert abs(float(res.stdout) - _uptime()) < 2.0
