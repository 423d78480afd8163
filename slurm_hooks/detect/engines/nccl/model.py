"""Result types of one all-reduce bandwidth run."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NcclRow:
    """One size of the nccl-tests table.  ``*_wrong`` is None when the run
    did not validate (``-c 0`` prints ``N/A``) or the table predates the
    ``#wrong`` column."""

    size: int
    count: int
    type: str
    redop: str
    root: int | None
    oop_time_us: float
    oop_algbw: float
    oop_busbw: float
    oop_wrong: int | None
    ip_time_us: float | None = None
    ip_algbw: float | None = None
    ip_busbw: float | None = None
    ip_wrong: int | None = None

    @property
    def busbw(self) -> float:
        """Best of out-of-place and in-place: what the fabric can do."""
        return max(self.oop_busbw, self.ip_busbw or 0.0)

    @property
    def wrong(self) -> int | None:
        vals = [w for w in (self.oop_wrong, self.ip_wrong) if w is not None]
        return sum(vals) if vals else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "count": self.count,
            "type": self.type,
            "redop": self.redop,
            "root": self.root,
            "oop_time_us": self.oop_time_us,
            "oop_algbw_gbps": self.oop_algbw,
            "oop_busbw_gbps": self.oop_busbw,
            "oop_wrong": self.oop_wrong,
            "ip_time_us": self.ip_time_us,
            "ip_algbw_gbps": self.ip_algbw,
            "ip_busbw_gbps": self.ip_busbw,
            "ip_wrong": self.ip_wrong,
        }


@dataclass(frozen=True)
class NcclDevice:
    rank: int
    host: str
    device: int
    pci: str
    name: str


@dataclass(frozen=True)
class NcclRun:
    """One run.  ``completed`` means the test printed its final ``Avg bus
    bandwidth`` line: a run without it crashed, hung or was cut short."""

    engine: str
    rows: tuple[NcclRow, ...] = ()
    devices: tuple[NcclDevice, ...] = ()
    nranks: int | None = None
    avg_busbw: float | None = None
    out_of_bounds: int | None = None
    completed: bool = False
    #: Fatal errors (Test NCCL failure, CUDA failure, timeouts, crashes).
    errors: tuple[str, ...] = ()
    #: ``NCCL WARN`` lines: fatal only when the run did not complete.
    warnings: tuple[str, ...] = ()
    header: tuple[tuple[str, str], ...] = ()
    #: True when the table reports ``#wrong`` counts (False: old ``error`` column).
    counts_wrong: bool = True
    #: Seconds after which we killed a run that had not ended (None: it ended).
    killed_after: float | None = None

    @property
    def wrong(self) -> int:
        """Wrong elements over all rows (0 when not validated)."""
        return sum(r.wrong or 0 for r in self.rows)

    @property
    def validated(self) -> bool:
        return any(r.wrong is not None for r in self.rows)

    @property
    def max_size(self) -> int | None:
        return max((r.size for r in self.rows), default=None)

    def large_rows(self, min_bytes: int | None = None) -> tuple[NcclRow, ...]:
        """Rows at or above ``min_bytes``; with no such row (or no bound),
        the rows of the largest size.  Bandwidth is only meaningful for large
        messages: small ones measure latency."""
        if not self.rows:
            return ()
        if min_bytes is not None:
            big = tuple(r for r in self.rows if r.size >= min_bytes)
            if big:
                return big
        top = max(r.size for r in self.rows)
        return tuple(r for r in self.rows if r.size == top)

    def large_busbw(self, min_bytes: int | None = None) -> float | None:
        """Median over the large rows of each row's best bus bandwidth."""
        rows = self.large_rows(min_bytes)
        if not rows:
            return None
        return float(statistics.median(r.busbw for r in rows))

    def to_dict(self, min_bytes: int | None = None) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "completed": self.completed,
            "nranks": self.nranks,
            "avg_busbw_gbps": self.avg_busbw,
            "large_busbw_gbps": self.large_busbw(min_bytes),
            "max_size": self.max_size,
            "wrong": self.wrong,
            "validated": self.validated,
            "out_of_bounds": self.out_of_bounds,
            "errors": list(self.errors),
            "warnings": list(self.warnings),
            "header": dict(self.header),
            "devices": [
                {"rank": d.rank, "host": d.host, "device": d.device, "pci": d.pci, "name": d.name}
                for d in self.devices
            ],
            "rows": [r.to_dict() for r in self.rows],
        }
