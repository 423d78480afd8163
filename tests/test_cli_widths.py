"""Human output fits 80 columns unless ``--wide`` (issue 17: ``check`` lines
were 132-151 columns, ``xid scan`` 234), and narrow output loses nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hooks.cli._width import fill, table

DATA = Path(__file__).parent / "data"

KERNEL_LOG = (
    "[1.0] NVRM: Xid (PCI:0000:3b:00): 94, pid=11, name=python3, Contained ECC error\n"
    "[4.0] NVRM: Xid (PCI:0000:86:00): 79, pid=<unknown>, name=<unknown>, "
    "GPU has fallen off the bus.\n"
    "May  1 10:00:00 n1 kernel: [123.4] NVRM: Xid (PCI:0000:bd:00): 13, pid=2345, "
    "name=a_really_long_process_name_here, Graphics SM Warp Exception on "
    "(GPC 0, TPC 1, SM 0): Out Of Range Address\n"
)


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slurm_hooks", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _widest(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def _words(text: str) -> list[str]:
    return " ".join(text.split()).split()


@pytest.fixture
def faulty_config(tmp_path: Path) -> str:
    p = tmp_path / "config.toml"
    p.write_text(
        f'[general]\nstate_dir = "{tmp_path}"\n'
        f'[checks]\nnvml = "lab:fake"\nnvml_scenario = "{DATA / "nvml" / "h100_faults.toml"}"\n'
        f'sysfs_root = "{DATA / "sysfs" / "dgx_h100_healthy"}"\n'
    )
    return str(p)


def test_check_table_fits_80_columns_and_wide_keeps_one_line(faulty_config: str) -> None:
    args = ("check", "--config", faulty_config, "--profile", "h100-sxm5-80gb")
    narrow, wide = _cli(*args), _cli(*args, "--wide")
    assert narrow.returncode == wide.returncode == 1, narrow.stderr
    assert _widest(narrow.stdout) <= 80, narrow.stdout
    assert _widest(wide.stdout) > 80
    # nothing is cut: every word of the wide table is in the narrow one, in order
    # (the first line ends with the run's duration, which differs)
    assert _words(narrow.stdout)[9:] == _words(wide.stdout)[9:]
    assert "fallen off the bus (XID 79); reboot, replace if it recurs" in " ".join(
        narrow.stdout.split()
    )


def test_xid_scan_fits_80_columns_and_wide_keeps_one_line() -> None:
    narrow = _cli("xid", "scan", "-", stdin=KERNEL_LOG)
    wide = _cli("xid", "scan", "-", "--wide", stdin=KERNEL_LOG)
    assert narrow.returncode == wide.returncode == 1
    assert _widest(narrow.stdout) <= 80 and _widest(narrow.stderr) <= 80, narrow.stdout
    assert _widest(wide.stdout) > 80
    assert len(wide.stdout.splitlines()) == 3  # one line per event
    flat = " ".join(narrow.stdout.split())
    assert "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address" in flat
    assert "name=a_really_long_process_name_here" in flat and "FAIL reboot" in flat


def test_width_helpers() -> None:
    rows = [("A", "B", "TEXT"), ("x", "y", "word " * 40)]
    lines = "\n".join(table(rows)).splitlines()
    assert max(map(len, lines)) <= 80 and lines[1] == "x  y"
    assert table(rows, wide=True)[1].startswith("x  y  word word")
    assert fill("a " * 100, wide=True).count("\n") == 0
    assert max(map(len, fill("a " * 100, indent="  ").splitlines())) <= 80
