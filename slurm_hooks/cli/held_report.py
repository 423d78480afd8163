"""Held faults for ``status`` and ``history``: what the breaker refused.

Read from Slurm (our held mark in each node's ``Comment``, fleet-wide) and
from this host's state dir (the full record: message, partition, alerts),
merged by node.  Read-only.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from slurm_hooks.core.held import parse_mark
from slurm_hooks.core.model import NodeState

HELD_BY = "held by breaker"


def held_rows(nodes: Sequence[NodeState], state_dir: str | Path | None) -> list[dict[str, Any]]:
    """One row per held fault: node, fault, component, incident, since, where seen."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for n in nodes:
        mark = parse_mark(n.comment)
        if mark is not None:
            rows[(n.name, mark.code)] = {
                "node": n.name,
                "fault": mark.code,
                "component": mark.component,
                "incident": mark.incident,
                "since": mark.since.isoformat(),
                "status": HELD_BY,
                "in_slurm": True,
                "message": None,
            }
    if state_dir is not None:
        from slurm_hooks.core.errors import StateError
        from slurm_hooks.store.state import StateStore

        store = StateStore(state_dir)
        names = {n.name for n in nodes}
        try:
            local = store.held_nodes()
        except (OSError, StateError):
            local = []
        for node in local:
            if names and node not in names:
                continue
            for code, rec in store.held(node).items():
                row = rows.setdefault(
                    (node, code),
                    {
                        "node": node,
                        "fault": code,
                        "component": rec.get("component"),
                        "incident": rec.get("incident"),
                        "since": rec.get("since"),
                        "status": HELD_BY,
                        "in_slurm": False,
                    },
                )
                row["message"] = rec.get("message")
                row["partition"] = rec.get("partition")
    return sorted(rows.values(), key=lambda r: (str(r["since"]), r["node"]))


def render(rows: Sequence[dict[str, Any]], now: datetime | None = None) -> list[str]:
    if not rows:
        return []
    out = [f"held by breaker ({len(rows)}): faults seen, NOT drained (slurm-hooks breaker reset)"]
    for r in rows:
        comp = f" {r['component']}" if r.get("component") else ""
        out.append(
            f"  {r['node']:<12} {r['fault']}{comp}  since {r['since']}  inc={r.get('incident')}"
            f"  {HELD_BY}"
        )
    return out
