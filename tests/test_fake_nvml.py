"""The fake NVML must behave like pynvml wherever our probes can tell."""

from __future__ import annotations

import inspect
import os
import re
import time
from ctypes import byref
from pathlib import Path

import pynvml
import pytest
from slurm_hooks_lab.fake_nvml import PRESETS, FakeNvml, Scenario

from slurm_hooks.core.errors import NvmlError
from slurm_hooks.detect.probes import nvml as nvml_probe

DATA = Path(__file__).parent / "data" / "nvml"


@pytest.fixture
def fake() -> FakeNvml:
    f = FakeNvml(str(DATA / "h100_faults.toml"))
    f.nvmlInit()
    return f


def test_every_modelled_function_exists_in_pynvml_with_compatible_arity() -> None:
    for name, fn in inspect.getmembers(FakeNvml, inspect.isfunction):
        if not name.startswith("nvml"):
            continue
        real = getattr(pynvml, name)
        real_params = [
            p for p in inspect.signature(real).parameters.values() if p.default is p.empty
        ]
        fake_params = list(inspect.signature(fn).parameters.values())[1:]
        fake_required = [p for p in fake_params if p.default is p.empty]
        assert len(fake_required) == len(real_params), name


def test_constants_and_error_classes_are_pynvml_own(fake: FakeNvml) -> None:
    assert fake.NVML_VOLATILE_ECC is pynvml.NVML_VOLATILE_ECC
    assert fake.NVMLError_GpuIsLost is pynvml.NVMLError_GpuIsLost
    assert fake.nvmlPciInfo_t is pynvml.nvmlPciInfo_t


def test_lost_gpu_raises_real_pynvml_subclass(fake: FakeNvml) -> None:
    with pytest.raises(pynvml.NVMLError_GpuIsLost) as info:
        fake.nvmlDeviceGetHandleByIndex(0)
    assert info.value.value == pynvml.NVML_ERROR_GPU_IS_LOST
    assert str(info.value) == "GPU is lost"


def test_calls_before_init_are_uninitialized() -> None:
    f = FakeNvml(str(DATA / "h100_healthy.toml"))
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        f.nvmlDeviceGetCount()
    f.nvmlInit()
    assert f.nvmlDeviceGetCount() == 8
    f.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        f.nvmlDeviceGetCount()


def test_return_types_mirror_pynvml(fake: FakeNvml) -> None:
    h = fake.nvmlDeviceGetHandleByIndex(1)
    pci = fake.nvmlDeviceGetPciInfo(h)
    assert isinstance(pci, pynvml.nvmlPciInfo_t)
    # pynvml's structures decode char arrays to str on Python 3.
    assert pci.busId == "00000000:2A:00.0"
    assert pci.bus == 0x2A
    assert isinstance(fake.nvmlDeviceGetName(h), str)
    assert fake.nvmlDeviceGetUUID(h).startswith("GPU-")
    mem = fake.nvmlDeviceGetMemoryInfo(h)
    assert isinstance(mem, pynvml.c_nvmlMemory_t)
    assert mem.total == 81559 * 1024 * 1024
    assert fake.nvmlDeviceGetRemappedRows(fake.nvmlDeviceGetHandleByIndex(2)) == (0, 1, 1, 0)
    assert fake.nvmlSystemGetDriverVersion() == "550.54.15"


def test_index_and_link_validation(fake: FakeNvml) -> None:
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetHandleByIndex(8)
    h = fake.nvmlDeviceGetHandleByIndex(5)
    assert fake.nvmlDeviceGetNvLinkState(h, 3) == pynvml.NVML_FEATURE_DISABLED
    assert fake.nvmlDeviceGetNvLinkState(h, 4) == pynvml.NVML_FEATURE_ENABLED
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetNvLinkState(h, 18)


def test_field_values_speak_pynvmls_interface(tmp_path: Path) -> None:
    """nvmlDeviceGetFieldValues as pynvml returns it: an array of
    c_nvmlFieldValue_t, one status per entry, field ids or (id, scope)."""
    scen = tmp_path / "s.toml"
    scen.write_text(
        "gpu_count = 1\n[defaults]\nnvlinks = 4\n"
        'nvlink_errors = { "1" = { replay = 5, crc_data = "not_supported" } }\n'
    )
    f = FakeNvml(str(scen))
    f.nvmlInit()
    h = f.nvmlDeviceGetHandleByIndex(0)
    asked = [
        pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L1,
        (pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L1, 0),
        pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L1,
        pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L5,  # the GPU has 4 links
        pynvml.NVML_FI_DEV_ECC_CURRENT,  # not modelled
        (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, 1),  # scoped by the link
        (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, 9),
    ]
    values = f.nvmlDeviceGetFieldValues(h, asked)
    assert all(isinstance(v, pynvml.c_nvmlFieldValue_t) for v in values)
    assert [v.fieldId for v in values] == [a if isinstance(a, int) else a[0] for a in asked]
    assert [v.nvmlReturn for v in values] == [
        pynvml.NVML_SUCCESS,
        pynvml.NVML_SUCCESS,
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_INVALID_ARGUMENT,
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_SUCCESS,
        pynvml.NVML_ERROR_INVALID_ARGUMENT,
    ]
    assert [v.scopeId for v in values][-2:] == [1, 9]
    assert values[5].value.ullVal == 5
    assert values[0].valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    assert (values[0].value.ullVal, values[1].value.ullVal) == (5, 0)
    assert f.calls.count("nvmlDeviceGetFieldValues") == 1
    scen.write_text("gpu_count = 1\n[gpu.0]\nlost = true\n")
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        f.nvmlDeviceGetFieldValues(h, asked)


def test_not_supported_features_per_preset() -> None:
    f = FakeNvml(str(DATA / "a100_healthy.toml"))
    f.nvmlInit()
    h = f.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        f.nvmlDeviceGetRetiredPagesPendingStatus(h)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        f.nvmlDeviceGetGpuFabricInfoV(h, byref(pynvml.c_nvmlGpuFabricInfo_v2_t()))


def test_fabric_info_fills_struct_passed_by_reference(fake: FakeNvml) -> None:
    info = pynvml.c_nvmlGpuFabricInfo_v3_t()
    assert fake.nvmlDeviceGetGpuFabricInfoV(fake.nvmlDeviceGetHandleByIndex(7), byref(info)) == 0
    assert info.state == pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED
    info = pynvml.c_nvmlGpuFabricInfo_v3_t()
    fake.nvmlDeviceGetGpuFabricInfoV(fake.nvmlDeviceGetHandleByIndex(1), byref(info))
    assert info.state == pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
    assert info.status == pynvml.NVML_SUCCESS


def test_function_not_modelled_raises_function_not_found(fake: FakeNvml) -> None:
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        fake.nvmlDeviceGetPowerUsage(fake.nvmlDeviceGetHandleByIndex(1))


def test_error_rules_raise_from_the_named_function_only() -> None:
    f = FakeNvml(str(DATA / "h100_midcheck_error.toml"))
    f.nvmlInit()
    h2 = f.nvmlDeviceGetHandleByIndex(2)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        f.nvmlDeviceGetTotalEccErrors(h2, 1, 0)
    with pytest.raises(pynvml.NVMLError_Unknown):
        f.nvmlDeviceGetTemperature(h2, pynvml.NVML_TEMPERATURE_GPU)
    assert f.nvmlDeviceGetTotalEccErrors(f.nvmlDeviceGetHandleByIndex(1), 1, 0) == 0
    assert f.nvmlDeviceGetPersistenceMode(h2) == 1


def test_json_scenario_init_error() -> None:
    f = FakeNvml(str(DATA / "driver_not_loaded.json"))
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        f.nvmlInit()


def test_scenario_reloads_when_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('preset = "h100-sxm5-80gb"\ngpu_count = 2\n')
    f = FakeNvml(str(path))
    f.nvmlInit()
    assert f.nvmlDeviceGetHandleByIndex(1) is not None
    path.write_text('preset = "h100-sxm5-80gb"\ngpu_count = 2\n[gpu.1]\nlost = true\n')
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        f.nvmlDeviceGetHandleByIndex(1)
    # A broken edit keeps the last good scenario instead of crashing the watcher.
    path.write_text("gpu_count = [")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 2_000_000))
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        f.nvmlDeviceGetHandleByIndex(1)
    assert f.nvmlDeviceGetCount() == 2


@pytest.mark.parametrize(
    "data, key",
    [
        ({"gpu_cout": 8}, "gpu_cout"),
        ({"gpu_count": 2, "gpu": {"1": {"tempreature": 3}}}, "gpu.1.tempreature"),
        ({"gpu_count": 2, "gpu": {"5": {"lost": True}}}, "gpu.5"),
        ({"preset": "b200"}, "preset"),
        ({"errors": [{"function": "nvmlInit", "error": "NOPE"}]}, "errors[0].error"),
    ],
)
def test_bad_scenarios_name_the_key(data: dict, key: str) -> None:
    with pytest.raises(NvmlError, match=re.escape(f"s.toml:{key}:")):
        Scenario(data, source="s.toml")


def test_every_preset_builds() -> None:
    for name in PRESETS:
        sc = Scenario({"preset": name, "gpu_count": 8})
        assert len({g["pci_bus_id"] for g in sc.gpus}) == 8
        assert len({g["uuid"] for g in sc.gpus}) == 8


def test_nvml_backend_by_name_never_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """pynvml unless a backend is named; the old environment variable is ignored."""
    from slurm_hooks.core.errors import ConfigError

    monkeypatch.setenv("SLURM_HOOKS_NVML_SCENARIO", str(DATA / "h100_healthy.toml"))
    assert nvml_probe.load_nvml() is pynvml
    assert isinstance(nvml_probe.load_nvml("lab:fake", DATA / "h100_healthy.toml"), FakeNvml)
    with pytest.raises(ConfigError, match="unknown backend 'fake'.*lab:fake.*pynvml"):
        nvml_probe.load_nvml("fake", DATA / "h100_healthy.toml")
    with pytest.raises(ConfigError, match="nvml_scenario"):
        nvml_probe.load_nvml("pynvml", DATA / "h100_healthy.toml")
    with pytest.raises(ConfigError, match="needs a scenario"):
        nvml_probe.load_nvml("lab:fake")


def test_nvml_scenario_without_a_fake_backend_is_a_config_error(tmp_path: Path) -> None:
    from slurm_hooks.core.errors import ConfigError
    from slurm_hooks.detect.checks.settings import ChecksConfig

    with pytest.raises(ConfigError, match="checks.nvml_scenario"):
        ChecksConfig.from_section({"nvml_scenario": "x.toml"}, path=None, prefix="checks")
    cfg = ChecksConfig.from_section(
        {"nvml": "lab:fake", "nvml_scenario": "x.toml"}, path=None, prefix="checks"
    )
    assert (cfg.nvml, cfg.nvml_scenario) == ("lab:fake", "x.toml")


def test_real_pynvml_without_driver_fails_init_cleanly() -> None:
    """No GPU here: the real library is missing, and the session remembers it."""
    session = nvml_probe.NvmlSession(nvml=pynvml)
    with pytest.raises(pynvml.NVMLError) as first:
        _ = session.nvml
    with pytest.raises(pynvml.NVMLError) as second:
        _ = session.nvml
    assert first.value is second.value
    assert nvml_probe.error_name(first.value) in ("LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED")


def test_session_inits_once_and_caches_identity() -> None:
    f = FakeNvml(str(DATA / "h100_healthy.toml"))
    s = nvml_probe.NvmlSession(nvml=f)
    assert s.device_count() == 8
    c1 = s.identity(3)
    c2 = s.identity(3)
    assert c1 == c2 and c1.pci == "00000000:5D:00.0" and c1.uuid
    assert f.calls.count("nvmlInit") == 1
    assert f.calls.count("nvmlDeviceGetUUID") == 1
    s.close()
    assert f.calls[-1] == "nvmlShutdown"


def test_lost_gpu_fails_queries_through_a_handle_taken_before(tmp_path):
    """A watcher keeps one NVML session: a GPU that falls off the bus after
    its handle was taken must fail every query, as real NVML does."""
    import json

    import pynvml
    from slurm_hooks_lab.fake_nvml import FakeNvml

    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"preset": "h100-sxm5-80gb", "gpu_count": 2}))
    nvml = FakeNvml(path)
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(1)
    assert nvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU) > 0
    path.write_text(
        json.dumps({"preset": "h100-sxm5-80gb", "gpu_count": 2, "gpu": {"1": {"lost": True}}})
    )
    import os

    os.utime(path, (1, 2_000_000_000))  # make sure the reload sees a new mtime
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetHandleByIndex(1)


def test_unknown_nvml_backend_is_a_config_error_of_the_run_not_a_gpu_fault(tmp_path: Path) -> None:
    """A typo in ``nvml`` must not look like a node whose GPUs are gone (that
    would drain every node with the bad config): the run cannot start."""
    from slurm_hooks.core.config import parse
    from slurm_hooks.core.errors import ConfigError
    from slurm_hooks.detect import runner

    text = f'[general]\nstate_dir = "{tmp_path}"\n[checks]\nnvml = "lab:fak"\n'
    cfg = parse(text, path=str(tmp_path / "c.toml"), validate=False)
    with pytest.raises(ConfigError, match="checks.nvml: unknown backend 'lab:fak'"):
        runner.run_phase("healthcheck", cfg=cfg, node="n1", profile="h100-sxm5-80gb")
