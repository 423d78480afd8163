"""Bus id -> GPU index/UUID through NVML (fake) or /proc/driver/nvidia."""

from __future__ import annotations

from pathlib import Path

from slurm_hooks_lab.fake_nvml import FakeNvml

from slurm_hooks.detect.xid.pci import gpu_map, gpus_from_nvml, gpus_from_procfs, lookup

INFO = """Model: 		 NVIDIA H100 80GB HBM3
IRQ:   		 0
GPU UUID: 	 GPU-6f4a1c2e-0b8d-4e1f-9a3b-2c7d5e8f1a0b
Video BIOS: 	 96.00.99.00.01
Bus Type: 	 PCIe
DMA Size: 	 52 bits
DMA Mask: 	 0xfffffffffffff
Bus Location: 	 0000:3b:00.0
Device Minor: 	 2
GPU Excluded:	 No
"""


def fake() -> FakeNvml:
    nv = FakeNvml(
        {
            "gpu_count": 2,
            "gpu": {
                "0": {"pci_bus_id": "00000000:3B:00.0"},
                "1": {"pci_bus_id": "00000000:86:00.0"},
            },
        }
    )
    nv.nvmlInit()
    return nv


def test_from_nvml() -> None:
    gpus = gpus_from_nvml(fake())
    assert sorted(gpus) == ["0000:3b:00.0", "0000:86:00.0"]
    ref = lookup("0000:86:00.0", gpus)
    assert ref is not None and ref.index == 1 and ref.uuid and ref.uuid.startswith("GPU-")


def test_from_procfs(tmp_path: Path) -> None:
    d = tmp_path / "0000:3b:00.0"
    d.mkdir()
    (d / "information").write_text(INFO)
    (tmp_path / "not-a-gpu").mkdir()
    gpus = gpus_from_procfs(str(tmp_path))
    assert list(gpus) == ["0000:3b:00.0"]
    assert gpus["0000:3b:00.0"].index == 0  # its place in bus order, not Device Minor 2
    assert gpus["0000:3b:00.0"].uuid == "GPU-6f4a1c2e-0b8d-4e1f-9a3b-2c7d5e8f1a0b"


def test_gpu_map_falls_back_to_procfs(tmp_path: Path) -> None:
    class Broken:
        def nvmlDeviceGetCount(self) -> int:
            raise RuntimeError("driver not loaded")

    d = tmp_path / "0000:86:00.0"
    d.mkdir()
    (d / "information").write_text(INFO.replace("Device Minor: \t 2", "Device Minor: \t 5"))
    assert gpu_map(Broken(), str(tmp_path))["0000:86:00.0"].index == 0  # not Device Minor 5
    assert gpu_map(fake(), str(tmp_path))["0000:86:00.0"].index == 1
    assert gpu_map(None, str(tmp_path / "missing")) == {}
    assert lookup(None, {}) is None


def test_lost_gpu_is_named_from_the_map_kept_while_it_answered(tmp_path: Path) -> None:
    """XID 79: NVML can no longer name the GPU that fell off the bus, but the
    drain reason must still say which GPU it was."""
    import json

    from slurm_hooks.detect.xid.pci import load_known, remember

    scenario = tmp_path / "gpus.json"
    gpus = {"0": {"pci_bus_id": "00000000:3B:00.0"}, "1": {"pci_bus_id": "00000000:86:00.0"}}
    scenario.write_text(json.dumps({"gpu_count": 2, "gpu": gpus}))
    nv = FakeNvml(str(scenario))
    nv.nvmlInit()
    state = str(tmp_path / "state")
    kept = remember(state, nv, now=1000.0)
    assert kept is not None and kept["0000:86:00.0"].index == 1
    assert remember(state, nv, now=1001.0) is None  # unchanged and fresh: no rewrite

    gpus["1"]["lost"] = True
    scenario.write_text(json.dumps({"gpu_count": 2, "gpu": gpus}))
    import os

    os.utime(scenario, (1, 2_000_000_000))
    assert remember(state, nv, now=5000.0) is None  # incomplete: the last full map stays
    now_seen = gpus_from_nvml(nv)
    assert list(now_seen) == ["0000:3b:00.0"]  # the sibling is still named
    ref = lookup("0000:86:00.0", gpu_map(nv, str(tmp_path / "no-procfs"), load_known(state)))
    assert ref is not None and ref.index == 1 and ref.uuid == kept["0000:86:00.0"].uuid


def test_xid_path_names_a_lost_gpu_as_nvml_did_where_minors_are_out_of_bus_order(
    tmp_path: Path,
) -> None:
    """Device minors are not always bus order (a host's minor 0 on the GPU
    nvidia-smi calls 3; ceems-dev/ceems discussion 513).  The XID path's
    procfs fallback named the GPU behind an XID 79 by its minor, so the drain
    reason said gpu3 where NVML and the GPU checks say gpu0, and the repair's
    ``nvidia-smi -r -i 3`` reset a healthy GPU.  Both paths now give the
    GPU's place in bus order."""
    from slurm_hooks.detect.probes.nvml import NvmlSession

    proc = tmp_path / "gpus"
    minors = {"0000:18:00.0": 3, "0000:2a:00.0": 2, "0000:9a:00.0": 1, "0000:ab:00.0": 0}
    for bus, minor in minors.items():
        (proc / bus).mkdir(parents=True)
        (proc / bus / "information").write_text(
            INFO.replace("0000:3b:00.0", bus)
            .replace("Device Minor: \t 2", f"Device Minor: \t {minor}")
            .replace("GPU-6f4a1c2e", f"GPU-{minor}")
        )
    scen = tmp_path / "s.toml"
    scen.write_text('preset = "h100-sxm5-80gb"\ngpu_count = 4\n[gpu.0]\nlost = true\n')
    nv = FakeNvml(str(scen))
    nv.nvmlInit()
    # NVML cannot name GPU 0 any more (fallen off the bus): the XID path
    # falls back to procfs for it, and the NVML checks name it by index.
    xid_ref = lookup("0000:18:00.0", gpu_map(nv, str(proc)))
    checks = NvmlSession(nvml=nv, proc_gpus=str(proc)).identity(0)
    assert xid_ref is not None
    assert xid_ref.index == checks.index == 0
    assert xid_ref.uuid == checks.uuid == "GPU-3-0b8d-4e1f-9a3b-2c7d5e8f1a0b"
    # Every GPU of the procfs listing, by place; none by its minor.
    by_proc = gpu_map(None, str(proc))
    assert [by_proc[bus].index for bus in minors] == [0, 1, 2, 3]
