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
#: from the start, and ``source.drop_handled`` keeps only what is newer than
#: the events known to be handled.
CORRUPT = "corrupt"


def load_cursor(state_dir: str, name: str) -> dict[str, Any] | None:
    """The saved cursor; None on a first run (no file); ``{CORRUPT: True}``
    when the file is there but unreadable (rebuilt, see ``source.drop_handled``)."""
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


def save_cursor(state_dir: str, name: str, cursor: dict[str, Any]) -> None:
    """Saved now, or when the open :func:`~slurm_hooks.detect.xid.commit.deferred`
    scope commits (after the act is durable)."""
    from slurm_hooks.detect.xid.commit import stage_or_write

    stage_or_write(state_path(state_dir, "cursor-" + name), cursor, write_json_atomic)
