"""The watcher's ``/metrics``: its latest poll, served at every scrape.

Metrics never stop detection: when the port cannot be bound or
prometheus_client is missing, ``serve_metrics`` logs it and returns None.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

log = logging.getLogger("slurm_hooks.agent.watch")  # the watcher's own log


class Watched(Protocol):
    """What the collector reads of a :class:`~slurm_hooks.agent.watch.Watcher`."""

    progress: Any

    def phase_run(self) -> Any: ...


class _WatchCollector:
    """Serves the watcher's latest poll at every scrape."""

    def __init__(self, watcher: Watched):
        self.watcher = watcher

    def collect(self) -> Any:
        from slurm_hooks.act.metrics import build_registry

        families = list(build_registry(self.watcher.phase_run()).collect())
        if self.watcher.progress is not None:  # step-time skew per job (docs/progress.md)
            families += self.watcher.progress.metric_families()
            families += self.watcher.progress.totals.metric_families()
        return families


def serve_metrics(watcher: Watched, port: int, addr: str = "0.0.0.0") -> Any:
    """``/metrics`` for the watcher; None (logged) when it cannot bind or
    prometheus_client is missing - metrics never stop detection."""
    try:
        from prometheus_client import CollectorRegistry

        from slurm_hooks.act.metrics import serve

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_WatchCollector(watcher))
        server, _ = serve(port, addr, registry)
    except (OSError, ImportError) as exc:
        log.warning("watch: /metrics not served on %s:%d: %s", addr, port, exc)
        return None
    log.info("watch: /metrics on %s:%s", addr, getattr(server, "server_port", port))
    return server
