"""Every kind of site check: its arguments, what it gathers, how it is judged.

A kind is data: ``name -> Kind(args class, gather, judge, code)``.  The
gather functions take the arguments and the run's :class:`~.gather.Facts`
(the only part that touches the node); the judges are :mod:`.judge`'s pure
functions.  ``code`` is the finding code (stable: reasons and metrics key
on it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from slurm_hooks.core.record import record
from slurm_hooks.detect.site import args as A
from slurm_hooks.detect.site import judge as J
from slurm_hooks.detect.site import nhc_function
from slurm_hooks.detect.site.gather import Facts, bounded


@record
class Kind:
    name: str
    family: str
    args: type
    gather: Callable[[Any, Facts], Any]
    judge: Callable[[Any, Any], list[J.Problem]]
    code: str
    summary: str


def _usage(a: A.FsSpace | A.FsInodes, f: Facts) -> Any:
    """statvfs of ``a.path`` when it is a mount point (df lists only those),
    else None."""
    import os

    points = {os.path.normpath(p.mountpoint) for p in f.mounts()}
    if os.path.normpath(a.path) not in points:
        return None
    return f.usage(a.path)


def _service(a: A.PsService, f: Facts) -> tuple[list[Any], Any]:
    found = J.service_procs(a, f.processes())
    restarted = None
    if a.running and a.restart and not found:
        restarted = f.command(a.restart_argv, 30.0)
    return found, restarted


def _stats(a: A.FileTest, f: Facts) -> dict[str, tuple[Any, Any]]:
    import os

    out = {}
    for p in a.paths:
        s = f.stat_of(p)
        follow = s
        if s is not None and os.path.islink(p):
            try:
                follow = bounded(functools.partial(os.stat, p), 5.0, f"stat {p}")
            except TimeoutError:
                raise
            except OSError:
                follow = None
        out[p] = (s, follow)
    return out


def _file_stat(a: A.FileStat, f: Facts) -> tuple[dict[str, tuple[Any, str, str]], float]:
    import os

    out: dict[str, tuple[Any, str, str]] = {}
    for p in a.paths:
        try:
            s = bounded(functools.partial(os.stat, p), 5.0, f"stat {p}")
        except FileNotFoundError:
            out[p] = (None, "", "")
            continue
        out[p] = (
            s,
            f.user_name(s.st_uid) if a.user else "",
            f.group_name(s.st_gid) if a.group else "",
        )
    return out, f.now()


def _text(a: A.FileContents, f: Facts) -> str | None:
    try:
        return f.text(a.path, a.max_bytes)
    except TimeoutError:
        raise  # a hung file system: UNKNOWN, not "cannot be read"
    except OSError:
        return None


def _dmi(a: A.DmiMatch, f: Facts) -> Any:
    return f.command(("dmidecode",), a.timeout_s)


_KINDS = (
    Kind("fs_mount", "filesystems", A.FsMount, lambda a, f: f.mounts(), J.fs_mount, "FS_MOUNT", "mounted, type, source, options, rw/ro"),
    Kind("fs_space", "filesystems", A.FsSpace, _usage, J.fs_space, "FS_SPACE", "free/used space and size"),
    Kind("fs_inodes", "filesystems", A.FsInodes, _usage, J.fs_inodes, "FS_INODES", "total/free/used inodes"),
    Kind("ps_service", "processes", A.PsService, _service, J.ps_service, "PS_SERVICE", "a daemon runs (as a user), or must not run"),
    Kind("ps_users", "processes", A.PsUsers, lambda a, f: f.processes(), J.ps_users, "PS_USERS", "no unauthorised users' processes"),
    Kind("ps_loadavg", "processes", A.PsLoadavg, lambda a, f: (f.loadavg(), f.cpuinfo() if a.per else None), J.ps_loadavg, "PS_LOADAVG", "load averages below limits"),
    Kind("hw_cpuinfo", "hardware", A.HwCpuinfo, lambda a, f: f.cpuinfo(), J.hw_cpuinfo, "HW_CPUINFO", "CPU sockets, cores, threads"),
    Kind("hw_memory", "hardware", A.HwMemory, lambda a, f: f.meminfo(), J.hw_memory, "HW_MEMORY", "RAM, swap or both within a range"),
    Kind("hw_memory_free", "hardware", A.HwMemoryFree, lambda a, f: f.meminfo(), J.hw_memory_free, "HW_MEMORY_FREE", "free RAM, swap or both"),
    Kind("hw_ib", "hardware", A.HwIb, lambda a, f: f.ib_ports(), J.hw_ib, "HW_IB", "an InfiniBand port active at a rate"),
    Kind("hw_eth", "hardware", A.HwEth, lambda a, f: f.net_devices(), J.hw_eth, "HW_ETH", "a network interface present"),
    Kind("hw_mcelog", "hardware", A.HwMcelog, lambda a, f: f.command(a.command, a.timeout_s), J.hw_mcelog, "HW_MCELOG", "machine-check errors within limits"),
    Kind("file_test", "files", A.FileTest, _stats, J.file_test, "FILE_TEST", "exists, type, access bits"),
    Kind("file_stat", "files", A.FileStat, _file_stat, lambda a, d: J.file_stat(a, *d), "FILE_STAT", "mode, owner, device, age"),
    Kind("file_contents", "files", A.FileContents, _text, J.file_contents, "FILE_CONTENTS", "lines match"),
    Kind("command", "commands", A.Command, lambda a, f: f.command(a.argv, a.timeout_s), J.command, "COMMAND", "exit status and output, with a timeout"),
    Kind("dmi", "dmi", A.DmiMatch, _dmi, J.dmi, "DMI", "dmidecode data matches"),
    Kind("nhc_function", "nhc", A.NhcFunction, nhc_function.gather, J.nhc_function, "NHC_FUNCTION", "a site's own NHC check function, run as NHC ran it"),
)  # fmt: skip

KINDS: dict[str, Kind] = {k.name: k for k in _KINDS}


def get(name: str) -> Kind:
    return KINDS[name]
