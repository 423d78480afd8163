"""The watcher's progress thread: hang and straggler passes beside the fault path.

The progress pass reads files users write (docs/progress.md), so its cost
is theirs to choose; the kernel-log scan and the NVML poll must never wait
behind it (issue #27).  :class:`ProgressThread` runs it on its own thread;
:class:`SerialEngine` is the engine as that thread sees it: each ``handle``
under the node's detect lock (the XID path's), held only while acting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from slurm_hooks.core.model import Finding

log = logging.getLogger("slurm_hooks.agent.watch")


class SerialEngine:
    """The engine as the progress thread uses it: each ``handle`` under the
    node's detect lock, so a hang verdict and an XID are never acted on at
    once; everything else (slurm reads, notify, audit) passes through."""

    def __init__(self, engine: Any, state_dir: str, timeout: float):
        self._engine = engine
        self._state_dir = state_dir
        self._timeout = timeout

    def handle(self, node: str, findings: Sequence[Finding]) -> list[Any]:
        from slurm_hooks.store.state import DETECT_LOCK, StateStore

        with StateStore(self._state_dir).lock(DETECT_LOCK, self._timeout):
            return list(self._engine.handle(node, findings))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


class ProgressThread:
    """Runs the progress pass every ``[progress] interval_s`` beside the
    watcher's loop.  A pass that raises is logged and counted; a pass that
    outlasts its interval is counted; neither stops the thread or the
    watcher."""

    def __init__(self, watcher: Any):
        self.watcher = watcher
        self.thread = threading.Thread(target=self._loop, name="progress", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)

    def _loop(self) -> None:
        w = self.watcher
        interval = w.progress.s.interval_s
        from slurm_hooks.detect.progress.gather import claim_base

        # Before any job of the node makes the directory theirs, and again
        # before each pass while it is not root's: a user who makes one in
        # the moment between moving theirs aside and making ours holds it
        # until the next pass at most (which reads nothing of it meanwhile).
        while not w.stop_event.is_set():
            t0 = time.monotonic()
            claim_base(w.progress.s.dir)
            try:
                w.progress_pass()
            except Exception:  # noqa: BLE001 - logged with its traceback; the thread survives
                w.progress.totals.crashes += 1
                log.exception("watch node=%s: progress pass crashed", w.node)
            took = time.monotonic() - t0
            if took > interval:
                w.progress.totals.overruns += 1
                log.warning("watch node=%s: progress pass took %.1fs (interval %gs)",
                            w.node, took, interval)  # fmt: skip
            w.stop_event.wait(max(0.0, interval - took) if took <= interval else interval)
