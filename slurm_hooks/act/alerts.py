"""Alerts journalled in the incident: queued before, sent after, retried.

An alert sent inline can be lost (the process dies before it goes out) or
hold up the job's checkpoint signal (a webhook that trickles).  So an
incident's alerts are *queued* in its journal (``doc["alerts"]``) at the
step that causes them, and *flushed* afterwards, outside the incident lock
and after the jobs were signalled: by the process that queued them, and
again by whoever rolls the incident forward (hook, watcher, grace worker)
until every sink has it.

Exactly once per sink, as far as a network allows:

* a sender first *claims* the alert in the journal (its pid and the time),
  so two processes flushing at once never both send it; a claim whose pid
  is dead, or older than ``CLAIM_S``, is taken over;
* each sink that delivered is recorded at once, so a retry goes only to
  the sinks that failed;
* the one window left, a kill between a sink's answer and the journal
  write, resends that alert once; the payload carries ``alert_id``
  (incident:key), the same on every try, so a receiver can drop the copy.

A sink that keeps failing is given up after ``MAX_ATTEMPTS`` (audited).

Alerts that belong to no incident's jobs (node resumed, breaker tripped)
are not journalled: :func:`send_bounded` sends them in a background thread
that the caller waits for at most ``INLINE_WAIT_S`` (a fast sink is done by
then; a hanging webhook never holds up the resume or the breaker
decision), and that process exit waits for at most ``BACKGROUND_DEADLINE_S``
from the send's start (a hook ends, the alert still has its chance).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from slurm_hooks.act.notify.base import Alert, Delivery, Notifier
from slurm_hooks.core.errors import StateError
from slurm_hooks.detect.probes.process import pid_alive
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import StateStore, iso, parse_time

log = logging.getLogger(__name__)

#: Tries per sink before an alert is given up.
MAX_ATTEMPTS = 5
#: Seconds a claim protects an alert being sent (above any sink's deadline).
CLAIM_S = 120.0
#: Seconds the caller of :func:`send_bounded` waits before leaving the send
#: to its background thread.
INLINE_WAIT_S = 1.0
#: Total seconds a background send may take, process exit included.
BACKGROUND_DEADLINE_S = 30.0

_background: list[tuple[threading.Thread, float]] = []
_background_lock = threading.Lock()
_atexit_armed = False


def send_bounded(
    notifier: Notifier,
    alert: Alert,
    record: Callable[[Delivery], None],
    *,
    wait_s: float = INLINE_WAIT_S,
    deadline_s: float = BACKGROUND_DEADLINE_S,
) -> bool:
    """Send ``alert`` off the caller's path: in a daemon thread, waited for
    at most ``wait_s``; ``record`` is called (in that thread) for each
    delivery.  True when it finished inline.  Never raises."""
    global _atexit_armed

    def work() -> None:
        try:
            for delivery in notifier.send(alert):
                record(delivery)
        except Exception:  # noqa: BLE001 - an alert never breaks the caller
            log.exception("alert %s not sent", alert.kind)

    thread = threading.Thread(target=work, name=f"alert-{alert.kind}", daemon=True)
    with _background_lock:
        _background[:] = [(t, d) for t, d in _background if t.is_alive()]
        _background.append((thread, time.monotonic() + deadline_s))
        if not _atexit_armed:
            atexit.register(wait_background)
            _atexit_armed = True
    thread.start()
    thread.join(max(0.0, wait_s))
    if thread.is_alive():
        log.warning("alert %s still being sent after %gs: left to the background (at most %gs)",
                    alert.kind, wait_s, deadline_s)  # fmt: skip
        return False
    return True


def wait_background(timeout: float | None = None) -> bool:
    """Wait for background sends, each until its own deadline (or
    ``timeout`` in all); True when none is left.  Run at process exit."""
    end = None if timeout is None else time.monotonic() + timeout
    with _background_lock:
        pending = list(_background)
    for thread, deadline in pending:
        limit = deadline if end is None else min(deadline, end)
        thread.join(max(0.0, limit - time.monotonic()))
    with _background_lock:
        _background[:] = [(t, d) for t, d in _background if t.is_alive()]
        left = len(_background)
    if left:
        log.error("%d alert(s) not sent within their deadline", left)
    return left == 0


def unsent(doc: dict[str, Any]) -> list[str]:
    """Keys of the journal's alerts that some sink still has to deliver."""
    return [k for k, a in (doc.get("alerts") or {}).items() if not a.get("done")]


def queue(doc: dict[str, Any], key: str, alert: Alert, now: datetime) -> bool:
    """Add ``alert`` under ``key`` to ``doc`` (in memory; the caller writes
    the journal, under the incident lock).  False when it is queued already
    (a rolled-forward step queues the same key again)."""
    alerts = doc.setdefault("alerts", {})
    if key in alerts:
        return False
    alerts[key] = {
        "alert": {
            "kind": alert.kind,
            "text": alert.text,
            "node": alert.node,
            "job_id": alert.job_id,
            "user": alert.user,
            "incident": alert.incident,
            "code": alert.code,
            "fields": dict(alert.fields),
        },
        "queued_at": iso(now),
        "sinks_done": [],
        "attempts": 0,
        "done": False,
    }
    return True


def _alert(rec: dict[str, Any], alert_id: str) -> Alert:
    a = rec["alert"]
    return Alert(
        a["kind"], a["text"], node=a.get("node"), job_id=a.get("job_id"), user=a.get("user"),
        incident=a.get("incident"), code=a.get("code"),
        fields={**(a.get("fields") or {}), "alert_id": alert_id},
    )  # fmt: skip


def flush(
    state: StateStore,
    incident: str,
    notifier: Notifier,
    audit: AuditLog,
    *,
    clock: Callable[[], datetime],
    actor: str,
) -> int:
    """Send the incident's queued alerts to the sinks that do not have them
    yet.  Never raises for a sink or a state failure (logged); returns the
    number of deliveries made."""
    sent = 0
    try:
        keys = _claim(state, incident, clock)
    except StateError as exc:
        log.error("alerts of incident %s not sent: %s", incident, exc)
        return 0
    for key, rec in keys:
        done = set(rec.get("sinks_done") or ())
        todo = [s for s in notifier.sinks if s.name not in done]
        alert = _alert(rec, f"{incident}:{key}")
        results = Notifier(todo).send(alert) if todo else []
        skipped = {s.name for s in todo} - {r.sink for r in results}  # sink does not want it
        for delivery in results:
            audit.record(
                "notify", node=alert.node, job=alert.job_id, incident=incident, user=alert.user,
                sink=delivery.sink, kind=alert.kind, outcome="sent" if delivery.ok else "failed",
                why=delivery.error, actor=actor,
            )  # fmt: skip
        ok = {r.sink for r in results if r.ok} | skipped
        sent += sum(1 for r in results if r.ok)
        try:
            _record(state, incident, key, ok, len(todo) - len(ok) > 0, clock)
        except StateError as exc:
            log.error(
                "alert %s:%s sent but not recorded (may be sent again): %s", incident, key, exc
            )
    return sent


def _claim(
    state: StateStore, incident: str, clock: Callable[[], datetime]
) -> list[tuple[str, dict[str, Any]]]:
    now = clock()
    with state.incident_lock(incident):
        doc = state.read_incident(incident)
        if doc is None:
            return []
        out = []
        for key in unsent(doc):
            rec = doc["alerts"][key]
            claim = rec.get("claim") or {}
            if claim and claim.get("pid") != os.getpid() and pid_alive(claim.get("pid")):
                at = parse_time(claim["at"]) if claim.get("at") else now
                if (now - at).total_seconds() < CLAIM_S:
                    continue  # another process is sending it right now
            rec["claim"] = {"pid": os.getpid(), "at": iso(now)}
            out.append((key, dict(rec)))
        if out:
            state.write_incident(doc)
        return out


def _record(
    state: StateStore,
    incident: str,
    key: str,
    ok: set[str],
    failed: bool,
    clock: Callable[[], datetime],
) -> None:
    with state.incident_lock(incident):
        doc = state.read_incident(incident)
        if doc is None:
            return
        rec = doc.get("alerts", {}).get(key)
        if rec is None:
            return
        rec["sinks_done"] = sorted(set(rec.get("sinks_done") or ()) | ok)
        rec["attempts"] = int(rec.get("attempts") or 0) + 1
        rec.pop("claim", None)
        if not failed:
            rec["done"] = True
            rec["sent_at"] = iso(clock())
        elif rec["attempts"] >= MAX_ATTEMPTS:
            rec["done"] = True
            rec["given_up"] = True
            log.error("alert %s:%s given up after %d tries", incident, key, rec["attempts"])
        state.write_incident(doc)
