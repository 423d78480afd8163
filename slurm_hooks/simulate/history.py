"""Replay a site's own audit log through the policy and compare.

Each ``decision`` record of the log (a fault code on a node, at a time) is
turned back into its evidence (``Evidence.from_code``), judged, and decided
again by ``decide()`` against the simulated Slurm as the log left it up to
that moment (our drains, the acceptance passes, the resumes); a ``resume``
decision is decided again by ``decide_resume``.  Where the replay and the
log agree, the policy in hand reproduces what the site's slurm-hooks did;
where they differ, the row says both (a changed config or catalogue, or a
fault whose evidence the replay cannot rebuild).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from slurm_hooks.core.errors import ForeignReasonError, ReasonChanged
from slurm_hooks.core.history import FaultEvent
from slurm_hooks.core.reason import format_reason
from slurm_hooks.decide import FleetView, PolicyConfig, decide, decide_resume
from slurm_hooks.decide.decision import Decision, DecisionKind
from slurm_hooks.detect.xid.catalogue import Catalogue
from slurm_hooks.simulate import evidence as evmod
from slurm_hooks.simulate.cluster import SimSlurm
from slurm_hooks.simulate.replay import NodeRecord
from slurm_hooks.simulate.trace import Trace, gpu_of
from slurm_hooks.slurm.door import SlurmDoor


@dataclass(frozen=True)
class Row:
    t: float
    node: str
    code: str | None
    logged: str
    replayed: str

    @property
    def match(self) -> bool:
        return self.logged == self.replayed

    def to_dict(self) -> dict[str, Any]:
        return {"t_s": round(self.t, 3), "node": self.node, "code": self.code,
                "logged": self.logged, "replayed": self.replayed, "match": self.match}  # fmt: skip


def replay_history(trace: Trace, policy: PolicyConfig | None = None, *, nodes: int = 0,
                   catalogue: Catalogue | None = None) -> list[Row]:  # fmt: skip
    """One row per decision record of the log.  ``nodes``: the partition's
    size (the breaker's limit depends on it); the log's nodes at least."""
    policy = policy or PolicyConfig()
    names = list(trace.names)
    names += [f"sim{i}" for i in range(max(nodes - len(names), 0))]
    clock = [0.0]
    start = trace.meta.get("start")
    epoch = datetime.fromisoformat(start) if isinstance(start, str) else datetime.now().astimezone()
    slurm = SimSlurm(names, epoch, lambda: clock[0])
    door = SlurmDoor(slurm)
    state = {n: NodeRecord() for n in names}
    rows: list[Row] = []
    for rec in trace.logged:
        clock[0] = rec.t
        now = epoch + timedelta(seconds=rec.t)
        st = state[rec.node]
        if rec.action == "acceptance" and rec.outcome == "passed":
            st.accepted.append(now)
            continue
        if rec.action != "decision" or not rec.decision:
            continue
        if rec.decision == "resume":
            d = decide_resume(slurm.nodes[rec.node], st.history(), now)
            rows.append(Row(rec.t, rec.node, rec.code, rec.decision, str(d.kind)))
            if d.kind is DecisionKind.RESUME:
                door.resume(rec.node)
                st.resumes.append(now)
                st.incident = None
            continue
        ev = evmod.Evidence.from_code(rec.code or "", catalogue)
        if ev is None:
            rows.append(Row(rec.t, rec.node, rec.code, rec.decision, "no-evidence-model"))
            continue
        found, incs = evmod.findings(ev, node=rec.node, gpu=gpu_of(rec.component),
                                     now=now.timestamp(), catalogue=catalogue,
                                     xid_history=st.xid)  # fmt: skip
        st.xid += incs
        node = slurm.nodes[rec.node]
        fleet = FleetView(tuple(slurm.nodes.values()))
        decisions = decide(found, node, st.history(), fleet, policy, now, node=rec.node)
        main = _main(decisions)
        rows.append(
            Row(rec.t, rec.node, rec.code, rec.decision, str(main.kind) if main else "none")
        )
        if main is not None and main.kind.drains and main.reason is not None:
            try:
                door.drain(rec.node, format_reason(main.reason), expect=node.reason)
            except (ForeignReasonError, ReasonChanged):
                continue
            st.faults.append(
                FaultEvent(now, main.code, main.component, str(main.kind), main.incident)
            )
            st.incident = main.incident
    return rows


def _main(decisions: list[Decision]) -> Decision | None:
    """The decision the engine audits first: the node's (drain kinds) over
    per-finding logs."""
    if not decisions:
        return None
    return max(decisions, key=lambda d: (d.kind.drains or d.kind is DecisionKind.ALREADY_HANDLED,
                                         d.kind is not DecisionKind.IGNORE))  # fmt: skip


__all__ = ["Row", "replay_history"]
