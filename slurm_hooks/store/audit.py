"""Append-only JSON-lines audit log: every decision and every action.

One line per event, written with a single ``write()`` on an ``O_APPEND``
descriptor, so the hooks, the watcher and the grace worker can append to the
same file at once without interleaving parts of lines.  An audit failure is
logged and never stops remediation.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class AuditLog:
    """``record(action=..., node=..., why=...)`` appends one JSON line with
    ``ts`` (UTC ISO time), ``actor`` and whatever fields are given (job,
    incident, durations ...)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        actor: str = "slurm-hooks",
        clock: Callable[[], datetime] | None = None,
    ):
        self.path = Path(path)
        self.actor = actor
        self.clock = clock or (lambda: datetime.now(UTC))

    def record(self, action: str, **fields: Any) -> dict[str, Any]:
        entry: dict[str, Any] = {"ts": self.clock().isoformat(), "actor": self.actor}
        entry["action"] = action
        entry.update({k: v for k, v in fields.items() if v is not None})
        entry.setdefault("pid", os.getpid())
        line = json.dumps(entry, sort_keys=False, default=str, ensure_ascii=False) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            try:
                os.write(fd, line.encode("utf-8"))
            finally:
                os.close(fd)
        except OSError as exc:
            log.error("cannot append to audit log %s: %s (entry: %s)", self.path, exc, line.strip())
        return entry

    def entries(self) -> Iterator[dict[str, Any]]:
        """Every readable entry, oldest first; broken lines are skipped."""
        try:
            fh = self.path.open(encoding="utf-8")
        except FileNotFoundError:
            return
        with fh:
            for n, line in enumerate(fh, 1):
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    log.warning("audit log %s line %d is not JSON; skipped", self.path, n)
