"""What keeps a healthy hook cheap: no NVML on a node without an NVIDIA
device, no metrics module without node_exporter's directory, entry-point
answers remembered in the state directory.  Timing is
bench/bench_healthcheck.py's job; these pin the behaviour."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from slurm_hooks.act import metrics
from slurm_hooks.agent import hook
from slurm_hooks.core import config, plugins
from slurm_hooks.core.errors import ConfigError
from slurm_hooks.detect import runner
from slurm_hooks.detect.probes import nvml, pci
from slurm_hooks.detect.profiles import Profile

# Lines as linux drivers/pci/proc.c show_device writes them: "%02x%02x\t%04x%04x\t%x" ...
CPU_BUS = "0000\t80860d57\t0\t0\t0\n0008\t1af41045\t0\t4000000004\t0\n"
GPU_BUS = CPU_BUS + "1b00\t10de2330\t1ff\t0\t0\n"


def _bus(tmp_path: Path, text: str, name: str = "devices") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_vendor_present_reads_the_vendor_half_of_the_id(tmp_path: Path) -> None:
    assert pci.vendor_present(pci.NVIDIA_VENDOR, _bus(tmp_path, GPU_BUS)) is True
    assert pci.vendor_present(pci.NVIDIA_VENDOR, _bus(tmp_path, CPU_BUS)) is False
    # 10de as the *device* half is not an NVIDIA device.
    assert pci.vendor_present(pci.NVIDIA_VENDOR, _bus(tmp_path, "0000\t808610de\t0\n")) is False


@pytest.mark.parametrize("text", ["", "garbage\n", "0000 10de2330\n"])
def test_an_unreadable_bus_list_proves_nothing(tmp_path: Path, text: str) -> None:
    assert pci.vendor_present(pci.NVIDIA_VENDOR, _bus(tmp_path, text)) is None
    assert pci.vendor_present(pci.NVIDIA_VENDOR, str(tmp_path / "absent")) is None


def test_no_gpu_reason(tmp_path: Path) -> None:
    cpu, gpu = _bus(tmp_path, CPU_BUS, "cpu"), _bus(tmp_path, GPU_BUS, "gpu")
    unset = Profile(name="x")
    assert runner.no_gpu_reason(Profile(gpu_count=0), "pynvml", gpu) == "profile expects no GPUs"
    no_driver = (str(tmp_path / "no-driver"),)
    assert runner.no_gpu_reason(unset, "pynvml", cpu, no_driver) == runner.NO_NVIDIA_DEVICE
    assert runner.no_gpu_reason(unset, "pynvml", gpu) is None
    # A loaded driver wins over a PCI list without the GPU (a container's).
    driver = tmp_path / "nvidiactl"
    driver.write_text("")
    assert runner.no_gpu_reason(unset, "pynvml", cpu, (str(driver),)) is None
    assert runner.no_gpu_reason(unset, "pynvml", cpu, (str(tmp_path / "none"),)) == (
        runner.NO_NVIDIA_DEVICE
    )
    assert runner.no_gpu_reason(unset, "pynvml", str(tmp_path / "absent")) is None
    # A profile that expects GPUs is checked whatever the bus says (a GPU
    # that fell off the bus is what the checks are for), and a named fake
    # NVML stands in for the hardware.
    assert runner.no_gpu_reason(Profile(gpu_count=8), "pynvml", cpu) is None
    assert runner.no_gpu_reason(unset, "lab:fake", cpu) is None
    assert runner.REAL_NVML == nvml.DEFAULT_BACKEND


def test_no_profile_on_a_cpu_node_skips_the_gpu_checks_without_nvml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pci, "PROC_PCI_DEVICES", _bus(tmp_path, CPU_BUS))
    cfg = config.parse(f'[general]\nstate_dir = "{tmp_path / "state"}"\n', validate=False)
    rs = runner.setup(cfg, node="n1")
    assert rs.no_gpu == runner.NO_NVIDIA_DEVICE and "nvml" not in rs.services
    result = runner.run_phase("healthcheck", run_setup=rs, only=["gpu_count", "ecc"])
    assert [(f.check, f.status.name, f.message) for f in result.findings] == [
        (name, "OK", f"not applicable: {runner.NO_NVIDIA_DEVICE}") for name in ("gpu_count", "ecc")
    ]


def test_no_profile_with_an_nvidia_device_still_asks_nvml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pci, "PROC_PCI_DEVICES", _bus(tmp_path, GPU_BUS))
    cfg = config.parse(f'[general]\nstate_dir = "{tmp_path / "state"}"\n', validate=False)
    rs = runner.setup(cfg, node="n1")
    assert rs.no_gpu is None and isinstance(rs.services["nvml"], nvml.NvmlSession)


def test_metrics_default_dir_is_the_metrics_modules(tmp_path: Path) -> None:
    assert hook.METRICS_DEFAULT_DIR == metrics.DEFAULT_TEXTFILE_DIR
    # A configured directory still goes through the typed section (and warns).
    cfg = config.parse(f'[metrics]\ntextfile_dir = "{tmp_path / "nope"}"\n', validate=False)
    assert hook.write_metrics("healthcheck", cfg, [], 0.1) is None
    cfg = config.parse(f'[metrics]\ntextfile_dir = "{tmp_path}"\n', validate=False)
    assert hook.write_metrics("healthcheck", cfg, [], 0.1) == str(
        tmp_path / "slurm_hooks_healthcheck.prom"
    )


# -- entry-point answers remembered -----------------------------------------


@pytest.fixture
def cache_dir(tmp_path: Path):
    plugins.remember_in(str(tmp_path))
    yield tmp_path
    plugins.remember_in(None)


def test_a_resolved_entry_point_is_remembered_and_used_without_a_scan(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = plugins.resolve(nvml.PLUGIN_GROUP, "lab:fake", {})
    doc = json.loads((cache_dir / plugins.CACHE_FILE).read_text())
    assert doc["entries"] == {"slurm_hooks.nvml:lab:fake": "slurm_hooks_lab.fake_nvml:backend"}
    import importlib.metadata

    def no_scan(**_kw: object) -> None:
        raise AssertionError("entry points scanned although the answer is remembered")

    monkeypatch.setattr(importlib.metadata, "entry_points", no_scan)
    assert plugins.resolve(nvml.PLUGIN_GROUP, "lab:fake", {}) is first


def test_a_changed_sys_path_or_a_broken_answer_scans_again(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugins.resolve(nvml.PLUGIN_GROUP, "lab:fake", {})
    path = cache_dir / plugins.CACHE_FILE
    doc = json.loads(path.read_text())
    doc["entries"]["slurm_hooks.nvml:lab:fake"] = "no_such_module_xyz:backend"
    path.write_text(json.dumps(doc))
    # The broken answer is not used: the scan finds the real one and rewrites it.
    assert plugins.resolve(nvml.PLUGIN_GROUP, "lab:fake", {}) is not None
    assert "fake_nvml" in json.loads(path.read_text())["entries"]["slurm_hooks.nvml:lab:fake"]
    # A distribution installed anywhere on sys.path (a new directory there) drops the cache.
    monkeypatch.setattr(sys, "path", [*sys.path, str(cache_dir)])
    (cache_dir / "new.dist-info").mkdir()
    assert plugins._read_cache(str(path)) == {}


def test_unknown_names_are_never_remembered(cache_dir: Path) -> None:
    with pytest.raises(ConfigError, match="unknown backend"):
        plugins.resolve(nvml.PLUGIN_GROUP, "nope", {})
    assert not (cache_dir / plugins.CACHE_FILE).exists()
