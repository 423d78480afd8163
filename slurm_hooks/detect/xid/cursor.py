"""Small JSON state files under the state dir, written atomically.

A hook killed half-way (slurmd's timeout, an OOM) must never leave half a
cursor behind: the next run would either re-report every old XID (and drain
a healthy node) or skip new ones.  So every write goes to a temporary file in
the same directory, is fsynced, and is renamed over the old one.  An
unreadable or corrupt file is logged and treated as absent.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

from slurm_hooks.core.errors import StateError

log = logging.getLogger(__name__)

#: Subdirectory of the state dir that holds XID cursors and history.
SUBDIR = "xid"

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def state_path(state_dir: str, name: str) -> str:
    return os.path.join(state_dir, SUBDIR, _SAFE.sub("_", name) + ".json")


def load_json(path: str) -> Any | None:
    """The JSON in ``path``; None if missing, unreadable or corrupt (logged)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable state file path=%s error=%s", path, exc)
        return None


def write_json_atomic(path: str, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` through temp file + fsync + rename."""
    from slurm_hooks.store.atomicfile import write_atomic

    try:
        write_atomic(path, json.dumps(obj, sort_keys=True, separators=(",", ":")), mode=0o600)
    except (OSError, TypeError, ValueError) as exc:
        raise StateError(f"cannot write state file {path}: {exc}") from exc


#: Key of the cursor :func:`load_cursor` returns for a cursor file that
#: exists but cannot be read (truncated, corrupt): the source reads its log
#: from the start, and :func:`drop_handled` keeps only what is newer than
#: the events known to be handled.
CORRUPT = "corrupt"


def load_cursor(state_dir: str, name: str) -> dict[str, Any] | None:
    """The saved cursor; None on a first run (no file); ``{CORRUPT: True}``
    when the file is there but unreadable (rebuilt, see :func:`drop_handled`)."""
    from slurm_hooks.detect.xid.commit import staged

    path = state_path(state_dir, "cursor-" + name)
    hit, data = staged(path)
    if not hit:
        data = load_json(path)
        if not isinstance(data, dict) and os.path.lexists(path):
            log.error("XID cursor %s is corrupt: re-reading the log, acting only on events newer "
                      "than the last handled one or the node's last resume/acceptance", path)  # fmt: skip
            return {CORRUPT: True}
    return data if isinstance(data, dict) else None


def handled_watermark(state_dir: str) -> float | None:
    """Seconds since the epoch up to which kernel-log events are known to be
    handled, from state kept OUTSIDE the cursor: the newest event in the XID
    history (committed with the cursor), and the latest resume or passed
    acceptance of a node in this state dir (a node put back in service after
    a fault: events before that are the fault it was repaired for).  None
    when nothing is known (then every event counts, as on a first run, and
    the engine still skips a node that carries our reason for the code)."""
    from slurm_hooks.detect.xid.history import load_history
    from slurm_hooks.store.state import StateStore

    marks = [i.t for i in load_history(state_dir)]
    nodes_dir = os.path.join(state_dir, "nodes")
    try:
        names = [n[: -len(".json")] for n in os.listdir(nodes_dir) if n.endswith(".json")]
    except OSError:
        names = []
    store = StateStore(state_dir)
    for node in names:
        try:
            hist = store.history(node)
        except (StateError, KeyError, TypeError, ValueError) as exc:
            log.warning("node state %s unreadable for the XID watermark: %s", node, exc)
            continue
        marks += [t.timestamp() for t in (*hist.resumes, *hist.acceptance_passes)]
    return max(marks) if marks else None


def drop_handled(state_dir: str, aggregates: tuple[Any, ...]) -> tuple[Any, ...]:
    """After a corrupt cursor: the aggregates whose newest event is after
    :func:`handled_watermark` (events without a wall-clock time are kept:
    a fault is never dropped on a guess).  Logged with what was dropped."""
    mark = handled_watermark(state_dir)
    if mark is None:
        log.error("XID cursor rebuilt with nothing known to be handled: acting on every event")
        return aggregates
    kept = tuple(a for a in aggregates if a.last_wall is None or a.last_wall > mark)
    log.error("XID cursor rebuilt: %d event group(s) at or before %.0f (already handled) "
              "dropped, %d kept", len(aggregates) - len(kept), mark, len(kept))  # fmt: skip
    return kept


def save_cursor(state_dir: str, name: str, cursor: dict[str, Any]) -> None:
    """Saved now, or when the open :func:`~slurm_hooks.detect.xid.commit.deferred`
    scope commits (after the act is durable)."""
    from slurm_hooks.detect.xid.commit import stage_or_write

    stage_or_write(state_path(state_dir, "cursor-" + name), cursor, write_json_atomic)
