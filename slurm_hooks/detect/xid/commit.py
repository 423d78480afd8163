"""Detection state that is committed only after the act is durable.

The kernel-log cursor and the XID history say "these events were handled".
Saved when the scan ends, they would lose a fault whenever acting on it
fails afterwards: a stalled slurmctld, a kill -9, a full disk.  So the
hooks and the watcher open a :func:`deferred` scope around "scan, then
act": inside it ``save_cursor`` / ``save_history`` only stage their files,
and the caller :meth:`Pending.commit`\\ s them once the engine has journalled
its decision (or there was nothing to act on).  A scope left without a
commit (an exception, a kill) discards them: the next run reads the same
records again and the fault is found again.

Outside a scope (the CLI's ``xid scan``, the prolog) writes go straight to
disk as before.  Checks run in worker threads, so the scope is process-wide
and guarded by a lock, not thread-local.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger(__name__)

_lock = threading.Lock()
_active: Pending | None = None


class Pending:
    """Files staged in one scope: path -> (JSON value, writer)."""

    def __init__(self) -> None:
        self.staged: dict[str, tuple[Any, Callable[[str, Any], None]]] = {}
        self.committed = False

    def get(self, path: str) -> tuple[bool, Any]:
        with _lock:
            if path in self.staged:
                return True, self.staged[path][0]
            return False, None

    def commit(self) -> None:
        """Write every staged file (atomically, each).  A write that fails is
        logged and the rest go on: the act is already durable, and a cursor
        left behind only means those records are read (and found handled)
        again."""
        with _lock:
            items = list(self.staged.items())
            self.staged.clear()
            self.committed = True
        for path, (value, write) in items:
            try:
                write(path, value)
            except Exception as exc:  # noqa: BLE001 - never fail after acting
                log.error("detection state not saved path=%s error=%s", path, exc)

    def discard(self) -> None:
        with _lock:
            n = len(self.staged)
            self.staged.clear()
        if n:
            log.warning("detection state not committed (%d file(s)): the events are read again", n)


@contextlib.contextmanager
def deferred() -> Iterator[Pending]:
    """Stage cursor and history writes until ``commit()``; discard on exit
    without one.  Scopes do not nest (the detect lock serialises them)."""
    global _active
    pending = Pending()
    with _lock:
        outer, _active = _active, pending
    try:
        yield pending
    finally:
        with _lock:
            _active = outer
        if not pending.committed:
            pending.discard()


def stage_or_write(path: str, value: Any, write: Callable[[str, Any], None]) -> None:
    """Inside a scope: stage ``value`` for ``path``; outside: ``write`` it now."""
    with _lock:
        pending = _active
        if pending is not None:
            pending.staged[path] = (value, write)
            return
    write(path, value)


def staged(path: str) -> tuple[bool, Any]:
    """(True, value) when ``path`` has a staged value in the open scope, so a
    second scan in the same scope continues from it."""
    with _lock:
        pending = _active
    return pending.get(path) if pending is not None else (False, None)
