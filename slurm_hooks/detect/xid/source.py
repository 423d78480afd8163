"""Where kernel-log records come from, and how to read only what is new.

Three sources, one contract (:class:`Source`): given the cursor saved by the
previous run (or None), feed every record written since into a
:class:`~slurm_hooks.detect.xid.scan.Scanner` and return the cursor to save.

* :class:`FileSource` - a plain file (syslog, kern.log, the lab's per-node
  file): offset + inode + size.  A new inode means the file was rotated, a
  size below the offset means it was truncated; both restart at offset 0.
* :class:`KmsgSource` - ``/dev/kmsg``: sequence number + boot id.  The
  device cannot seek to a sequence number, so records up to the saved one are
  read and skipped (cheap: no decoding); ``EPIPE`` (a record overwritten
  while we read) and sequence gaps are counted as lost.
* :class:`JournalSource` - ``journalctl -k -o json --after-cursor`` through
  ``probes.commands.run`` (timeout, no shell).

:func:`scan_new` ties a source to the cursor files under the state dir.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from collections.abc import Callable
from typing import Any, Protocol

from slurm_hooks.core.errors import CommandError, KernelLogError, StateError
from slurm_hooks.detect.xid.cursor import CORRUPT, load_cursor, save_cursor
from slurm_hooks.detect.xid.limits import BOOT_ID_PATH, KMSG_PATH, MAX_LINE
from slurm_hooks.detect.xid.scan import CHUNK, Scanner, ScanResult, looks_like_json

log = logging.getLogger(__name__)


def handled_watermark(state_dir: str) -> float | None:
    """Seconds since the epoch up to which kernel-log events are known to be
    handled, from state kept OUTSIDE the cursor: the newest event in the XID
    history (committed with the cursor), and the latest resume or passed
    acceptance of a node in this state dir (a node put back in service after
    a fault: events before that are the fault it was repaired for).  None
    when nothing is known (then every event counts, as on a first run, and
    the engine still skips a node that carries our reason for the code)."""
    from slurm_hooks.detect.xid.history import load_history
    from slurm_hooks.store.state import StateStore

    marks = [i.t for i in load_history(state_dir)]
    nodes_dir = os.path.join(state_dir, "nodes")
    try:
        names = [n[: -len(".json")] for n in os.listdir(nodes_dir) if n.endswith(".json")]
    except OSError:
        names = []
    store = StateStore(state_dir)
    for node in names:
        try:
            hist = store.history(node)
        except (StateError, KeyError, TypeError, ValueError) as exc:
            log.warning("node state %s unreadable for the XID watermark: %s", node, exc)
            continue
        marks += [t.timestamp() for t in (*hist.resumes, *hist.acceptance_passes)]
    return max(marks) if marks else None


def drop_handled(state_dir: str, aggregates: tuple[Any, ...]) -> tuple[Any, ...]:
    """After a corrupt cursor: the aggregates whose newest event is after
    :func:`handled_watermark` (events without a wall-clock time are kept:
    a fault is never dropped on a guess).  Logged with what was dropped."""
    mark = handled_watermark(state_dir)
    if mark is None:
        log.error("XID cursor rebuilt with nothing known to be handled: acting on every event")
        return aggregates
    kept = tuple(a for a in aggregates if a.last_wall is None or a.last_wall > mark)
    log.error("XID cursor rebuilt: %d event group(s) at or before %.0f (already handled) "
              "dropped, %d kept", len(aggregates) - len(kept), mark, len(kept))  # fmt: skip
    return kept


class Source(Protocol):
    """A kernel log that can be read incrementally."""

    #: Stable identity: the cursor file is named after it.
    name: str

    def read_new(
        self, cursor: dict[str, Any] | None, scanner: Scanner
    ) -> tuple[dict[str, Any], str | None]:
        """Feed new records to ``scanner``; return (cursor to save, reset reason)."""
        ...


def read_boot_id(path: str = BOOT_ID_PATH) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip() or None
    except OSError:
        return None


class FileSource:
    """A plain log file, read from the saved offset to the last complete line."""

    def __init__(self, path: str, *, first_run: str = "all", chunk: int = CHUNK) -> None:
        self.path = path
        self.first_run = first_run
        self.chunk = chunk
        self.name = "file" + os.path.abspath(path).replace("/", "_")

    def read_new(
        self, cursor: dict[str, Any] | None, scanner: Scanner
    ) -> tuple[dict[str, Any], str | None]:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise KernelLogError(f"cannot read kernel log {self.path}: {exc}") from exc
        identity = {"path": self.path, "inode": st.st_ino, "dev": st.st_dev}
        reset: str | None = None
        offset = _int(cursor.get("offset")) if cursor else None
        if cursor is None or offset is None:
            offset = 0 if self.first_run == "all" else st.st_size
            if cursor is not None:
                reset = "corrupt"
        elif cursor.get("inode") != st.st_ino or cursor.get("dev") != st.st_dev:
            offset, reset = 0, "rotated"
        elif st.st_size < offset:
            offset, reset = 0, "truncated"
        if st.st_size == offset:
            # Nothing new: the common case on every healthcheck run.  One stat.
            return {**identity, "offset": offset, "size": st.st_size}, reset
        try:
            with open(self.path, "rb") as f:
                if offset == 0:
                    scanner.json_mode = looks_like_json(f.read(4096))
                f.seek(offset)
                consumed = scanner.feed_stream(f, final=False, chunk=self.chunk)
        except OSError as exc:
            raise KernelLogError(f"cannot read kernel log {self.path}: {exc}") from exc
        if reset:
            log.info("kernel log restarted path=%s reason=%s", self.path, reset)
        return {**identity, "offset": offset + consumed, "size": st.st_size}, reset


#: os.read-like: (fd, size) -> bytes; raises BlockingIOError at the end.
ReadFn = Callable[[int, int], bytes]


class KmsgSource:
    """``/dev/kmsg``: one record per read, non-blocking, keyed by sequence
    number within a boot."""

    name = "kmsg"

    def __init__(
        self,
        path: str = KMSG_PATH,
        *,
        boot_id_path: str = BOOT_ID_PATH,
        first_run: str = "all",
        read: ReadFn | None = None,
        opener: Callable[[str], int] | None = None,
    ) -> None:
        self.path = path
        self.boot_id_path = boot_id_path
        self.first_run = first_run
        self._read = read or os.read
        self._open = opener or (lambda p: os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))

    def read_new(
        self, cursor: dict[str, Any] | None, scanner: Scanner
    ) -> tuple[dict[str, Any], str | None]:
        boot = read_boot_id(self.boot_id_path)
        reset: str | None = None
        last = _int(cursor.get("seq")) if cursor else None
        feed = True
        if cursor is None:
            last = -1
            feed = self.first_run == "all"
        elif cursor.get("boot_id") != boot:
            last, reset = -1, "reboot"
        elif last is None:
            last, reset = -1, "corrupt"
        try:
            fd = self._open(self.path)
        except OSError as exc:
            raise KernelLogError(f"cannot open {self.path}: {exc}") from exc
        newest = last
        stats = scanner.stats
        gap_checked = last < 0
        try:
            while True:
                try:
                    rec = self._read(fd, 16384)
                except BlockingIOError:
                    break
                except BrokenPipeError:
                    # The record we were about to read was overwritten.
                    stats.lost += 1
                    continue
                except InterruptedError:
                    continue
                except OSError as exc:
                    if exc.errno == errno.EAGAIN:
                        break
                    if exc.errno == errno.EPIPE:
                        stats.lost += 1
                        continue
                    if exc.errno == errno.EINVAL:  # record larger than our buffer
                        stats.oversized += 1
                        continue
                    raise KernelLogError(f"cannot read {self.path}: {exc}") from exc
                if not rec:
                    break
                seq = _kmsg_seq(rec)
                if seq is None:
                    stats.malformed += 1
                    continue
                if seq <= newest:
                    continue
                if not gap_checked:
                    gap_checked = True
                    if seq > last + 1:
                        stats.lost += seq - last - 1
                newest = seq
                stats.lines += 1
                stats.bytes += len(rec)
                if feed and b"Xid" in rec:
                    # Continuation lines (" KEY=value") follow the first newline.
                    nl = rec.find(b"\n")
                    scanner.feed_line(rec if nl < 0 else rec[:nl])
        finally:
            os.close(fd)
        return {"boot_id": boot, "seq": newest}, reset


class JournalSource:
    """``journalctl -k -o json``: kernel messages from the journal, resumed
    with ``--after-cursor``."""

    name = "journal"

    def __init__(
        self,
        *,
        journalctl: str = "journalctl",
        timeout: float = 30.0,
        first_run: str = "all",
        run: Callable[..., Any] | None = None,
    ) -> None:
        self.journalctl = journalctl
        self.timeout = timeout
        self.first_run = first_run
        self._run = run

    def argv(self, cursor: str | None) -> list[str]:
        argv = [self.journalctl, "-k", "-o", "json", "--no-pager", "-q"]
        if cursor:
            argv += ["--after-cursor", cursor]
        elif self.first_run == "end":
            argv += ["-n", "1"]
        else:
            argv += ["-b"]
        return argv

    def read_new(
        self, cursor: dict[str, Any] | None, scanner: Scanner
    ) -> tuple[dict[str, Any], str | None]:
        run = self._run
        if run is None:
            from slurm_hooks.detect.probes import commands

            run = commands.run
        saved = cursor.get("cursor") if cursor else None
        saved = saved if isinstance(saved, str) and saved else None
        try:
            result = run(self.argv(saved), timeout=self.timeout, check=False)
        except CommandError as exc:
            raise KernelLogError(f"cannot read the journal: {exc}") from exc
        if result.rc != 0 and not result.stdout:
            raise KernelLogError(f"journalctl failed rc={result.rc}: {result.stderr.strip()[:300]}")
        lines = result.stdout.splitlines()
        scanner.json_mode = True
        if cursor is None and self.first_run == "end":
            stats = scanner.stats
            stats.lines += len(lines)
        else:
            scanner.feed_lines(lines)
        newest = saved
        for line in reversed(lines):
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):  # a hostile nesting depth
                continue
            if isinstance(obj, dict) and isinstance(obj.get("__CURSOR"), str):
                newest = obj["__CURSOR"]
                break
        return {"cursor": newest}, None


def scan_new(
    source: Source,
    state_dir: str,
    *,
    year: int | None = None,
    save: bool = True,
    max_line: int = MAX_LINE,
) -> ScanResult:
    """Everything ``source`` logged since the last call with the same
    ``state_dir``.  The cursor is saved (atomically) before returning, or,
    inside an ``xid.commit.deferred`` scope (hooks, watcher), staged until
    the caller commits it once the act on these events is durable: a run
    that could not act leaves them to be read again.
    Lines longer than ``max_line`` bytes (``[checks.xid] max_line``) are
    skipped and counted as oversized."""
    cursor = load_cursor(state_dir, source.name)
    scanner = Scanner(year=year, max_line=max_line)
    new_cursor, reset = source.read_new(cursor, scanner)
    if save and new_cursor != cursor:
        save_cursor(state_dir, source.name, new_cursor)
    aggregates = scanner.aggregates()
    if cursor is not None and cursor.get(CORRUPT):
        aggregates = drop_handled(state_dir, aggregates)
    return ScanResult(
        source=source.name,
        aggregates=aggregates,
        stats=scanner.stats,
        reset=reset,
        cursor=new_cursor,
    )


def _kmsg_seq(rec: bytes) -> int | None:
    head, sep, _ = rec.partition(b";")
    if not sep:
        return None
    parts = head.split(b",", 3)
    if len(parts) < 3 or not parts[1].isdigit():
        return None
    return int(parts[1])


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= -1 else None
