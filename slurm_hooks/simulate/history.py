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

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from slurm_hooks.core.errors import ForeignReasonError, ReasonChanged
from slurm_hooks.core.held import HeldMark, format_mark
from slurm_hooks.core.history import FaultEvent, Trip
from slurm_hooks.core.reason import format_reason
from slurm_hooks.decide import PolicyConfig, decide, decide_resume
from slurm_hooks.decide.breaker import rank_claim
from slurm_hooks.decide.decision import Decision, DecisionKind
from slurm_hooks.detect.xid.catalogue import Catalogue
from slurm_hooks.simulate import evidence as evmod
from slurm_hooks.simulate.cluster import SimSlurm
from slurm_hooks.simulate.state import NodeRecord
from slurm_hooks.simulate.trace import Logged, Trace, gpu_of
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
    """One row per decision and per breaker claim of the log.  ``nodes``:
    the partition's size (the breaker's limit depends on it); the log's
    nodes at least.

    As the engine does: decide on the node's own state, claim the drain,
    and at the log's ``claim`` record rank it against the node table
    (``rank_claim``): confirmed, or taken back and held (the latch).  Slurm
    stamps reasons to the second and a claim is ranked once slurmctld's
    clock passed its second, so the records are replayed by second, the
    decisions of a second before its claims' rankings."""
    policy = policy or PolicyConfig()
    names = list(trace.names)
    names += [f"sim{i}" for i in range(max(nodes - len(names), 0))]
    clock = [0.0]
    start = trace.meta.get("start")
    epoch = datetime.fromisoformat(start) if isinstance(start, str) else datetime.now().astimezone()
    slurm = SimSlurm(names, epoch, lambda: clock[0])
    door = SlurmDoor(slurm)
    state = {n: NodeRecord() for n in names}
    claims: dict[str, tuple[str, Decision]] = {}
    trips: dict[str, Trip] = {}
    rows: list[Row] = []

    def second(t: float) -> int:
        return math.floor((epoch + timedelta(seconds=t)).timestamp())

    order = sorted(trace.logged, key=lambda r: (second(r.t), r.action == "claim", r.t))
    stamps = _claim_stamps(trace.logged, epoch)
    for rec in order:
        clock[0] = rec.t
        now = epoch + timedelta(seconds=rec.t)
        st = state[rec.node]
        if rec.action == "acceptance" and rec.outcome == "passed":
            st.accepted.append(now)
        elif rec.action == "claim" and rec.node in claims:
            claim, d = claims.pop(rec.node)
            fleet = list(slurm.nodes.values())
            v = rank_claim(rec.node, claim, fleet, policy, now, trips)
            got = "confirmed" if v.confirmed else "lost" if v.lost else "taken_back"
            rows.append(Row(rec.t, rec.node, d.code, f"claim {rec.outcome}", f"claim {got}"))
            if v.confirmed:
                st.faults.append(FaultEvent(now, d.code, d.component, str(d.kind), d.incident))
                st.incident = d.incident
            elif not v.lost:
                door.take_back(rec.node, claim)
                door.mark_held(rec.node, format_mark(HeldMark(d.code, d.component,
                                                              str(d.incident), now, v.key_at)))  # fmt: skip
                trips.setdefault(v.partition, Trip(v.partition, now, rec.node, v.rank - 1,
                                                   v.limit, v.key_at))  # fmt: skip
        elif rec.action == "decision" and rec.decision == "resume":
            r = decide_resume(slurm.nodes[rec.node], st.history(), now)
            rows.append(Row(rec.t, rec.node, rec.code, rec.decision, str(r.kind)))
            if r.kind is DecisionKind.RESUME:
                door.resume(rec.node)
                st.resumes.append(now)
                st.incident = None
        elif rec.action == "decision" and rec.decision:
            if rec.incident in stamps:
                slurm.stamps[rec.node] = stamps[rec.incident]
            rows.append(_decide_again(rec, st, slurm, door, policy, catalogue, claims, now))
            slurm.stamps.pop(rec.node, None)
    return rows


def _claim_stamps(logged: Sequence[Logged], epoch: datetime) -> dict[str, datetime]:
    """Reason stamps that put a burst's claims in Slurm's order.

    The order of claims is Slurm's (when slurmctld processed each drain,
    stamped to the second, ties by node name), not the policy's, and the
    audit log does not carry the stamps; it carries each confirmed claim's
    rank in that order.  Read by rank, the names rise within a second and
    fall back where a new second began: that splits the confirmed claims of
    a burst (claims within a minute) into their seconds; the taken-back
    claims follow, in the second after.  A log without ranks keeps the
    replay's own stamps."""
    claims = [r for r in logged if r.action == "claim" and r.incident and r.outcome]
    out: dict[str, datetime] = {}
    bursts: dict[int, list[Logged]] = {}
    for r in claims:
        bursts.setdefault(int(r.t // 60), []).append(r)
    for burst in bursts.values():
        confirmed = sorted((r for r in burst if r.outcome == "confirmed" and r.rank),
                           key=lambda r: r.rank or 0)  # fmt: skip
        base = (epoch + timedelta(seconds=min(r.t for r in burst) - 60)).replace(microsecond=0)
        sec, last = 0, ""
        for r in confirmed:
            if last and r.node < last:
                sec += 1
            last = r.node
            out[str(r.incident)] = base + timedelta(seconds=sec)
        for r in burst:
            out.setdefault(str(r.incident), base + timedelta(seconds=sec + 1))
    return out


def _decide_again(rec: Logged, st: NodeRecord, slurm: SimSlurm, door: SlurmDoor,
                  policy: PolicyConfig, catalogue: Catalogue | None,
                  claims: dict[str, tuple[str, Decision]], now: datetime) -> Row:  # fmt: skip
    ev = evmod.Evidence.from_code(rec.code or "", catalogue)
    if ev is None:
        return Row(rec.t, rec.node, rec.code, str(rec.decision), "no-evidence-model")
    found, incs = evmod.findings(ev, node=rec.node, gpu=gpu_of(rec.component),
                                 now=now.timestamp(), catalogue=catalogue,
                                 xid_history=st.xid)  # fmt: skip
    st.xid += incs
    node = slurm.nodes[rec.node]
    main = _main(decide(found, node, st.history(), None, policy, now, node=rec.node))
    row = Row(rec.t, rec.node, rec.code, str(rec.decision), str(main.kind) if main else "none")
    if main is not None and main.kind.drains and main.reason is not None:
        claim = format_reason(main.reason)
        try:
            door.drain(rec.node, claim, expect=node.reason)
        except (ForeignReasonError, ReasonChanged):
            return row
        if main.facts.get("already_drained"):
            return row
        claims[rec.node] = (claim, main)
        # Without a claim record (an engine before claims): confirmed at once.
        st.faults.append(FaultEvent(now, main.code, main.component, str(main.kind),
                                    main.incident))  # fmt: skip
        st.incident = main.incident
    return row


def _main(decisions: list[Decision]) -> Decision | None:
    """The decision the engine audits first: the node's (drain kinds) over
    per-finding logs."""
    if not decisions:
        return None
    return max(decisions, key=lambda d: (d.kind.drains or d.kind is DecisionKind.ALREADY_HANDLED,
                                         d.kind is not DecisionKind.IGNORE))  # fmt: skip


__all__ = ["Row", "replay_history"]
