"""A fake node for site-check tests: /proc, /sys and commands under a tmp dir.

Each test makes the node healthy, asks NHC's line (through ``nhc import``)
for a verdict from the site checks, breaks the node, and asks again.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from slurm_hooks.core.model import Phase, Status
from slurm_hooks.detect.checks.base import CheckContext
from slurm_hooks.detect.site.check import SiteChecks
from slurm_hooks.detect.site.nhc_import import import_conf
from slurm_hooks.detect.site.spec import SiteChecksConfig

#: NHC's own test data (test/test_lbnl_hw.nhc): dual-socket 6-core Sandy
#: Bridge with HT on; 32 GB RAM, 18 GB swap.
RAM_TOTAL, RAM_FREE, SWAP_TOTAL, SWAP_FREE = 32857508, 27828840, 18563064, 18480520


def cpuinfo(sockets: int, cores_per_socket: int, threads_per_core: int) -> str:
    out = []
    n = 0
    for s in range(sockets):
        for c in range(cores_per_socket):
            for _t in range(threads_per_core):
                out.append(
                    f"processor\t: {n}\nvendor_id\t: GenuineIntel\nphysical id\t: {s}\n"
                    f"siblings\t: {cores_per_socket * threads_per_core}\ncore id\t\t: {c}\n"
                    f"cpu cores\t: {cores_per_socket}\ncpu MHz\t\t: 2400.000\n"
                )
                n += 1
    return "\n".join(out)


def meminfo(ram_total: int = RAM_TOTAL, ram_free: int = RAM_FREE, swap_total: int = SWAP_TOTAL,
            swap_free: int = SWAP_FREE) -> str:  # fmt: skip
    buffers, cached = 828840, 7000000
    return (
        f"MemTotal:       {ram_total} kB\nMemFree:        {ram_free - buffers - cached} kB\n"
        f"MemAvailable:   {ram_free} kB\nBuffers:        {buffers} kB\nCached:         {cached} kB\n"
        f"SwapCached:            0 kB\nSwapTotal:      {swap_total} kB\nSwapFree:       {swap_free} kB\n"
    )


MOUNTS = (
    "/dev/sda1 / ext4 rw,relatime 0 0\n"
    "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
    "tmpfs /tmp tmpfs rw,nosuid,nodev 0 0\n"
    "devpts /dev/pts devpts rw,nosuid,noexec,relatime,gid=5,mode=620,ptmxmode=000 0 0\n"
    "bluearc0:/home /home nfs rw,relatime,vers=3,hard,proto=tcp 0 0\n"
)


class Node:
    """A node under ``root``: write its files, then :meth:`verdict` a line."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.proc = root / "proc"
        self.sys = root / "sys"
        self.bin = root / "bin"
        for d in (self.proc / "self", self.sys / "class" / "net", self.bin):
            d.mkdir(parents=True, exist_ok=True)
        self.write("proc/cpuinfo", cpuinfo(2, 6, 2))
        self.write("proc/meminfo", meminfo())
        self.write("proc/self/mounts", MOUNTS)
        self.write("proc/loadavg", "0.50 0.40 0.30 1/200 12345\n")
        self.statvfs: dict[str, SimpleNamespace] = {}
        self.users = {0: "root", 74: "sshd", 1000: "alice", 1001: "mallory"}

    def write(self, rel: str, text: str) -> Path:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        return p

    def process(self, pid: int, args: str, uid: int = 0, ppid: int = 1) -> None:
        comm = os.path.basename(args.split()[0]) if args else "?"
        self.write(f"proc/{pid}/cmdline", args.replace(" ", "\0") + "\0")
        self.write(
            f"proc/{pid}/status",
            f"Name:\t{comm[:15]}\nPPid:\t{ppid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n",
        )

    def kill(self, pid: int) -> None:
        for f in (self.proc / str(pid)).iterdir():
            f.unlink()
        (self.proc / str(pid)).rmdir()

    def df(self, path: str, *, size_kb: int, used_kb: int, inodes: int = 1000000,
           ifree: int = 900000) -> None:  # fmt: skip
        """What statvfs says for the file system mounted at ``path``."""
        frsize = 1024
        self.statvfs[path] = SimpleNamespace(
            f_frsize=frsize, f_blocks=size_kb, f_bfree=size_kb - used_kb,
            f_bavail=size_kb - used_kb, f_files=inodes, f_favail=ifree,
        )  # fmt: skip

    def stub(self, name: str, script: str) -> None:
        """A command in the node's PATH (a shell script)."""
        p = self.bin / name
        p.write_text("#!/bin/sh\n" + script)
        p.chmod(0o755)

    def ib_port(self, dev: str, port: int, state: str, phys: str, rate: str) -> None:
        d = f"sys/class/infiniband/{dev}/ports/{port}"
        self.write(f"{d}/state", state + "\n")
        self.write(f"{d}/phys_state", phys + "\n")
        self.write(f"{d}/rate", rate + "\n")
        self.write(f"{d}/link_layer", "InfiniBand\n")

    def services(self) -> dict[str, object]:
        from slurm_hooks.detect.probes.commands import run

        def run_here(argv, *, timeout, check=False, env=None):
            return run(argv, timeout=timeout, check=check,
                       env={"PATH": f"{self.bin}:/usr/bin:/bin", **(env or {})})  # fmt: skip

        return {
            "proc_root": str(self.proc),
            "sysfs_root": str(self.sys),
            "statvfs": lambda p: self.statvfs[p],
            "user_name": lambda uid: self.users.get(uid, str(uid)),
            "group_name": lambda gid: {0: "root"}.get(gid, str(gid)),
            "run_command": run_here,
        }

    def run(self, cfg: SiteChecksConfig, node: str = "n0001", **settings: object):
        ctx = CheckContext(
            node=node, phase=Phase.HEALTHCHECK, settings=settings,
            services={"site_checks": cfg, **self.services()},
        )  # fmt: skip
        check = SiteChecks()
        return check.judge(check.gather(ctx), ctx)

    def verdict(
        self, nhc_line: str, node: str = "n0001", variables: dict[str, str] | None = None
    ) -> int:
        """The imported checks' verdict on ``nhc_line`` as NHC's exit status:
        0 pass, 1 fail.  Raises when the line does not translate, or when a
        check could not run (never a silent pass).  ``variables``: what
        /etc/sysconfig/nhc would set (``nhc import --sysconfig``)."""
        imp = import_conf(nhc_line if "||" in nhc_line else f"* || {nhc_line}", variables=variables)
        assert not imp.untranslated, imp.untranslated
        cfg = SiteChecksConfig.from_section(imp.rows, path=None, prefix="site_checks")
        findings = self.run(cfg, node)
        unknown = [f for f in findings if f.status is Status.UNKNOWN]
        assert not unknown, unknown
        return 1 if any(f.status is Status.FAIL for f in findings) else 0
