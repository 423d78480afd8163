"""Group a fleet's node states into what an operator needs to see first.

``slurm-hooks status`` answers "what is out of service, who took it out,
why, since when, and is anything waiting on a replacement?".  This module is
pure: node states and a clock in, a ``FleetSummary`` out, so the grouping is
tested table-driven without Slurm.  Reasons are read only through
``drain_reason`` (the one module that knows our grammar).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypedDict

from slurm_hooks.core import hostlist
from slurm_hooks.core.model import NodeState, ReasonOwner
from slurm_hooks.core.reason import SLURM_REASONS, classify_owner, printable, try_parse_reason

#: Fault code of the reason the bridge writes when it lends an idle node to
#: inference.  A lent node is out of Slurm on purpose, not broken.
LEND_CODE = "LEND"
#: Values of our ``repl=`` reason field that mean "a replacement was asked for".
REPLACEMENT_VALUES = frozenset({"requested", "pending", "approved", "ordered", "yes", "true"})
#: Order in which owner sections are shown: ours first (we can act on them),
#: then other automation, then people, then Slurm itself.
OWNER_ORDER = (
    ReasonOwner.OURS,
    ReasonOwner.NHC,
    ReasonOwner.ADMIN,
    ReasonOwner.OPERATOR,
    ReasonOwner.SLURM,
    ReasonOwner.NONE,
)


@dataclass(frozen=True)
class NodeRow:
    """One node that is drained, down or lent, with its reason taken apart."""

    name: str
    state: str
    flags: tuple[str, ...]
    owner: ReasonOwner
    #: Our fault code (``XID79``); for foreign reasons a short label
    #: (``NHC``, the Slurm reason such as ``Prolog error``, ``-`` for an admin).
    code: str
    reason: str | None = None
    reason_user: str | None = None
    reason_time: datetime | None = None
    age_s: float | None = None
    incident: str | None = None
    component: str | None = None
    replacement: str | None = None
    lent: bool = False
    text: str | None = None
    #: Jobs Slurm still runs on the node (ids; ``?`` when they could not be
    #: read): under our drain, what the repair waits for, a job given its
    #: grace or one spared by ``evacuate = "gpu"``.
    jobs: tuple[str, ...] = ()

    @property
    def replacement_requested(self) -> bool:
        return self.replacement is not None and self.replacement.lower() in REPLACEMENT_VALUES

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "flags": list(self.flags),
            "owner": str(self.owner),
            "code": self.code,
            "reason": self.reason,
            "reason_user": self.reason_user,
            "reason_time": self.reason_time.isoformat() if self.reason_time else None,
            "age_s": None if self.age_s is None else round(self.age_s, 1),
            "incident": self.incident,
            "component": self.component,
            "replacement": self.replacement,
            "replacement_requested": self.replacement_requested,
            "lent": self.lent,
            "text": self.text,
            "jobs": list(self.jobs),
        }


@dataclass(frozen=True)
class Group:
    """Nodes with the same owner and fault code (and, for foreign reasons,
    the same reason text: three nodes drained "rack 12 maintenance" are one
    line, not three)."""

    owner: ReasonOwner
    code: str
    rows: tuple[NodeRow, ...]
    text: str | None = None

    @property
    def nodes(self) -> str:
        return hostlist.fold(r.name for r in self.rows)

    @property
    def oldest_age_s(self) -> float | None:
        ages = [r.age_s for r in self.rows if r.age_s is not None]
        return max(ages) if ages else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "owner": str(self.owner),
            "code": self.code,
            "text": self.text,
            "nodes": self.nodes,
            "count": len(self.rows),
            "oldest_age_s": None if self.oldest_age_s is None else round(self.oldest_age_s, 1),
            "members": [r.to_dict() for r in self.rows],
        }


@dataclass(frozen=True)
class FleetSummary:
    total: int
    groups: tuple[Group, ...]
    lent: tuple[NodeRow, ...]
    breaker: str = "unknown"
    breaker_detail: Mapping[str, Any] = field(default_factory=dict)
    counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def out_of_service(self) -> tuple[NodeRow, ...]:
        return tuple(r for g in self.groups for r in g.rows)

    @property
    def needs_attention(self) -> bool:
        """True when any node is out of service for a fault (lending is not
        a fault) or the breaker is open: the ``status`` exit code 1."""
        return bool(self.groups) or self.breaker.lower() == "tripped"

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "counts": dict(self.counts),
            "breaker": self.breaker,
            "breaker_detail": dict(self.breaker_detail),
            "groups": [g.to_dict() for g in self.groups],
            "lent": [r.to_dict() for r in self.lent],
            "lent_nodes": hostlist.fold(r.name for r in self.lent),
            "needs_attention": self.needs_attention,
        }


def _aware(t: datetime) -> datetime:
    """scontrol prints reason times in local time without a zone; treat a
    naive time as local so ages are right on any host."""
    return t.astimezone() if t.tzinfo is None else t


def age_seconds(since: datetime | None, now: datetime) -> float | None:
    if since is None:
        return None
    return max((_aware(now) - _aware(since)).total_seconds(), 0.0)


def _foreign_code(owner: ReasonOwner, reason: str) -> str:
    if owner is ReasonOwner.NHC:
        return "NHC"
    if owner is ReasonOwner.OPERATOR:
        return "slurm-operator"
    if owner is ReasonOwner.SLURM:
        for prefix in SLURM_REASONS:
            if reason.startswith(prefix):
                return prefix
    return "-"


class _RowCommon(TypedDict):
    """The ``NodeRow`` fields every out-of-service node has, ours or not."""

    name: str
    state: str
    flags: tuple[str, ...]
    owner: ReasonOwner
    reason: str | None
    reason_user: str | None
    reason_time: datetime | None
    age_s: float | None


def is_out_of_service(node: NodeState) -> bool:
    return node.drained or node.down or "FAIL" in node.flags


def classify(node: NodeState, now: datetime) -> NodeRow | None:
    """The row for a drained, down or failing node; None for a node in service."""
    if not is_out_of_service(node):
        return None
    # Other writers' reasons (an NHC note quoting a process's arguments, a
    # script's) reach an admin's terminal: one printable line.
    raw = printable(node.reason or "").strip() or None
    owner = classify_owner(raw)
    ours = try_parse_reason(raw) if owner is ReasonOwner.OURS else None
    common: _RowCommon = {
        "name": node.name,
        "state": node.state,
        "flags": tuple(sorted(node.flags)),
        "owner": owner,
        "reason": raw,
        "reason_user": node.reason_user,
        "reason_time": node.reason_time,
        "age_s": age_seconds(node.reason_time, now),
    }
    if ours is not None:
        return NodeRow(
            code=ours.code,
            incident=ours.incident,
            component=ours.component,
            replacement=ours.extra.get("repl"),
            lent=ours.code == LEND_CODE,
            text=ours.text,
            **common,
        )
    return NodeRow(code=_foreign_code(owner, raw or ""), text=raw, **common)


def _group_key(row: NodeRow) -> tuple[int, str, str]:
    # Foreign reasons group by their full text; ours by fault code.
    text = "" if row.owner is ReasonOwner.OURS else (row.text or "")
    return (OWNER_ORDER.index(row.owner), row.code, text)


def summarize(
    nodes: Iterable[NodeState],
    now: datetime | None = None,
    *,
    breaker: str = "unknown",
    breaker_detail: Mapping[str, Any] | None = None,
    replacements: Mapping[str, str] | None = None,
    jobs: Mapping[str, Sequence[str]] | None = None,
) -> FleetSummary:
    """Group out-of-service nodes by owner, then fault code.

    ``replacements`` maps node name -> replacement marker found outside the
    reason (for example the bridge's Kubernetes annotation); it fills in
    ``replacement`` where our reason has no ``repl=`` field.  ``jobs`` maps
    node name -> the jobs still running there.
    """
    now = now or datetime.now(UTC)
    nodes = list(nodes)
    replacements = replacements or {}
    rows: list[NodeRow] = []
    lent: list[NodeRow] = []
    counts = {"total": len(nodes), "in_service": 0, "drained": 0, "down": 0, "lent": 0}
    for node in nodes:
        row = classify(node, now)
        if row is None:
            counts["in_service"] += 1
            continue
        if row.replacement is None and node.name in replacements:
            row = replace(row, replacement=replacements[node.name])
        if (on := (jobs or {}).get(node.name)) is not None:
            row = replace(row, jobs=tuple(on))
        if row.lent:
            counts["lent"] += 1
            lent.append(row)
            continue
        counts["down" if node.down else "drained"] += 1
        rows.append(row)
    buckets: dict[tuple[int, str, str], list[NodeRow]] = {}
    for row in rows:
        buckets.setdefault(_group_key(row), []).append(row)
    groups = tuple(
        Group(
            owner=members[0].owner,
            code=members[0].code,
            rows=tuple(sorted(members, key=lambda r: _sort_name(r.name))),
            text=None if members[0].owner is ReasonOwner.OURS else members[0].text,
        )
        for key, members in sorted(buckets.items(), key=lambda kv: kv[0])
    )
    return FleetSummary(
        total=len(nodes),
        groups=groups,
        lent=tuple(sorted(lent, key=lambda r: _sort_name(r.name))),
        breaker=breaker,
        breaker_detail=dict(breaker_detail or {}),
        counts=counts,
    )


def _sort_name(name: str) -> tuple[str, int, str]:
    """``n2`` before ``n10``."""
    head = name.rstrip("0123456789")
    digits = name[len(head) :]
    return (head, int(digits) if digits else -1, name)


# -- rendering (plain text; the CLI adds colour) --------------------------------


def format_age(seconds: float | None) -> str:
    """``45s``, ``12m``, ``2h13m``, ``3d4h``: compact enough for a table."""
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h{m:02d}m" if m else f"{h}h"
    d, h = divmod(h, 24)
    return f"{d}d{h}h" if h else f"{d}d"


def _clip(text: str, width: int) -> str:
    if width <= 0:
        return ""
    return text if len(text) <= width else text[: max(width - 3, 0)] + "..."


OWNER_TITLES = {
    ReasonOwner.OURS: "slurm-hooks",
    ReasonOwner.NHC: "NHC",
    ReasonOwner.ADMIN: "admin",
    ReasonOwner.OPERATOR: "slurm-operator",
    ReasonOwner.SLURM: "Slurm",
    ReasonOwner.NONE: "no reason",
}


@dataclass(frozen=True)
class Line:
    """One output line with a style hint (``title``, ``bad``, ``warn``,
    ``ok``, ``dim`` or empty) that the CLI maps to colours on a terminal."""

    text: str
    style: str = ""


def _at_limit(summary: FleetSummary) -> str:
    """A note when an armed breaker's next drain would trip it."""
    parts = sorted(
        p for p, d in summary.breaker_detail.items() if isinstance(d, dict) and d.get("at_limit")
    )
    if summary.breaker.lower() == "tripped" or not parts:
        return ""
    return f"breaker at its limit in {','.join(parts)}: the next drain there trips it"


#: Job ids a status row names before it says how many more.
JOBS_SHOWN = 3


def job_cell(jobs: Sequence[str]) -> str:
    """``jobs=812,813+2``: the jobs still on a drained node, the first few
    by id; empty when none."""
    if not jobs:
        return ""
    more = len(jobs) - JOBS_SHOWN
    return "jobs=" + ",".join(jobs[:JOBS_SHOWN]) + (f"+{more}" if more > 0 else "")


def render(summary: FleetSummary, width: int = 80) -> list[Line]:
    """The status table as lines no wider than ``width``."""
    c = summary.counts
    out = [
        Line(
            _clip(
                f"{c.get('total', summary.total)} nodes: {c.get('in_service', 0)} in service, "
                f"{c.get('drained', 0)} drained, {c.get('down', 0)} down, "
                f"{c.get('lent', 0)} lent   breaker: {summary.breaker}",
                width,
            ),
            "bad" if summary.breaker.lower() == "tripped" else "title",
        )
    ]
    if note := _at_limit(summary):
        out.append(Line(_clip(note, width), "warn"))
    code_w = min(
        24, max([10, *(len(g.code) for g in summary.groups if g.owner is ReasonOwner.OURS)])
    )
    current: ReasonOwner | None = None
    for group in summary.groups:
        if group.owner is not current:
            current = group.owner
            out.append(Line(""))
            out.append(Line(f"{OWNER_TITLES[group.owner]}:", "title"))
        count = f"({len(group.rows)})"
        age = format_age(group.oldest_age_s)
        if group.owner is ReasonOwner.OURS:
            head = f"  {group.code:<{code_w}} {count:>5} {_clip(group.nodes, width - 15 - code_w)}"
            out.append(Line(head, "bad"))
            for r in group.rows:
                repl = "repl=" + r.replacement if r.replacement else ""
                cells = (
                    f"    {r.name:<14} {(r.component or '-'):<9} "
                    f"{('inc=' + r.incident) if r.incident else '':<13} "
                    f"{format_age(r.age_s):>6}  {repl} {job_cell(r.jobs)}"
                ).rstrip()
                out.append(Line(_clip(cells, width), "warn" if r.replacement else ""))
        else:
            who = f"by {group.rows[0].reason_user}, " if group.rows[0].reason_user else ""
            label = "" if group.code == "-" else group.code
            head = f"  {label:<14} {count:>5} {group.nodes}"
            out.append(Line(_clip(head, width), "warn"))
            detail = f'    {who}{age}: "{group.text or ""}"'
            out.append(Line(_clip(detail, width), "dim"))
    if summary.lent:
        out.append(Line(""))
        out.append(Line("lent to inference:", "title"))
        nodes = hostlist.fold(r.name for r in summary.lent)
        oldest = max((r.age_s or 0.0) for r in summary.lent)
        out.append(
            Line(_clip(f"  {nodes} ({len(summary.lent)}), oldest {format_age(oldest)}", width))
        )
    if not summary.groups and not summary.lent:
        out.append(Line("all nodes in service", "ok"))
    return out
