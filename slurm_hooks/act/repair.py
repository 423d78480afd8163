"""The repair loop on plain Slurm: reset or reboot, re-check, resume or escalate.

When an incident's jobs are settled (``jobs_done``), the node is empty and the
ladder (``decide/repair.py``, pure) says what to try: a GPU reset, a reboot
by Slurm, or a hardware ticket.  The work runs in the detached worker
(``agent/worker.py``), never inside a hook: the engine only sees that work is
due (``due``) and starts the worker; the worker calls ``advance``.

The journal is the incident's own file (``repair`` in it), on the node's disk,
so it survives the reboot; the reason in Slurm carries the rung too
(``step=reboot``), so every node counts the reboots in flight from Slurm
(the cap) and a lost state dir still shows what was going on.  Each step
writes its intent before the call and its result after it; on a restart:

* ``reset_intent`` found: the reset may have happened.  It is not repeated:
  acceptance runs and decides (a reset that did not land fails it and the
  ladder climbs);
* ``reboot_intent`` found: Slurm is asked what it knows (REBOOT_* flags, its
  ``reboot issued``/``reboot complete`` words, a new boot id); only when it
  shows no reboot is the reboot asked for, so a node is rebooted once;
* ``ticket_intent`` found: the ticket is sent again with the same ticket id
  (the incident id): a receiver that keys on it files one ticket;
* ``resume_intent`` found (acceptance passed, the resume may or may not have
  reached Slurm): the resume is asked for again, which the door answers with
  "in service already" when it had; the incident is closed either way.  A
  journal that said ``resumed`` before the call would leave a node killed in
  that window out of service for good.

After a reboot the node's own hook (``HealthCheckProgram`` runs when slurmd
starts) or watcher finds the incident ``rebooting``, starts the worker, which
sees the reboot done, runs acceptance here and resumes the node only on a
pass; a failure climbs the ladder.  ``observe_only`` plans and audits, and
touches nothing.

With ``[repair] health_extra`` the grade each run reaches (``HealthGrade``:
ok, repair, replace) is written into the node's ``Extra`` through the door,
our key only, so the scheduler's own views show it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from slurm_hooks.act.notify.base import Alert
from slurm_hooks.core.errors import ForeignReasonError, SlurmError, SlurmHooksError, StateError
from slurm_hooks.core.incident import IncidentStatus
from slurm_hooks.core.reason import REPLACEMENT_ASKED, format_reason, try_parse_reason
from slurm_hooks.decide.repair import (
    HEALTH_KEY,
    REPLACE_CODE,
    Attempt,
    HealthGrade,
    RepairConfig,
    RepairStep,
    escalate,
    plan_repair,
    reboot_allowed,
)
from slurm_hooks.decide.scope import gpu_of
from slurm_hooks.store.journal import Incident
from slurm_hooks.store.state import REPAIR_SETTLED, iso, parse_time

if TYPE_CHECKING:
    from slurm_hooks.act.context import Context

log = logging.getLogger(__name__)

#: ``accept(node) -> (passed, detail)``: acceptance run here (agent/acceptance.py).
Accept = Callable[[str], tuple[bool, str]]

#: Node-local history of repairs (the ladder's memory), in the node file.
HISTORY_KEY = "repairs"
_REBOOT_FLAGS = frozenset({"REBOOT_REQUESTED", "REBOOT_ISSUED", "REBOOT"})
_DONE_STATES = REPAIR_SETTLED


class Status:
    """``repair.status`` values in the journal."""

    PLANNED = "planned"
    DEFERRED = "deferred"
    RESET_INTENT = "reset_intent"
    REBOOT_INTENT = "reboot_intent"
    REBOOTING = "rebooting"
    ACCEPTING = "accepting"
    TICKET_INTENT = "ticket_intent"
    RESUME_INTENT = "resume_intent"
    REPLACE = "replace"
    RESUMED = "resumed"
    HUMAN = "left_for_human"
    OBSERVED = "observed"


def config_of(ctx: Context) -> RepairConfig:
    cfg = getattr(ctx, "repair", None)
    return cfg if isinstance(cfg, RepairConfig) else RepairConfig()


def due(doc: dict[str, Any] | None, cfg: RepairConfig) -> bool:
    """Repair work is left for this incident (the worker should run)."""
    if not cfg.enabled or not doc or not doc.get("jobs_done"):
        return False
    if IncidentStatus.parse(doc.get("status")) in (
        IncidentStatus.CLOSED, IncidentStatus.ABANDONED, IncidentStatus.HELD,
    ):  # fmt: skip
        return False
    rep = doc.get("repair") or {}
    return rep.get("status") not in _DONE_STATES


def attempts(ctx: Context, node: str) -> list[Attempt]:
    """The ladder's memory for ``node`` (survives reboots: node-local disk)."""
    try:
        raw = ctx.state.read_node(node).get(HISTORY_KEY) or []
    except StateError:
        return []
    out = []
    for r in raw if isinstance(raw, list) else []:
        try:
            out.append(Attempt(parse_time(r["at"]), RepairStep(r["step"]), str(r.get("code")),
                               r.get("component"), r.get("serial"), str(r.get("outcome") or "")))  # fmt: skip
        except (KeyError, ValueError, TypeError):
            continue
    return out


def _remember(ctx: Context, node: str, rec: dict[str, Any]) -> None:
    def change(d: dict[str, Any]) -> None:
        raw = d.get(HISTORY_KEY)
        hist: list[dict[str, Any]] = raw if isinstance(raw, list) else []
        hist = [h for h in hist if h.get("incident") != rec.get("incident")
                or h.get("step") != rec.get("step")]  # fmt: skip
        d[HISTORY_KEY] = (hist + [rec])[-50:]

    try:
        ctx.state.update_node(node, change)
    except StateError as exc:
        log.error("repair history of %s not recorded: %s", node, exc)


def _action_of(inc: Incident) -> str | None:
    if inc.action:
        return str(inc.action)
    m = re.match(r"^XID(\d+)$", str(inc.code or ""))
    if not m:
        return None
    from slurm_hooks.detect.xid.catalogue import load_catalogue

    cat = load_catalogue()
    info = cat.get(int(m.group(1)))
    return str(cat.bucket(info.bucket).action) if info is not None else None


def _save(ctx: Context, incident: str, rep: dict[str, Any], step: str) -> None:
    """Journal the repair record with its step (``repair_<step>``), once."""
    ctx.journal.step(incident, f"repair_{step}", repair=rep)


def _audit(ctx: Context, inc: Incident, outcome: str, **fields: Any) -> None:
    ctx.audit.record(
        "repair", node=inc.node, incident=inc.id, code=inc.code,
        outcome=outcome, **fields,
    )  # fmt: skip


def advance(ctx: Context, incident: str, *, accept: Accept | None = None, nvml: Any = None,
            boot_id: str | None = None) -> str | None:  # fmt: skip
    """Move the incident's repair on as far as it goes now; returns the
    repair status reached (None: nothing to do).  Safe to call any number of
    times from any process (each step is journalled before its call)."""
    from slurm_hooks.store.state import LockTimeout

    cfg = config_of(ctx)
    status: str | None = None
    try:
        # One repair worker at a time per incident (acceptance can take long:
        # the incident's own lock is taken only around each journal write).
        with ctx.state.lock(f"repair-{incident}", timeout=2.0):
            for _ in range(8):  # a few rungs in one call (reset fails -> reboot ...)
                doc = ctx.state.read_incident(incident)
                if not due(doc, cfg):
                    return (doc or {}).get("repair", {}).get("status") if doc else None
                assert doc is not None
                before = (doc.get("repair") or {}).get("status")
                inc = Incident.from_doc(doc)
                status = _step_once(ctx, inc, cfg, accept=accept, nvml=nvml, boot_id=boot_id)
                if status in (before, Status.REBOOTING, Status.DEFERRED, Status.TICKET_INTENT) or (
                    status in _DONE_STATES
                ):
                    break
    except LockTimeout:
        log.info("repair of incident %s: another worker is on it", incident)
        return None
    if status is not None:
        done = ctx.journal.read(incident)
        if done is not None:
            publish_health(ctx, done.node, status)
    return status


def grade_of(status: str) -> HealthGrade:
    """The health grade a repair status shows the scheduler."""
    if status == Status.RESUMED:
        return HealthGrade.OK
    if status in (Status.TICKET_INTENT, Status.REPLACE):
        return HealthGrade.REPLACE
    if status == Status.OBSERVED:
        return HealthGrade.OBSERVE
    return HealthGrade.REPAIR


#: Set once Slurm refused ``Extra`` in this process: asked once, not per step.
_EXTRA_REFUSED: list[str] = []


def publish_health(ctx: Context, node: str, status: str) -> bool:
    """``[repair] health_extra``: our grade into the node's Extra (the door
    keeps everyone else's keys).  Observe-only writes nothing.  A Slurm that
    refuses the field is asked once per process and then left alone (one
    debug line): the grade is a convenience, never a reason to fail a repair."""
    if not config_of(ctx).health_extra or ctx.observe_only or _EXTRA_REFUSED:
        return False
    grade = grade_of(status)
    try:
        return ctx.door.set_extra(node, HEALTH_KEY, grade.value)
    except SlurmError as exc:
        _EXTRA_REFUSED.append(str(exc))
        log.debug("health grade not written to %s's Extra (this Slurm refuses it?): %s", node,
                  exc)  # fmt: skip
        return False


def _step_once(ctx: Context, inc: Incident, cfg: RepairConfig, *, accept: Accept | None,
               nvml: Any, boot_id: str | None) -> str:  # fmt: skip
    rep: dict[str, Any] = dict(inc.repair or {})
    node, incident = inc.node, inc.id
    status = rep.get("status")
    now = ctx.clock()
    if status is None:
        return _plan(ctx, inc, cfg, nvml)
    step = RepairStep(rep.get("step", "none"))
    if status in (Status.PLANNED, Status.DEFERRED):
        if step is RepairStep.NONE:
            rep["status"] = Status.HUMAN
            _save(ctx, incident, rep, "left_for_human")
            return Status.HUMAN
        if step is RepairStep.RESET:
            return _reset(ctx, inc, rep, cfg, nvml)
        if step is RepairStep.REBOOT:
            return _reboot(ctx, inc, rep, cfg, boot_id, status)
        return _replace(ctx, inc, rep, cfg)
    if status == Status.RESET_INTENT:
        # A run died between the intent and the result: never reset twice;
        # acceptance tells whether it worked.
        rep["status"] = Status.ACCEPTING
        rep["reset"] = "unknown: a run died while resetting"
        _save(ctx, incident, rep, "reset_done")
        return Status.ACCEPTING
    if status == Status.REBOOT_INTENT:
        current = ctx.slurm.get_node(node)
        if _reboot_seen(current, rep, boot_id):
            rep["status"] = Status.REBOOTING
            _save(ctx, incident, rep, "rebooting")
            return Status.REBOOTING
        return _reboot(ctx, inc, rep, cfg, boot_id, status, cap=False)
    if status == Status.REBOOTING:
        current = ctx.slurm.get_node(node)
        if current.flags & _REBOOT_FLAGS and not (boot_id and boot_id != rep.get("boot_id")):
            started = parse_time(rep.get("reboot_at") or iso(now))
            if now - started < timedelta(seconds=cfg.reboot_timeout_s):
                return Status.REBOOTING
            return _climb(ctx, inc, rep, step, f"node did not come back within "
                          f"{cfg.reboot_timeout_s:g}s")  # fmt: skip
        rep["status"] = Status.ACCEPTING
        rep["back_at"] = iso(now)
        _save(ctx, incident, rep, "back")
        _audit(ctx, inc, "back", step=str(step), why="node registered after the reboot")
        return Status.ACCEPTING
    if status == Status.ACCEPTING:
        if accept is None:
            return Status.ACCEPTING  # only the worker on the node runs acceptance
        passed, detail = accept(node)
        rep.setdefault("history", []).append({"step": str(step), "passed": passed,
                                              "detail": detail, "at": iso(ctx.clock())})  # fmt: skip
        _remember(ctx, node, _attempt_rec(inc, rep, step, "passed" if passed else "failed"))
        if not passed:
            ctx.state.record_acceptance(node, ctx.clock(), False, detail)
            ctx.audit.record("acceptance", node=node, incident=incident, outcome="failed",
                                why=detail, actor=ctx.actor)  # fmt: skip
            return _climb(ctx, inc, rep, step, f"acceptance failed: {detail}")
        ctx.state.record_acceptance(node, ctx.clock(), True, detail)
        ctx.audit.record("acceptance", node=node, incident=incident, outcome="passed",
                            why=detail, actor=ctx.actor)  # fmt: skip
        rep["status"] = Status.RESUME_INTENT
        _save(ctx, incident, rep, "accepted")
        _audit(ctx, inc, "accepted", step=str(step), why=detail)
        return _resume(ctx, inc, rep)
    if status == Status.RESUME_INTENT:
        return _resume(ctx, inc, rep)
    if status == Status.TICKET_INTENT:
        return _send_ticket(ctx, inc, rep, cfg)
    return str(status)


def _plan(ctx: Context, inc: Incident, cfg: RepairConfig, nvml: Any) -> str:
    """The first rung: what the ladder says to try (observe-only: only say it)."""
    node, incident = inc.node, inc.id
    now = ctx.clock()
    serial = uuid = None
    idx = gpu_of(inc.component)
    if idx is not None and nvml is not None:
        from slurm_hooks.detect.probes.gpu_reset import identity

        ident = identity(nvml, idx)
        serial, uuid = ident.serial, ident.uuid
    plan = plan_repair(_action_of(inc), str(inc.code), inc.component, serial,
                       attempts(ctx, node), cfg, now)  # fmt: skip
    rep: dict[str, Any] = {"step": str(plan.step), "why": plan.why, "planned_at": iso(now), "serial": serial,
           "uuid": uuid, "gpu": idx, "status": Status.PLANNED, "history": [],
           "worker_pid": (inc.repair or {}).get("worker_pid")}  # fmt: skip
    if ctx.observe_only:
        rep["status"] = Status.OBSERVED
        _save(ctx, incident, rep, "observed")
        _audit(ctx, inc, "observe_only", step=str(plan.step), why=plan.why)
        return Status.OBSERVED
    _save(ctx, incident, rep, "planned")
    _audit(ctx, inc, "planned", step=str(plan.step), why=plan.why)
    return Status.PLANNED


def _resume(ctx: Context, inc: Incident, rep: dict[str, Any]) -> str:
    """Resume after a passed acceptance; safe to repeat (``resume_intent``).
    A run killed after Slurm's resume and before its record leaves the node in
    service: the next run finds nothing to resume and closes the incident
    itself, so the node is resumed once and the incident does not stay open."""
    node, incident = inc.node, inc.id
    from slurm_hooks.act import resume

    d = resume.try_resume(ctx, node)
    if str(d.kind) != "resume":
        view = ctx.door.look(node)
        if not view.out_of_service:
            log.info("repair of %s: node in service already (resumed by an earlier run)", node)
            ctx.state.record_resume(node, ctx.clock(), incident)
            ctx.journal.update(incident, lambda j: j.update(status=str(IncidentStatus.CLOSED)))
            _audit(ctx, inc, "resumed_earlier", why="in service already when asked again")
        else:
            log.warning("repair of %s passed acceptance but not resumed: %s", node, d.explanation)
    rep["status"] = Status.RESUMED
    _save(ctx, incident, rep, "resumed")
    return Status.RESUMED


def _attempt_rec(inc: Incident, rep: dict[str, Any], step: RepairStep, outcome: str) -> dict[str, Any]:  # fmt: skip
    return {"at": rep.get("planned_at"), "step": str(step), "code": inc.code,
            "component": inc.component, "serial": rep.get("serial"),
            "incident": inc.id, "outcome": outcome}  # fmt: skip


def _climb(ctx: Context, inc: Incident, rep: dict[str, Any], step: RepairStep, why: str) -> str:  # fmt: skip
    nxt = escalate(step)
    rep["history"] = list(rep.get("history") or []) + [{"step": str(step), "failed": why}]
    rep.update(step=str(nxt), status=Status.PLANNED, why=f"{step} did not hold ({why}): {nxt}")
    _save(ctx, inc.id, rep, "escalated")
    _audit(ctx, inc, "escalated", step=str(nxt), why=rep["why"])
    return Status.PLANNED


def _reset(ctx: Context, inc: Incident, rep: dict[str, Any], cfg: RepairConfig, nvml: Any) -> str:  # fmt: skip
    from slurm_hooks.detect.probes.gpu_reset import GpuBusy, ResetFailed, reset_gpu

    idx = rep.get("gpu")
    if idx is None:
        return _climb(ctx, inc, rep, RepairStep.RESET, "no GPU index to reset")
    rep["status"] = Status.RESET_INTENT
    rep["reset_at"] = iso(ctx.clock())
    _save(ctx, inc.id, rep, "reset_intent")
    _remember(ctx, inc.node, _attempt_rec(inc, rep, RepairStep.RESET, "tried"))
    try:
        how = reset_gpu(int(idx), nvml=nvml, timeout=cfg.reset_timeout_s)
    except GpuBusy as exc:
        rep["status"] = Status.DEFERRED
        _save(ctx, inc.id, rep, "reset_deferred")
        _audit(ctx, inc, "deferred", step="reset", why=str(exc))
        return Status.DEFERRED
    except ResetFailed as exc:
        return _climb(ctx, inc, rep, RepairStep.RESET, str(exc))
    rep["status"] = Status.ACCEPTING
    rep["reset"] = how
    _save(ctx, inc.id, rep, "reset_done")
    _audit(ctx, inc, "reset", step="reset", why=f"GPU {idx} reset ({how})")
    return Status.ACCEPTING


def _reboot_seen(current: Any, rep: dict[str, Any], boot_id: str | None) -> bool:
    reason = current.reason or ""
    return bool(
        current.flags & _REBOOT_FLAGS
        or "reboot issued" in reason
        or "reboot complete" in reason
        or (boot_id and rep.get("boot_id") and boot_id != rep.get("boot_id"))
    )


def _step_reason(inc: Incident, step: RepairStep, code: str | None = None, **extra: str) -> str:
    ours = try_parse_reason(inc.reason)
    assert ours is not None, "the incident's reason is ours"
    from slurm_hooks.core.reason import DrainReason

    r = DrainReason(code or ours.code, ours.incident, ours.text, ours.component,
                    {**ours.extra, "step": str(step), **extra})  # fmt: skip
    return format_reason(r)


def _reboot(ctx: Context, inc: Incident, rep: dict[str, Any], cfg: RepairConfig,
            boot_id: str | None, status: str, *, cap: bool = True) -> str:  # fmt: skip
    node, incident = inc.node, inc.id
    if cap:
        verdict = reboot_allowed(node, ctx.slurm.list_nodes(), cfg)
        if not verdict.allowed:
            if status != Status.DEFERRED:
                rep["status"] = Status.DEFERRED
                _save(ctx, incident, rep, "reboot_deferred")
                _audit(ctx, inc, "deferred", step="reboot", why=verdict.explain())
            return Status.DEFERRED
    reason = _step_reason(inc, RepairStep.REBOOT)
    rep.update(status=Status.REBOOT_INTENT, reboot_at=iso(ctx.clock()), boot_id=boot_id,
               reason=reason)  # fmt: skip
    _save(ctx, incident, rep, "reboot_intent")
    try:
        # The step goes into Slurm first: the cap counts it on every node.
        ctx.door.drain(node, reason)
        if cap and not _still_allowed(ctx, inc, rep, cfg, node):
            return Status.DEFERRED
        _remember(ctx, node, _attempt_rec(inc, rep, RepairStep.REBOOT, "tried"))
        done = ctx.door.reboot(node, reason, incident=incident, nextstate=cfg.reboot_nextstate)
    except ForeignReasonError as exc:
        rep["status"] = Status.HUMAN
        _save(ctx, incident, rep, "reboot_refused")
        _audit(ctx, inc, "refused", step="reboot", why=str(exc))
        return Status.HUMAN
    if not done:
        return _climb(ctx, inc, rep, RepairStep.REBOOT, "this Slurm client cannot reboot nodes")
    rep["status"] = Status.REBOOTING
    _save(ctx, incident, rep, "rebooting")
    _audit(ctx, inc, "reboot", step="reboot", why=rep.get("why"), reason=reason,
           nextstate=cfg.reboot_nextstate)  # fmt: skip
    return Status.REBOOTING


def _still_allowed(ctx: Context, inc: Incident, rep: dict[str, Any], cfg: RepairConfig,
                   node: str) -> bool:  # fmt: skip
    """The cap, counted again once our ``step=reboot`` is in Slurm.  Nodes
    that checked at the same moment all saw room; of any two, at least one
    sees the other's step here (each writes before it counts), so that one
    yields: its reason goes back to the plain one and the reboot waits
    (DEFERRED, retried by the next run).  Two that both see each other both
    wait: never more reboots than the cap, at worst a retry later."""
    verdict = reboot_allowed(node, ctx.slurm.list_nodes(), cfg)
    if verdict.allowed:
        return True
    try:
        ctx.door.drain(node, inc.reason)
    except (ForeignReasonError, SlurmError) as exc:
        log.warning("step=reboot of %s not taken back: %s", node, exc)
    rep["status"] = Status.DEFERRED
    _save(ctx, inc.id, rep, "reboot_deferred")
    _audit(ctx, inc, "deferred", step="reboot", why=verdict.explain() + " (counted again)")
    return False


def _replace(ctx: Context, inc: Incident, rep: dict[str, Any], cfg: RepairConfig) -> str:
    node, incident = inc.node, inc.id
    reason = _step_reason(inc, RepairStep.REPLACE, REPLACE_CODE, **REPLACEMENT_ASKED)
    try:
        ctx.door.drain(node, reason)  # stays out: REPLACE, until a human or the bridge acts
    except (ForeignReasonError, SlurmError) as exc:
        log.warning("REPLACE reason for %s not written: %s", node, exc)
    rep.update(status=Status.TICKET_INTENT, reason=reason, ticket_at=iso(ctx.clock()))
    _save(ctx, incident, rep, "ticket_intent")
    _remember(ctx, node, _attempt_rec(inc, rep, RepairStep.REPLACE, "ticket"))
    return _send_ticket(ctx, inc, rep, cfg)


def ticket_alert(ctx: Context, inc: Incident, rep: dict[str, Any]) -> Alert:
    """The hardware ticket: node, GPU slot and serial, XID history, acceptance results."""
    node = inc.node
    faults = [
        {"at": iso(e.at), "code": e.code, "component": e.component}
        for e in ctx.state.history(node).faults_since(
            ctx.clock() - timedelta(seconds=config_of(ctx).window_s)
        )
    ][-20:]
    text = (f"hardware replacement needed on {node} ({inc.code} "
            f"{inc.component or ''}, GPU serial {rep.get('serial') or 'unknown'}): "
            f"{rep.get('why')}")  # fmt: skip
    return Alert(
        "hardware_ticket", text, node=node, incident=inc.id, code=inc.code,
        fields={"ticket_id": f"{node}-{inc.id}", "gpu_slot": inc.component,
                "gpu_index": rep.get("gpu"), "gpu_serial": rep.get("serial"),
                "gpu_uuid": rep.get("uuid"), "faults": faults,
                "repairs": rep.get("history") or [],
                "ladder": [a.step.value for a in attempts(ctx, node)]},
    )  # fmt: skip


def _send_ticket(ctx: Context, inc: Incident, rep: dict[str, Any], cfg: RepairConfig) -> str:  # fmt: skip
    alert = ticket_alert(ctx, inc, rep)
    try:
        if cfg.ticket_url:
            from slurm_hooks.act.notify.webhook import WebhookSink

            WebhookSink(cfg.ticket_url, deadline=cfg.ticket_deadline_s).send(alert)
        else:  # the [notify] sinks: sent when at least one took it
            failed = [d for d in ctx.notifier.send(alert) if not d.ok]
            if failed and len(failed) == len(ctx.notifier.sinks):
                raise SlurmHooksError("; ".join(str(d.error) for d in failed))
    except SlurmHooksError as exc:  # NotifyError: kept as intent, sent on the next run
        log.error("hardware ticket for %s not sent: %s", inc.node, exc)
        _audit(ctx, inc, "ticket_failed", why=str(exc))
        return Status.TICKET_INTENT
    rep["status"] = Status.REPLACE
    rep["ticket_sent_at"] = iso(ctx.clock())
    _save(ctx, inc.id, rep, "ticket_sent")
    _audit(ctx, inc, "ticket", step="replace", why=rep.get("why"),
           ticket=alert.fields.get("ticket_id"))  # fmt: skip
    return Status.REPLACE


__all__ = [
    "Accept",
    "Status",
    "advance",
    "attempts",
    "due",
    "grade_of",
    "publish_health",
    "ticket_alert",
]
