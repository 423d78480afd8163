"""One check's part of a run: its findings and how long it took.

Apart from the runner so that the passes over a run's outcomes (``fold``)
name the type without importing the runner that calls them.
"""

from __future__ import annotations

from collections.abc import Iterable

from slurm_hooks.core.model import Finding, Status
from slurm_hooks.core.record import record


def worst(statuses: Iterable[Status]) -> Status:
    """The most serious of ``statuses`` (OK for none)."""
    return max(statuses, key=lambda s: s.rank, default=Status.OK)


@record
class CheckOutcome:
    """One check's part of a run."""

    name: str
    findings: tuple[Finding, ...]
    seconds: float

    @property
    def status(self) -> Status:
        return worst(f.status for f in self.findings)
