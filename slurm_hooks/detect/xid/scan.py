"""Scan kernel-log bytes for XID events: fast, flood-proof, never crashing.

The fast path reads large binary chunks and looks for ``b"Xid"`` with
``bytes.find`` (a two-way search in C), so the 99.9 % of lines that are not
XIDs are never split, decoded or matched.  Only lines around a hit are
decoded (UTF-8 with ``errors="replace"``) and handed to the parser.

Events are aggregated as they arrive, keyed by (kind, xid, pci, pid,
normalised message): a GPU that floods 800,000 identical XID 95 lines yields
a handful of aggregates with counts and first/last times, in bounded memory.

Bad input is skipped and counted in :class:`ScanStats`: lines that mention an
XID but do not parse, lines over ``MAX_LINE``, undecodable bytes, NUL
padding, two records glued on one line, kmsg records lost to overwrites.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, BinaryIO

from slurm_hooks.core.record import record
from slurm_hooks.detect.xid.limits import MAX_LINE

if TYPE_CHECKING:
    from slurm_hooks.detect.xid.aggregate import XidAggregate
    from slurm_hooks.detect.xid.parser import XidEvent

#: Lines longer than MAX_LINE (xid/limits.py) are skipped and counted.
#: The parser (and its regexes) is imported only when a line mentions an
#: XID, so a scan that finds nothing new compiles no regex.

#: Bytes read per chunk on the fast path.
CHUNK = 4 * 1024 * 1024
#: Distinct aggregates kept per scan; beyond it events fold into one
#: aggregate per (kind, xid, pci) so no code and no GPU is ever lost.
MAX_AGGREGATES = 10_000

#: Every XID and SXID record prints its bus id in parentheses right after
#: the word, and the ``(`` makes the search skip ahead ~5 bytes per probe.
_NEEDLE = b"Xid ("
_JSON_NEEDLE = re.compile(rb'Xid|"MESSAGE"\s*:\s*\[')


_STAT_FIELDS = (
    "bytes",
    "lines",
    "candidates",
    "events",
    "malformed",
    "oversized",
    "decode_errors",
    "binary",
    "interleaved",
    "lost",
    "folded",
    "not_kernel",
)


class ScanStats:
    """Counters for one scan.  ``malformed`` + ``oversized`` + ``lost`` are
    what an admin wants to see when a log looks odd.  (A slotted class, not
    a dataclass: it is mutated on the hot path and costs nothing to import.)"""

    __slots__ = _STAT_FIELDS

    def __init__(self, **counts: int) -> None:
        for name in _STAT_FIELDS:
            setattr(self, name, counts.get(name, 0))

    bytes: int
    lines: int
    candidates: int
    events: int
    malformed: int
    oversized: int
    decode_errors: int
    binary: int
    interleaved: int
    lost: int
    folded: int
    #: XID-looking lines a program wrote (``logger``, a journal record of
    #: another transport): never an event, counted so a spoof is visible.
    not_kernel: int

    def to_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in _STAT_FIELDS}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ScanStats) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return "ScanStats(" + ", ".join(f"{k}={v}" for k, v in self.to_dict().items()) + ")"

    @property
    def skipped(self) -> int:
        return self.malformed + self.oversized


@record
class ScanResult:
    """What one scan found.  ``reset`` says why the cursor started over
    (``rotated``, ``truncated``, ``reboot``, ``corrupt``), None if it did not."""

    source: str
    aggregates: tuple[XidAggregate, ...]
    stats: ScanStats
    reset: str | None = None
    cursor: dict[str, Any] | None = None

    @property
    def event_count(self) -> int:
        return sum(a.count for a in self.aggregates)


_HEX = r"0x[0-9a-fA-F]+"
_LONGNUM = r"\b(?=[0-9a-fA-F_]*\d)[0-9a-fA-F_]{5,}\b"
_SPACE = r"\s+"


@functools.lru_cache(maxsize=4096)
def normalise_message(message: str) -> str:
    """The message with addresses, channel ids and other long numbers
    blanked, so one fault repeated with different addresses folds into one
    aggregate; small numbers (GPC/TPC/SM, link) stay.  (Patterns compile on
    the first event, through re's cache: a scan with none compiles none.)"""
    text = re.sub(_HEX, "0x#", message)
    text = re.sub(_LONGNUM, "#", text)
    return re.sub(_SPACE, " ", text).strip()


class _Agg:
    __slots__ = ("first", "count", "first_mono", "last_mono", "first_wall", "last_wall")

    def __init__(self, first: XidEvent) -> None:
        self.first = first
        self.count = 0
        self.first_mono: float | None = None
        self.last_mono: float | None = None
        self.first_wall: float | None = None
        self.last_wall: float | None = None

    def add(self, ev: XidEvent) -> None:
        self.count += 1
        if ev.monotonic is not None:
            if self.first_mono is None:
                self.first_mono = ev.monotonic
            self.last_mono = ev.monotonic
        if ev.wall is not None:
            if self.first_wall is None:
                self.first_wall = ev.wall
            self.last_wall = ev.wall

    def freeze(self, folded: bool) -> XidAggregate:
        from slurm_hooks.detect.xid.aggregate import XidAggregate

        ev = self.first
        return XidAggregate(
            kind=ev.kind,
            xid=ev.xid,
            pci=ev.pci,
            pid=None if folded else ev.pid,
            name=None if folded else ev.name,
            message=ev.message,
            count=self.count,
            raw_pci=ev.raw_pci,
            switch=ev.switch,
            first_monotonic=self.first_mono,
            last_monotonic=self.last_mono,
            first_wall=self.first_wall,
            last_wall=self.last_wall,
            boot_id=ev.boot_id,
        )


class Scanner:
    """Feed it lines (or let :meth:`feed_stream` chunk a file); read
    ``aggregates()`` and ``stats`` at the end."""

    def __init__(
        self,
        *,
        year: int | None = None,
        max_line: int = MAX_LINE,
        json_mode: bool = False,
        on_event: Callable[[XidEvent], None] | None = None,
        count_lines: bool = True,
    ) -> None:
        self.year = year
        self.max_line = max_line
        self.json_mode = json_mode
        self.on_event = on_event
        #: Counting every newline costs ~25 % of a bulk scan; off for big files.
        self.count_lines = count_lines
        self.stats = ScanStats()
        self._aggs: dict[tuple[Any, ...], _Agg] = {}
        self._folded: set[tuple[Any, ...]] = set()

    # -- events -------------------------------------------------------------

    def add_event(self, ev: XidEvent) -> None:
        self.stats.events += 1
        if self.on_event is not None:
            self.on_event(ev)
        key: tuple[Any, ...] = (
            ev.kind,
            ev.xid,
            ev.pci or ev.raw_pci,
            ev.pid,
            normalise_message(ev.message),
        )
        agg = self._aggs.get(key)
        if agg is None:
            if len(self._aggs) >= MAX_AGGREGATES:
                key = (ev.kind, ev.xid, ev.pci or ev.raw_pci, None, "*")
                self._folded.add(key)
                self.stats.folded += 1
                agg = self._aggs.get(key)
            if agg is None:
                agg = self._aggs[key] = _Agg(first=ev)
        agg.add(ev)

    def aggregates(self) -> tuple[XidAggregate, ...]:
        items = sorted(
            self._aggs.items(),
            key=lambda kv: (
                kv[1].first_wall if kv[1].first_wall is not None else float("inf"),
                kv[1].first_mono if kv[1].first_mono is not None else float("inf"),
            ),
        )
        return tuple(agg.freeze(key in self._folded) for key, agg in items)

    # -- lines --------------------------------------------------------------

    def feed_line(self, raw: bytes | bytearray | str) -> None:
        """One complete line (no trailing newline needed) that may hold an XID."""
        self.stats.candidates += 1
        if len(raw) > self.max_line:
            self.stats.oversized += 1
            return
        if isinstance(raw, bytes | bytearray):
            text = raw.decode("utf-8", errors="replace")
            if "\ufffd" in text:
                self.stats.decode_errors += 1
        else:
            text = raw
        if "\x00" in text:
            self.stats.binary += 1
            text = text.replace("\x00", "")
        starts = _record_starts(text)
        if len(starts) > 1:
            self.stats.interleaved += 1
            pieces = [text] + [text[s:] for s in starts[1:]]
        else:
            pieces = [text]
        from slurm_hooks.detect.xid.parser import (
            MALFORMED,
            NOT_KERNEL,
            OVERSIZED,
            XidEvent,
            classify_line,
        )

        for i, piece in enumerate(pieces):
            result = classify_line(piece, year=self.year, max_line=self.max_line)
            if isinstance(result, XidEvent):
                self.add_event(result)
            elif result == MALFORMED:
                self.stats.malformed += 1
            elif result == OVERSIZED:
                self.stats.oversized += 1
            elif result == NOT_KERNEL:
                self.stats.not_kernel += 1
                if i == 0:
                    # The line's own prefix says a program wrote it: the
                    # records "glued" after it are its text, not the kernel's.
                    break

    def feed_lines(self, lines: Iterable[bytes | str]) -> None:
        """Slow path for small inputs (journal output, tests): every line
        counted, candidates picked by substring."""
        for line in lines:
            self.stats.lines += 1
            self.stats.bytes += len(line)
            if isinstance(line, bytes):
                if b"Xid" in line or (self.json_mode and _JSON_NEEDLE.search(line)):
                    self.feed_line(line.rstrip(b"\r\n"))
            elif "Xid" in line or (self.json_mode and _JSON_NEEDLE.search(line.encode())):
                self.feed_line(line.rstrip("\r\n"))

    # -- streams ------------------------------------------------------------

    def feed_stream(self, f: BinaryIO, *, final: bool = True, chunk: int = CHUNK) -> int:
        """Scan ``f`` to EOF; return the bytes consumed.  Without ``final``
        an unterminated last line is left for next time (a writer may be in
        the middle of it) and not counted as consumed.

        Chunks are read into one reused buffer and searched in place; only
        the line that straddles two chunks is copied."""
        buf = bytearray(chunk)
        readinto = getattr(f, "readinto", None)
        carry = b""  # the unterminated line so far (never above max_line)
        total = 0
        in_oversize = False
        max_line = self.max_line
        stats = self.stats
        count = self.count_lines
        needle = _NEEDLE
        while True:
            if readinto is not None:
                n = readinto(buf)
            else:
                data = f.read(chunk)
                n = len(data)
                buf[:n] = data
            if not n:
                break
            total += n
            first_nl = buf.find(b"\n", 0, n)
            if first_nl < 0:  # the whole chunk is inside one line
                if not in_oversize:
                    if len(carry) + n > max_line:
                        in_oversize = True
                        stats.oversized += 1
                        carry = b""
                    else:
                        carry += buf[:n]
                continue
            # the line that ends at first_nl (it may have started earlier)
            if count:
                stats.lines += 1
            if in_oversize:
                in_oversize = False
            else:
                head = carry + buf[:first_nl] if carry else bytes(buf[:first_nl])
                if len(head) > max_line:
                    stats.oversized += 1
                elif needle in head or (self.json_mode and _JSON_NEEDLE.search(head)):
                    self.feed_line(head)
            carry = b""
            start = first_nl + 1
            end = buf.rfind(b"\n", start, n) + 1
            if end > start:
                if count:
                    stats.lines += buf.count(b"\n", start, end)
                self._scan_region(buf, start, end)
            else:
                end = start
            if n - end > max_line:
                in_oversize = True
                stats.oversized += 1
            elif n > end:
                carry = bytes(buf[end:n])
        stats.bytes += total
        if carry and final:
            if count:
                stats.lines += 1
            if needle in carry or (self.json_mode and _JSON_NEEDLE.search(carry)):
                self.feed_line(carry)
            return total
        if in_oversize and final:
            return total
        return total - len(carry)

    def _scan_region(self, buf: bytes | bytearray, start: int, end: int) -> None:
        """Every line in buf[start:end] (which ends with a newline) holding the
        needle goes to :meth:`feed_line`; nothing else is touched."""
        if self.json_mode:
            pos = start
            while True:
                m = _JSON_NEEDLE.search(buf, pos, end)
                if m is None:
                    return
                pos = self._feed_around(buf, m.start(), start, end)
        find = buf.find
        i = find(_NEEDLE, start, end)
        while i >= 0:
            i = find(_NEEDLE, self._feed_around(buf, i, start, end), end)

    def _feed_around(self, buf: bytes | bytearray, hit: int, start: int, end: int) -> int:
        ls = buf.rfind(b"\n", start, hit) + 1
        if ls < start:
            ls = start
        le = buf.find(b"\n", hit, end)
        if le < 0:
            le = end
        self.feed_line(buf[ls:le])
        return le + 1


def _record_starts(text: str) -> list[int]:
    starts = []
    i = text.find("NVRM: Xid")
    while i >= 0:
        starts.append(i)
        i = text.find("NVRM: Xid", i + 9)
    return starts


def looks_like_json(head: bytes) -> bool:
    """``journalctl -o json`` output starts with ``{``."""
    return head.lstrip()[:1] == b"{"


def scan_stream(
    f: BinaryIO, *, name: str = "<stream>", year: int | None = None, count_lines: bool = True
) -> ScanResult:
    """Scan a whole binary stream (a file, stdin) once, no cursor.  The
    format (text or journal JSON) is sniffed with ``peek`` when the stream
    has it, so nothing is consumed twice."""
    scanner = Scanner(year=year, json_mode=looks_like_json(_peek(f)), count_lines=count_lines)
    scanner.feed_stream(f, final=True)
    return ScanResult(source=name, aggregates=scanner.aggregates(), stats=scanner.stats)


def scan_path(path: str, *, year: int | None = None, count_lines: bool = False) -> ScanResult:
    """Scan a whole file once, no cursor.  Lines are not counted by default
    (``stats.lines`` stays 0): a bulk scan is about speed."""
    with open(path, "rb", buffering=0) as f:
        head = f.read(4096)
        f.seek(0)
        scanner = Scanner(year=year, json_mode=looks_like_json(head), count_lines=count_lines)
        scanner.feed_stream(f, final=True)
    return ScanResult(source=path, aggregates=scanner.aggregates(), stats=scanner.stats)


def scan_text(text: str | bytes, *, year: int | None = None) -> ScanResult:
    """Scan an in-memory log (tests, small captures)."""
    import io

    data = text.encode("utf-8") if isinstance(text, str) else text
    return scan_stream(io.BufferedReader(io.BytesIO(data)), name="<text>", year=year)


def _peek(f: BinaryIO) -> bytes:
    peek = getattr(f, "peek", None)
    if peek is not None:
        try:
            return bytes(peek(4096)[:4096])
        except (OSError, ValueError):
            pass
    return b""


def __getattr__(name: str) -> Any:
    # XidAggregate lives in .aggregate, built on first use (see there).
    if name == "XidAggregate":
        from slurm_hooks.detect.xid.aggregate import XidAggregate

        globals()["XidAggregate"] = XidAggregate
        return XidAggregate
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
