"""Installed RAM, the mount table, free space and a write test, from the stdlib.

What the memory, mounts and scratch checks need from the node, without
psutil: importing psutil costs a health check more (~8 ms) than reading the
three things it would read for us.  :data:`HOST` answers the same calls with
the same values as ``psutil`` (``virtual_memory().total``,
``disk_partitions(all=True)``, ``disk_usage(path)``), so the checks keep
taking an injected ``psutil``-shaped service in tests:

* total RAM is ``MemTotal`` from ``/proc/meminfo`` (what psutil reads), not
  ``sysconf(_SC_PHYS_PAGES)``: both come from the kernel's ``totalram_pages``,
  but inside a container LXCFS rewrites only ``/proc/meminfo``;
* the mount table is ``/proc/self/mounts`` with getmntent's octal escapes
  decoded (a mount point with a space is ``\\040`` there); it never stats a
  mount, so a hung NFS server cannot hang it;
* free space is ``os.statvfs``: ``free`` is what an unprivileged user may
  still write (``f_bavail``), as with psutil.

:func:`write_test` creates and removes a file in-process instead of running
``mktemp`` and ``rm`` (two child processes, ~8 ms): the file-system calls run
in a daemon thread joined with a timeout, so a mount whose server is gone
leaves a thread blocked in the kernel, not a hung hook.
"""

from __future__ import annotations

import errno
import os
import threading
from typing import NamedTuple

PROC_MEMINFO = "/proc/meminfo"
PROC_MOUNTS = "/proc/self/mounts"
#: Prefix of the write test's file (the name the mktemp-based test used).
WRITE_TEST_PREFIX = ".slurm-hooks-write."


class VirtualMemory(NamedTuple):
    total: int


class Partition(NamedTuple):
    device: str
    mountpoint: str
    fstype: str
    opts: str


class DiskUsage(NamedTuple):
    total: int
    used: int
    free: int
    percent: float


def mem_total(meminfo: str = PROC_MEMINFO) -> int:
    """Bytes of RAM the kernel manages (``MemTotal``); sysconf where
    ``/proc`` is not mounted."""
    try:
        with open(meminfo, "rb") as f:
            for line in f:
                if line.startswith(b"MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _unescape(field: str) -> str:
    r"""getmntent's decoding: ``\040`` space, ``\011`` tab, ``\012`` newline,
    ``\134`` backslash."""
    if "\\" not in field:
        return field
    return (
        field.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
    )


def parse_mounts(text: str) -> list[Partition]:
    """``/proc/self/mounts`` lines as partitions, in table order (a later
    entry for the same mount point is the one on top)."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        device, mountpoint, fstype, opts = (_unescape(f) for f in fields[:4])
        out.append(Partition("" if device == "none" else device, mountpoint, fstype, opts))
    return out


def mounts(path: str = PROC_MOUNTS) -> list[Partition]:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
    except FileNotFoundError:
        with open("/etc/mtab", encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
    return parse_mounts(text)


def disk_usage(path: str) -> DiskUsage:
    """Like ``psutil.disk_usage``: ``total`` and ``used`` for the whole file
    system, ``free`` and ``percent`` as an unprivileged user sees them.
    Raises FileNotFoundError for a missing path."""
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    used = total - st.f_bfree * st.f_frsize
    free = st.f_bavail * st.f_frsize
    total_user = used + free
    percent = round(used / total_user * 100, 1) if total_user else 0.0
    return DiskUsage(total, used, free, percent)


class Host:
    """The ``psutil`` calls the host checks make, answered from the stdlib."""

    def virtual_memory(self) -> VirtualMemory:
        return VirtualMemory(mem_total())

    def disk_partitions(self, all: bool = True) -> list[Partition]:  # noqa: A002 - psutil's name
        return mounts()

    def disk_usage(self, path: str) -> DiskUsage:
        return disk_usage(path)


HOST = Host()


def _create_and_remove(path: str) -> None:
    name = os.path.join(path, WRITE_TEST_PREFIX + os.urandom(6).hex())
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.close(fd)
    finally:
        os.unlink(name)


#: :func:`write_test`'s answer when the file system has no space or inodes
#: left for the file (what any user can bring about by filling it).
WRITE_FULL = "full"


def write_test(path: str, timeout: float) -> str:
    """Create and remove a file under ``path``: "" on success, "timeout" when
    the file system did not answer within ``timeout`` seconds,
    :data:`WRITE_FULL` when it had no space or inodes left, else the error."""
    box: dict[str, BaseException] = {}

    def target() -> None:
        try:
            _create_and_remove(path)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            box["error"] = exc

    t = threading.Thread(target=target, name="write-test", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        return "timeout"
    exc = box.get("error")
    if exc is None:
        return ""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return WRITE_FULL
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot create a file in {path}: {exc.strerror}"
    return f"cannot create a file in {path}: {exc}"
