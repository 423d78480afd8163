"""The ``[policy]`` config section: what the decision engine may do, and how fast.

Defaults are the conservative choices: a 120 s checkpoint grace, a breaker
that stops automation at 10 % or 20 nodes of a partition per hour, and a
node that fails three times after being resumed is left for a human.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_hooks.core.bounds import require_at_least, require_positive


@dataclass(frozen=True)
class RepeatRule:
    """Escalate a fault code that repeats on one node: ``count`` occurrences
    (this one included) within ``window_s`` seconds turn into ``action``."""

    #: Occurrences of the code on one node (per GPU or other component when
    #: the finding names one), this one included, that escalate; >= 1.
    count: int = 3
    #: Seconds back over which occurrences are counted (> 0).
    window_s: float = 3600.0
    #: "drain" or "replace".
    action: str = "drain"

    def validate(self) -> None:
        require_at_least(self, 1, "count")
        require_positive(self, "window_s")
        if self.action not in ("drain", "replace"):
            raise ValueError("action must be 'drain' or 'replace'")


def _no_overrides() -> Mapping[str, RepeatRule]:
    return types.MappingProxyType({})


#: ``[policy] evacuate``: every job on a drained node, or the faulty GPU's.
EVACUATE_SCOPES = ("node", "gpu")


@dataclass(frozen=True)
class PolicyConfig:
    """``[policy]``.  Times are seconds."""

    #: Log and audit every decision, act on none (also honoured: general.observe_only).
    observe_only: bool = False
    #: Seconds a job gets to checkpoint between the signal and the requeue (0 allowed).
    grace_seconds: float = 120.0
    #: Signal for the batch script (``scancel --batch``); empty to send none.
    signal_batch: str = "USR1"
    #: Signal for the job's steps; empty to send none.
    signal_steps: str = "TERM"
    #: Cancel a job that cannot be requeued (else leave it running on the draining node).
    cancel_unrequeueable: bool = True
    #: Which jobs a drain moves off the node: "node", every job on it; "gpu",
    #: for a fault Slurm's GRES can place on one GPU (the drain names gpuN),
    #: only the jobs given that GPU (``scontrol -d show job``'s IDX), while
    #: jobs on the node's other GPUs run on to their end under the drain and
    #: the repair waits for them.  A job whose GPUs are not known (a GPU
    #: share, MIG, a client that cannot tell, a node whose GPUs are not GRES)
    #: is moved as under "node".  A later fault on a GPU a spared job holds,
    #: or of the node, moves it too.  docs/signals.md.
    evacuate: str = "node"

    #: App-level faults (action restart_app) that repeat this often on a node drain it.
    app_fault_repeat_count: int = 3
    #: Seconds back over which those repeats are counted (per code and component).
    app_fault_repeat_window_s: float = 3600.0
    #: A fault any user's code can raise (an XID 13/31 whose finding names
    #: the processes' users) repeats against the node only when the processes
    #: of at least this many different users raised it (1: any repeats).
    app_fault_repeat_users: int = 2
    #: Drain-level faults on the same node within the window escalate to replace.
    replace_after: int = 3
    #: Seconds back over which drain-level faults count towards replace_after
    #: (default 7 days).
    replace_window_s: float = 7 * 86400.0
    #: Per fault code overrides, e.g. ``[policy.repeat.XID13] count = 2``.
    repeat: Mapping[str, RepeatRule] = field(default_factory=_no_overrides)

    #: Circuit breaker, per partition: automation drains at most
    #: min(breaker_max_nodes, max(breaker_min_nodes, floor(share * size))) nodes
    #: whose reason is ours and was set within the window.
    breaker_max_share: float = 0.10
    #: Hard cap on that limit, whatever the partition's size (>= 1).
    breaker_max_nodes: int = 20
    #: The limit never goes below this (small partitions; 0 allowed), nor
    #: above the partition's size.
    breaker_min_nodes: int = 1
    #: Seconds back: only drains whose reason time falls inside count (a
    #: reason with no time always counts).
    breaker_window_s: float = 3600.0
    #: Latch file that keeps a trip until ``slurm-hooks breaker reset``.  Put it
    #: on a file system every node mounts so every node sees the trip; empty
    #: means ``<state_dir>/breaker.json`` (node-local latch; the Slurm-derived
    #: count is still fleet-wide).
    breaker_state_file: str = ""

    #: A node that we resumed this many times within the window and that fails
    #: again is drained with code FLAPPING and left for a human.
    flap_count: int = 3
    #: Seconds back over which our resumes of the node are counted (default 1 day).
    flap_window_s: float = 86400.0

    #: Evidence a job's user can write or cause (progress records, a process
    #: state, RAS/flight-recorder files) blames the node only with trusted
    #: corroboration on it within this many seconds (docs/security.md).
    user_evidence_window_s: float = 3600.0
    #: ... or when hangs of jobs of at least this many different users named
    #: this node as the culprit within that window.  0 (the default): off,
    #: since each hang is evidence its user writes, and two accounts (one
    #: person's, or two who agree) would drain any node they share; a site
    #: that trusts its users may set 2 or more.
    cross_user_hangs: int = 0

    #: Resume our drained nodes automatically once acceptance passed after the fault.
    auto_resume: bool = True
    #: Audit log path; empty means ``<state_dir>/audit.jsonl``.
    audit_log: str = ""

    def validate(self) -> None:
        require_at_least(self, 0, "user_evidence_window_s", "grace_seconds", "breaker_min_nodes")
        if self.cross_user_hangs == 1 or self.cross_user_hangs < 0:
            raise ValueError("cross_user_hangs must be 0 (off) or >= 2")
        if not 0 < self.breaker_max_share <= 1:
            raise ValueError("breaker_max_share must be in (0, 1]")
        require_at_least(
            self,
            1,
            "breaker_max_nodes",
            "app_fault_repeat_count",
            "app_fault_repeat_users",
            "replace_after",
            "flap_count",
        )
        require_positive(
            self,
            "app_fault_repeat_window_s",
            "replace_window_s",
            "breaker_window_s",
            "flap_window_s",
        )
        for sig in (self.signal_batch, self.signal_steps):
            if sig and not sig.replace("SIG", "", 1).isalnum():
                raise ValueError(f"invalid signal name {sig!r}")
        for rule in self.repeat.values():
            rule.validate()
        if self.evacuate not in EVACUATE_SCOPES:
            raise ValueError(f"evacuate must be one of {', '.join(EVACUATE_SCOPES)}")

    def repeat_rule(self, code: str) -> RepeatRule:
        """The escalation rule for an app-level fault code."""
        if code in self.repeat:
            return self.repeat[code]
        return RepeatRule(self.app_fault_repeat_count, self.app_fault_repeat_window_s, "drain")
