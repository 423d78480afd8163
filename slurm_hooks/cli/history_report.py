"""Incident timelines, rebuilt from the audit log.

The audit log is JSON lines, one record per thing automation (or an
operator through the CLI) did.  Records this module relies on::

    {"ts": "2024-05-01T10:00:00+00:00", "node": "gpu003", "incident": "7f3a2c1b",
     "job": "1234", "action": "drain", "actor": "slurm-hooks/healthcheck",
     "why": "XID79 gpu3", "code": "XID79", ...}

Only ``ts`` and ``action`` are required; other keys are read when present
and anything else in a record is kept (``extra``) for ``--json``.  Action
names are mapped to timeline stages through STAGE_ALIASES so that the log
can say ``drain`` or ``drained``.  A malformed line is skipped and counted,
never fatal: an operator reading history during an outage must get what can
be read.

Pure apart from ``read_records``/``read_fleet`` (which read files);
``build_incidents`` takes records and a clock, ``slurm_events`` the node
table someone else read (docs/history.md: the fleet's three sources).
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from slurm_hooks.core.errors import SlurmHooksError
from slurm_hooks.core.reason import printable

log = logging.getLogger(__name__)

#: Timeline stages in the order an incident normally goes through them.
STAGES = (
    "detected",
    "drained",
    "signalled",
    "requeued",
    "replacement_requested",
    "resumed",
)

#: Audit ``action`` values (lower case) -> stage.  Actions not listed keep
#: their own name in the timeline (``notify``, ``cancel``, ``skip`` ...).
STAGE_ALIASES: Mapping[str, str] = {
    "detect": "detected",
    "detected": "detected",
    "finding": "detected",
    "fault": "detected",
    "decide": "detected",
    "decision": "detected",
    "drain": "drained",
    "drained": "drained",
    "down": "drained",
    "signal": "signalled",
    "signal_job": "signalled",
    "signalled": "signalled",
    "signaled": "signalled",
    "requeue": "requeued",
    "requeued": "requeued",
    "replace": "replacement_requested",
    "request_replacement": "replacement_requested",
    "replacement_requested": "replacement_requested",
    "replacement": "replacement_requested",
    "resume": "resumed",
    "resumed": "resumed",
    "undrain": "resumed",
}

#: Acceptance runs (``Engine.record_acceptance`` writes ``action="acceptance"``,
#: ``outcome="passed"|"failed"``, no incident id): a passed run is the
#: ``accepted`` milestone, shown between replacement and resume.
ACCEPTANCE = "acceptance"
_MILESTONES = (*STAGES[:-1], ACCEPTANCE, STAGES[-1])

#: Audit outcomes that mean the action did not happen.
_NOT_DONE = frozenset({"skipped", "refused", "failed", "error", "dry_run", "observe_only"})


class HistoryError(SlurmHooksError):
    """The audit log could not be read, or a --since value is invalid."""


@dataclass(frozen=True)
class Event:
    ts: datetime
    action: str
    stage: str
    node: str | None = None
    incident: str | None = None
    job: str | None = None
    actor: str | None = None
    why: str | None = None
    code: str | None = None
    outcome: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return (self.outcome or "").lower() not in _NOT_DONE

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "ts": self.ts.isoformat(),
            "action": self.action,
            "stage": self.stage,
            "node": self.node,
            "incident": self.incident,
            "job": self.job,
            "actor": self.actor,
            "why": self.why,
            "code": self.code,
            "outcome": self.outcome,
        }
        if self.extra:
            d["extra"] = dict(self.extra)
        return d


@dataclass(frozen=True)
class Incident:
    incident: str
    nodes: tuple[str, ...]
    events: tuple[Event, ...]
    code: str | None = None

    @property
    def start(self) -> datetime:
        return self.events[0].ts

    @property
    def last(self) -> datetime:
        return self.events[-1].ts

    @property
    def jobs(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for e in self.events:
            if e.job:
                seen.setdefault(e.job, None)
        return tuple(seen)

    def reached(self, stage: str) -> datetime | None:
        """When the incident first reached ``stage`` (an action that was done)."""
        for e in self.events:
            if e.stage == stage and e.done:
                return e.ts
        return None

    @property
    def resolved(self) -> datetime | None:
        return self.reached("resumed")

    def duration_s(self, now: datetime) -> float:
        """Open incidents count up to ``now``."""
        end = self.resolved or now
        return max((end - self.start).total_seconds(), 0.0)

    def milestones(self) -> dict[str, float]:
        """Seconds from the first event to each stage reached."""
        out = {}
        for stage in _MILESTONES:
            t = self.reached(stage)
            if t is not None:
                out["accepted" if stage == ACCEPTANCE else stage] = (t - self.start).total_seconds()
        return out

    @property
    def sources(self) -> tuple[str, ...]:
        """Where its events come from: ``audit`` (a log), ``slurm`` (a reason)."""
        return tuple(sorted({str(e.extra.get("source", "audit")) for e in self.events}))

    def to_dict(self, now: datetime) -> dict[str, Any]:
        return {
            "incident": self.incident,
            "nodes": list(self.nodes),
            "sources": list(self.sources),
            "code": self.code,
            "start": self.start.isoformat(),
            "end": self.resolved.isoformat() if self.resolved else None,
            "open": self.resolved is None,
            "duration_s": round(self.duration_s(now), 1),
            "jobs": list(self.jobs),
            "milestones_s": {k: round(v, 1) for k, v in self.milestones().items()},
            "events": [e.to_dict() for e in self.events],
        }


@dataclass(frozen=True)
class History:
    incidents: tuple[Incident, ...]
    #: Records with no incident id (notifications, breaker trips, operator commands).
    loose: tuple[Event, ...] = ()
    #: Lines that could not be read (bad JSON, no ts/action).
    skipped: int = 0


# -- time parsing -----------------------------------------------------------

_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``2h``, ``3d``, ``1w``, ``1h30m``."""
    s = text.strip().replace(" ", "")
    if not s:
        raise HistoryError("empty duration")
    pos, total = 0, 0.0
    for m in _DURATION_RE.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2).lower()]
        pos = m.end()
    if pos != len(s) or pos == 0:
        raise HistoryError(f"invalid duration {text!r} (use e.g. 90s, 15m, 2h, 3d, 1h30m)")
    return timedelta(seconds=total)


def parse_time(value: Any) -> datetime:
    """An ISO 8601 time (``Z`` allowed) or a Unix timestamp; naive means local."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(float(value), UTC)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"not a time: {value!r}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    t = datetime.fromisoformat(text)
    return t.astimezone() if t.tzinfo is None else t


def parse_since(text: str, now: datetime) -> datetime:
    """``--since``: a relative duration back from ``now`` (``2h``, ``3d``) or
    an ISO time (``2024-05-01``, ``2024-05-01T10:00``, ``...Z``)."""
    if _DURATION_RE.match(text.strip()):
        try:
            return now - parse_duration(text)
        except HistoryError:
            pass
    try:
        return parse_time(text)
    except ValueError as exc:
        raise HistoryError(
            f"invalid --since {text!r}: use a duration (2h, 3d) or an ISO time (2024-05-01T10:00)"
        ) from exc


# -- reading ------------------------------------------------------------------

_KNOWN = ("ts", "action", "node", "incident", "job", "actor", "why", "code", "outcome")


def stage_of(action: str) -> str:
    return STAGE_ALIASES.get(action.strip().lower(), action.strip().lower())


def _s(value: Any) -> str | None:
    """A field of the log as text, without control characters: the log
    quotes users' words (a process's arguments), which must not drive the
    terminal the report is read on, nor break a line of it."""
    if value is None or value == "":
        return None
    return printable(str(value))


def event_from_record(rec: Mapping[str, Any]) -> Event:
    """Raise ValueError for a record without a usable ts or action."""
    ts = parse_time(rec.get("ts"))
    action = rec.get("action")
    if not isinstance(action, str) or not action.strip():
        raise ValueError("record has no action")
    action = printable(action)  # shown as the stage when not one we know
    outcome = rec.get("outcome", rec.get("result"))
    return Event(
        ts=ts,
        action=action,
        stage=stage_of(action),
        node=_s(rec.get("node")),
        incident=_s(rec.get("incident")),
        job=_s(rec.get("job", rec.get("job_id"))),
        actor=_s(rec.get("actor")),
        why=_s(rec.get("why", rec.get("reason"))),
        code=_s(rec.get("code")),
        outcome=_s(outcome),
        extra={k: v for k, v in rec.items() if k not in _KNOWN and k not in ("result", "job_id")},
    )


def parse_lines(lines: Iterable[str]) -> tuple[list[Event], int]:
    """Events from JSON lines, plus the number of lines skipped."""
    events: list[Event] = []
    skipped = 0
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
            events.append(event_from_record(rec))
        except (ValueError, TypeError) as exc:
            skipped += 1
            log.debug("audit line skipped line=%s error=%s", n, exc)
    return events, skipped


def audit_files(path: str | Path) -> list[Path]:
    """The log and its rotated copies (``audit.jsonl.1`` ...), oldest first.
    Compressed rotations are not read."""
    p = Path(path)
    rotated = []
    for q in p.parent.glob(p.name + ".*"):
        suffix = q.name[len(p.name) + 1 :]
        if suffix.isdigit():
            rotated.append((int(suffix), q))
    files = [q for _, q in sorted(rotated, reverse=True)]
    if p.exists():
        files.append(p)
    return files


def read_records(path: str | Path) -> tuple[list[Event], int]:
    files = audit_files(path)
    if not files:
        raise HistoryError(f"no audit log at {path}")
    events: list[Event] = []
    skipped = 0
    for f in files:
        try:
            with f.open(encoding="utf-8", errors="replace") as fh:
                ev, sk = parse_lines(fh)
        except OSError as exc:
            raise HistoryError(f"cannot read audit log {f}: {exc}") from exc
        events.extend(ev)
        skipped += sk
    return events, skipped


def shared_bases(directory: str | Path) -> list[Path]:
    """Every per-node log of a shared audit dir (``n4.jsonl``; also one
    only its rotated copies ``n4.jsonl.1`` are left of), sorted by name."""
    from slurm_hooks.store.audit import UntrustedSharedDir, check_shared_dir

    d = Path(directory)
    try:
        check_shared_dir(d)
        names = [q.name for q in d.iterdir() if stat.S_ISREG(q.lstat().st_mode)]
    except UntrustedSharedDir as exc:
        raise HistoryError(
            f"shared audit dir {d} not read: {exc.strerror}; its records could be any user's"
        ) from exc
    except OSError as exc:
        raise HistoryError(f"cannot read shared audit dir {d}: {exc}") from exc
    bases = set()
    for name in names:
        base, dot, suffix = name.rpartition(".")
        if name.endswith(".jsonl"):
            bases.add(name)
        elif dot and suffix.isdigit() and base.endswith(".jsonl"):
            bases.add(base)
    return [d / b for b in sorted(bases)]


def _open_log(path: Path) -> TextIO:
    """A log opened for reading: never through a symlink, never blocking (a
    FIFO in a log's place), and only a regular file."""
    from slurm_hooks.store.atomicfile import open_regular

    return open(open_regular(path, os.O_RDONLY), encoding="utf-8", errors="replace")  # noqa: SIM115


def read_fleet(logs: Iterable[str | Path]) -> tuple[list[Event], int, list[Path]]:
    """Events of every log (each with its rotated copies), merged by time.

    A record is in the local log and in the shared dir's copy alike: the
    same line read twice is kept once.  Logs that do not exist are passed
    over; returns the files read too (empty: nothing to read)."""
    seen: set[str] = set()
    events: list[Event] = []
    skipped = 0
    read: list[Path] = []
    for base in logs:
        for f in audit_files(base):
            try:
                with _open_log(f) as fh:
                    fresh = [ln for ln in fh if ln.strip() and ln.strip() not in seen]
            except OSError as exc:
                raise HistoryError(f"cannot read audit log {f}: {exc}") from exc
            seen.update(ln.strip() for ln in fresh)
            ev, sk = parse_lines(fresh)
            events.extend(ev)
            skipped += sk
            read.append(f)
    events.sort(key=lambda e: e.ts)
    return events, skipped, read


# -- Slurm's own record -----------------------------------------------------------

#: ``Event.extra["source"]`` of an event rebuilt from a node's reason in Slurm.
SLURM_SOURCE = "slurm"


def slurm_events(nodes: Iterable[Any], now: datetime) -> list[Event]:
    """One ``drained`` event per node whose reason in Slurm is a fault of
    ours: the reason names the code, the component and the incident, and
    Slurm keeps its time and who set it.  This is the fleet record every host
    can read (one node-table read), audit files or not.  ``LEND``/``SPARE``
    are not incidents; foreign and malformed reasons are not ours to show."""
    from slurm_hooks.core.held import parse_mark
    from slurm_hooks.core.history import aware
    from slurm_hooks.core.reason import try_parse_reason

    out = []
    for n in nodes:
        mark = parse_mark(getattr(n, "comment", None))
        if mark is not None:  # a fault the breaker held (our mark in the node's Comment)
            held_why = " ".join(p for p in (mark.code, mark.component) if p)
            out.append(
                Event(mark.since, "held", "held", n.name, mark.incident, None, "slurm (comment)",
                      f"{held_why}: held by breaker (not drained) since {mark.since.isoformat()}",
                      mark.code, None, {"source": SLURM_SOURCE, "comment": n.comment})
            )  # fmt: skip
        r = try_parse_reason(n.reason)
        if r is None or not r.is_fault:
            continue
        at = aware(n.reason_time) if n.reason_time else now
        extra: dict[str, Any] = {"source": SLURM_SOURCE, "reason": n.reason, "state": n.state}
        if r.component:
            extra["component"] = r.component
        if r.extra:
            extra["fields"] = dict(r.extra)
        who = f"slurm ({n.reason_user})" if n.reason_user else "slurm"
        why = f"{r.component} {r.text}" if r.component else r.text
        out.append(
            Event(at, "drain", "drained", n.name, r.incident, None, who, why, r.code, None, extra)
        )
    return out


def merge_slurm(events: list[Event], from_slurm: Iterable[Event]) -> list[Event]:
    """``events`` plus each Slurm event whose incident the audit logs do not
    have on that node (the audit's own timeline is richer when there is one)."""
    known = {(e.incident, e.node) for e in events if e.incident}
    extra = [e for e in from_slurm if (e.incident, e.node) not in known]
    return sorted([*events, *extra], key=lambda e: e.ts)


# -- building -------------------------------------------------------------------


def build_incidents(events: Iterable[Event], skipped: int = 0) -> History:
    """Group events by incident id, each timeline in time order; incidents
    ordered by start time."""
    by_id: dict[str, list[Event]] = {}
    loose: list[Event] = []
    for e in events:
        if e.incident:
            by_id.setdefault(e.incident, []).append(e)
        else:
            loose.append(e)
    loose = _attach_acceptance(by_id, loose)
    incidents = []
    for inc, evs in by_id.items():
        evs.sort(key=lambda e: (e.ts, _stage_rank(e.stage)))
        nodes = tuple(dict.fromkeys(e.node for e in evs if e.node))
        code = next((e.code for e in evs if e.code), None)
        incidents.append(Incident(inc, nodes, tuple(evs), code))
    incidents.sort(key=lambda i: (i.start, i.incident))
    loose.sort(key=lambda e: e.ts)
    return History(tuple(incidents), tuple(loose), skipped)


def _attach_acceptance(by_id: dict[str, list[Event]], loose: list[Event]) -> list[Event]:
    """Acceptance records carry the node, not the incident: file each under
    the incident open on that node when it ran (the latest one started
    before it and not resumed before it).  Runs outside any incident stay
    loose; the caller shows them as acceptance runs of their own."""
    spans: dict[str, list[tuple[datetime, datetime | None, str]]] = {}
    for inc, evs in by_id.items():
        start = min(e.ts for e in evs)
        resumed = [e.ts for e in evs if e.stage == "resumed" and e.done]
        end = min(resumed) if resumed else None
        for n in dict.fromkeys(e.node for e in evs if e.node):
            spans.setdefault(n, []).append((start, end, inc))
    rest: list[Event] = []
    for e in loose:
        if e.stage != ACCEPTANCE or not e.node:
            rest.append(e)
            continue
        open_then = [
            (start, inc)
            for start, end, inc in spans.get(e.node, ())
            if start <= e.ts and (end is None or e.ts <= end)
        ]
        if open_then:
            by_id[max(open_then)[1]].append(e)
        else:
            rest.append(e)
    return rest


def acceptance_runs(history: History) -> tuple[Event, ...]:
    """Acceptance runs that belong to no incident (a burn-in of a new node,
    a check before maintenance ends)."""
    return tuple(e for e in history.loose if e.stage == ACCEPTANCE)


def _stage_rank(stage: str) -> int:
    return _MILESTONES.index(stage) if stage in _MILESTONES else len(_MILESTONES)


def select(
    history: History,
    *,
    node: str | None = None,
    since: datetime | None = None,
) -> History:
    """Incidents touching ``node`` that were active at or after ``since``
    (an incident opened last week and resolved an hour ago is in ``--since 2h``)."""

    def keep_inc(i: Incident) -> bool:
        if node is not None and node not in i.nodes:
            return False
        return since is None or i.resolved is None or i.last >= since

    def keep_ev(e: Event) -> bool:
        if node is not None and e.node != node:
            return False
        return since is None or e.ts >= since

    return History(
        tuple(i for i in history.incidents if keep_inc(i)),
        tuple(e for e in history.loose if keep_ev(e)),
        history.skipped,
    )


def iter_lines(history: History, now: datetime, *, wide: bool = False) -> Iterator[str]:
    """Human-readable timelines: 80 columns (long explanations wrap onto
    indented lines), or one line per event with ``wide``."""
    from slurm_hooks.cli._width import clip, fill
    from slurm_hooks.cli.fleet import format_age

    for inc in history.incidents:
        state = "open" if inc.resolved is None else "resolved"
        head = (
            f"incident {inc.incident}  {inc.code or '?'}  {','.join(inc.nodes) or '?'}  "
            f"{state}, {format_age(inc.duration_s(now))}"
        )
        yield clip(head, wide=wide)
        for e in inc.events:
            yield _event_line(e, format_age((e.ts - inc.start).total_seconds()), wide, fill)
        yield ""
    runs = acceptance_runs(history)
    if runs:
        yield "acceptance runs outside an incident:"
        for e in runs:
            line = _event_line(e, "", wide, fill, node=True)
            yield line
        yield ""


def _event_line(e: Event, offset: str, wide: bool, fill: Any, *, node: bool = False) -> str:
    parts = [f"  {e.ts.astimezone().strftime('%m-%d %H:%M:%S')}"]
    if node:
        parts.append(f"{e.node or '?':<14}")
    else:
        parts.append(f"+{offset:<6}")
    parts.append(f"{e.stage:<22}")
    if e.job:
        parts.append(f"job={e.job}")
    if e.stage == ACCEPTANCE and e.outcome:
        parts.append(e.outcome)
    elif e.outcome and not e.done:
        parts.append(f"[{e.outcome}]")
    if e.extra.get("source") == SLURM_SOURCE:
        parts.append("[Slurm reason]")
    if e.why:
        parts.append(e.why)
    return fill(" ".join(parts), wide=wide, subsequent=" " * 6)
