"""Diagnostics never consume the hooks' detection state.

``slurm-hooks check`` and ``xid scan --since-cursor`` read the hooks' state
dir (XID cursor and history, the GPU map, the hostlist cache) but must never
advance or rewrite it: an admin who looks at a node must not make its fault
disappear from the next health check.  They run on a scratch copy of what
detection reads, thrown away afterwards.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

#: What detection never reads and a diagnostic must not copy (or touch).
_SKIP = ("incidents", "locks", "nodes", "audit.jsonl", "breaker.json", "breaker.json.lock")


@contextlib.contextmanager
def scratch_state(state_dir: str | Path | None) -> Iterator[str]:
    """A temporary copy of ``state_dir``'s detection files (empty when there
    is none); removed on exit, the original is never written."""
    with tempfile.TemporaryDirectory(prefix="slurm-hooks-diag-") as tmp:
        src = Path(state_dir) if state_dir else None
        if src is not None and src.is_dir():
            dst = Path(tmp) / "state"
            shutil.copytree(
                src, dst, symlinks=True, ignore=shutil.ignore_patterns(*_SKIP), dirs_exist_ok=True
            )
            yield str(dst)
        else:
            yield tmp
