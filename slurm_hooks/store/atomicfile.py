"""Replace a file in one step: temp file in the same directory, fsync, rename.

Hooks are killed at their time limit and nodes lose power: a cursor, an
incident journal or a generated slurm.conf must be either the old file or
the new one, never half of each.  Standard library only (no ``tempfile``):
this runs on every hook's path.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time


def ensure_dir(path: str | os.PathLike[str], mode: int = 0o755) -> None:
    """``mkdir -p`` where every directory created gets ``mode`` at most,
    whatever the caller's umask (slurmd's may be 0; ``os.makedirs`` gives
    the parents 0777 & umask): a directory a user can write would let them
    plant what root reads back (docs/security.md).  Existing ones are kept."""
    path = os.path.abspath(os.fspath(path))
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, mode)
        except FileExistsError:
            continue
        os.chmod(d, mode)  # mkdir's mode is masked by the umask, never widened by it


def write_atomic(
    path: str | os.PathLike[str], text: str, *, mode: int = 0o644, durable: bool = True
) -> None:
    """Write ``text`` to ``path`` atomically.  ``durable`` also fsyncs the
    file and its directory, so the new content survives a power cut; OSError
    propagates (callers decide whether a failed write matters)."""
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    ensure_dir(directory)
    tmp = os.path.join(
        directory, f".{os.path.basename(path)}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    )
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)  # O_CREAT's mode is masked by the umask
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def open_regular(path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
    """``os.open`` of a regular file only: never through a symlink, never
    waiting on a FIFO or a device someone put in its place (opened without
    blocking, then checked); OSError otherwise.  The descriptor blocks again
    once it is known to be a file."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd
