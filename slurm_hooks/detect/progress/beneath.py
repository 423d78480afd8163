"""Open what users made under the progress directory without ever asking a
file system of theirs.

Any user may mount a FUSE file system on a directory or file they own
(``fusermount`` is setuid root).  Where a site allows ``user_allow_other``
(``/etc/fuse.conf``) and the user mounts with ``allow_other``, root's looks
go to the user's daemon, and a stopped daemon holds every ``stat``,
``open`` or directory read of the mount for as long as the user likes: the
watcher's progress pass (and with it every other job's hang and straggler
checks), ``slurm-hooks job``, or the prolog of the job that gets the id next
(which slurmd then drains for a prolog timeout).

An ``O_PATH`` open asks no file system (it only walks the names), and
``/proc/self/fdinfo`` names the mount of a descriptor, so a name whose mount
is not its directory's is refused before anything asks that mount.  The
file is then opened again through that very descriptor (``/proc/self/fd/N``
reaches the inode the descriptor holds, never a mount put on top of it
since), so a mount made between the look and the open is not crossed
either.

The progress directory itself is root's once the watcher made it, but a
user can make it first and mount on it: :func:`lstat_path` refuses a FUSE
mount a user made (``/proc/self/mountinfo``) wherever it stands, while an
admin's own mount there (a tmpfs of its own) is fine; :func:`detach` takes
such a mount away without asking its daemon anything.  Standard library
only: the prolog imports it on every job start.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Callable

log = logging.getLogger(__name__)


class AnotherMount(OSError):
    """The name is a mount point (or the way to it crosses one): a file
    system someone mounted there, not the directory's own."""


def mount_id(fd: int) -> int | None:
    """The id of the mount ``fd`` is on (``mnt_id`` of
    ``/proc/self/fdinfo/<fd>``); None where /proc does not say."""
    try:
        info = os.open(f"/proc/self/fdinfo/{fd}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            raw = os.read(info, 4096)
        finally:
            os.close(info)
        return int(raw.split(b"mnt_id:", 1)[1].split(None, 1)[0])
    except (OSError, ValueError, IndexError):
        return None


def _look(name: str, dir_fd: int, here: int | None) -> int:
    """An ``O_PATH`` descriptor of ``name`` in ``dir_fd`` (whose mount is
    ``here``), which must be one plain component on that same mount
    (AnotherMount otherwise)."""
    if not name or "/" in name or name in (".", ".."):
        raise OSError(errno.EINVAL, "not one name in the directory", name)
    pfd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    there = mount_id(pfd)
    if here is None or there != here:
        os.close(pfd)
        raise AnotherMount(errno.EXDEV, "a mount point (another file system)", name)
    return pfd


def stat_beneath(name: str, *, dir_fd: int, here: int | None = None) -> os.stat_result:
    """``lstat`` of ``name`` in ``dir_fd``, refused (AnotherMount) where
    ``name`` is a mount point: the ``stat`` would ask that file system.
    ``here``: ``dir_fd``'s :func:`mount_id` where the caller has it."""
    pfd = _look(name, dir_fd, mount_id(dir_fd) if here is None else here)
    try:
        return os.fstat(pfd)
    finally:
        os.close(pfd)


def open_beneath(name: str, *, dir_fd: int, flags: int, kind: int, here: int | None = None) -> int:
    """``name`` in ``dir_fd``, opened with ``flags``: one plain component,
    never a symlink, of file type ``kind`` (``stat.S_IFDIR``,
    ``stat.S_IFREG``), and on its directory's mount.  OSError otherwise
    (AnotherMount for a mount point); nothing of another mount is asked.
    ``here``: ``dir_fd``'s :func:`mount_id`, for a caller opening many
    names in one directory."""
    pfd = _look(name, dir_fd, mount_id(dir_fd) if here is None else here)
    try:
        st = os.fstat(pfd)
        if stat.S_IFMT(st.st_mode) != kind:
            raise OSError(errno.EINVAL, "not the kind of file asked for", name)
        # The magic link is followed by design; O_NOFOLLOW would refuse it.
        return os.open(f"/proc/self/fd/{pfd}", (flags & ~os.O_NOFOLLOW) | os.O_CLOEXEC)
    finally:
        os.close(pfd)


def open_dir(path: str, *, follow: bool = True) -> int:
    """An ``O_PATH`` descriptor of the directory ``path`` (an admin's: the
    progress directory, or what a configured glob names before ``{job}``),
    for :func:`open_beneath` to start from; AnotherMount where it is a FUSE
    mount a user made (looking up a name in it would ask their daemon).
    ``follow=False``: a symlink there is refused (ENOTDIR)."""
    flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        _refuse_users_fuse(fd, path)
    except OSError:
        os.close(fd)
        raise
    return fd


def lstat_path(path: str) -> os.stat_result:
    """``lstat`` of the absolute ``path``, refused (AnotherMount) where a
    user's FUSE mount is there: the ``stat`` would ask their daemon."""
    pfd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _refuse_users_fuse(pfd, path)
        return os.fstat(pfd)
    finally:
        os.close(pfd)


def _refuse_users_fuse(fd: int, path: str) -> None:
    """AnotherMount where ``fd`` is on a FUSE mount a user made.  Cheap in
    the usual case: only a mount other than the parent directory's is looked
    up in ``/proc/self/mountinfo``."""
    here = mount_id(fd)
    if here is None:
        raise AnotherMount(errno.EXDEV, "no mount id in /proc", path)
    parent = os.path.dirname(os.path.normpath(path)) or "/"
    try:
        pfd = os.open(parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        pfd = -1
    try:
        if pfd >= 0 and mount_id(pfd) == here:
            return
    finally:
        if pfd >= 0:
            os.close(pfd)
    if users_fuse(here):
        raise AnotherMount(errno.EXDEV, "a FUSE mount of a user's", path)


def users_fuse(mnt: int, mountinfo: str = "/proc/self/mountinfo") -> bool:
    """Whether mount ``mnt`` is a FUSE file system (``fuse``, ``fuse.*``,
    ``fuseblk``) that a user other than root mounted (``user_id=`` in its
    super options, as the kernel shows it)."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                fields = line.split()
                if not fields or fields[0] != str(mnt) or "-" not in fields:
                    continue
                dash = fields.index("-")
                fstype = fields[dash + 1] if len(fields) > dash + 1 else ""
                opts = fields[dash + 3].split(",") if len(fields) > dash + 3 else []
                fuse = fstype in ("fuse", "fuseblk") or fstype.startswith("fuse.")
                return fuse and "user_id=0" not in opts
    except OSError:
        return True  # cannot tell: do not look
    return False


#: Mounts stacked on one name that are detached, at most (a user may stack
#: them: each is detached, none is asked anything).
MAX_DETACH = 8


def detach_while(path: str, mounted: Callable[[], bool]) -> None:
    """:func:`detach` ``path`` while ``mounted()`` says a mount is still
    there, at most :data:`MAX_DETACH` times (OSError past that)."""
    for _ in range(MAX_DETACH):
        if not mounted():
            return
        detach(path)
    if mounted():
        raise OSError(errno.EBUSY, f"more than {MAX_DETACH} mounts stacked", path)


def detach(path: str) -> None:
    """``umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW)``: it asks nothing of
    the mounted file system, so a stopped daemon cannot hold it.  ctypes
    only on this rare path (the prolog's imports stay light)."""
    import ctypes  # noqa: PLC0415 - only when a user mounted something here

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(os.fsencode(path), 2 | 8) != 0:  # MNT_DETACH | UMOUNT_NOFOLLOW
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    log.warning("progress: detached a mount a user put at %s", path)
