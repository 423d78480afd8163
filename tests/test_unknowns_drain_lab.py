"""On the lab, through slurmd's HealthCheckProgram (every 2 s): a lost GPU
among many UNKNOWN findings from other checks is drained within a couple
of health checks, with the fold (detect/fold.py) and without it.

Two sources of UNKNOWNs: another GPU whose NVML calls for every per-GPU
check raise NVML_ERROR_UNKNOWN (never folded: that GPU is not lost), and,
with the fold switched off in the hook process, the lost GPU's own "could
not run on gpuN" from every other check (what a helper saw not drained
after 30 s).  The engine's side (one short state write for all log-only
decisions, never one full lock wait each before the drain) is pinned in
tests/faults/test_unknowns_never_delay_drain.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from slurm_hooks_lab.hooks import install, wait_drained

from slurm_hooks.core.reason import parse_reason

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

INTERVAL = 2
#: Two health-check intervals, plus what one hook run costs on 2 busy cores.
DRAIN_WITHIN_S = 2 * INTERVAL + 6.0
#: NVML calls of every per-GPU check but gpu_lost's (handle, name, bus id).
PER_CHECK_CALLS = (
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetGpuFabricInfoV",
    "nvmlDeviceGetGpuFabricInfo",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetFieldValues",  # NVLink states and counters, one query each per GPU
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPersistenceMode",
)
NO_FOLD = """\
# test only: the hook with detect/fold.py's fold switched off
import runpy, sys
import slurm_hooks.detect.runner as runner
runner.fold_lost_gpus = tuple
sys.argv = ["slurm_hooks", *sys.argv[1:]]
runpy.run_module("slurm_hooks", run_name="__main__", alter_sys=True)
"""


def _python_without_fold(where: Path) -> str:
    """An interpreter for the shim (called as ``PY -m slurm_hooks hook P``)
    that runs the real hook with the fold off."""
    script = where / "nofold.py"
    script.write_text(NO_FOLD)
    wrapper = where / "python-nofold"
    wrapper.write_text(f'#!/bin/sh\nshift 2\nexec "{sys.executable}" "{script}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.mark.parametrize("fold", [True, False], ids=["fold", "no_fold"])
def test_lost_gpu_among_unknowns_is_drained_within_two_health_checks(fresh_lab, job_dir, fold):
    lab = fresh_lab
    node = "n2"
    python = sys.executable if fold else _python_without_fold(job_dir)
    hooks = install(lab, grace_s=2.0, healthcheck_interval=INTERVAL, prolog=None, python=python)
    try:
        # GPU 3's NVML answers nothing but its handle: 9 checks UNKNOWN on it,
        # every run; the node stays in service (UNKNOWN is not a fault).
        hooks.set_gpu(node, 3, errors=[{"function": f, "error": "UNKNOWN"}
                                       for f in PER_CHECK_CALLS])  # fmt: skip
        lab.wait_for(
            lambda: [e for e in hooks.audit(node) if e.get("code") == "CHECK_UNKNOWN"],
            30,
            what="a health check that saw the UNKNOWNs",
        )
        assert not [n for n in lab.nodes_state() if n.drained]

        hooks.lose_gpu(node, 1)
        ours = parse_reason(wait_drained(lab, node, timeout=DRAIN_WITHIN_S))
        assert (ours.code, ours.component) == ("GPU_LOST", "gpu1")
        # The audit line follows the drain (after the breaker claim is confirmed).
        drains = lab.wait_for(
            lambda: [e for e in hooks.audit(node) if e["action"] == "drain"], 10,
            what="the drain's audit line",
        )  # fmt: skip
        entries = hooks.audit(node)
        assert [(e["code"], e["actor"]) for e in drains] == [
            ("GPU_LOST", "slurm-hooks/healthcheck")
        ]
        decisions = {(e["code"], e.get("component")) for e in entries if e["action"] == "decision"}
        assert ("GPU_LOST", "gpu1") in decisions and ("CHECK_UNKNOWN", "gpu3") in decisions
    finally:
        hooks.finish()
