"""One XID aggregate: identical events folded into one, with how many and when.

Its own module so that a scan that finds nothing (every health check on a
healthy node) does not pay for building the class; ``scan.XidAggregate``
still names it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from slurm_hooks.detect.xid.parser import XidIdentity


@dataclass(frozen=True)
class XidAggregate(XidIdentity):
    """Identical events folded into one, with how many and when."""

    count: int
    raw_pci: str | None = None
    switch: str | None = None
    first_monotonic: float | None = None
    last_monotonic: float | None = None
    first_wall: float | None = None
    last_wall: float | None = None
    boot_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["code"] = self.code
        return d
