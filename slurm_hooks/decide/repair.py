"""The repair ladder: reset -> reboot -> replace, with memory.  Pure.

Once an incident's jobs are settled, the node is empty and the catalogue's
advice can be carried out (``act/repair.py``).  What to do is decided here,
from the fault's recommended action and the repairs already tried on the
same node and GPU (by serial where NVML gave one, so a GPU moved to another
slot keeps its record) within ``[repair] window_s``:

* the first rung is the catalogue's: ``reset_gpu`` -> RESET, ``reboot`` ->
  REBOOT, ``replace`` -> REPLACE; ``drain`` (cables, firmware) -> NONE: a
  human has to look, we do not guess;
* each repair already tried for this GPU (or this node, for a node-wide
  fault) within the window moves one rung up, so a GPU that keeps failing is
  not reset or rebooted for ever: the same XID 79 after a reboot -> REPLACE;
* a failed acceptance after a repair is the same: one rung up.

The reboot cap (``reboot_allowed``) counts, from Slurm's own reasons, the
nodes of each partition that carry our reason with ``step=reboot``: every
node sees the same count, as with the circuit breaker.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from slurm_hooks.core.bounds import require_at_least, require_positive
from slurm_hooks.core.model import Action, NodeState
from slurm_hooks.core.ownership import our_reason


class RepairStep(enum.StrEnum):
    """One rung of the ladder, as written into the reason (``step=``)."""

    NONE = "none"
    RESET = "reset"
    REBOOT = "reboot"
    REPLACE = "replace"

    @property
    def rung(self) -> int:
        return _RUNG[self]


_RUNG = {RepairStep.NONE: 0, RepairStep.RESET: 1, RepairStep.REBOOT: 2, RepairStep.REPLACE: 3}
_BY_RUNG = {v: k for k, v in _RUNG.items()}
_FIRST = {
    Action.RESET_GPU: RepairStep.RESET,
    Action.REBOOT: RepairStep.REBOOT,
    Action.REPLACE: RepairStep.REPLACE,
}
#: Reason code that keeps a node out for hardware replacement.
REPLACE_CODE = "REPLACE"
#: Our key in the node's ``Extra`` field (``[repair] health_extra``).
HEALTH_KEY = "slurm_hooks_health"


class HealthGrade(enum.StrEnum):
    """The node's health as the scheduler shows it (``Extra``:
    ``slurm_hooks_health=<grade>``), so a site's tools and ``sinfo -O
    NodeList,Extra`` see it without asking us."""

    #: In service after a passed acceptance.
    OK = "ok"
    #: In service, watched (reserved for the watcher's WARN findings; the
    #: repair loop does not write it).
    OBSERVE = "observe"
    #: Out of service while we reset, reboot and test it, or left for a human.
    REPAIR = "repair"
    #: Out for good: a hardware ticket is open.
    REPLACE = "replace"


@dataclass(frozen=True)
class RepairConfig:
    """``[repair]``: the repair loop on plain Slurm.  Opt-in (``enabled``);
    observe-only is honoured (decided and audited, nothing done)."""

    #: Reset / reboot / replace nodes once their jobs are settled.
    enabled: bool = False
    #: Seconds back over which earlier repairs of the same GPU/node count
    #: (a fault that returns within it climbs the ladder).  Default 7 days.
    window_s: float = 7 * 86400.0
    #: Nodes per partition that may be rebooting at once (our ``step=reboot``).
    max_concurrent_reboots: int = 1
    #: ``scontrol reboot ... nextstate=``: DOWN keeps the node out of service
    #: after it comes back, until acceptance passes and we resume it.
    reboot_nextstate: str = "DOWN"
    #: Seconds to wait for a rebooted node before the repair escalates.
    reboot_timeout_s: float = 1800.0
    #: Webhook (Slack-compatible JSON) that opens a hardware ticket; empty:
    #: the ticket goes to the [notify] sinks as an alert.
    ticket_url: str = ""
    #: Total seconds one ticket POST may take, retries included.
    ticket_deadline_s: float = 20.0
    #: Seconds ``nvidia-smi -r`` may take.
    reset_timeout_s: float = 120.0
    #: Resume one of our SPARE nodes for each job requeued off a failed node,
    #: from the same topology block/switch as the job's other nodes.
    resume_spares: bool = False
    #: Write the node's health grade (ok, repair, replace) into its Slurm
    #: ``Extra`` field as ``slurm_hooks_health=<grade>``, never touching
    #: other keys there (free text someone else wrote is left alone).
    health_extra: bool = False

    def validate(self) -> None:
        require_positive(
            self, "window_s", "reboot_timeout_s", "reset_timeout_s", "ticket_deadline_s"
        )
        require_at_least(self, 0, "max_concurrent_reboots")
        if self.reboot_nextstate.upper() not in ("DOWN", "RESUME"):
            raise ValueError("reboot_nextstate must be DOWN or RESUME")


@dataclass(frozen=True)
class Attempt:
    """A repair tried before (node-local ``repair`` history)."""

    at: datetime
    step: RepairStep
    code: str
    component: str | None = None
    serial: str | None = None
    outcome: str = ""


@dataclass(frozen=True)
class RepairPlan:
    step: RepairStep
    why: str
    earlier: int = 0


def first_step(action: Action | str | None) -> RepairStep:
    try:
        return _FIRST.get(Action(action), RepairStep.NONE) if action else RepairStep.NONE
    except ValueError:
        return RepairStep.NONE


def _same_part(a: Attempt, component: str | None, serial: str | None) -> bool:
    if serial and a.serial:
        return a.serial == serial
    return (a.component or None) == (component or None)


def plan_repair(
    action: Action | str | None,
    code: str,
    component: str | None,
    serial: str | None,
    attempts: Sequence[Attempt],
    cfg: RepairConfig,
    now: datetime,
) -> RepairPlan:
    """The next rung for a fault on an empty node."""
    base = first_step(action)
    if base is RepairStep.NONE:
        return RepairPlan(RepairStep.NONE, f"{code}: catalogue action {action or 'none'} has no "
                          "automatic repair; left drained for a human")  # fmt: skip
    since = now - timedelta(seconds=cfg.window_s)
    earlier = [
        a for a in attempts
        if a.at >= since and a.step is not RepairStep.NONE and _same_part(a, component, serial)
    ]  # fmt: skip
    if not earlier:
        return RepairPlan(base, f"{code}: catalogue says {base}")
    top = max(a.step.rung for a in earlier)
    step = _BY_RUNG[min(max(base.rung, top + 1), RepairStep.REPLACE.rung)]
    what = f"GPU {serial}" if serial else (component or "the node")
    return RepairPlan(
        step,
        f"{code} again on {what}: {len(earlier)} repair(s) within {cfg.window_s / 86400:g} "
        f"days (last: {_BY_RUNG[top]}): escalated to {step}",
        len(earlier),
    )


def escalate(step: RepairStep) -> RepairStep:
    """The rung after a repair that did not hold (failed acceptance)."""
    return _BY_RUNG[min(step.rung + 1, RepairStep.REPLACE.rung)]


def rebooting(node: NodeState) -> bool:
    """Our reason on ``node`` says it is being rebooted by us."""
    ours = our_reason(node)
    return ours is not None and ours.extra.get("step") == RepairStep.REBOOT.value


@dataclass(frozen=True)
class RebootVerdict:
    allowed: bool
    partition: str
    rebooting: int
    limit: int

    def explain(self) -> str:
        state = "allowed" if self.allowed else "deferred"
        return (f"reboot {state}: {self.rebooting} node(s) of partition {self.partition} "
                f"rebooting (limit {self.limit})")  # fmt: skip


def reboot_allowed(
    node: str,
    fleet: Sequence[NodeState],
    cfg: RepairConfig,
    *,
    rank: Mapping[str, int] | None = None,
) -> RebootVerdict:
    """May ``node`` be rebooted now?  Counts the other nodes of each of its
    partitions that carry our ``step=reboot`` reason; the tightest partition
    decides."""
    me = next((n for n in fleet if n.name == node), None)
    parts = (me.partitions if me is not None else ()) or ("*",)
    worst = RebootVerdict(True, parts[0], 0, cfg.max_concurrent_reboots)
    for part in parts:
        count = sum(
            1 for n in fleet
            if n.name != node and (part == "*" or part in n.partitions) and rebooting(n)
        )  # fmt: skip
        verdict = RebootVerdict(count < cfg.max_concurrent_reboots, part, count,
                                cfg.max_concurrent_reboots)  # fmt: skip
        if not verdict.allowed or count > worst.rebooting:
            worst = verdict
        if not verdict.allowed:
            break
    return worst


__all__ = [
    "HEALTH_KEY",
    "REPLACE_CODE",
    "Attempt",
    "HealthGrade",
    "RebootVerdict",
    "RepairConfig",
    "RepairPlan",
    "RepairStep",
    "escalate",
    "first_step",
    "plan_repair",
    "reboot_allowed",
    "rebooting",
]
