"""One XID aggregate: identical events folded into one, with how many and when.

Its own module so that a scan that finds nothing (every health check on a
healthy node) does not pay for building the class; ``scan.XidAggregate``
still names it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class XidAggregate:
    """Identical events folded into one, with how many and when."""

    kind: str
    xid: int
    pci: str | None
    pid: int | None
    name: str | None
    message: str
    count: int
    raw_pci: str | None = None
    switch: str | None = None
    first_monotonic: float | None = None
    last_monotonic: float | None = None
    first_wall: float | None = None
    last_wall: float | None = None
    boot_id: str | None = None

    @property
    def code(self) -> str:
        return f"SXID{self.xid}" if self.kind == "sxid" else f"XID{self.xid}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["code"] = self.code
        return d
