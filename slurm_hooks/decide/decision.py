"""Decisions are values: what the engine would do to a node, and why.

Because a decision is data, ``--dry-run``, observe-only mode and
``slurm-hooks policy explain`` show exactly what the live path would do.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

from slurm_hooks.core.model import Finding
from slurm_hooks.core.reason import DrainReason, format_reason


class DecisionKind(enum.StrEnum):
    #: The finding is of no consequence.
    IGNORE = "ignore"
    #: Record it (audit, counters for repeat rules); leave the node in service.
    LOG = "log"
    #: Drain with our reason and move the node's jobs elsewhere.
    DRAIN = "drain"
    #: Drain (or re-mark our drain) asking for the node to be replaced.
    REPLACE = "replace"
    #: Return a node we drained to service.
    RESUME = "resume"
    #: Drain and leave it for a human (flapping); never resumed automatically.
    HOLD_FOR_HUMAN = "hold_for_human"
    #: A drain was due but the circuit breaker forbids it; detection goes on.
    BREAKER_TRIPPED = "breaker_tripped"
    #: Already drained by us for this fault: nothing new to do (idempotent).
    ALREADY_HANDLED = "already_handled"
    #: Someone else's reason (admin, NHC, operator, Slurm): never touched.
    FOREIGN_REASON = "foreign_reason"
    #: User-side evidence alone (core.model.Provenance): tell the job's owner
    #: and the admins; the node and every other job are left alone.
    REPORT_JOB = "report_job"
    #: As REPORT_JOB, and the job opted in to be requeued on such a verdict:
    #: requeue that job (only it, exactly once).  Never a drain.
    REQUEUE_JOB = "requeue_job"

    @property
    def drains(self) -> bool:
        """Whether acting on it writes a drain (so it needs Slurm's view first)."""
        return self in (DecisionKind.DRAIN, DecisionKind.REPLACE, DecisionKind.HOLD_FOR_HUMAN)

    @property
    def job_only(self) -> bool:
        """Whether it acts on one user's own job and nothing else."""
        return self in (DecisionKind.REPORT_JOB, DecisionKind.REQUEUE_JOB)


@dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    node: str
    code: str
    explanation: str
    component: str | None = None
    #: The reason to write (drain kinds) or the reason found (already handled).
    reason: DrainReason | None = None
    findings: tuple[Finding, ...] = ()
    observe_only: bool = False
    #: Move the node's running jobs (signal, grace, requeue).
    evacuate: bool = False
    #: Extra facts behind the decision (breaker counts, repeat counts).
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def incident(self) -> str | None:
        return self.reason.incident if self.reason else None

    @property
    def acts(self) -> bool:
        """Whether the engine would change Slurm for this decision."""
        return not self.observe_only and (
            self.kind.drains or self.kind in (DecisionKind.RESUME, DecisionKind.REQUEUE_JOB)
        )

    def observed(self) -> Decision:
        return replace(self, observe_only=True)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "node": self.node,
            "code": self.code,
            "component": self.component,
            "incident": self.incident,
            "reason": format_reason(self.reason) if self.reason else None,
            "explanation": self.explanation,
            "observe_only": self.observe_only,
            "evacuate": self.evacuate,
            "findings": [f.to_dict() for f in self.findings],
            "facts": dict(self.facts),
        }
