"""Repeats of a fault on a node we already drained for it cost O(1).

A GPU that fell off the bus can log XID 79 hundreds of times a second.  The
first one drains the node; each repeat would otherwise cost two Slurm reads
(the node, the partition for the breaker) and an audit line, from every
node that floods, at once.  So the engine remembers, in the node's state
file, "drained by us for these codes under incident X, verified with Slurm
at T" (``drained_for``).  A repeat of one of those codes while the node's
open incident is still X and T is recent is *absorbed*: counted, no Slurm
call, no audit line.  Every ``VERIFY_S`` the next repeat goes the full way
(Slurm is asked again: an admin may have resumed the node) and one audit
line summarises what was absorbed since.

The functions that take a ``Context`` are the repeats room of an incident's
life (absorb, remember, the log-only lines, the fault history); the Engine
sequences them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from slurm_hooks.act.context import Context
from slurm_hooks.core.errors import StateError
from slurm_hooks.core.history import FaultEvent
from slurm_hooks.decide.decision import Decision, DecisionKind
from slurm_hooks.store.state import StateStore, iso, parse_time

log = logging.getLogger(__name__)

#: Seconds the fault path waits for a node-state lock before it drains
#: without that bookkeeping (a stuck holder must not cost the drain).
BOOKKEEPING_WAIT_S = 2.0

#: Seconds an "already drained by us" verdict is trusted before Slurm is asked again.
VERIFY_S = 300.0
KEY = "drained_for"


def remember(state: StateStore, node: str, incident: str, code: str, now: datetime) -> None:
    """Slurm just confirmed (or took) our drain for ``code`` under ``incident``."""

    def change(d: dict[str, Any]) -> None:
        memo = d.get(KEY) if isinstance(d.get(KEY), dict) else None
        if memo is None or memo.get("incident") != incident:
            memo = {"incident": incident, "codes": [], "repeats": {}}
        if code not in memo["codes"]:
            memo["codes"].append(code)
        memo["verified_at"] = iso(now)
        d[KEY] = memo

    state.update_node(node, change)


def absorbable(data: dict[str, Any], codes: set[str], now: datetime) -> bool:
    """Whether repeats of ``codes`` on this node (its state file ``data``)
    need no Slurm call: the open incident is the one we drained for them,
    verified less than VERIFY_S ago."""
    memo = data.get(KEY)
    if not isinstance(memo, dict) or not codes:
        return False
    if memo.get("incident") is None or memo.get("incident") != data.get("open_incident"):
        return False
    if not codes <= set(memo.get("codes") or ()):
        return False
    try:
        verified = parse_time(memo["verified_at"])
    except (KeyError, TypeError, ValueError):
        return False
    return 0 <= (now - verified).total_seconds() < VERIFY_S


def absorb(state: StateStore, node: str, counts: dict[str, int]) -> None:
    """Count absorbed repeats (local write only)."""

    def change(d: dict[str, Any]) -> None:
        memo = d.get(KEY)
        if isinstance(memo, dict):
            reps = memo.setdefault("repeats", {})
            for code, n in counts.items():
                reps[code] = int(reps.get(code, 0)) + n

    state.update_node(node, change)


def take_summary(state: StateStore, node: str) -> dict[str, int]:
    """The repeats absorbed since the last summary, reset to zero."""
    out: dict[str, int] = {}

    def change(d: dict[str, Any]) -> None:
        memo = d.get(KEY)
        if isinstance(memo, dict) and memo.get("repeats"):
            out.update({k: int(v) for k, v in memo["repeats"].items()})
            memo["repeats"] = {}

    state.update_node(node, change)
    return out


#: Seconds between two audit lines for the same log-only code on a node:
#: the repeats in between are counted and the next line carries the count.
LOG_PERIOD_S = 60.0
LOG_KEY = "logged"


#: Seconds the log-only bookkeeping waits for the node's state lock.  It
#: runs before the engine acts, once per run: a lock held by a stuck process
#: must cost the drain that follows at most this, however many log-only
#: findings (a lost GPU's "could not run" from every other check) there are.
LOG_LOCK_WAIT_S = 1.0


def absorb_log(state: StateStore, node: str, code: str, now: datetime) -> tuple[bool, int]:
    """A log-only decision (XID 43: the application's fault, no action) for
    ``code`` on ``node``.  (True, 0): audited less than LOG_PERIOD_S ago,
    counted instead (one local write, no audit line).  (False, n): write
    the audit line now, summarising the ``n`` repeats absorbed since the
    last one.  A state dir that cannot be written audits every time."""
    return absorb_logs(state, node, [code], now, timeout=None)[0]


def absorb_logs(
    state: StateStore,
    node: str,
    codes: Sequence[str],
    now: datetime,
    *,
    timeout: float | None,
) -> list[tuple[bool, int]]:
    """:func:`absorb_log` for every log-only decision of one run, in order
    (a code seen twice in the run: the second is absorbed), in ONE locked
    write that waits at most ``timeout`` for the lock (None: the store's
    lock timeout; the engine passes LOG_LOCK_WAIT_S).  Raises StateError
    (LockTimeout included): the caller then audits every decision."""
    out: list[tuple[bool, int]] = []

    def change(d: dict[str, Any]) -> None:
        out.clear()
        raw = d.get(LOG_KEY)
        memo: dict[str, Any] = raw if isinstance(raw, dict) else {}
        out.extend(_absorb_one(memo, code, now) for code in codes)
        d[LOG_KEY] = memo

    if codes:
        state.update_node(node, change, timeout=timeout)
    return list(out)


def _absorb_one(memo: dict[str, Any], code: str, now: datetime) -> tuple[bool, int]:
    rec_raw = memo.get(code)
    rec: dict[str, Any] | None = rec_raw if isinstance(rec_raw, dict) else None
    last = None
    if rec is not None:
        try:
            last = parse_time(rec["at"])
        except (KeyError, TypeError, ValueError):
            last = None
    if rec is not None and last is not None and 0 <= (now - last).total_seconds() < LOG_PERIOD_S:
        rec["repeats"] = int(rec.get("repeats") or 0) + 1
        return True, 0
    repeats = int(rec.get("repeats") or 0) if rec is not None else 0
    memo[code] = {"at": iso(now), "repeats": 0}
    return False, repeats


def log_lines(
    ctx: Context, node: str, decisions: Sequence[Decision]
) -> dict[int, tuple[bool, int]]:
    """Log-only repeats (an XID 43 flood, a lost GPU's "could not run"
    from every other check) cost no audit line each: one line per
    ``LOG_PERIOD_S`` per code, with the count since.  Index of
    each LOG decision -> (absorbed, repeats since the last line).

    This runs before the drain it sits beside, so it is ONE state write
    per run whose lock wait is short (``LOG_LOCK_WAIT_S``): one
    wait per log-only decision, at the state store's full lock timeout
    each, put a lost GPU's drain (1 FAIL + 9 UNKNOWN) behind 180 s of
    waiting on a lock a stuck process held: past the 60 s slurmd gives a
    health check, so no run ever drained.  Failing here audits every line."""
    idx = [i for i, d in enumerate(decisions) if d.kind is DecisionKind.LOG]
    try:
        got = absorb_logs(ctx.state, node, [decisions[i].code for i in idx],
                                  ctx.clock(), timeout=LOG_LOCK_WAIT_S)  # fmt: skip
    except StateError as exc:
        log.warning("log-only repeats of %s not counted (every line audited): %s", node, exc)
        return {}
    return dict(zip(idx, got, strict=True))


def absorb_drained(ctx: Context, node: str, first: Sequence[Decision]) -> list[Decision] | None:
    """Repeats of the fault(s) we already drained this node for: counted,
    no Slurm call, no audit line.  ``first``: the Slurm-free decisions (the
    Engine's, made once).  None when the findings need the full way."""
    now = ctx.clock()
    try:
        data = ctx.state.read_node(node)
    except StateError:
        return None
    if not isinstance(data.get(KEY), dict):
        return None
    drains = [d for d in first if d.kind.drains]
    if not drains or any(d.kind is not DecisionKind.DRAIN for d in drains):
        return None
    if not absorbable(data, {d.code for d in drains}, now):
        return None
    counts: dict[str, int] = {}
    for d in drains:
        counts[d.code] = counts.get(d.code, 0) + sum(
            int(c) if isinstance(c := (f.values or {}).get("count"), int) else 1 for f in d.findings
        )
    try:
        absorb(ctx.state, node, counts)
    except StateError as exc:
        ctx.state_failed("node", f"repeat count of {node} not recorded: {exc}")
    incident = data.get("open_incident")
    out = [
        Decision(
            DecisionKind.ALREADY_HANDLED,
            node,
            d.code,
            f"{d.code} again on {node}, already drained by slurm-hooks (inc={incident}): "
            "repeat counted",
            d.component,
            None,
            d.findings,
            facts={"absorbed": True},
        )
        for d in drains
    ]
    return out + [d for d in first if not d.kind.drains and d.kind is not DecisionKind.IGNORE]


def remember_confirmed(ctx: Context, node: str, decisions: Sequence[Decision]) -> None:
    """After Slurm confirmed our drain (ALREADY_HANDLED for our open
    incident): trust it for repeats for a while, and summarise the
    repeats absorbed since the last look in one audit line."""
    for d in decisions:
        if d.kind is not DecisionKind.ALREADY_HANDLED or d.reason is None:
            continue
        try:
            if d.reason.incident != ctx.state.open_incident(node):
                continue
            remember(ctx.state, node, str(d.reason.incident), d.code, ctx.clock())
            absorbed = take_summary(ctx.state, node)
        except StateError as exc:
            ctx.state_failed("node", f"drain memo of {node} not recorded: {exc}")
            continue
        if absorbed:
            ctx.audit.record(
                "repeats", node=node, incident=d.reason.incident, counts=absorbed,
                why=f"repeats absorbed without a Slurm call since the last look "
                f"(at most every {VERIFY_S:g}s)",
            )  # fmt: skip


def record_faults(ctx: Context, node: str, decisions: Sequence[Decision]) -> None:
    """The node's fault history (what REPLACE counts), before acting."""
    now = ctx.clock()
    events = []
    for d in decisions:
        if d.kind is DecisionKind.IGNORE:
            continue
        for i, f in enumerate(d.findings):
            # Only a new drain counts as a hardware event towards REPLACE;
            # a fault seen again on an already drained node does not.
            if d.kind.drains and i == 0:
                severity = str(d.kind)
            elif d.kind is DecisionKind.LOG:
                severity = "log"
            else:
                severity = str(d.kind) if not d.kind.drains else "secondary"
            comp = d.component if i == 0 else None
            if comp is None and f.component.kind != "node":
                comp = f.component.short()
            # Whose evidence: the history's user-side entries corroborate
            # nothing alone, and hangs of two users blame the node (decide/trust.py);
            # whose processes raised a fault any user can cause (decide.py's repeats).
            user = f.values.get("user") if f.user_side else f.values.get("process_users")
            events.append(FaultEvent(now, f.code, comp, severity, d.incident,
                                     not f.user_side, user if isinstance(user, str) else None))  # fmt: skip
    # Bookkeeping on the way to a drain: a lock held by a stuck process
    # must not hold up the drain (StateError is caught by the caller).
    ctx.state.record_faults(node, events, timeout=BOOKKEEPING_WAIT_S)


def remember_drain(ctx: Context, node: str, incident: str, code: str) -> None:
    """A drain of ours confirmed: its repeats are absorbed from now on."""
    try:
        remember(ctx.state, node, incident, code, ctx.clock())
    except StateError as exc:
        ctx.state_failed("node", f"drain memo of {node} not recorded: {exc}")


def audit_decisions(ctx: Context, node: str, decisions: Sequence[Decision]) -> None:
    """One audit line per decision; log-only repeats one per period."""
    logged = log_lines(ctx, node, decisions)
    for i, d in enumerate(decisions):
        if d.kind is DecisionKind.IGNORE or logged.get(i, (False, 0))[0]:
            continue
        ctx.audit.record(
                "decision", node=node, code=d.code, component=d.component,
                incident=d.incident, decision=str(d.kind), why=d.explanation,
                outcome="observe_only" if d.observe_only and d.kind.drains else None,
                repeats_since_last=logged.get(i, (False, 0))[1] or None,
            )  # fmt: skip
