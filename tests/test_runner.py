"""The runner: timeouts, budget, crashing and missing checks, whole phases."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest

from slurm_hooks.core import config
from slurm_hooks.core.errors import CheckNotInstalled, ConfigError
from slurm_hooks.core.model import Finding, Phase, Status
from slurm_hooks.detect.checks.base import CheckContext, ok
from slurm_hooks.detect.runner import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_UNHEALTHY,
    CheckOutcome,
    RunResult,
    plan,
    run_checks,
    run_phase,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Stub:
    phases: ClassVar[frozenset[Phase]] = frozenset(Phase)

    def __init__(
        self, name: str, behaviour: str = "ok", clock: FakeClock | None = None, cost: float = 0.0
    ):
        self.name = name
        self.behaviour = behaviour
        self.clock = clock
        self.cost = cost
        self.ran = threading.Event()

    def gather(self, ctx: CheckContext) -> Any:
        self.ran.set()
        if self.clock is not None:
            self.clock.t += self.cost
        if self.behaviour == "crash":
            raise ZeroDivisionError("boom")
        if self.behaviour == "hang":
            threading.Event().wait(30)
        if self.behaviour == "config":
            raise ConfigError("unknown key", path="c.toml", key="checks.x.y")
        return None

    def judge(self, data: Any, ctx: CheckContext) -> list[Finding]:
        if self.behaviour == "fail":
            return [Finding(check=self.name, status=Status.FAIL, code="BAD", message="bad")]
        if self.behaviour == "empty":
            return []
        if self.behaviour == "junk":
            return ["not a finding"]  # type: ignore[list-item]
        return [ok(self.name)]


def ctx_for(name: str) -> CheckContext:
    return CheckContext(node="n1", phase=Phase.HEALTHCHECK)


def go(
    stubs: dict[str, Stub], budget: float = 10, timeout: float = 5, clock: Any = None, missing=()
):
    def loader(name: str) -> Any:
        if name in missing:
            raise CheckNotInstalled(f"check {name!r} not installed")
        return stubs[name]

    names = list(stubs) + list(missing)
    kwargs = {"clock": clock} if clock else {}
    return run_checks(
        names,
        ctx_for,
        phase=Phase.HEALTHCHECK,
        budget_s=budget,
        timeout_for=lambda n: timeout,
        loader=loader,
        **kwargs,
    )


def test_crash_is_unknown_and_others_still_run() -> None:
    stubs = {"a": Stub("a", "crash"), "b": Stub("b", "fail"), "c": Stub("c")}
    outcomes, finished = go(stubs)
    assert finished
    by = {o.name: o for o in outcomes}
    assert by["a"].findings[0].status == Status.UNKNOWN
    assert (
        by["a"].findings[0].code == "CHECK_ERROR"
        and "ZeroDivisionError: boom" in by["a"].findings[0].message
    )
    assert by["b"].status == Status.FAIL and by["c"].status == Status.OK


def test_hanging_check_times_out_and_the_next_runs() -> None:
    stubs = {"slow": Stub("slow", "hang"), "next": Stub("next")}
    outcomes, finished = go(stubs, timeout=0.2)
    assert not finished
    assert outcomes[0].findings[0].code == "CHECK_TIMEOUT"
    assert outcomes[1].status == Status.OK


def test_budget_skips_later_checks() -> None:
    clock = FakeClock()
    stubs = {n: Stub(n, clock=clock, cost=4.0) for n in "abcd"}
    outcomes, _ = go(stubs, budget=10, clock=clock)
    assert [o.status for o in outcomes] == [Status.OK, Status.OK, Status.OK, Status.UNKNOWN]
    assert outcomes[3].findings[0].code == "CHECK_BUDGET"
    assert outcomes[3].findings[0].message.startswith("skipped: budget")
    assert not stubs["d"].ran.is_set()


def test_not_installed_config_error_empty_and_junk() -> None:
    stubs = {
        "cfg": Stub("cfg", "config"),
        "empty": Stub("empty", "empty"),
        "junk": Stub("junk", "junk"),
    }
    outcomes, _ = go(stubs, missing=("xid",))
    codes = {o.name: o.findings[0].code for o in outcomes}
    assert codes == {
        "cfg": "CONFIG_ERROR",
        "empty": "OK",
        "junk": "CHECK_ERROR",
        "xid": "CHECK_NOT_INSTALLED",
    }
    assert "c.toml:checks.x.y" in outcomes[0].findings[0].message
    assert outcomes[3].findings[0].message.startswith("check not installed")


def _result(*statuses: Status) -> RunResult:
    outs = tuple(
        CheckOutcome(f"c{i}", (Finding(check=f"c{i}", status=s, code="X", message=""),), 0.0)
        for i, s in enumerate(statuses)
    )
    return RunResult(phase=Phase.HEALTHCHECK, node="n", profile="p", outcomes=outs)


@pytest.mark.parametrize(
    "statuses, status, code",
    [
        ((Status.OK, Status.OK), Status.OK, EXIT_OK),
        ((Status.OK, Status.WARN), Status.WARN, EXIT_OK),
        ((Status.OK, Status.UNKNOWN), Status.UNKNOWN, EXIT_OK),
        ((Status.UNKNOWN, Status.FAIL), Status.FAIL, EXIT_UNHEALTHY),
        ((Status.UNKNOWN, Status.UNKNOWN), Status.UNKNOWN, EXIT_ERROR),
    ],
)
def test_overall_status_and_exit_code(statuses: tuple, status: Status, code: int) -> None:
    r = _result(*statuses)
    assert (r.status, r.exit_code) == (status, code)
    assert json.loads(json.dumps(r.to_dict()))["status"] == str(status)


def _cfg(tmp_path: Path, scenario: str | None, extra: str = "") -> config.Config:
    text = f'[general]\nstate_dir = "{tmp_path / "state"}"\n[checks]\nsysfs_root = "{DATA / "sysfs" / "dgx_h100_healthy"}"\n'
    if scenario:
        text += f'nvml = "lab:fake"\nnvml_scenario = "{DATA / "nvml" / scenario}"\n'
    text += '[profiles.h100]\nbase = "h100-sxm5-80gb"\nnodes = "gpu[001-004]"\nmemory_gb = 1\n'
    text += '[profiles.cpu]\nbase = "cpu"\nnodes = "cpu[01-02]"\n' + extra
    p = tmp_path / "config.toml"
    p.write_text(text)
    return config.load(p, validate=False)


class NoKernelLog:
    """The xid check reads the kernel log; give it an empty one."""


def test_run_phase_healthy_gpu_node(tmp_path: Path) -> None:
    from slurm_hooks.detect.xid.source import FileSource

    log = tmp_path / "kern.log"
    log.write_text("")
    r = run_phase(
        "healthcheck",
        cfg=_cfg(tmp_path, "h100_healthy.toml"),
        node="gpu002",
        services={"kernel_log": FileSource(str(log))},
    )
    assert r.profile == "h100"
    assert r.status == Status.OK, [f for f in r.findings if f.status != Status.OK]
    assert r.exit_code == EXIT_OK
    assert "burnin" not in r.durations and "gpu_lost" in r.durations


def test_run_phase_faulty_node_and_only(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "h100_faults.toml", "[checks.pcie]\nenabled = false\n")
    r = run_phase("healthcheck", cfg=cfg, node="gpu001", only=["gpu_lost,ecc", "pcie"])
    assert list(r.durations) == ["gpu_lost", "ecc", "pcie"]  # explicit beats enabled=false
    assert r.exit_code == EXIT_UNHEALTHY
    codes = {(f.code, f.component.index) for f in r.findings}
    assert {("GPU_LOST", 0), ("ECC_DBE", 1), ("PCIE_DOWNTRAINED", 4)} <= codes
    r = run_phase("healthcheck", cfg=cfg, node="gpu001")
    assert "pcie" not in r.durations


def test_run_phase_nvml_error_mid_check_other_checks_run(tmp_path: Path) -> None:
    r = run_phase(
        "healthcheck",
        cfg=_cfg(tmp_path, "h100_midcheck_error.toml"),
        node="gpu001",
        only=["ecc", "gpu_temp", "row_remap", "memory"],
    )
    st = {o.name: o.status for o in r.outcomes}
    assert st == {
        "ecc": Status.UNKNOWN,
        "gpu_temp": Status.UNKNOWN,
        "row_remap": Status.OK,
        "memory": Status.OK,
    }
    assert r.exit_code == EXIT_OK


def test_run_phase_driver_not_loaded(tmp_path: Path) -> None:
    r = run_phase(
        "prolog",
        cfg=_cfg(tmp_path, "driver_not_loaded.json"),
        node="gpu001",
        only=["gpu_count", "ecc"],
    )
    f = {o.name: o.findings[0] for o in r.outcomes}
    assert f["gpu_count"].code == "NVML_INIT" and f["ecc"].status == Status.UNKNOWN
    assert "DRIVER_NOT_LOADED" in f["ecc"].message


def test_plan_and_unknown_names() -> None:
    from slurm_hooks.detect.checks.settings import ChecksConfig

    cc = ChecksConfig()
    assert "burnin" in plan("prolog", cc) and "burnin" not in plan("healthcheck", cc)
    assert plan("healthcheck", cc)[:2] == ["gpu_count", "gpu_lost"]
    with pytest.raises(ConfigError, match="unknown check 'eccc'"):
        plan("healthcheck", cc, ["eccc"])


def test_deadline_service_reaches_checks(tmp_path: Path) -> None:
    seen: dict[str, float] = {}

    class Peek(Stub):
        def gather(self, ctx: CheckContext) -> Any:
            seen["left"] = ctx.services["deadline"].remaining()

    import slurm_hooks.detect.runner as runner_mod

    rs = runner_mod.setup(_cfg(tmp_path, None), node="cpu01")
    orig = runner_mod.run_checks

    def patched(names, context_for, **kw):  # type: ignore[no-untyped-def]
        return orig(["x"], context_for, **{**kw, "loader": lambda n: Peek("x")})

    runner_mod.run_checks = patched
    try:
        runner_mod.run_phase("healthcheck", run_setup=rs, budget_s=7)
    finally:
        runner_mod.run_checks = orig
    assert 6 < seen["left"] <= 7


def _subprocess(
    code: str, env_extra: dict[str, str], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, **env_extra}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
        check=False,
    )


HOOK_CODE = """
import sys, json
from slurm_hooks.detect.runner import run_phase
r = run_phase("healthcheck", node=sys.argv[1] if len(sys.argv) > 1 else "{node}")
bad = sorted(m for m in ("click", "requests", "urllib3") if m in sys.modules)
print(json.dumps({{"bad": bad, "status": str(r.status), "pynvml": "pynvml" in sys.modules,
                  "checks": list(r.durations)}}))
"""


@pytest.mark.parametrize("node, scenario", [("cpu01", None), ("gpu001", "h100_healthy.toml")])
def test_hook_path_imports_neither_click_nor_requests(
    tmp_path: Path, node: str, scenario: str | None
) -> None:
    cfg = _cfg(tmp_path, scenario)
    proc = _subprocess(HOOK_CODE.format(node=node), {"SLURM_HOOKS_CONFIG": str(cfg.path)}, tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["bad"] == []
    # A CPU node never loads NVML; a GPU node does (the fake imports pynvml's constants).
    assert out["pynvml"] is (scenario is not None)
    assert "gpu_count" in out["checks"]


def test_runner_module_entry(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, None)
    import os

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurm_hooks.detect.runner",
            "healthcheck",
            "--only",
            "memory,gpu_count",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "SLURM_HOOKS_CONFIG": str(cfg.path), "SLURMD_NODENAME": "cpu02"},
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["profile"] == "cpu" and data["status"] == "OK"
    assert [f["check"] for f in data["findings"]] == ["gpu_count", "memory"]
