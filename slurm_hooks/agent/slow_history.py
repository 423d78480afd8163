"""A node's recent SLOW reports (stragglers, docs/progress.md), for the prolog and acceptance.

A straggler under the default ``slow_policy = "report"`` drains nothing: the
engine records a ``SLOW`` fault with severity ``log`` in the node's state
file.  That history still matters before the next job: a node reported slow
since its last prolog pass gets the full check (burn-in, NCCL) instead of
the cached pass, and acceptance says the node was slow recently beside its
verdict (a clean burn-in does not prove a thermal or a PCIe problem gone).
One small file read, no Slurm call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from slurm_hooks.core.errors import StateError

log = logging.getLogger(__name__)

CODE = "SLOW"


@dataclass(frozen=True)
class SlowReport:
    at: float
    #: ``job:<id>/rank<r>`` (the finding's component), when recorded.
    component: str | None
    severity: str


def recent_slow(state_dir: str, node: str, *, now: float, window_s: float) -> list[SlowReport]:
    """SLOW reports of ``node`` in the last ``window_s`` seconds, oldest first."""
    from slurm_hooks.store.state import StateStore, parse_time

    if window_s <= 0:
        return []
    try:
        data = StateStore(state_dir).read_node(node)
    except StateError as exc:
        log.warning("node state of %s unreadable for its SLOW history: %s", node, exc)
        return []
    out = []
    for f in data.get("faults", ()):
        if not isinstance(f, dict) or f.get("code") != CODE:
            continue
        try:
            t = parse_time(f["at"]).timestamp()
        except (KeyError, TypeError, ValueError):
            continue
        if now - window_s <= t <= now + 60:
            out.append(SlowReport(t, f.get("component"), str(f.get("severity", "log"))))
    return sorted(out, key=lambda r: r.at)


def window_s(cfg: object) -> float:
    """``[progress] slow_history_s`` (the default when the section is unreadable)."""
    from slurm_hooks.detect.progress.settings import ProgressConfig

    try:
        return float(cfg.section("progress", ProgressConfig).slow_history_s)  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - a bad [progress] must not stop a prolog
        log.warning("[progress] unreadable, SLOW history window defaults: %s", exc)
        return ProgressConfig().slow_history_s


def describe(reports: list[SlowReport]) -> str:
    """``reported SLOW 2 time(s) in the window, last for job:12/rank1``."""
    last = reports[-1]
    where = f" for {last.component}" if last.component else ""
    return f"reported SLOW {len(reports)} time(s) recently, last{where}"
