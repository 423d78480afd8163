"""One finding per root cause: a lost GPU is one FAIL, not one FAIL plus an
UNKNOWN from every other GPU check (before: 9 UNKNOWN rows per run, each a
decision and an audit line).  And the health check exits 0 once our drain
holds every problem (slurmd logs "error: health_check failed" for any
non-zero exit, every interval)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from slurm_hooks.agent.hook import already_handled
from slurm_hooks.core.model import Action, Component, Finding, Status
from slurm_hooks.decide.decision import Decision, DecisionKind
from slurm_hooks.detect.fold import fold_lost_gpus
from slurm_hooks.detect.runner import CheckOutcome

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"

GPU3 = Component("gpu", 3)
LOST = Finding("gpu_lost", Status.FAIL, "GPU_LOST", "gpu3 lost", GPU3, Action.REBOOT,
               values={"nvml_error": "GPU_IS_LOST"})  # fmt: skip


def _blind(check: str, comp: Component = GPU3) -> Finding:
    return Finding(check, Status.UNKNOWN, "CHECK_UNKNOWN", f"could not run on {comp.short()}",
                   comp, values={"nvml_error": "GPU_IS_LOST"})  # fmt: skip


def _config(tmp_path: Path, scenario: str) -> Path:
    (tmp_path / "kern.log").write_text("")
    (tmp_path / "lost.toml").write_text(scenario)
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[general]\nstate_dir = "{tmp_path / "state"}"\n[checks]\n'
        f'sysfs_root = "{DATA / "sysfs" / "dgx_h100_healthy"}"\n'
        f'nvml = "lab:fake"\nnvml_scenario = "{tmp_path / "lost.toml"}"\n'
        f'[checks.xid]\nsource = "file"\npath = "{tmp_path / "kern.log"}"\n'
        '[profiles.h100]\nbase = "h100-sxm5-80gb"\nnodes = "gpu[001-004]"\nmemory_gb = 1\n'
    )
    return cfg


def test_check_cli_reports_a_lost_gpu_once(tmp_path: Path) -> None:
    cfg = _config(tmp_path, 'preset = "h100-sxm5-80gb"\ngpu_count = 8\n[gpu.3]\nlost = true\n')
    res = subprocess.run(
        [sys.executable, "-m", "slurm_hooks", "check", "--json", "--config", str(cfg),
         "--node", "gpu001"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "SLURM_HOOKS_LOG_LEVEL": "WARNING"},
    )  # fmt: skip
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    problems = [f for f in doc["findings"] if f["status"] != "OK"]
    assert [(f["check"], f["code"], f["component"]["index"]) for f in problems] == [
        ("gpu_lost", "GPU_LOST", 3)
    ]
    blind = set(problems[0]["values"]["blind"].split(","))
    assert {"ecc", "row_remap", "nvlink", "pcie", "gpu_temp"} <= blind
    # The blinded checks still say they looked at the other GPUs.
    ecc = [f for f in doc["findings"] if f["check"] == "ecc"]
    assert [f["status"] for f in ecc] == ["OK"] and "gpu3 lost" in ecc[0]["message"]


def test_fold_keeps_real_faults_and_other_gpus() -> None:
    other = _blind("ecc", Component("gpu", 1))  # an NVML error on a GPU that is not lost
    real = Finding("ecc", Status.FAIL, "ECC_DBE", "dbe", GPU3, Action.DRAIN)  # a fault on it
    timeout = Finding("nvlink", Status.UNKNOWN, "CHECK_TIMEOUT", "timed out")  # node-wide
    outcomes = (
        CheckOutcome("gpu_lost", (LOST,), 0.1),
        CheckOutcome("ecc", (_blind("ecc"), other, real), 0.1),
        CheckOutcome("nvlink", (timeout,), 0.1),
        CheckOutcome("pcie", (_blind("pcie"),), 0.1),
    )
    folded = {o.name: o.findings for o in fold_lost_gpus(outcomes)}
    assert folded["ecc"] == (other, real)
    assert folded["nvlink"] == (timeout,)
    assert [f.status for f in folded["pcie"]] == [Status.OK]
    assert folded["gpu_lost"][0].values["blind"] == "ecc,pcie"
    # gpu_lost disabled or not failing: nothing is hidden.
    without = tuple(o for o in outcomes if o.name != "gpu_lost")
    assert fold_lost_gpus(without) == without


def _decision(kind: DecisionKind, *findings: Finding) -> Decision:
    return Decision(kind, "n1", findings[0].code, "why", findings=findings)


def test_healthcheck_exit_is_zero_only_once_our_drain_holds_it() -> None:
    unknown = _blind("ecc")
    warn = Finding("gpu_temp", Status.WARN, "GPU_HOT", "hot", GPU3)
    assert already_handled([_decision(DecisionKind.ALREADY_HANDLED, LOST)])
    assert already_handled([_decision(DecisionKind.ALREADY_HANDLED, LOST),
                            _decision(DecisionKind.LOG, unknown)])  # fmt: skip
    # The run that drains says so (one slurmd error line per incident) ...
    assert not already_handled([_decision(DecisionKind.DRAIN, LOST)])
    # ... as does any problem our drain does not hold.
    for kind in (DecisionKind.BREAKER_TRIPPED, DecisionKind.FOREIGN_REASON, DecisionKind.LOG):
        assert not already_handled([_decision(DecisionKind.ALREADY_HANDLED, LOST),
                                    _decision(kind, warn)])  # fmt: skip
    assert not already_handled([])
