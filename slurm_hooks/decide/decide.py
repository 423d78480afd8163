"""decide(): findings + Slurm's view + history -> decisions.  Pure.

No subprocess, no HTTP, no clock: time is passed in, incident ids are
derived from the inputs, so the same inputs always give the same decisions
(tests are tables; ``policy explain`` shows what the live path would do).

Order of the gates for a node that needs draining, first match wins:

1. a foreign reason (admin, ``NHC:``, ``slurm-operator:``, Slurm's own) is
   never touched, but the jobs are still evacuated and the decision carries
   the reason we would write, for the engine to drain with once the foreign
   reason is lifted (FOREIGN_REASON with ``deferred_drain``);
2. our own reason already there: nothing new (idempotent), unless the fault
   escalated to REPLACE and the reason does not say so yet;
3. the node flaps (resumed N times in the window and failing again): drain
   with code FLAPPING and hold it for a human;
4. the circuit breaker: no drain past the partition's limit;
5. drain (or replace) and evacuate the jobs.

Before any of them, the trust rule (``decide/trust.py``): a finding whose
evidence is user-side only and that would take the node out acts on its
job alone (REPORT_JOB, REQUEUE_JOB) unless trusted evidence on the node
corroborates it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from slurm_hooks.core.history import EMPTY_HISTORY, FaultEvent, NodeHistory
from slurm_hooks.core.model import Action, Finding, NodeState, ReasonOwner, Status
from slurm_hooks.core.ownership import Ownership, effective_owner, node_ownership, our_reason
from slurm_hooks.core.reason import REPLACEMENT_ASKED, DrainReason
from slurm_hooks.core.user_caused import USERS_CAUSE
from slurm_hooks.decide import breaker as breaker_mod
from slurm_hooks.decide import trust
from slurm_hooks.decide.breaker import FleetView
from slurm_hooks.decide.config import PolicyConfig
from slurm_hooks.decide.decision import Decision, DecisionKind
from slurm_hooks.decide.flapping import FLAPPING, flap_verdict

_TOKEN_OK = re.compile(r"^[A-Za-z0-9_.:/+\-\[\],]{1,64}$")
_CODE_OK = re.compile(r"^[A-Z][A-Z0-9_]{0,31}$")

#: Severity of a per-finding verdict, to pick the one that drives the node.
_RANK = {
    DecisionKind.IGNORE: 0,
    DecisionKind.LOG: 1,
    DecisionKind.DRAIN: 2,
    DecisionKind.REPLACE: 3,
}


def incident_id(node: str, code: str, component: str | None, now: datetime) -> str:
    """Eight hex digits derived from what happened where and when, so that
    deciding twice on the same inputs names the same incident."""
    key = f"{node}|{code}|{component or ''}|{now.isoformat()}"
    return hashlib.sha256(key.encode()).hexdigest()[:8]


def reason_code(code: str) -> str:
    """A finding code usable in our reason grammar."""
    if _CODE_OK.match(code):
        return code
    cleaned = re.sub(r"[^A-Z0-9_]", "_", code.upper())[:32] or "FAULT"
    return cleaned if cleaned[0].isalpha() else f"F{cleaned[:31]}"


def component_token(finding: Finding) -> str | None:
    short = finding.component.short()
    if finding.component.kind == "node" or not _TOKEN_OK.match(short) or "=" in short:
        return None
    return short


def _count(finding: Finding) -> int:
    value = finding.values.get("count", 1) if finding.values else 1
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _evacuates(findings: Sequence[Finding]) -> bool:
    """Whether taking the node out for ``findings`` moves the jobs on it:
    yes unless every one keeps them, as a finding may ask (SLOW, drain at
    the job's end) and as one the node's users can cause by using it does
    (``USERS_CAUSE``: a user must not move another user's job)."""
    return any(
        f.values.get("evacuate") is not False and f.code not in USERS_CAUSE for f in findings
    )


def _process_users(f: Finding, past: list[FaultEvent]) -> set[str] | None:
    """The users whose processes raised ``f`` and its past repeats; None for
    a finding that names no processes' users (not one a user can cause)."""
    named = f.values.get("process_users") if f.values else None
    if not isinstance(named, str):
        return None
    users = {u for u in named.split(",") if u}
    for e in past:
        users.update(u for u in (e.user or "").split(",") if u)
    return users


def _finding_verdict(
    f: Finding, node: str, history: NodeHistory, cfg: PolicyConfig, now: datetime
) -> tuple[DecisionKind, str, dict[str, object]]:
    """What one finding alone asks for, after repeat rules."""
    comp = component_token(f)
    if f.status is Status.UNKNOWN:
        return DecisionKind.LOG, f"{f.check} could not run; not a fault by itself", {}
    if not f.is_problem:
        return DecisionKind.IGNORE, "healthy", {}
    if f.action is Action.IGNORE:
        return DecisionKind.IGNORE, f"{f.code}: catalogue says ignore", {}
    if f.action in (Action.NONE, Action.RESTART_APP):
        rule = cfg.repeat_rule(f.code)
        since = now - timedelta(seconds=rule.window_s)
        past = history.faults_since(since, f.code, comp)
        seen = len(past) + _count(f)
        facts: dict[str, object] = {
            "repeat_count": seen,
            "repeat_limit": rule.count,
            "window_s": rule.window_s,
        }
        users = _process_users(f, past)
        if users is not None:
            facts["users"] = len(users)
        if (
            seen >= rule.count
            and users is not None
            and cfg.app_fault_repeat_users > max(1, len(users))
        ):
            return (
                DecisionKind.LOG,
                f"{f.code} seen {seen} time(s) within {rule.window_s:g}s on {comp or node}, "
                f"from the processes of {len(users)} user(s): a user's own code raises it at "
                f"will; {cfg.app_fault_repeat_users} users' are needed to blame the node",
                facts,
            )
        if seen >= rule.count and (f.action is Action.RESTART_APP or f.code in cfg.repeat):
            kind = DecisionKind.REPLACE if rule.action == "replace" else DecisionKind.DRAIN
            return (
                kind,
                f"{f.code} seen {seen} time(s) within {rule.window_s:g}s on "
                f"{comp or node} (limit {rule.count}): escalated to {kind}",
                facts,
            )
        if f.action is Action.RESTART_APP:
            return (
                DecisionKind.LOG,
                f"{f.code} is an application-level fault ({seen}/{rule.count} within "
                f"{rule.window_s:g}s): node stays in service, the job may be restarted",
                facts,
            )
        return (
            DecisionKind.LOG,
            f"{f.code}: {f.status} with no recommended action: {f.message}",
            facts,
        )
    if f.action is Action.REPLACE:
        return DecisionKind.REPLACE, f"{f.code}: hardware needs replacing ({f.action})", {}
    if f.code in USERS_CAUSE:
        return (
            DecisionKind.DRAIN,
            f"{f.code}: what the node's users can cause by using it: drained as the site "
            "asked (no new job lands here), its jobs are not moved, and it never counts "
            "towards replacing the node",
            {},
        )
    # RESET_GPU, DRAIN, REBOOT: take the node out; repeated hardware faults -> replace.
    since = now - timedelta(seconds=cfg.replace_window_s)
    past = [
        e
        for e in history.faults_since(since, component=comp)
        if e.severity in ("drain", "replace", "hold_for_human") and e.code not in USERS_CAUSE
    ]
    seen = len(past) + 1
    hw_facts: dict[str, object] = {"hardware_faults": seen, "replace_after": cfg.replace_after}
    if seen >= cfg.replace_after:
        return (
            DecisionKind.REPLACE,
            f"{f.code}: {seen} hardware faults on {comp or node} within "
            f"{cfg.replace_window_s / 86400:g} days (limit {cfg.replace_after}): replace",
            hw_facts,
        )
    return DecisionKind.DRAIN, f"{f.code}: {f.action} needed, node must leave service", hw_facts


def decide(
    findings: Sequence[Finding],
    node_state: NodeState | None,
    history: NodeHistory | None,
    fleet: FleetView | None,
    config: PolicyConfig,
    now: datetime,
    *,
    node: str | None = None,
    observe_only: bool = False,
) -> list[Decision]:
    """Decisions for one node.

    ``node_state`` / ``fleet`` may be None when Slurm was not asked (the
    engine asks only when something may need draining): the result then
    assumes an undrained node and skips the breaker, and the engine decides
    again with Slurm's view before acting on any drain.
    """
    name = node or (node_state.name if node_state else "")
    if not name:
        raise ValueError("decide() needs node_state or node")
    history = history or EMPTY_HISTORY
    observe = observe_only or config.observe_only
    out: list[Decision] = []
    drivers: list[tuple[DecisionKind, Finding, str, dict[str, object]]] = []
    for f in findings:
        kind, why, facts = _finding_verdict(f, name, history, config, now)
        if f.is_problem and f.user_side:
            facts = {**facts, "provenance": [str(p) for p in f.provenance]}
            if kind in (DecisionKind.DRAIN, DecisionKind.REPLACE):
                backed = trust.corroboration(f, history, config, now)
                if backed is None:
                    out.append(_job_only(f, name, kind, why, facts))
                    continue
                why += f"; user-side evidence corroborated: {backed}"
                facts["corroborated_by"] = backed
        if kind in (DecisionKind.DRAIN, DecisionKind.REPLACE):
            drivers.append((kind, f, why, facts))
        elif f.status is not Status.OK:
            out.append(
                Decision(kind, name, f.code, why, component_token(f), findings=(f,), facts=facts)
            )
    if drivers:
        out.append(_node_decision(name, drivers, node_state, history, fleet, config, now))
    if observe:
        out = [d.observed() for d in out]
    return out


def _job_only(
    f: Finding, name: str, kind: DecisionKind, why: str, facts: dict[str, object]
) -> Decision:
    """User-side evidence alone: its job, never the node (decide/trust.py)."""
    job_kind = trust.job_only_kind(f)
    act = (
        "that job (opted in) is requeued"
        if job_kind is DecisionKind.REQUEUE_JOB
        else "the owner and the admins are told"
    )
    return Decision(
        job_kind,
        name,
        reason_code(f.code),
        f"{why}; but its evidence is user-side only ({', '.join(map(str, f.provenance))}) "
        f"with no trusted corroboration on {name}: the node stays in service, no other job "
        f"is touched; {act}",
        component_token(f),
        findings=(f,),
        facts={**facts, **trust.job_facts(f), "would_be": str(kind)},
    )


def _node_decision(
    name: str,
    drivers: list[tuple[DecisionKind, Finding, str, dict[str, object]]],
    node_state: NodeState | None,
    history: NodeHistory,
    fleet: FleetView | None,
    cfg: PolicyConfig,
    now: datetime,
) -> Decision:
    # The most severe finding names the fault; FAIL beats WARN at equal kind.
    drivers.sort(key=lambda d: (_RANK[d[0]], d[1].status.rank, d[1].action.rank), reverse=True)
    kind, primary, why, facts = drivers[0]
    code = reason_code(primary.code)
    comp = component_token(primary)
    found = tuple(d[1] for d in drivers)
    if len(drivers) > 1:
        why += f" (+{len(drivers) - 1} more finding(s))"

    def make(
        k: DecisionKind, explanation: str, reason: DrainReason | None, **more: object
    ) -> Decision:
        return Decision(
            k,
            name,
            code,
            explanation,
            comp,
            reason,
            found,
            evacuate=k.drains and _evacuates(found),
            facts={**facts, **more},
        )

    current = node_state.reason if node_state else None
    # One rule (core/ownership.py): a reason counts only on a node that is out
    # of service; Slurm 24.11 leaves the old one on a resumed node (STALE).
    owner = effective_owner(node_state)
    if owner not in (ReasonOwner.NONE, ReasonOwner.OURS):
        return _foreign_decision(make, name, kind, primary, code, comp, why, owner, current, now)
    if node_ownership(node_state) is Ownership.STALE:
        why += f" (the old reason {current!r} is stale: the node is in service)"
    ours = our_reason(node_state)
    if ours is not None and not ours.is_fault:
        # A lent or spare node that faults: the fault wins, with its own incident.
        why += f" (node was out of Slurm as {ours.code}; the fault takes precedence)"
        ours = None
    if ours is not None:
        if kind is DecisionKind.REPLACE and not ours.replacement_asked and ours.code != FLAPPING:
            return make(
                DecisionKind.REPLACE,
                f"{why}; already drained by us (inc={ours.incident}), marking it for replacement",
                ours.with_extra(**REPLACEMENT_ASKED),
                already_drained=True,
            )
        same = ours.incident == history.open_incident or (
            ours.code == code and ours.component == comp
        )
        detail = "for the same fault" if same else f"for {ours.code}; {code} recorded"
        return make(
            DecisionKind.ALREADY_HANDLED,
            f"{why}; node already drained by slurm-hooks (inc={ours.incident}) {detail}",
            ours,
        )

    flap = flap_verdict(history.resumes, now, cfg.flap_count, cfg.flap_window_s)
    incident = incident_id(name, code, comp, now)
    # A node's users can fill its scratch as often as they like: only a
    # fault of the node's own makes it FLAPPING (held for a human).
    users_only = not any(f.code not in USERS_CAUSE for f in found)
    if flap.flapping and not users_only:
        reason = DrainReason(
            FLAPPING,
            incident,
            f"{code} again after {flap.explain()}; left for a human",
            comp,
            {"last": code},
        )
        decision_kind = DecisionKind.HOLD_FOR_HUMAN
        explanation = f"{why}; node is flapping: {flap.explain()}: held for a human"
    else:
        extra = dict(REPLACEMENT_ASKED) if kind is DecisionKind.REPLACE else {}
        reason = DrainReason(code, incident, primary.message or why, comp, extra)
        decision_kind = kind
        explanation = why

    if fleet is not None:
        verdict = breaker_mod.evaluate(name, fleet, cfg, now, users_cause=users_only)
        bfacts = {
            "breaker_partition": verdict.partition,
            "breaker_counted": verdict.counted,
            "breaker_limit": verdict.limit,
            "breaker_size": verdict.size,
            "breaker_latched": verdict.latched,
        }
        if not verdict.allowed and users_only:
            # Over the cap for what users cause: not drained, and no trip (a
            # user must not latch the breaker real faults drain under).
            return make(
                DecisionKind.LOG,
                f"{explanation}; NOT drained: {verdict.explain()}; what the node's users "
                "cause never trips the breaker",
                reason,
                would_be=str(decision_kind),
                **bfacts,
            )
        if not verdict.allowed:
            return make(
                DecisionKind.BREAKER_TRIPPED,
                f"{explanation}; NOT drained: {verdict.explain()}",
                reason,
                would_be=str(decision_kind),
                **bfacts,
            )
        facts.update(bfacts)
    return make(decision_kind, explanation, reason)


def _foreign_decision(
    make: Callable[..., Decision],
    name: str,
    kind: DecisionKind,
    primary: Finding,
    code: str,
    comp: str | None,
    why: str,
    owner: ReasonOwner,
    current: str | None,
    now: datetime,
) -> Decision:
    """Someone else's drain (NHC, an admin, Slurm) already holds the node:
    their reason is never touched, but a fault that needs the node out of
    service still evacuates its jobs (signal, grace, requeue, tell the
    owner), and the reason we *would* write rides along so the engine can
    drain with it the moment the foreign reason is lifted (``deferred``)."""
    extra = dict(REPLACEMENT_ASKED) if kind is DecisionKind.REPLACE else {}
    incident = incident_id(name, code, comp, now)
    reason = DrainReason(code, incident, primary.message or why, comp, extra)
    d = make(
        DecisionKind.FOREIGN_REASON,
        f"{why}; but the node's reason belongs to {owner} ({current!r}): slurm-hooks never "
        "touches it; its jobs are evacuated and our drain follows once that reason is lifted",
        reason,
        deferred_drain=True,
        foreign_reason=current,
        would_be=str(kind),
    )
    return replace(d, evacuate=_evacuates(d.findings))


def _resume_cleared(
    node_state: NodeState, ours: DrainReason, history: NodeHistory, base: Mapping[str, object]
) -> Decision:
    """Our drain for what the node's users can cause (a full scratch, the
    load: ``core/user_caused.py``) once a health check found every check
    passing: back into service, as NHC brings back the nodes it took out;
    unless the node was held for anything else since the drain (an XID
    absorbed under it is an event no later check sees again)."""
    since = node_state.reason_time
    other = (
        [e.code for e in history.faults_since(since) if e.code not in USERS_CAUSE
         and e.severity in trust.NODE_SEVERITIES]
        if since is not None else ["(no drain time from Slurm)"]
    )  # fmt: skip
    if other:
        return Decision(
            DecisionKind.LOG,
            node_state.name,
            explanation=f"{ours.code} is gone, but the node was held for {', '.join(other)} "
            "since: waiting for acceptance checks",
            **base,  # type: ignore[arg-type]
        )
    return Decision(
        DecisionKind.RESUME,
        node_state.name,
        explanation=f"our reason (inc={ours.incident}): {ours.code} is what the node's users can "
        "cause, and a health check found every check passing",
        facts={"cleared": True},
        **base,  # type: ignore[arg-type]
    )


def decide_resume(
    node_state: NodeState,
    history: NodeHistory | None,
    now: datetime,
    *,
    skip_acceptance: bool = False,
    human: bool = False,
    cleared: bool = False,
) -> Decision:
    """May this node go back into service?  Only nodes that carry our reason
    and passed acceptance after the fault; FLAPPING nodes only by a human.
    ``cleared``: a health check just found every check passing, which is
    the acceptance of a drain for what the node's users cause
    (:func:`_resume_cleared`)."""
    history = history or EMPTY_HISTORY
    name = node_state.name
    current = node_state.reason
    owner = effective_owner(node_state)  # a stale reason (24.11) is no drain to lift
    if owner is ReasonOwner.NONE:
        if node_state.drained or node_state.down:
            return Decision(
                DecisionKind.FOREIGN_REASON,
                name,
                "NO_REASON",
                "node is drained/down without a reason: not ours to resume",
            )
        return Decision(DecisionKind.IGNORE, name, "IN_SERVICE", "node is already in service")
    if owner is not ReasonOwner.OURS:
        return Decision(
            DecisionKind.FOREIGN_REASON,
            name,
            "FOREIGN",
            f"reason belongs to {owner} ({current!r}): slurm-hooks never resumes it",
        )
    ours = our_reason(node_state)
    assert ours is not None
    base = {"code": ours.code, "component": ours.component, "reason": ours}
    if ours.code == FLAPPING and not human:
        return Decision(
            DecisionKind.HOLD_FOR_HUMAN,
            name,
            explanation="node is held for a human (FLAPPING): never resumed automatically",
            **base,  # type: ignore[arg-type]
        )
    if not ours.is_fault and not human:
        return Decision(
            DecisionKind.LOG,
            name,
            explanation=f"node is out of Slurm as {ours.code}, not for a fault: the bridge "
            "returns it (after evicting its pods), not an acceptance pass",
            **base,  # type: ignore[arg-type]
        )
    since = node_state.reason_time
    if cleared and ours.code in USERS_CAUSE and not human:
        return _resume_cleared(node_state, ours, history, base)
    passed = history.acceptance_since(since)
    if passed is None and not skip_acceptance:
        when = since.isoformat() if since else "the fault"
        return Decision(
            DecisionKind.LOG,
            name,
            explanation=f"waiting for acceptance checks to pass after {when}",
            **base,  # type: ignore[arg-type]
        )
    why = (
        f"acceptance passed at {passed.isoformat()}"
        if passed is not None
        else "acceptance skipped by --force-acceptance-skip"
    )
    return Decision(
        DecisionKind.RESUME,
        name,
        explanation=f"our reason (inc={ours.incident}); {why}",
        facts={"acceptance_at": passed.isoformat() if passed else None},
        **base,  # type: ignore[arg-type]
    )
