"""Slurm's GPU numbers on real Slurm: the index in slurmd's list, not the minor.

A one-node lab whose gres.conf lists the node's four GPU devices out of
order (``File=.../nvidia7,.../nvidia6,.../nvidia5,.../nvidia4``, character
devices of major 195 as the driver makes them), with no autodetection.  A
job given two GPUs is told ``SLURM_JOB_GPUS=0,1`` in its prolog and
``IDX:0-1`` by ``scontrol -d show job``: slurmd's index into its list, which
it builds in the order gres.conf is written (its debug log counts 7, 6, 5,
4), not the minors of the files.  The prolog took these numbers for minors
until now.  ``slurm/gpu_order.py`` reads the same gres.conf (found beside
the ``SLURM_CONF`` slurmd hands the prolog) and maps the indices to the
files' GPUs.  Run on 22.05, 24.11 and 26.05.  The ``File=`` line stands in a
file gres.conf includes by a relative name, which both read in slurm.conf's
directory.

With autodetection slurmd merges what it found into that list and sorts it,
by device file and then by the links NVML gives (``AutoDetect=nvml``).
``AutoDetect=nvidia`` (24.11 on) gives no links, so its order is the files'
alone.  No GPU here for either plugin: slurmd's own test hook,
``fake_gpus.conf`` beside slurm.conf, hands the same merge a found list, with
no links, as the nvidia plugin's is (slurmd then numbers the GPUs by file,
4, 5, 6, 7, whatever order gres.conf and the found list give), or with the
links NVML gives (then by bus order).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import own_lab, submit
from slurm_hooks_lab.lab import Lab
from test_gpu_order import driver_list
from test_trust_lab import script

from slurm_hooks.slurm.gpu_order import find_gres_conf, gpu_order
from slurm_hooks.slurm.gres import gpus_on

pytestmark = [pytest.mark.slurm]

#: The device minors of the node's four GPU files, in gres.conf's order.
MINORS = (7, 6, 5, 4)


def restart_with_prolog(lab: Lab) -> None:
    """A prolog that records what slurmd hands it, slurmd's GRES debug log,
    and slurmd restarted: it reads gres.conf (and fake_gpus.conf) as it starts."""
    node = lab.node_names[0]
    prolog = lab.base_dir / "prolog.sh"
    prolog.write_text(
        "#!/bin/sh\n"
        f'echo "$SLURM_JOB_ID $SLURM_JOB_GPUS $SLURM_CONF" >> {lab.base_dir}/prolog.out\n'
    )
    prolog.chmod(0o755)
    lab.reconfigure(f"Prolog={prolog}\nDebugFlags=Gres\nSlurmdDebug=debug\n")
    log = lab.log_dir / f"slurmd-{node}.log"
    before = log.stat().st_size if log.exists() else 0
    lab.stop_slurmd(node)
    lab.start_slurmd(node)
    # slurmd logs "started on" once its socket listens (slurmd.c, every
    # release here): a job sent before that never reaches its prolog, as one
    # CI run on a loaded machine showed (the old slurmd was slow to stop).
    lab.wait_for(lambda: b"started on" in log.read_bytes()[before:], 60,
                 what="the new slurmd listening")  # fmt: skip
    lab.wait_idle()


@pytest.fixture(scope="module")
def reversed_lab() -> Iterator[Lab]:
    with own_lab("slurm-hooks-test-gpuorder-", 1, gpus=4) as lab:
        node = lab.node_names[0]
        dev = lab.base_dir / "dev" / node
        for minor in MINORS:
            path = dev / f"nvidia{minor}"
            if not path.exists():
                os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(195, minor))
        files = ",".join(f"{dev}/nvidia{i}" for i in MINORS)
        # Through an Include, named relative to the config directory, as slurmd reads it.
        etc = lab.slurm_conf.parent
        (etc / "gres-gpus.conf").write_text(f"NodeName={node} Name=gpu File={files}\n")
        (etc / "gres.conf").write_text("Include gres-gpus.conf\n")
        restart_with_prolog(lab)
        yield lab


def test_slurms_gpu_numbers_are_its_list_index_not_the_device_minor(
    reversed_lab: Lab, tmp_path: Path
) -> None:
    lab = reversed_lab
    node = lab.node_names[0]
    work = lab.shared_dir / "gpu-order"
    work.mkdir(parents=True, exist_ok=True)
    os.chmod(work, 0o1777)
    job = submit(lab, script(work / "two.sh", "sleep 60\n"), "-w", node, "--gres=gpu:2",
                 "-o", "/dev/null")  # fmt: skip
    try:
        lab.wait_job(job, lambda j: j.state == "RUNNING", timeout=60)
        # RUNNING comes before the prolog on the node (no PrologFlags=Alloc).
        out = lab.base_dir / "prolog.out"
        lab.wait_for(lambda: out.exists() and out.read_text().endswith("\n"), 60,
                     what="the prolog's line")  # fmt: skip
        seen = out.read_text().split()
        assert seen[:2] == [job, "0,1"], seen  # not 7,6 (or 4,5): the files' minors
        # slurmd numbered its devices in gres.conf's written order (its
        # debug log names each device as it counts it), not sorted.
        logged = re.findall(
            r"gpu device number (\d+)\(", (lab.log_dir / f"slurmd-{node}.log").read_text()
        )
        assert tuple(int(m) for m in logged[-4:]) == MINORS, logged
        detail = lab.client().job_gpu_detail(job)
        assert gpus_on(detail, node) == frozenset({0, 1})
        # The prolog finds slurmd's gres.conf through the SLURM_CONF it is given.
        conf = find_gres_conf({"SLURM_CONF": seen[2]})
        assert conf == lab.slurm_conf.parent / "gres.conf"
        # The driver lists the GPUs with minors in bus order here (4 to 7):
        # index 0 (/dev/nvidia7) is NVML's GPU 3, index 1 (/dev/nvidia6) NVML's 2.
        proc = driver_list(tmp_path, sorted(MINORS))
        order = gpu_order(node, gres_conf=conf, proc_root=proc)
        assert order.known and order.nvml((0, 1)) == (2, 3) and order.nvml((0,)) == (3,)
    finally:
        lab.reset()


#: The driver's GPUs in PCI bus order, by device minor (NVML's GPU k has minor BUS[k]).
BUS = (6, 7, 4, 5)


@pytest.mark.parametrize(
    ("autodetect", "numbered"),
    [("nvidia", (4, 5, 6, 7)), ("nvml", BUS)],
    ids=["no-links-by-file", "nvml-links-by-bus"],
)
def test_found_gpus_are_numbered_by_links_else_by_device_file(
    reversed_lab: Lab, tmp_path: Path, autodetect: str, numbered: tuple[int, ...]
) -> None:
    """The found list as each plugin gives it: the nvidia plugin with no
    links, NVML with links whose -1 marks the GPU's own place in bus order."""
    lab = reversed_lab
    node = lab.node_names[0]
    dev = lab.base_dir / "dev" / node
    fake = lab.slurm_conf.parent / "fake_gpus.conf"

    def links(minor: int) -> str:
        if autodetect == "nvidia":
            return "(null)"
        return ",".join("-1" if BUS[k] == minor else "0" for k in range(len(BUS)))

    # <type>|<cpu count>|<cpus>|<links>|<device file>, found out of order.
    fake.write_text(
        "".join(
            f"(null)|{lab.cpus}|0-{lab.cpus - 1}|{links(m)}|{dev}/nvidia{m}\n" for m in (6, 4, 7, 5)
        )
    )
    out = lab.base_dir / "prolog.out"
    out.unlink(missing_ok=True)
    work = lab.shared_dir / "gpu-order"
    work.mkdir(parents=True, exist_ok=True)
    os.chmod(work, 0o1777)
    try:
        restart_with_prolog(lab)
        slurmd_log = lab.log_dir / f"slurmd-{node}.log"

        def counted() -> list[str]:
            """The devices slurmd counted after reading the found list."""
            text = slurmd_log.read_text()
            at = text.rfind("fake system GPU data")
            return re.findall(r"gpu device number (\d+)\(", text[at:]) if at >= 0 else []

        lab.wait_for(lambda: len(counted()) >= 4, 60, what="slurmd counting the found GPUs")
        logged = tuple(int(m) for m in counted()[-4:])
        assert logged == numbered, logged
        job = submit(lab, script(work / "found.sh", "sleep 60\n"),
                     "-w", node, "--gres=gpu:2", "-o", "/dev/null")  # fmt: skip
        lab.wait_job(job, lambda j: j.state == "RUNNING", timeout=60)
        lab.wait_for(lambda: out.exists() and out.read_text().endswith("\n"), 60,
                     what="the prolog's line")  # fmt: skip
        assert out.read_text().split()[:2] == [job, "0,1"]
        assert gpus_on(lab.client().job_gpu_detail(job), node) == frozenset({0, 1})
        # gpu_order, told the plugin, names slurmd's index k as the GPU it
        # counted k-th: NVML's GPU at that minor's place in bus order.
        proc = driver_list(tmp_path, BUS)
        gres = tmp_path / "gres.conf"
        gres.write_text(f"NodeName={node} AutoDetect={autodetect}\n")
        order = gpu_order(node, gres_conf=gres, proc_root=proc)
        assert order.known
        for k, minor in enumerate(logged):
            assert order.nvml((k,)) == (BUS.index(minor),), (k, minor)
    finally:
        lab.reset()
        fake.unlink(missing_ok=True)
