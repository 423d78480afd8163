"""NVML checks against fake-NVML scenarios (tests/data/nvml/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pynvml
import pytest
from slurm_hooks_lab.fake_nvml import FakeNvml

from slurm_hooks.core.model import Action, Finding, Phase, Status
from slurm_hooks.detect.checks.base import CheckContext
from slurm_hooks.detect.checks.driver import DriverCheck, version_matches
from slurm_hooks.detect.checks.ecc import EccCheck
from slurm_hooks.detect.checks.fabric import FabricCheck
from slurm_hooks.detect.checks.gpu_count import GpuCountCheck
from slurm_hooks.detect.checks.gpu_lost import GpuLostCheck
from slurm_hooks.detect.checks.gpu_memory import GpuMemoryCheck
from slurm_hooks.detect.checks.gpu_temp import GpuTempCheck
from slurm_hooks.detect.checks.nvlink import STATE_FILE, NvlinkCheck
from slurm_hooks.detect.checks.pcie import PcieCheck
from slurm_hooks.detect.checks.persistence import PersistenceCheck
from slurm_hooks.detect.checks.retired_pages import RetiredPagesCheck
from slurm_hooks.detect.checks.row_remap import RowRemapCheck
from slurm_hooks.detect.checks.throttle import ThrottleCheck
from slurm_hooks.detect.probes.nvml import NvmlSession
from slurm_hooks.detect.profiles import load_builtin

DATA = Path(__file__).parent / "data" / "nvml"
H100 = load_builtin("h100-sxm5-80gb")
A100 = load_builtin("a100-sxm4-80gb")
CPU = load_builtin("cpu")


def ctx_for(
    scenario: str | Path | FakeNvml,
    profile: Any = H100,
    settings: dict[str, Any] | None = None,
    state_dir: str = "/nonexistent",
) -> CheckContext:
    fake = scenario if isinstance(scenario, FakeNvml) else FakeNvml(str(DATA / scenario))
    return CheckContext(
        node="gpu001",
        phase=Phase.HEALTHCHECK,
        profile=profile,
        settings=settings or {},
        state_dir=state_dir,
        services={"nvml": NvmlSession(nvml=fake, proc_gpus="/nonexistent")},
    )


def run(check: Any, ctx: CheckContext) -> list[Finding]:
    return check.judge(check.gather(ctx), ctx)


def problems(findings: list[Finding]) -> dict[tuple[str, int | None], Finding]:
    return {(f.code, f.component.index): f for f in findings if f.status != Status.OK}


ALL_GPU_CHECKS = [
    GpuCountCheck,
    GpuLostCheck,
    EccCheck,
    RetiredPagesCheck,
    RowRemapCheck,
    PcieCheck,
    NvlinkCheck,
    ThrottleCheck,
    GpuTempCheck,
    DriverCheck,
    PersistenceCheck,
    FabricCheck,
    GpuMemoryCheck,
]


@pytest.mark.parametrize("check_cls", ALL_GPU_CHECKS)
@pytest.mark.parametrize(
    "scenario, profile",
    [("h100_healthy.toml", H100), ("a100_healthy.toml", A100), ("h200_healthy.toml", None)],
)
def test_healthy_scenarios_are_ok(
    check_cls: type, scenario: str, profile: Any, tmp_path: Path
) -> None:
    prof = profile if profile is not None else load_builtin("h200-sxm-141gb")
    findings = run(check_cls(), ctx_for(scenario, prof, state_dir=str(tmp_path)))
    assert [f.status for f in findings] == [Status.OK], findings


@pytest.mark.parametrize("check_cls", ALL_GPU_CHECKS)
def test_cpu_profile_never_loads_nvml(check_cls: type) -> None:
    class Exploding:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"NVML touched: {name}")

    ctx = CheckContext(
        node="cpu01", phase=Phase.HEALTHCHECK, profile=CPU, services={"nvml": Exploding()}
    )
    findings = run(check_cls(), ctx)
    assert [f.status for f in findings] == [Status.OK]
    assert "not applicable" in findings[0].message


FAULT_TABLE = [
    (GpuLostCheck, "GPU_LOST", 0, Status.FAIL, Action.REBOOT),
    (EccCheck, "ECC_DBE", 1, Status.FAIL, Action.RESET_GPU),
    (RowRemapCheck, "ROW_REMAP_PENDING", 2, Status.FAIL, Action.RESET_GPU),
    (RowRemapCheck, "ROW_REMAP_FAILED", 3, Status.FAIL, Action.REPLACE),
    (PcieCheck, "PCIE_DOWNTRAINED", 4, Status.FAIL, Action.DRAIN),
    (NvlinkCheck, "NVLINK_DOWN", 5, Status.FAIL, Action.RESET_GPU),
    (ThrottleCheck, "GPU_THROTTLE", 6, Status.FAIL, Action.DRAIN),
    (GpuTempCheck, "GPU_TEMP", 6, Status.FAIL, Action.DRAIN),
    (FabricCheck, "FABRIC_MANAGER", 7, Status.FAIL, Action.DRAIN),
    (PersistenceCheck, "PERSISTENCE_MODE", 7, Status.WARN, Action.NONE),
]


@pytest.mark.parametrize("check_cls, code, gpu, status, action", FAULT_TABLE)
def test_fault_scenario_maps_to_code_and_action(
    check_cls: type, code: str, gpu: int, status: Status, action: Action, tmp_path: Path
) -> None:
    findings = run(check_cls(), ctx_for("h100_faults.toml", state_dir=str(tmp_path)))
    found = problems(findings)
    f = found[(code, gpu)]
    assert (f.status, f.action) == (status, action)
    assert f.component.kind == "gpu" and f.component.index == gpu
    if check_cls is not GpuLostCheck:
        assert f.component.uuid and f.component.pci
    # Only the faulty GPU is flagged for this code; the lost GPU is UNKNOWN elsewhere.
    assert {k for k in found if k[0] == code} == {(code, gpu)} or code == "ROW_REMAP_FAILED"
    if check_cls is not GpuLostCheck:
        lost = found[("CHECK_UNKNOWN", 0)]
        assert lost.status == Status.UNKNOWN and "GPU_IS_LOST" in lost.message


def test_nvml_error_mid_check_is_unknown_for_that_gpu_only() -> None:
    findings = run(EccCheck(), ctx_for("h100_midcheck_error.toml"))
    bad = [f for f in findings if f.status != Status.OK]
    assert len(bad) == 1
    assert bad[0].status == Status.UNKNOWN and bad[0].component.index == 2
    assert bad[0].values["nvml_error"] == "GPU_IS_LOST"
    temp = run(GpuTempCheck(), ctx_for("h100_midcheck_error.toml"))
    assert [(f.status, f.component.index) for f in temp] == [(Status.UNKNOWN, 2)]
    assert "UNKNOWN" in temp[0].message
    # Other checks on the same GPU are unaffected.
    assert [f.status for f in run(RowRemapCheck(), ctx_for("h100_midcheck_error.toml"))] == [
        Status.OK
    ]


def test_lost_gpu_by_query_and_unknown_error(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(
        'preset = "h100-sxm5-80gb"\ngpu_count = 4\n[gpu.1]\nlost = "queries"\n'
        "[gpu.2]\nunknown_error = true\n[gpu.3]\nreset_required = true\n"
    )
    found = problems(run(GpuLostCheck(), ctx_for(FakeNvml(str(path)))))
    assert found[("GPU_LOST", 1)].values["nvml_error"] == "GPU_IS_LOST"
    assert found[("GPU_LOST", 2)].values["nvml_error"] == "UNKNOWN"
    assert found[("GPU_RESET_REQUIRED", 3)].action == Action.RESET_GPU


def test_driver_not_loaded_fails_count_and_leaves_others_unknown() -> None:
    ctx = ctx_for("driver_not_loaded.json")
    [f] = run(GpuCountCheck(), ctx)
    assert (f.status, f.code, f.action) == (Status.FAIL, "NVML_INIT", Action.REBOOT)
    assert f.values["nvml_error"] == "DRIVER_NOT_LOADED"
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        EccCheck().gather(ctx)  # the runner turns this into UNKNOWN


def test_no_profile_and_no_nvml_is_unknown_not_fail() -> None:
    [f] = run(GpuCountCheck(), ctx_for("driver_not_loaded.json", profile={}))
    assert f.status == Status.UNKNOWN


def test_profile_mismatch_count_and_model() -> None:
    # An H100 node described by the A100 profile, and a node missing GPUs.
    found = problems(run(GpuCountCheck(), ctx_for("h100_healthy.toml", A100)))
    assert found[("GPU_MODEL", 0)].status == Status.WARN
    assert len([k for k in found if k[0] == "GPU_MODEL"]) == 8
    sixteen = H100.__class__(**{**dict(H100), "gpu_count": 16})
    [f] = run(GpuCountCheck(), ctx_for("h100_healthy.toml", sixteen))
    assert (f.status, f.code, f.action) == (Status.FAIL, "GPU_COUNT", Action.REBOOT)
    assert f.values == {"count": 8, "expected": 16}
    four = H100.__class__(**{**dict(H100), "gpu_count": 4})
    [f] = run(GpuCountCheck(), ctx_for("h100_healthy.toml", four))
    assert (f.status, f.code) == (Status.WARN, "GPU_COUNT")


def test_pcie_gen_below_max_only_when_busy(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(
        'preset = "h100-sxm5-80gb"\ngpu_count = 2\n'
        '[gpu.0]\npcie = { gen = 1 }\nthrottle = ["gpu_idle"]\n'
        '[gpu.1]\npcie = { gen = 3 }\nthrottle = ["sw_power_cap"]\n'
    )
    found = problems(run(PcieCheck(), ctx_for(FakeNvml(str(path)))))
    assert list(found) == [("PCIE_DOWNTRAINED", 1)]
    assert found[("PCIE_DOWNTRAINED", 1)].status == Status.WARN
    quiet = run(PcieCheck(), ctx_for(FakeNvml(str(path)), settings={"gen_below_max": "OK"}))
    assert [f.status for f in quiet] == [Status.OK]
    # A platform that cannot reach the profile's generation at all fails.
    gen4 = tmp_path / "g4.toml"
    gen4.write_text(
        'preset = "h100-sxm5-80gb"\ngpu_count = 1\n[defaults]\npcie = { max_gen = 4, gen = 4 }\n'
    )
    [f] = run(PcieCheck(), ctx_for(FakeNvml(str(gen4))))
    assert (f.status, f.code) == (Status.FAIL, "PCIE_DOWNTRAINED")


def test_nvlink_counters_rising_since_last_run(tmp_path: Path) -> None:
    scen = tmp_path / "s.toml"
    scen.write_text(
        'preset = "h100-sxm5-80gb"\ngpu_count = 2\n[gpu.1]\nnvlink_errors = { "4" = { crc_flit = 10 } }\n'
    )
    state = tmp_path / "state"
    first = run(NvlinkCheck(), ctx_for(FakeNvml(str(scen)), state_dir=str(state)))
    assert [f.status for f in first] == [Status.OK]  # no previous values yet
    saved = json.loads((state / STATE_FILE).read_text())
    assert len(saved) == 2 and all(len(v) == 18 for v in saved.values())
    scen.write_text(
        'preset = "h100-sxm5-80gb"\ngpu_count = 2\n'
        '[gpu.1]\nnvlink_errors = { "4" = { crc_flit = 500, replay = 20 }, "6" = { recovery = 1 } }\n'
    )
    found = [
        f
        for f in run(NvlinkCheck(), ctx_for(FakeNvml(str(scen)), state_dir=str(state)))
        if f.is_problem
    ]
    assert [(f.code, f.component.index, f.values["link"]) for f in found] == [
        ("NVLINK_ERRORS", 1, 4),
        ("NVLINK_ERRORS", 1, 6),
    ]
    assert found[0].values["new_crc_flit"] == 490 and found[0].values["new_replay"] == 20
    # Same counters again: nothing new.  Counters reset (driver reload): not an error.
    again = run(NvlinkCheck(), ctx_for(FakeNvml(str(scen)), state_dir=str(state)))
    assert [f.status for f in again] == [Status.OK]
    scen.write_text('preset = "h100-sxm5-80gb"\ngpu_count = 2\n')
    reset = run(NvlinkCheck(), ctx_for(FakeNvml(str(scen)), state_dir=str(state)))
    assert [f.status for f in reset] == [Status.OK]


def test_nvlink_counters_unchanged_are_not_rewritten(tmp_path: Path) -> None:
    """A healthy run whose counters did not move leaves the saved file as it
    is (no rewrite, no fsync each interval); counters that moved are saved,
    and a file that cannot be parsed is replaced."""
    scen = tmp_path / "s.toml"
    scen.write_text('preset = "h100-sxm5-80gb"\ngpu_count = 2\n')
    state = tmp_path / "state"
    run(NvlinkCheck(), ctx_for(FakeNvml(str(scen)), state_dir=str(state)))
    path = state / STATE_FILE
    first = path.stat().st_ino
    run(NvlinkCheck(), ctx_for(FakeNvml(str(scen)), state_dir=str(state)))
    assert path.stat().st_ino == first
    scen.write_text(
        'preset = "h100-sxm5-80gb"\ngpu_count = 2\n[gpu.1]\nnvlink_errors = { "4" = { replay = 3 } }\n'
    )
    run(NvlinkCheck(), ctx_for(FakeNvml(str(scen)), state_dir=str(state)))
    assert path.stat().st_ino != first
    assert sorted(v["4"]["replay"] for v in json.loads(path.read_text()).values()) == [0, 3]
    path.write_text("{not json")
    run(NvlinkCheck(), ctx_for(FakeNvml(str(scen)), state_dir=str(state)))
    assert len(json.loads(path.read_text())) == 2


def _nvlink_counters(scenario: Path, profile: Any, state: Path) -> tuple[dict[str, Any], FakeNvml]:
    fake = FakeNvml(str(scenario))
    run(NvlinkCheck(), ctx_for(fake, profile, state_dir=str(state)))
    return json.loads((state / STATE_FILE).read_text()), fake


def test_nvlink_counters_one_field_query_per_gpu(tmp_path: Path) -> None:
    """One nvmlDeviceGetFieldValues per GPU asks every counter NVML has a
    field for: all four of links 0-11, replay and recovery of any link
    (scoped by the link).  The rest (the CRC counters of links 12-17 on an
    H100), and what the query says is NOT_SUPPORTED, are asked one at a
    time, as before, and land in the same place."""
    scen = tmp_path / "s.toml"
    errors = (
        'nvlink_errors = { "3" = { replay = 7, crc_data = "not_supported" },'
        ' "15" = { crc_data = 9, recovery = 2 } }'
    )
    scen.write_text(f'preset = "a100-sxm4-80gb"\ngpu_count = 2\n[gpu.1]\n{errors}\n')
    saved, fake = _nvlink_counters(scen, A100, tmp_path / "a100")
    assert fake.calls.count("nvmlDeviceGetFieldValues") == 2 * 2  # states, counters
    assert "nvmlDeviceGetNvLinkState" not in fake.calls
    # Only the counter the query could not answer is asked again (and is not supported).
    assert fake.calls.count("nvmlDeviceGetNvLinkErrorCounter") == 1
    assert len(saved) == 2 and all(len(v) == 12 for v in saved.values())
    assert sorted(v["3"]["replay"] for v in saved.values()) == [0, 7]
    # crc_data "not_supported" on GPU 1: left out there, as a single call's None was.
    assert sorted(len(v["3"]) for v in saved.values()) == [3, 4]

    scen.write_text(f'preset = "h100-sxm5-80gb"\ngpu_count = 1\n[gpu.0]\n{errors}\n')
    saved, fake = _nvlink_counters(scen, H100, tmp_path / "h100")
    assert fake.calls.count("nvmlDeviceGetFieldValues") == 2
    assert "nvmlDeviceGetNvLinkState" not in fake.calls
    # crc_flit and crc_data of links 12-17, and link 3's unsupported crc_data.
    assert fake.calls.count("nvmlDeviceGetNvLinkErrorCounter") == 6 * 2 + 1
    [links] = saved.values()
    assert links["3"] == {"replay": 7, "recovery": 0, "crc_flit": 0}
    assert links["15"] == {"replay": 0, "recovery": 2, "crc_flit": 0, "crc_data": 9}


def test_nvlink_counters_without_the_field_api(tmp_path: Path) -> None:
    """A driver without nvmlDeviceGetFieldValues: every counter one call at a
    time, with the same result."""
    scen = tmp_path / "s.toml"
    body = 'preset = "h100-sxm5-80gb"\ngpu_count = 1\n[gpu.0]\nnvlink_errors = { "3" = { replay = 7 } }\n'
    scen.write_text(body)
    batched, _ = _nvlink_counters(scen, H100, tmp_path / "batched")
    scen.write_text(
        body
        + 'errors = [{ function = "nvmlDeviceGetFieldValues", error = "FUNCTION_NOT_FOUND" }]\n'
    )
    single, fake = _nvlink_counters(scen, H100, tmp_path / "single")
    assert fake.calls.count("nvmlDeviceGetNvLinkErrorCounter") == 18 * 4
    assert fake.calls.count("nvmlDeviceGetNvLinkState") == 18
    assert single == batched


class _SleepingLink(FakeNvml):
    """A driver whose field query reports link 2 in a low-power state."""

    @staticmethod
    def _link_state_field(gpu: dict[str, Any], link: int) -> tuple[int, int]:
        if link == 2:
            return pynvml.NVML_SUCCESS, pynvml.NVML_NVLINK_STATE_SLEEP
        return FakeNvml._link_state_field(gpu, link)


class _UnscopedReplay(FakeNvml):
    """A driver that refuses the scoped replay field (an entry error)."""

    def _field(self, gpu: dict[str, Any], field: int, scope: int) -> tuple[int, int]:
        if field == pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT, 0
        return super()._field(gpu, field, scope)


def test_nvlink_counter_the_query_refuses_is_read_by_the_single_call(tmp_path: Path) -> None:
    scen = tmp_path / "s.toml"
    scen.write_text(
        'preset = "h100-sxm5-80gb"\ngpu_count = 1\n[gpu.0]\nnvlink_errors = { "14" = { replay = 3 } }\n'
    )
    fake = _UnscopedReplay(str(scen))
    run(NvlinkCheck(), ctx_for(fake, H100, state_dir=str(tmp_path)))
    [links] = json.loads((tmp_path / STATE_FILE).read_text()).values()
    assert links["14"]["replay"] == 3
    # replay, crc_flit and crc_data of links 12-17 one at a time.
    assert fake.calls.count("nvmlDeviceGetNvLinkErrorCounter") == 6 * 3


@pytest.mark.parametrize("profile, asked", [(H100, 18), ({}, 18)])
def test_nvlink_states_from_one_query_per_gpu(tmp_path: Path, profile: Any, asked: int) -> None:
    """The states come from one query: a link the query says is inactive
    is down, as nvmlDeviceGetNvLinkState's DISABLED was; a state it cannot
    map (sleep) is asked of nvmlDeviceGetNvLinkState for that link alone.
    Without a profile value the links are walked until NVML has no more,
    with the query's INVALID_ARGUMENT confirmed by the single call."""
    scen = tmp_path / "s.toml"
    scen.write_text('preset = "h100-sxm5-80gb"\ngpu_count = 1\n[gpu.0]\nnvlink_down = [5]\n')
    fake = _SleepingLink(str(scen))
    findings = run(NvlinkCheck(), ctx_for(fake, profile, state_dir=str(tmp_path)))
    [f] = [f for f in findings if f.is_problem]
    assert (f.code, f.values["down"], f.values["expected"]) == ("NVLINK_DOWN", "5", asked)
    assert fake.calls.count("nvmlDeviceGetNvLinkState") == 1  # link 2, asleep: enabled
    scen.write_text('preset = "a100-sxm4-80gb"\ngpu_count = 1\n')
    fake = FakeNvml(str(scen))
    assert [f.status for f in run(NvlinkCheck(), ctx_for(fake, {}, state_dir=str(tmp_path)))] == [
        Status.OK
    ]
    # 12 links answered; the query's "no link 12" confirmed once, then the walk stops.
    assert fake.calls.count("nvmlDeviceGetNvLinkState") == 1


def test_nvlink_field_query_errors_are_the_checks_errors(tmp_path: Path) -> None:
    """Any other failure of the query is that GPU's NVML error, as a single
    call's was: UNKNOWN for the GPU, never a healthy link."""
    scen = tmp_path / "s.toml"
    scen.write_text(
        'preset = "h100-sxm5-80gb"\ngpu_count = 1\n'
        'errors = [{ function = "nvmlDeviceGetFieldValues", error = "UNKNOWN" }]\n'
    )
    [f] = run(NvlinkCheck(), ctx_for(FakeNvml(str(scen)), H100, state_dir=str(tmp_path)))
    assert (f.status, f.component.index, f.values["nvml_error"]) == (Status.UNKNOWN, 0, "UNKNOWN")


def test_nvlink_missing_links_and_unsupported(tmp_path: Path) -> None:
    scen = tmp_path / "s.toml"
    scen.write_text('preset = "a100-sxm4-80gb"\ngpu_count = 1\n')  # 12 links
    [f] = run(NvlinkCheck(), ctx_for(FakeNvml(str(scen)), H100, state_dir=str(tmp_path)))
    assert f.code == "NVLINK_DOWN" and f.values["missing"] == "12,13,14,15,16,17"
    scen.write_text("gpu_count = 1\n[defaults]\nnvlinks = 0\n")  # a PCIe card
    [f] = run(NvlinkCheck(), ctx_for(FakeNvml(str(scen)), H100, state_dir=str(tmp_path)))
    assert (f.status, f.code) == (Status.FAIL, "NVLINK_DOWN")
    [f] = run(NvlinkCheck(), ctx_for(FakeNvml(str(scen)), {}, state_dir=str(tmp_path)))
    assert f.status == Status.OK


def test_nvlink_state_dir_unwritable_still_judges(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    findings = run(NvlinkCheck(), ctx_for("h100_faults.toml", state_dir=str(blocker / "sub")))
    assert ("NVLINK_DOWN", 5) in problems(findings)


def test_throttle_falls_back_to_throttle_reasons_on_old_driver(tmp_path: Path) -> None:
    scen = tmp_path / "s.toml"
    scen.write_text(
        'preset = "h100-sxm5-80gb"\ngpu_count = 1\n[defaults]\nthrottle = ["hw_thermal"]\n'
        'errors = [{ function = "nvmlDeviceGetCurrentClocksEventReasons", error = "FUNCTION_NOT_FOUND" }]\n'
    )
    fake = FakeNvml(str(scen))
    [f] = run(ThrottleCheck(), ctx_for(fake))
    assert (f.code, f.status) == ("GPU_THROTTLE", Status.FAIL)
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in fake.calls
    [f] = run(
        ThrottleCheck(),
        ctx_for(fake, settings={"fail_reasons": [], "warn_reasons": ["hw_thermal"]}),
    )
    assert (f.status, f.action) == (Status.WARN, Action.NONE)


def test_temperature_thresholds_profile_then_settings(tmp_path: Path) -> None:
    scen = tmp_path / "s.toml"
    scen.write_text(
        "gpu_count = 3\n[gpu.0]\ntemperature = 40\n[gpu.1]\ntemperature = 86\n[gpu.2]\ntemperature = 89\n"
    )
    found = problems(run(GpuTempCheck(), ctx_for(FakeNvml(str(scen)), H100)))
    assert found[("GPU_TEMP", 1)].status == Status.WARN
    assert found[("GPU_TEMP", 2)].status == Status.FAIL
    found = problems(
        run(GpuTempCheck(), ctx_for(FakeNvml(str(scen)), {}, settings={"warn_c": 30, "fail_c": 87}))
    )
    assert [(k[1], f.status) for k, f in sorted(found.items())] == [
        (0, Status.WARN),
        (1, Status.WARN),
        (2, Status.FAIL),
    ]


def test_gpu_memory_held_with_no_process_asks_for_a_reset(tmp_path: Path) -> None:
    """Held: 30 GiB in use and no process, at both looks.  Not held: a
    process is listed (a user's: whatever they leave running is theirs, not
    this finding), a MIG GPU (its memory is its instances'), a little
    memory, or memory freed by the second look."""
    gpus = {
        "0": {"memory_used_mib": 30000},
        "1": {"memory_used_mib": 30000, "processes": [4242]},
        "2": {"memory_used_mib": 30000, "mig": True},
        "3": {"memory_used_mib": 200},
    }
    scenario = tmp_path / "held.json"
    scenario.write_text(json.dumps({"preset": "h100-sxm5-80gb", "gpu_count": 4, "gpu": gpus}))
    slept: list[float] = []
    ctx = ctx_for(FakeNvml(str(scenario)), load_builtin("h100-sxm5-80gb"))
    ctx.services["sleep"] = slept.append
    findings = run(GpuMemoryCheck(), ctx)
    assert [(f.code, f.component.index, f.action) for f in findings] == [
        ("GPU_MEMORY_HELD", 0, Action.RESET_GPU)
    ]
    assert findings[0].values == {"used_mib": 30000, "processes": 0} and slept == [2.0]

    def freed(seconds: float) -> None:  # the exiting process's memory comes back meanwhile
        slept.append(seconds)
        gpus["0"] = {"memory_used_mib": 0}
        scenario.write_text(json.dumps({"preset": "h100-sxm5-80gb", "gpu_count": 4, "gpu": gpus}))

    ctx.services["sleep"] = freed
    assert [f.status for f in run(GpuMemoryCheck(), ctx)] == [Status.OK]
    # Nothing suspect: no second look, no wait.
    slept.clear()
    assert [f.status for f in run(GpuMemoryCheck(), ctx)] == [Status.OK] and slept == []
    # In a PID namespace of its own (slurmd in a pod), a process NVML does
    # not list there would look like held memory: it is not judged at all.
    gpus["0"] = {"memory_used_mib": 30000}
    scenario.write_text(json.dumps({"preset": "h100-sxm5-80gb", "gpu_count": 4, "gpu": gpus}))
    ctx.services["host_pid_namespace"] = lambda: False
    (f,) = run(GpuMemoryCheck(), ctx)
    assert f.status is Status.OK and "host's PID namespace" in f.message


def test_the_host_pid_namespace_is_told_from_a_containers() -> None:
    import os
    import subprocess
    import sys

    from slurm_hooks.detect.checks.gpu_memory import host_pid_namespace

    if os.geteuid() != 0:
        pytest.skip("a new PID namespace needs root (the test command runs as root)")
    code = "from slurm_hooks.detect.checks.gpu_memory import host_pid_namespace as h; print(h())"
    assert host_pid_namespace("/nonexistent") is False  # cannot tell: not the host's
    out = subprocess.run(["unshare", "--pid", "--fork", "--", sys.executable, "-c", code],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "False"


def test_driver_version_rules() -> None:
    assert version_matches("550.54.15", "550")
    assert version_matches("550.54.15", "550.54.15")
    assert not version_matches("550.54.14", "550.54.15")
    assert not version_matches("5500.1", "550")
    pinned = H100.__class__(**{**dict(H100), "driver_version": "535"})
    [f] = run(DriverCheck(), ctx_for("h100_healthy.toml", pinned))
    assert (f.status, f.code, f.action) == (Status.FAIL, "DRIVER_VERSION", Action.DRAIN)
    newer = H100.__class__(**{**dict(H100), "driver_min_version": "560.28.03"})
    [f] = run(DriverCheck(), ctx_for("h100_healthy.toml", newer))
    assert "older than the minimum" in f.message


def test_fabric_states(tmp_path: Path) -> None:
    [f, *rest] = run(FabricCheck(), ctx_for("fm_in_progress.toml"))
    assert (f.status, f.code) == (Status.WARN, "FABRIC_MANAGER") and len(rest) == 7
    scen = tmp_path / "s.toml"
    scen.write_text(
        'preset = "h100-sxm5-80gb"\ngpu_count = 3\n'
        '[gpu.0]\nfabric = { state = "completed", status = "NOT_READY" }\n'
        '[gpu.1]\nfabric = { state = "completed", health_summary = "unhealthy" }\n'
        '[gpu.2]\nfabric = "not_supported"\n'
    )
    found = problems(run(FabricCheck(), ctx_for(FakeNvml(str(scen)))))
    assert found[("FABRIC_MANAGER", 0)].values["status"] == "NOT_READY"
    assert found[("FABRIC_MANAGER", 1)].values["health"] == "unhealthy"
    # The H100 profile expects a fabric manager: no fabric info is UNKNOWN there...
    assert found[("CHECK_UNKNOWN", 2)].status == Status.UNKNOWN
    # ...and simply not applicable without that expectation.
    relaxed = problems(run(FabricCheck(), ctx_for(FakeNvml(str(scen)), {})))
    assert ("CHECK_UNKNOWN", 2) not in relaxed


def test_ecc_not_supported_and_aggregate_limit(tmp_path: Path) -> None:
    scen = tmp_path / "s.toml"
    scen.write_text(
        'gpu_count = 2\n[gpu.0]\necc = "not_supported"\n[gpu.1]\necc = { aggregate_uncorrected = 4 }\n'
    )
    [f] = run(EccCheck(), ctx_for(FakeNvml(str(scen)), {}))
    assert f.status == Status.OK and f.values["ecc_supported"] == 1
    found = problems(
        run(EccCheck(), ctx_for(FakeNvml(str(scen)), {}, settings={"max_aggregate_uncorrected": 3}))
    )
    assert found[("ECC_DBE_AGGREGATE", 1)].status == Status.WARN


def test_retired_pages_pending_asks_for_a_reset() -> None:
    # Pre-Ampere page retirement: one GPU with pages pending, one that has
    # them retired already, one that answers NOT_SUPPORTED (A100 and later).
    fake = FakeNvml(
        {
            "gpu_count": 3,
            "gpu": {
                "0": {"retired_pages_pending": True},
                "1": {"retired_pages_pending": False},
                "2": {"retired_pages_pending": "not_supported"},
            },
        }
    )
    [f] = run(RetiredPagesCheck(), ctx_for(fake, {}))
    assert (f.check, f.status, f.code, f.action) == (
        "retired_pages",
        Status.FAIL,
        "RETIRED_PAGES_PENDING",
        Action.RESET_GPU,
    )
    assert f.component.index == 0 and f.values == {"pending": True}
    assert f.message == "gpu0: retired pages pending; reset the GPU to retire them"


def test_bad_check_settings_name_file_and_key() -> None:
    ctx = CheckContext(
        node="n",
        phase=Phase.HEALTHCHECK,
        profile=H100,
        settings={"enabled": True, "warn_cc": 3},
        config_path="/etc/slurm-hooks/config.toml",
        services={"nvml": NvmlSession(nvml=FakeNvml(str(DATA / "h100_healthy.toml")))},
    )
    from slurm_hooks.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"/etc/slurm-hooks/config.toml:checks.gpu_temp.warn_cc"):
        run(GpuTempCheck(), ctx)


def test_lost_gpu_is_named_from_the_driver_procfs(tmp_path: Path) -> None:
    """NVML cannot name a lost GPU; /proc/driver/nvidia/gpus still can."""
    proc = tmp_path / "gpus"
    for bus, uuid in (("0000:18:00.0", "GPU-aaaa"), ("0000:2a:00.0", "GPU-bbbb")):
        (proc / bus).mkdir(parents=True)
        (proc / bus / "information").write_text(
            f"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 123\nGPU UUID: \t {uuid}\n"
            f"Video BIOS: \t 96.00.74.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
            f"DMA Mask: \t 0xfffffffffffff\nBus Location: \t {bus}\nDevice Minor: \t 0\n"
            "GPU Excluded:\t No\n"
        )
    scen = tmp_path / "s.toml"
    scen.write_text('preset = "h100-sxm5-80gb"\ngpu_count = 2\n[gpu.0]\nlost = true\n')
    session = NvmlSession(nvml=FakeNvml(str(scen)), proc_gpus=str(proc))
    ctx = CheckContext(node="n", phase=Phase.HEALTHCHECK, profile=H100, services={"nvml": session})
    [f] = [f for f in run(GpuLostCheck(), ctx) if f.is_problem]
    assert (f.component.index, f.component.pci, f.component.uuid) == (
        0,
        "00000000:18:00.0",
        "GPU-aaaa",
    )
