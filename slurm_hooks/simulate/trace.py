"""Failure traces: generated from published rates and cause mixes
(``data/failure_traces.json``, sources in the file), or read from a site's
own history (the audit log JSON lines, or ``slurm-hooks history --json``).

A trace is data: what fails, where and when, and the pre-drawn chances that
decide the hardware's behaviour later (whether a repaired fault returns),
so every baseline replays exactly the same trace.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from slurm_hooks.core.errors import ConfigError

DATA_FILE = "failure_traces.json"
#: Simulated time zero (any fixed instant: the policy is handed the time).
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Fault:
    """One failure: ``cause`` (a key of the evidence table) on node index
    ``node`` at ``t`` seconds, on GPU ``gpu``."""

    t: float
    node: int
    cause: str
    gpu: int = 0
    #: The fault returns after a reset or reboot (drawn once, per trace).
    persists: bool = False
    #: Seconds after its repair that a persistent fault returns.
    recur_after: float = 0.0
    #: Several nodes failing together (a leaf switch): the group's id.
    group: int | None = None
    #: Read from a site's history: the code it logged (XID79, GPU_LOST...).
    code: str | None = None


@dataclass(frozen=True)
class Logged:
    """A record of a site's audit log the replay compares itself with."""

    t: float
    node: str
    action: str
    decision: str | None = None
    code: str | None = None
    component: str | None = None
    incident: str | None = None
    outcome: str | None = None
    #: A breaker claim's rank in Slurm's order (claim records).
    rank: int | None = None


@dataclass(frozen=True)
class Trace:
    name: str
    source: str
    faults: tuple[Fault, ...]
    #: Node names for a site's history (index -> name); empty: generated names.
    names: tuple[str, ...] = ()
    logged: tuple[Logged, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)


@functools.cache
def published() -> Mapping[str, Any]:
    """The packaged table of published rates, cause mixes and evidence."""
    text = (resources.files("slurm_hooks") / "data" / DATA_FILE).read_text(encoding="utf-8")
    return json.loads(text)


def profiles() -> list[str]:
    return sorted(published()["profiles"])


def cause_weights(profile: str) -> dict[str, float]:
    prof = _profile(profile)
    src = prof.get("causes_from")
    causes = _profile(src)["causes"] if src else prof["causes"]
    return {k: float(v.get("count", v.get("share", 0))) for k, v in causes.items()}


def _profile(name: str) -> Mapping[str, Any]:
    try:
        return published()["profiles"][name]
    except KeyError:
        raise ConfigError(f"unknown trace {name!r} (known: {', '.join(profiles())})") from None


def evidence_table() -> Mapping[str, Mapping[str, Any]]:
    return {k: v for k, v in published()["evidence"].items() if k != "note"}


def generate(profile: str, *, nodes: int, days: float, seed: int, switch_nodes: int = 16,
             gpus_per_node: int = 8, recur_s: float = 6 * 3600.0) -> Trace:  # fmt: skip
    """A Poisson process at the profile's published rate over ``nodes`` for
    ``days``, causes drawn by the published mix.  Same seed, same trace."""
    prof = _profile(profile)
    rate = float(prof["rate_per_1000_node_days"]) * nodes / 1000.0 / 86400.0
    weights = cause_weights(profile)
    table = evidence_table()
    causes = sorted(weights)
    cum = list(_cumulative([weights[c] for c in causes]))
    rng = random.Random(seed)
    horizon = days * 86400.0
    out: list[Fault] = []
    t, group = 0.0, 0
    while True:
        t += rng.expovariate(rate)
        if t >= horizon:
            break
        cause = causes[_pick(cum, rng.random())]
        ev = table[cause]
        persists = rng.random() < float(ev.get("persist", 0.0))
        recur = rng.uniform(0.1, 1.0) * recur_s
        node = rng.randrange(nodes)
        gpu = rng.randrange(gpus_per_node)
        if ev["kind"] == "link" and rng.random() < float(ev.get("switch_share", 0.0)):
            first = node - node % switch_nodes
            for n in range(first, min(first + switch_nodes, nodes)):
                out.append(Fault(t, n, cause, 0, persists, recur, group))
            group += 1
            continue
        out.append(Fault(t, node, cause, gpu, persists, recur))
    return Trace(profile, str(prof["source"]), tuple(out),
                 meta={"rate_per_1000_node_days": prof["rate_per_1000_node_days"],
                       "title": prof["title"]})  # fmt: skip


def _cumulative(ws: Sequence[float]) -> Iterable[float]:
    total, acc = sum(ws), 0.0
    for w in ws:
        acc += w / total
        yield acc


def _pick(cum: Sequence[float], x: float) -> int:
    for i, c in enumerate(cum):
        if x < c:
            return i
    return len(cum) - 1


# -- a site's own history --------------------------------------------------------------------


def read_history(paths: Sequence[str | Path]) -> Trace:
    """A trace from audit logs (JSON lines) or ``slurm-hooks history --json``
    documents: each incident's first fault decision is a fault (its code is
    replayed through the same judges), every record is kept for comparison."""
    records: list[dict[str, Any]] = []
    for p in paths:
        try:
            records.extend(_records(Path(p)))
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"{p}: neither a published trace ({', '.join(profiles())}) nor a readable "
                f"audit log or history document: {exc}"
            ) from exc
    records = [r for r in records if isinstance(r.get("ts"), str) and r.get("action")]
    if not records:
        raise ConfigError(f"no audit records in {', '.join(map(str, paths))}")
    for r in records:
        r["_t"] = datetime.fromisoformat(str(r["ts"]).replace("Z", "+00:00"))
    records.sort(key=lambda r: r["_t"])
    t0 = records[0]["_t"]
    names: list[str] = []
    logged: list[Logged] = []
    faults: list[Fault] = []
    for r in records:
        node = r.get("node")
        if not isinstance(node, str):
            continue
        if node not in names:
            names.append(node)
        t = (r["_t"] - t0).total_seconds()
        rank = r.get("rank")
        item = Logged(t, node, str(r["action"]), _str(r.get("decision")), _str(r.get("code")),
                      _str(r.get("component")), _str(r.get("incident")), _str(r.get("outcome")),
                      rank if isinstance(rank, int) else None)  # fmt: skip
        logged.append(item)
        if item.action == "decision" and item.code and item.decision != "resume":
            faults.append(
                Fault(t, names.index(node), "logged", gpu_of(item.component), code=item.code)
            )
    return Trace("history", ", ".join(map(str, paths)), tuple(faults), tuple(names),
                 tuple(logged), {"start": t0.isoformat()})  # fmt: skip


def _records(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and "incidents" in doc:  # slurm-hooks history --json
        out = []
        for inc in doc["incidents"]:
            for e in inc.get("events", ()):
                rec = {k: v for k, v in e.items() if k != "extra"}
                rec.update(e.get("extra") or {})
                out.append(rec)
        return out
    out = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def gpu_of(component: str | None) -> int:
    if component and component.startswith("gpu") and component[3:].isdigit():
        return int(component[3:])
    return 0


def expected_faults(profile: str, nodes: int, days: float) -> float:
    """The trace's expected size: rate x node-days."""
    return float(_profile(profile)["rate_per_1000_node_days"]) * nodes * days / 1000.0


__all__ = ["EPOCH", "Fault", "Logged", "Trace", "expected_faults", "generate", "read_history"]
