"""The small incident history the multi-event rules need across runs
(XID 13 repeated on one GPU over a day spans many healthcheck runs).
Stored as JSON next to the cursors, written atomically, bounded in size."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from slurm_hooks.detect.xid.cursor import load_json, state_path, write_json_atomic

if TYPE_CHECKING:
    # The rules (and the catalogue behind them) load only when there is
    # history to read: the prolog asks this module for NAME on every job.
    from slurm_hooks.detect.xid.rules import Incident

NAME = "history"


def load_history(state_dir: str) -> list[Incident]:
    """Remembered incidents; an unreadable file counts as none (logged)."""
    from slurm_hooks.detect.xid.commit import staged
    from slurm_hooks.detect.xid.rules import Incident

    hit, data = staged(state_path(state_dir, NAME))
    if not hit:
        data = load_json(state_path(state_dir, NAME))
    if not isinstance(data, dict) or not isinstance(data.get("incidents"), list):
        return []
    out = []
    for item in data["incidents"]:
        if isinstance(item, dict):
            inc = Incident.from_dict(item)
            if inc is not None:
                out.append(inc)
    return out


def save_history(state_dir: str, incidents: Sequence[Incident]) -> None:
    """Committed with the cursor (``xid.commit``): events counted towards a
    repeat rule are the events the cursor says were handled, no more."""
    from slurm_hooks.detect.xid.commit import stage_or_write

    stage_or_write(
        state_path(state_dir, NAME),
        {"version": 1, "incidents": [i.to_dict() for i in incidents]},
        write_json_atomic,
    )
