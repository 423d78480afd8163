"""The kernel module's GPU list, read once for the NVML session and the XID path."""

from __future__ import annotations

from pathlib import Path

from slurm_hooks.detect.probes.driver_gpus import read_gpu_information

# Lines as the driver writes them (key, colon, tabs, value).
INFO = "GPU UUID: \t GPU-6f4a1c2e\nBus Location: \t 0000:3b:00.0\nDevice Minor: \t 2\n"


def test_fields_per_gpu_in_bus_order(tmp_path: Path) -> None:
    for bus in ("0000:86:00.0", "0000:3b:00.0"):
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "information").write_text(INFO + "a line without a colon\n")
    (tmp_path / "0000:99:00.0").mkdir()  # no information file: no fields
    got = read_gpu_information(str(tmp_path))
    assert [entry for entry, _ in got] == ["0000:3b:00.0", "0000:86:00.0", "0000:99:00.0"]
    fields = got[0][1]
    assert fields["GPU UUID"] == "GPU-6f4a1c2e"
    assert fields["Bus Location"] == "0000:3b:00.0" and fields["Device Minor"] == "2"
    assert "a line without a colon" not in " ".join(fields)
    assert got[2][1] == {}


def test_no_driver_no_gpus(tmp_path: Path) -> None:
    assert read_gpu_information(str(tmp_path / "missing")) == []
