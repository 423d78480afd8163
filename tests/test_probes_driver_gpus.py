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


def gpus(root: Path, minors: dict[str, str]) -> str:
    """A driver GPU list: bus id -> ``Device Minor`` ("" for none)."""
    for bus, minor in minors.items():
        (root / bus).mkdir(parents=True)
        line = f"Device Minor: \t {minor}\n" if minor else ""
        (root / bus / "information").write_text(f"GPU UUID: \t GPU-{bus}\n{line}")
    return str(root)


def test_minor_positions(tmp_path: Path) -> None:
    from slurm_hooks.detect.probes.driver_gpus import minor_positions

    root = gpus(tmp_path / "r", {"0000:18:00.0": "3", "0000:28:00.0": "0", "0000:9a:00.0": "1"})
    assert minor_positions(root) == {3: 0, 0: 1, 1: 2}
    gap = gpus(tmp_path / "gap", {"0000:18:00.0": "0", "0000:28:00.0": "2"})
    assert minor_positions(gap) == {0: 0, 2: 1}
    assert (
        minor_positions(gpus(tmp_path / "unknown", {"0000:18:00.0": "0", "0000:28:00.0": ""}))
        is None
    )
    assert minor_positions(str(tmp_path / "none")) is None
