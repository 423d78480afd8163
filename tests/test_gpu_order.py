"""Slurm's GPU indices on a node, in NVML's numbering (``slurm/gpu_order.py``).

What slurmd's index k is, from Slurm's source (the same at 22.05, 24.11,
25.11 and 26.05): with ``AutoDetect=nvml`` its list is sorted into NVML's
order (``gres_gpu.c:_merge_system_gres_conf``), with ``AutoDetect=nvidia``
(no links) into device-file order, without autodetection it is
gres.conf's ``File=`` entries as written (``gres.c:gres_node_config_load``);
``SLURM_JOB_GPUS`` and ``IDX`` print that index
(``gres_common.c:gres_common_prep_set_env``,
``gres_stepmgr.c:gres_stepmgr_job_build_details``).  The driver's list and
the device nodes here are files made as the driver and udev make them
(major 195, minor N).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_hooks.slurm.gpu_order import expand_files, gpu_order, parse_gres_conf

#: Four GPUs by bus id, with the minors the driver gave them: the public
#: report's kind (minor 0 on the GPU nvidia-smi calls 3).
REVERSED = {"0000:18:00.0": 3, "0000:2a:00.0": 2, "0000:9a:00.0": 1, "0000:ab:00.0": 0}
USUAL = {"0000:18:00.0": 0, "0000:2a:00.0": 1, "0000:9a:00.0": 2, "0000:ab:00.0": 3}


def driver_list(root: Path, minors: Sequence[int]) -> str:
    """The driver's ``/proc/driver/nvidia/gpus`` under ``root``: one GPU per
    minor, in PCI bus order as listed (NVML's GPU k has ``minors[k]``)."""
    proc = root / "proc"
    for place, minor in enumerate(minors):
        (proc / f"0000:{0x18 + place:02x}:00.0").mkdir(parents=True)
        (proc / f"0000:{0x18 + place:02x}:00.0" / "information").write_text(
            f"Device Minor: \t {minor}\n"
        )
    return str(proc)


def node_files(tmp_path: Path, minors: dict[str, int]) -> tuple[str, Path]:
    """The driver's GPU list and ``dev/nvidia0..3`` character devices."""
    proc = tmp_path / "proc"
    for bus, minor in minors.items():
        (proc / bus).mkdir(parents=True)
        (proc / bus / "information").write_text(
            f"GPU UUID: \t GPU-{minor}\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n"
        )
    dev = tmp_path / "dev"
    dev.mkdir()
    for minor in minors.values():
        try:
            os.mknod(dev / f"nvidia{minor}", stat.S_IFCHR | 0o666, os.makedev(195, minor))
        except PermissionError:
            pytest.skip("making a character device needs root (the test command runs as root)")
    return str(proc), dev


def conf(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gres.conf"
    path.write_text(text)
    return path


def test_expand_files_keeps_the_written_order() -> None:
    assert expand_files("/dev/nvidia[0-3]") == tuple(f"/dev/nvidia{i}" for i in range(4))
    assert expand_files("/dev/nvidia[2-3],/dev/nvidia0") == (
        "/dev/nvidia2",
        "/dev/nvidia3",
        "/dev/nvidia0",
    )
    assert expand_files("/dev/nvidia[3,1,0-0]") == ("/dev/nvidia3", "/dev/nvidia1", "/dev/nvidia0")
    assert expand_files("/d/g[08-10]") == ("/d/g08", "/d/g09", "/d/g10")
    assert expand_files("/d/x[0-1]y[0-1]") is None
    assert expand_files("/d/g[a-b]") is None


def test_parse_gres_conf_per_node() -> None:
    text = (
        "# global\nAutoDetect=nvml\n"
        "NodeName=gpu[01-04] AutoDetect=off\n"
        "NodeName=gpu[01-02] Name=gpu Type=h100 File=/dev/nvidia[0-3]  # comment\n"
        "NodeName=gpu[03-04] Name=gpu File=/dev/nvidia[3,2,1,0]\n"
        "NodeName=gpu[01-04] Name=shard Count=8 File=/dev/nvidia[0-3]\n"
        "NodeName=gpu09 Name=gpu Links=-1,0\n"
    )
    one = parse_gres_conf(text, "gpu01")
    assert one is not None and one.autodetect == "off"
    assert one.files == tuple(f"/dev/nvidia{i}" for i in range(4)) and not one.links
    three = parse_gres_conf(text, "gpu03")
    assert three is not None and three.files == tuple(f"/dev/nvidia{i}" for i in (3, 2, 1, 0))
    other = parse_gres_conf(text, "gpu09")
    assert other is not None and other.autodetect == "nvml" and other.files == ()
    assert other.links
    # What this does not read for certain reads as nothing at all.
    assert parse_gres_conf("Include /etc/slurm/gres.d/x.conf\n", "gpu01") is None
    # Include lines are followed where a reader is given (slurmd's conf dir);
    # what cannot be followed for certain reads as nothing.
    files = {"gres.d/gpu.conf": "NodeName=gpu01 Name=gpu File=/dev/nvidia[1,0]\n",
             "auto.conf": "AutoDetect=off\nInclude\tgres.d/gpu.conf  # nested\n",
             "loop.conf": "Include loop.conf\n"}  # fmt: skip
    read = files.get
    got = parse_gres_conf("AutoDetect=nvml\nInclude auto.conf\n", "gpu01", read)
    assert got is not None and got.autodetect == "off"
    assert got.files == ("/dev/nvidia1", "/dev/nvidia0")
    for text in ("Include missing.conf\n", "Include loop.conf\n", "Include gres-%c.conf\n",
                 "Include gres.d/*.conf\n"):  # fmt: skip
        assert parse_gres_conf(text, "gpu01", read) is None, text
    assert parse_gres_conf("Name=gpu MultipleFiles=/dev/nvidia[0-1]\n", "gpu01") is None
    assert parse_gres_conf("NodeName=@all Name=gpu File=/dev/nvidia0\n", "gpu01") is None


def test_where_minors_follow_the_bus_nothing_is_renamed(tmp_path: Path) -> None:
    proc, dev = node_files(tmp_path, USUAL)
    order = gpu_order("n1", gres_conf=conf(tmp_path, f"Name=gpu File={dev}/nvidia[0-3]\n"),
                      proc_root=proc)  # fmt: skip
    assert order.known and order.nvml((2, 0)) == (0, 2)
    assert gpu_order("n1", gres_conf=tmp_path / "none", proc_root=proc).nvml((1,)) == (1,)


def test_autodetect_nvml_numbers_as_nvml_does(tmp_path: Path) -> None:
    """slurmd sorts what NVML found into NVML's order: index 0 is the
    lowest bus id, whatever its minor."""
    proc, dev = node_files(tmp_path, REVERSED)
    text = f"AutoDetect=nvml\nName=gpu File={dev}/nvidia[0-3]\n"
    order = gpu_order("n1", gres_conf=conf(tmp_path, text), proc_root=proc)
    assert order.known and order.nvml((0,)) == (0,) and order.nvml((1, 3)) == (1, 3)


def test_file_lines_number_by_the_files_minors(tmp_path: Path) -> None:
    """No autodetection: index k is the k-th file, /dev/nvidia<k> for the
    usual ``File=/dev/nvidia[0-3]``; on a node whose minor 0 is the 4th GPU
    by bus id, the job given index 0 has NVML's GPU 3."""
    proc, dev = node_files(tmp_path, REVERSED)
    order = gpu_order("n1", gres_conf=conf(tmp_path, f"Name=gpu File={dev}/nvidia[0-3]\n"),
                      proc_root=proc)  # fmt: skip
    assert order.known and order.nvml((0,)) == (3,) and order.nvml((0, 1)) == (2, 3)
    assert order.nvml((4,)) is None  # an index Slurm's list does not have

    # Files written out of minor order, on a node whose minors follow the bus.
    proc2, dev2 = node_files(tmp_path / "b", USUAL)
    text = f"NodeName=n1 Name=gpu File={dev2}/nvidia3,{dev2}/nvidia[0-2]\n"
    order = gpu_order("n1", gres_conf=conf(tmp_path / "b", text), proc_root=proc2)
    assert order.nvml((0,)) == (3,) and order.nvml((1,)) == (0,)
    # The same lines in a file gres.conf includes, by a name relative to its directory.
    (tmp_path / "b" / "gres-gpus.conf").write_text(text)
    order = gpu_order("n1", gres_conf=conf(tmp_path / "b", "Include gres-gpus.conf\n"),
                      proc_root=proc2)  # fmt: skip
    assert order.nvml((0,)) == (3,) and order.nvml((1,)) == (0,)


def test_autodetect_nvidia_numbers_by_device_minor(tmp_path: Path) -> None:
    """The nvidia plugin names each GPU /dev/nvidia<minor> and gives no
    links, so slurmd's sort leaves them in file order: index 0 is minor 0,
    which on this node is the 4th GPU by bus id (NVML's 3)."""
    proc, dev = node_files(tmp_path, REVERSED)
    order = gpu_order("n1", gres_conf=conf(tmp_path, "AutoDetect=nvidia\n"), proc_root=proc)
    assert order.known and order.nvml((0,)) == (3,) and order.nvml((1, 3)) == (0, 2)
    assert "minor" in order.why
    # File= lines beside it pick which found GPUs count, not their order.
    text = f"NodeName=n1 AutoDetect=nvidia\nNodeName=n1 Name=gpu File={dev}/nvidia3,{dev}/nvidia1\n"
    order = gpu_order("n1", gres_conf=conf(tmp_path, text), proc_root=proc)
    assert order.nvml((0,)) == (2,) and order.nvml((1,)) == (0,) and order.nvml((2,)) is None
    # Where the minors follow the bus, nothing is renamed.
    proc2, _ = node_files(tmp_path / "b", USUAL)
    order = gpu_order("n1", gres_conf=conf(tmp_path, "AutoDetect=nvidia\n"), proc_root=proc2)
    assert order.known and order.places is None and order.nvml((2, 0)) == (0, 2)


def test_where_it_cannot_be_told_nothing_is_guessed(tmp_path: Path) -> None:
    proc, dev = node_files(tmp_path, REVERSED)
    for text in (
        None,  # no gres.conf where slurmd's would be
        "AutoDetect=rsmi\nName=gpu File=/dev/nvidia[0-3]\n",  # another plugin's order
        "AutoDetect=nvidia\nName=gpu Links=-1,0,0,0\n",  # links put before files
        "Include /nonexistent/gres-node.conf\n",
        f"Name=gpu File={dev}/nvidia[0-1],{tmp_path}/not-a-device\n",
    ):
        path = conf(tmp_path, text) if text is not None else tmp_path / "missing"
        order = gpu_order("n1", gres_conf=path, proc_root=proc)
        assert not order.known and order.nvml((0,)) is None, text
        assert "not in PCI bus order" in order.why
    # No driver list at all (a node without the driver, the lab): as given.
    order = gpu_order("n1", gres_conf=tmp_path / "missing", proc_root=str(tmp_path / "none"))
    assert order.known and order.nvml((3, 1)) == (1, 3)
