"""Append-only JSON-lines audit log: every decision and every action.

One line per event, written with a single ``write()`` on an ``O_APPEND``
descriptor, so the hooks, the watcher and the grace worker can append to the
same file at once without interleaving parts of lines.  An audit failure is
logged and never stops remediation.

Fleet view (``[general] audit_dir``, docs/history.md): every record is also
appended to ``<audit_dir>/<node>.jsonl`` on a shared filesystem, named by the
node the record is about (records about no node, such as ``breaker_reset``,
by the writing host), so ``slurm-hooks history`` on any host sees every
node's incidents, and an admin's ``resume n4`` run elsewhere lands in n4's
file.  The local file stays the complete record of this host (a shared
filesystem that is away loses nothing); readers drop the copy a record has
in both places (the same line).  The shared write is bounded: it runs in a
helper thread joined for at most ``shared_timeout_s``, so a hung mount never
holds up a drain; the shared file is locked (``lockf``, bounded) around each
append because ``O_APPEND`` alone is not atomic across NFS clients.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slurm_hooks.store.atomicfile import ensure_dir, open_regular

log = logging.getLogger(__name__)

#: Names a shared audit file may take (a Slurm node name or a host name):
#: anything else (a slash, ``..``, a blank, a control character) is written
#: to the local file only, never turned into a path.
_FILE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", re.ASCII)
SHARED_SUFFIX = ".jsonl"
#: Seconds a record may wait for the shared filesystem (lock and write).
SHARED_TIMEOUT_S = 2.0


class UntrustedSharedDir(OSError):
    """The shared audit directory is one any user can write: its files could
    be theirs (forged records, a FIFO where a node's file belongs)."""


def check_shared_dir(directory: str | os.PathLike[str]) -> None:
    """Refuse a shared audit directory any user may write (mode ``o+w``,
    sticky or not): on it, a user could make the file of a node that has
    none yet and write records in the automation's name.  Root-squashed NFS
    wants the directory writable by the squash user (``nobody``), not by
    all (docs/history.md)."""
    st = os.stat(directory)
    if st.st_mode & stat.S_IWOTH:
        raise UntrustedSharedDir(
            errno.EPERM,
            f"any user may write it (mode {stat.S_IMODE(st.st_mode):o})",
            str(directory),
        )


def shared_file_name(name: str | None) -> str | None:
    """``<name>.jsonl`` for a safe node or host name, else None."""
    if not isinstance(name, str) or not _FILE_NAME_RE.fullmatch(name):
        return None
    return name + SHARED_SUFFIX


def this_host() -> str:
    """The short host name, the file of records about no node."""
    import socket  # only where a shared dir is configured

    return socket.gethostname().split(".", 1)[0] or "localhost"


class AuditLog:
    """``record(action=..., node=..., why=...)`` appends one JSON line with
    ``ts`` (UTC ISO time), ``actor`` and whatever fields are given (job,
    incident, durations ...)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        actor: str = "slurm-hooks",
        clock: Callable[[], datetime] | None = None,
        shared_dir: str | os.PathLike[str] | None = None,
        shared_timeout_s: float = SHARED_TIMEOUT_S,
        host: str | None = None,
    ):
        self.path = Path(path)
        self.actor = actor
        self.clock = clock or (lambda: datetime.now(UTC))
        #: ``[general] audit_dir``: the fleet's shared directory, or None.
        self.shared_dir = Path(shared_dir) if shared_dir else None
        self.shared_timeout_s = shared_timeout_s
        self.host = host

    def record(self, action: str, **fields: Any) -> dict[str, Any]:
        entry: dict[str, Any] = {"ts": self.clock().isoformat(), "actor": self.actor}
        entry["action"] = action
        entry.update({k: v for k, v in fields.items() if v is not None})
        entry.setdefault("pid", os.getpid())
        line = json.dumps(entry, sort_keys=False, default=str, ensure_ascii=False) + "\n"
        data = line.encode("utf-8")
        try:
            ensure_dir(self.path.parent)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as exc:
            log.error("cannot append to audit log %s: %s (entry: %s)", self.path, exc, line.strip())
        if self.shared_dir is not None:
            self._record_shared(entry.get("node"), data)
        return entry

    def shared_path(self, node: Any) -> Path | None:
        """The shared file a record about ``node`` goes to (None: no shared
        dir, or a name that cannot be a file name)."""
        if self.shared_dir is None:
            return None
        name = shared_file_name(node if node is not None else self.host or this_host())
        return self.shared_dir / name if name else None

    def _record_shared(self, node: Any, data: bytes) -> None:
        target = self.shared_path(node)
        if target is None:
            log.warning("audit record about %r kept in the local log only (not a file name)", node)
            return
        done = threading.Event()
        failure: list[str] = []

        def write() -> None:
            try:
                # the lock gets half the time: the write after it must fit too
                _append_locked(target, data, time.monotonic() + self.shared_timeout_s / 2)
            except OSError as exc:
                failure.append(str(exc))
            finally:
                done.set()

        threading.Thread(target=write, name="audit-shared", daemon=True).start()
        if not done.wait(self.shared_timeout_s):
            log.error("shared audit dir %s did not answer in %.1fs; record kept in %s",
                      self.shared_dir, self.shared_timeout_s, self.path)  # fmt: skip
        elif failure:
            log.error("cannot append to shared audit log %s: %s; record kept in %s",
                      target, failure[0], self.path)  # fmt: skip

    def entries(self) -> Iterator[dict[str, Any]]:
        """Every readable entry, oldest first; broken lines are skipped."""
        try:
            fh = self.path.open(encoding="utf-8")
        except FileNotFoundError:
            return
        with fh:
            for n, line in enumerate(fh, 1):
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    log.warning("audit log %s line %d is not JSON; skipped", self.path, n)


def _append_locked(target: Path, data: bytes, deadline: float) -> None:
    """Append ``data`` to ``target`` under an exclusive ``lockf`` taken
    before the deadline (past it: appended unlocked, never dropped).  The
    shared directory is never created (no mkdir): a missing mount must fail,
    not be papered over by a local directory of the same name; a symlink in
    the file's place is refused (``O_NOFOLLOW``), and so is anything but a
    regular file (opened without blocking), and a directory any user may
    write (:func:`check_shared_dir`)."""
    check_shared_dir(target.parent)
    fd = open_regular(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
    try:
        locked = False
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                    log.warning(
                        "shared audit log %s not locked (%s); appending anyway", target, exc
                    )
                    break
                time.sleep(0.01)
        os.write(fd, data)
        if locked:
            fcntl.lockf(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
