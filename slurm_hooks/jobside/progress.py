"""Report "rank R finished step S" to the node's watcher, cheaply, from a training loop.

Standard library only: importing this module pulls in nothing else of
slurm_hooks (``slurm_hooks/__init__.py`` is a docstring and a version).  Any
other language can follow the same file protocol (docs/progress.md)::

    <dir>/<job id>/rank<R>.log      one line appended per step, O_APPEND

    P1 job=<id> restart=<n> rank=<R> node=<name> pid=<pid> [pidns=<inode>] step=<S> time=<unix s> busy=<s>

``<dir>`` is ``$SLURM_HOOKS_PROGRESS_DIR``, else ``/dev/shm/slurm-hooks-progress``
(node-local tmpfs: a step costs one ``write(2)`` of ~100 bytes, no fsync).
``step=0`` is written once when the rank starts (the first step may take
long: no hang is ever judged before a first step completed).  ``busy`` is
optional: the seconds this rank computed before it entered the step's
collective (the straggler judge compares it; the interval between two
records is the same on every rank of a synchronous job).  ``pidns`` is
written only by a rank in a PID namespace of its own (a container): its
``pid`` is the container's number, and the watcher finds the process by
both (``detect/progress/pidns.py``).

Usage::

    from slurm_hooks.jobside.progress import Progress
    progress = Progress.from_env()          # None-safe: a no-op outside Slurm
    for step in range(start + 1, steps + 1):
        ...
        progress.step(step, busy=compute_seconds)

A job that never writes records is never judged: opting in is using this.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import time
import warnings
from collections.abc import Mapping

ENV_DIR = "SLURM_HOOKS_PROGRESS_DIR"
DEFAULT_DIR = "/dev/shm/slurm-hooks-progress"
#: The writer starts its file again (O_TRUNC) past this size, so a long run
#: never fills tmpfs; the reader reads only the tail anyway.
MAX_BYTES = 4 << 20
VERSION = "P1"
#: The host's first PID namespace (the kernel's ``PROC_PID_INIT_INO``): a
#: rank there writes no ``pidns``, its pid is the host's.
INIT_PIDNS = 0xEFFFFFFC


def _clean(value: str) -> str:
    """No blanks or '=' inside a field: one line stays one record."""
    return "".join(ch if ch.isprintable() and ch not in " =\t" else "_" for ch in value)[:64]


class Progress:
    """One rank's progress file.  ``enabled`` False (no job id) makes every
    call a no-op, so the same training code runs outside Slurm."""

    def __init__(
        self,
        directory: str,
        job: str | None,
        rank: int,
        *,
        restart: int = 0,
        node: str | None = None,
        clock=time.time,  # noqa: ANN001 - stdlib only, kept trivially injectable
    ) -> None:
        self.enabled = bool(job) and str(job).isdigit()
        self.rank = int(rank)
        self.clock = clock
        self._fd: int | None = None
        self._written = 0
        if not self.enabled:
            return
        base = os.path.join(directory, str(job))
        self.path = os.path.join(base, f"rank{self.rank}.log")
        self._head = (
            f"{VERSION} job={job} restart={int(restart)} rank={self.rank} "
            f"node={_clean(node or socket.gethostname())} pid={os.getpid()}"
        )
        ns = _pid_namespace()
        if ns is not None and ns != INIT_PIDNS:
            self._head += f" pidns={ns}"
        try:
            _mkdir(directory, 0o1777)  # shared by every user's jobs on the node, like /tmp
            _mkdir(base, 0o755)
            _check_mine(directory, str(job))
            self._open(truncate=False)
        except OSError as exc:
            # Progress is a report, never a reason for the training to fail:
            # another user may have made the directory under this job's id
            # (the prolog moves such a one aside), or filled the tmpfs.
            self.enabled = False
            self.close()
            warnings.warn(f"slurm-hooks progress off for this rank: {exc}", RuntimeWarning,
                          stacklevel=2)  # fmt: skip
            return
        self.step(0)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **kw: object) -> Progress:
        """From the launcher's environment: SLURM_JOB_ID, SLURM_PROCID,
        SLURM_RESTART_COUNT, SLURMD_NODENAME and SLURM_HOOKS_PROGRESS_DIR."""
        env = os.environ if env is None else env
        return cls(
            env.get(ENV_DIR) or DEFAULT_DIR,
            env.get("SLURM_JOB_ID"),
            int(env.get("SLURM_PROCID") or env.get("RANK") or 0),
            restart=int(env.get("SLURM_RESTART_COUNT") or 0),
            node=env.get("SLURMD_NODENAME"),
            **kw,
        )

    def _open(self, *, truncate: bool) -> None:
        """The rank's file: never through a symlink, never waiting on a FIFO
        (``O_NONBLOCK``), a regular file or an error."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
        if truncate:
            flags |= os.O_TRUNC
        self.close()
        fd = os.open(self.path, flags | os.O_NONBLOCK, 0o644)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", self.path)
        os.set_blocking(fd, True)
        self._fd, self._written = fd, st.st_size

    def step(self, step: int, *, busy: float | None = None) -> None:
        """Record that this rank finished ``step`` (one ``write(2)``)."""
        if not self.enabled or self._fd is None:
            return
        line = f"{self._head} step={int(step)} time={self.clock():.6f}"
        if busy is not None:
            line += f" busy={float(busy):.6f}"
        data = (line + "\n").encode()
        try:
            if self._written + len(data) > MAX_BYTES:
                self._open(truncate=True)
            if self._fd is not None:
                self._written += os.write(self._fd, data)
        except OSError:
            pass  # a full tmpfs (any user can fill it) costs this record, not the training

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _check_mine(directory: str, job: str) -> None:
    """``<directory>/<job>`` is a real directory of this process's user that
    no one else may write, on the progress directory's own mount; else
    OSError (then the records are not written there).  Another user's FUSE
    mount there (where the site allows ``user_allow_other``), its daemon
    stopped, would hold this rank's start for as long as they like: the look
    (``O_PATH``, /proc's ``mnt_id``) asks no file system, and a mount point
    is refused before anything asks it."""
    path = os.path.join(directory, job)
    top = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = os.open(job, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=top)
        try:
            if _mount(fd) != _mount(top):
                raise OSError(errno.EXDEV, "a mount point, not this job's directory", path)
            st = os.fstat(fd)
        finally:
            os.close(fd)
    finally:
        os.close(top)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise OSError(errno.EPERM, f"not this user's own directory (owner uid {st.st_uid})", path)


def _mount(fd: int) -> bytes:
    """The mount ``fd`` is on, as ``/proc/self/fdinfo`` names it (the
    watcher has ``detect.progress.beneath.mount_id``; what training jobs
    import imports nothing else of ours)."""
    with open(f"/proc/self/fdinfo/{fd}", "rb") as fh:
        words = fh.read().split()
    if b"mnt_id:" not in words:
        raise OSError(errno.ENOTSUP, "no mnt_id in /proc/self/fdinfo")
    return words[words.index(b"mnt_id:") + 1]


def _pid_namespace() -> int | None:
    """This process's PID namespace, as ``/proc/self/ns/pid`` names it
    (``pid:[4026531836]``); None where /proc cannot say.  (The watcher
    reads the same link with ``detect.progress.pidns.namespace_of``; what
    training jobs import imports nothing else of ours.)"""
    try:
        link = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    inner = link[5:-1] if link.startswith("pid:[") and link.endswith("]") else ""
    return int(inner) if inner.isdigit() else None


def _mkdir(path: str, mode: int) -> None:
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        return
    os.chmod(path, mode)  # the umask must not take the sticky bit away
