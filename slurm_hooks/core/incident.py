"""The typed vocabulary of the incident journal (``store/state.py`` files,
written by ``act/engine.py``).

Both enums are ``str``-valued, so the JSON on disk is what it always was
(``"status": "draining"``) and files written by older releases read back
unchanged; ``parse`` turns a raw value from disk into the enum, keeping an
unknown one visible instead of guessing.
"""

from __future__ import annotations

import enum
from typing import Self


class _Stored(enum.StrEnum):
    """A value the journal stores as its string."""

    @classmethod
    def parse(cls, raw: object) -> Self | None:
        """The value stored on disk, or None when missing or unknown."""
        try:
            return cls(str(raw))
        except ValueError:
            return None


class IncidentStatus(_Stored):
    """Where an incident stands; the journal's ``status``."""

    #: Intent recorded, the drain may or may not have landed yet.
    DRAINING = "draining"
    #: Our drain is written (the breaker claim, act/claim.py); no job has
    #: been signalled; the claim is confirmed or taken back next.
    CLAIMED = "claimed"
    DRAINED = "drained"
    #: Jobs listed and being signalled; the grace runs.
    EVACUATING = "evacuating"
    #: Every job has an outcome.
    JOBS_DONE = "jobs_done"
    #: On recovery the node carried someone else's reason: left alone; or a
    #: claim for what users cause taken back past the breaker's cap.
    ABANDONED = "abandoned"
    #: The node was resumed.
    CLOSED = "closed"
    #: The claim ranked past the breaker's limit and was taken back: the
    #: fault is held (store/state.py ``held``), no job was touched.
    HELD = "held"


class Outcome(_Stored):
    """What happened to one job of an incident; the journal's ``outcome``."""

    REQUEUED = "requeued"
    CANCELLED = "cancelled"
    LEFT_RUNNING = "left_running"
    #: It ended on its own (completed, cancelled by its owner) or is pending.
    FINISHED = "finished"
    #: Slurm no longer knows the job.
    GONE = "gone"

    @property
    def audit_action(self) -> str:
        """The audit log's action word for this outcome (kept as before)."""
        return {Outcome.REQUEUED: "requeue", Outcome.CANCELLED: "cancel"}.get(self, self.value)
