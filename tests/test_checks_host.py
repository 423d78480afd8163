"""Host checks: InfiniBand from recorded-format sysfs trees, memory, mounts, scratch."""

from __future__ import annotations

import os
from collections import namedtuple
from pathlib import Path
from typing import Any

import pytest

from slurm_hooks.core.errors import CommandError, CommandTimeout
from slurm_hooks.core.model import Action, Finding, Phase, Status
from slurm_hooks.detect.checks.base import CheckContext
from slurm_hooks.detect.checks.ib import IbCheck
from slurm_hooks.detect.checks.memory import MemoryCheck
from slurm_hooks.detect.checks.mounts import MountsCheck
from slurm_hooks.detect.checks.scratch import ScratchCheck
from slurm_hooks.detect.probes.commands import run as real_run
from slurm_hooks.detect.probes.sysfs import parse_numbered, parse_rate, read_ib_ports
from slurm_hooks.detect.profiles import load_builtin

SYSFS = Path(__file__).parent / "data" / "sysfs"
H100 = load_builtin("h100-sxm5-80gb")
GIB = 1024**3

Partition = namedtuple("Partition", "device mountpoint fstype opts")
Usage = namedtuple("Usage", "total used free percent")
VMem = namedtuple("VMem", "total available")


class FakePsutil:
    def __init__(self, total: int = 0, partitions: list[Partition] | None = None, free: int = 0):
        self.total = total
        self.partitions = partitions or []
        self.free = free

    def virtual_memory(self) -> VMem:
        return VMem(self.total, self.total)

    def disk_partitions(self, all: bool = False) -> list[Partition]:
        assert all, "must read the whole mount table (nfs, lustre are not 'physical')"
        return self.partitions

    def disk_usage(self, path: str) -> Usage:
        if not os.path.exists(path):
            raise FileNotFoundError(path)
        return Usage(10_000 * GIB, 10_000 * GIB - self.free, self.free, 0.0)


def ctx(profile: Any, **services: Any) -> CheckContext:
    settings = services.pop("settings", {})
    return CheckContext(
        node="gpu001",
        phase=Phase.HEALTHCHECK,
        profile=profile,
        settings=settings,
        services=services,
    )


def run(check: Any, c: CheckContext) -> list[Finding]:
    return check.judge(check.gather(c), c)


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("4: ACTIVE", (4, "ACTIVE")),
        ("5: LinkUp", (5, "LinkUp")),
        ("2: Polling\n", (2, "Polling")),
        ("", (None, "")),
    ],
)
def test_parse_numbered(text: str, parsed: tuple) -> None:
    assert parse_numbered(text) == parsed


@pytest.mark.parametrize(
    "text, rate",
    [
        ("400 Gb/sec (4X NDR)", 400.0),
        ("2.5 Gb/sec (1X SDR)", 2.5),
        ("56 Gb/sec (4X FDR)", 56.0),
        ("", None),
    ],
)
def test_parse_rate(text: str, rate: float | None) -> None:
    assert parse_rate(text) == rate


def test_read_ports_from_tree() -> None:
    ports = read_ib_ports(str(SYSFS / "dgx_h100_healthy"))
    assert [p.name for p in ports][:2] == ["mlx5_0/1", "mlx5_1/1"]
    assert all(p.active for p in ports)
    assert ports[-1].link_layer == "Ethernet" and ports[-1].rate_gbps == 200.0
    assert read_ib_ports(str(SYSFS / "no-such-tree")) == []


def test_ib_healthy() -> None:
    [f] = run(IbCheck(), ctx(H100, sysfs_root=str(SYSFS / "dgx_h100_healthy")))
    assert f.status == Status.OK and f.values["active"] == 8


def test_ib_degraded() -> None:
    findings = run(IbCheck(), ctx(H100, sysfs_root=str(SYSFS / "dgx_h100_degraded")))
    got = sorted((f.code, f.component.name or "") for f in findings)
    assert got == [
        ("IB_PORT_DOWN", "mlx5_3/1"),
        ("IB_PORT_DOWN", "mlx5_6/1"),
        ("IB_PORT_MISSING", ""),
        ("IB_RATE", "mlx5_5/1"),
    ]
    assert all(f.status == Status.FAIL and f.action == Action.DRAIN for f in findings)


def test_ib_named_devices() -> None:
    prof = H100.__class__(
        **{**dict(H100), "ib": {"devices": ["mlx5_0", "mlx5_7/1"], "rate_gbps": 400}}
    )
    from slurm_hooks.detect.profiles import as_profile

    p = as_profile(dict(prof))
    findings = run(IbCheck(), ctx(p, sysfs_root=str(SYSFS / "dgx_h100_degraded")))
    assert [(f.code, f.component.name) for f in findings] == [("IB_PORT_MISSING", "mlx5_7/1")]


def test_ib_not_expected_reads_nothing() -> None:
    [f] = run(IbCheck(), ctx(load_builtin("cpu"), sysfs_root="/definitely/not/here"))
    assert f.status == Status.OK and "not applicable" in f.message


def test_memory() -> None:
    prof = {"memory_gb": 2048}
    [ok] = run(MemoryCheck(), ctx(prof, psutil=FakePsutil(total=2015 * GIB)))
    assert ok.status == Status.OK
    [bad] = run(MemoryCheck(), ctx(prof, psutil=FakePsutil(total=1536 * GIB)))
    assert (bad.status, bad.code, bad.action) == (Status.FAIL, "MEMORY_SIZE", Action.DRAIN)
    [loose] = run(
        MemoryCheck(),
        ctx(prof, psutil=FakePsutil(total=1536 * GIB), settings={"tolerance_pct": 30}),
    )
    assert loose.status == Status.OK


def test_memory_real_psutil() -> None:
    [f] = run(MemoryCheck(), ctx({"memory_gb": 1}))
    assert f.status == Status.OK and f.values["total_gb"] > 0


def test_mounts_write_test_on_real_dirs(tmp_path: Path) -> None:
    good, ro = tmp_path / "good", tmp_path / "ro"
    good.mkdir()
    ro.mkdir()
    fake = FakePsutil(
        partitions=[
            Partition("server:/export", str(good), "nfs4", "rw,relatime,vers=4.2"),
            Partition("/dev/md0", str(ro), "ext4", "ro,relatime"),
        ]
    )
    prof = {"mounts": [str(good), str(ro), "/missing"]}
    findings = run(MountsCheck(), ctx(prof, psutil=fake))
    got = [(f.code, f.component.name) for f in findings]
    assert got == [("MOUNT_READONLY", str(ro)), ("MOUNT_MISSING", "/missing")]
    assert os.listdir(good) == []  # the test file was removed


def test_mounts_hung_and_unwritable(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def hung(argv: list[str], *, timeout: float) -> Any:
        calls.append(argv)
        raise CommandTimeout(argv, timeout)

    def denied(argv: list[str], *, timeout: float) -> Any:
        raise CommandError(argv, 1, "mktemp: failed to create file: Permission denied")

    fake = FakePsutil(partitions=[Partition("srv:/home", "/home", "nfs4", "rw")])
    [f] = run(MountsCheck(), ctx({"mounts": ["/home"]}, psutil=fake, run_command=hung))
    assert (f.code, f.status) == ("MOUNT_HUNG", Status.FAIL)
    assert calls[0][:3] == ["mktemp", "-p", "/home"]
    [f] = run(MountsCheck(), ctx({"mounts": ["/home"]}, psutil=fake, run_command=denied))
    assert f.code == "MOUNT_NOT_WRITABLE" and "Permission denied" in f.message
    [f] = run(
        MountsCheck(),
        ctx(
            {"mounts": ["/home"]},
            psutil=fake,
            run_command=hung,
            settings={"no_write_test": ["/home"]},
        ),
    )
    assert f.status == Status.OK


def test_mounts_real_mount_table() -> None:
    [f] = run(MountsCheck(), ctx({"mounts": ["/proc"]}, settings={"write_test": False}))
    assert f.status == Status.OK


def test_write_test_real_timeout_kills_child(tmp_path: Path) -> None:
    """A child that never returns is killed at the timeout, not waited for."""
    from slurm_hooks.detect.checks.mounts import write_test

    def slow(argv: list[str], *, timeout: float) -> Any:
        return real_run(["sleep", "5"], timeout=timeout)

    assert write_test(str(tmp_path), 0.4, slow) == "timeout"
    assert write_test(str(tmp_path), 5, real_run) == ""


def test_scratch(tmp_path: Path) -> None:
    prof = {"scratch_path": str(tmp_path), "scratch_min_free_gb": 100}
    [f] = run(ScratchCheck(), ctx(prof, psutil=FakePsutil(free=50 * GIB)))
    assert (f.code, f.status, f.action) == ("SCRATCH_FULL", Status.FAIL, Action.DRAIN)
    assert f.values["free_gb"] == 50.0
    [f] = run(ScratchCheck(), ctx(prof, psutil=FakePsutil(free=500 * GIB)))
    assert f.status == Status.OK
    missing = {"scratch_path": str(tmp_path / "nope"), "scratch_min_free_gb": 1}
    [f] = run(ScratchCheck(), ctx(missing, psutil=FakePsutil(free=500 * GIB)))
    assert f.code == "SCRATCH_MISSING"
    [f] = run(ScratchCheck(), ctx({"scratch_path": str(tmp_path), "scratch_min_free_gb": 0.001}))
    assert f.status == Status.OK  # real psutil
