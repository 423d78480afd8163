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
either.  Standard library only: the prolog imports it on every job start.
"""

from __future__ import annotations

import errno
import logging
import os
import stat

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


def open_dir(path: str) -> int:
    """An ``O_PATH`` descriptor of the directory ``path`` (an admin's: the
    progress directory, or what a configured glob names before ``{job}``),
    for :func:`open_beneath` to start from."""
    return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
