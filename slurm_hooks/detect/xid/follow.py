"""Followers: "is there anything new in the kernel log?", cheaply.

The watcher (``agent/watch.py``) waits on one of these between scans: on
``/dev/kmsg`` it sleeps in ``poll()`` until the kernel appends a record; on a
plain file it ``stat()``s every interval (one syscall); on the journal it
looks every interval.  A follower only rings the bell: the XID check reads
the records again from its own cursor and decides what is really new.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import threading
import time


class Follower:
    """Waits until the kernel log may hold something new.  ``wait`` returns
    True when it is worth running the XID check, False on timeout."""

    def wait(self, timeout: float, stop: threading.Event) -> bool:  # pragma: no cover - protocol
        raise NotImplementedError

    def close(self) -> None:
        pass


class FileFollower(Follower):
    """A plain file: one ``stat()`` per ``interval``; new inode, size or
    mtime means look (the XID check's cursor decides what is really new)."""

    def __init__(self, path: str, interval: float):
        self.path = path
        self.interval = interval
        self._seen: tuple[int, int, int, int] | None = None

    def _stamp(self) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def changed(self) -> bool:
        stamp = self._stamp()
        if stamp is None or stamp == self._seen:
            return False
        self._seen = stamp
        return True

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            if self.changed():
                return True
            left = deadline - time.monotonic()
            if left <= 0 or stop.is_set():
                return False
            if stop.wait(min(self.interval, left)):
                return False


class KmsgFollower(Follower):
    """``/dev/kmsg``: ``poll()`` on our own descriptor, positioned at the end,
    wakes when the kernel appends a record.  The records read here are only
    a doorbell; the XID check reads them again from its cursor."""

    def __init__(self, path: str, wakeup_fd: int | None = None):
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with contextlib.suppress(OSError):
            os.lseek(self.fd, 0, os.SEEK_END)
        self.poller = select.poll()
        self.poller.register(self.fd, select.POLLIN | select.POLLPRI)
        self.wakeup_fd = wakeup_fd
        if wakeup_fd is not None:
            self.poller.register(wakeup_fd, select.POLLIN)
        self._first = True

    def _drain(self) -> None:
        while True:
            try:
                if not os.read(self.fd, 16384):
                    return
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.EINVAL, errno.EINTR):
                    continue  # overwritten or oversized record: the check counts those
                raise

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        if self._first:  # catch up with whatever came before we started
            self._first = False
            return True
        if stop.is_set():
            return False
        events = self.poller.poll(max(0, int(timeout * 1000)))
        hit = any(fd == self.fd and ev & (select.POLLIN | select.POLLPRI) for fd, ev in events)
        if hit:
            self._drain()
        return hit

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class IntervalFollower(Follower):
    """The journal (or anything without a cheap change signal): look every
    ``interval`` seconds."""

    def __init__(self, interval: float):
        self.interval = interval
        self._next = 0.0

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        left = self._next - time.monotonic()
        if left > timeout:
            stop.wait(max(0.0, timeout))
            return False
        if left > 0 and stop.wait(left):
            return False
        self._next = time.monotonic() + self.interval
        return True
