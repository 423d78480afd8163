"""Prometheus metrics of the bridge.

Durations are computed from timestamps kept in Slurm (reason time) and in
our Node annotations, so they survive a restart of the bridge: a node cordoned
by one replica and handed back under another still yields one observation.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: Seconds to hours: a drain is cordoned within a pass, a replacement can take hours.
_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, 259200)


class BridgeMetrics:
    """One set per Bridge, on its own registry (tests build many bridges)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self._api_children: dict[tuple[str, int], tuple[Any, Any]] = {}
        self.incidents = Counter(
            "slurm_hooks_bridge_incidents",
            "Incidents the bridge acted on, by step done.",
            ["step"],
            registry=r,
        )
        self.held = Gauge(
            "slurm_hooks_bridge_nodes_held",
            "Kubernetes nodes currently held for a Slurm incident.",
            registry=r,
        )
        self.deferred = Counter(
            "slurm_hooks_bridge_deferred",
            "Steps not taken because of a cap or a missing node.",
            ["why"],
            registry=r,
        )
        self.drain_to_cordon = Histogram(
            "slurm_hooks_bridge_drain_to_cordon_seconds",
            "From the Slurm drain (reason time) to the cordon.",
            buckets=_BUCKETS,
            registry=r,
        )
        self.cordon_to_replacement = Histogram(
            "slurm_hooks_bridge_cordon_to_replacement_seconds",
            "From the cordon to the replacement request.",
            buckets=_BUCKETS,
            registry=r,
        )
        self.drain_to_back = Histogram(
            "slurm_hooks_bridge_drain_to_back_seconds",
            "From the Slurm drain to the node being schedulable again.",
            buckets=_BUCKETS,
            registry=r,
        )
        self.api_calls = Counter(
            "slurm_hooks_bridge_api_calls",
            "Kubernetes API calls, by verb and HTTP status (0: no answer).",
            ["verb", "code"],
            registry=r,
        )
        self.api_seconds = Histogram(
            "slurm_hooks_bridge_api_call_seconds",
            "Kubernetes API call latency.",
            ["verb"],
            registry=r,
        )
        self.passes = Counter(
            "slurm_hooks_bridge_passes", "Reconcile passes, by outcome.", ["outcome"], registry=r
        )
        self.pass_seconds = Histogram(
            "slurm_hooks_bridge_pass_seconds", "Duration of a reconcile pass.", registry=r
        )
        self.leader = Gauge(
            "slurm_hooks_bridge_leader", "1 while this replica holds the lease.", registry=r
        )
        # -- lending idle Slurm nodes to inference (lend_exec) --
        self.lend_events = Counter(
            "slurm_hooks_lending_events",
            "Lending moves: lent, opened, reclaim, returned, withdrawn, released, aborted, "
            "forced, pods_evicted, evict_blocked.",
            ["event"],
            registry=r,
        )
        self.gpu_hours_lent = Counter(
            "slurm_hooks_lending_gpu_hours",
            "GPU-hours lent to Kubernetes (lent nodes x GPUs x time, added each pass).",
            registry=r,
        )
        self.nodes_lent = Gauge(
            "slurm_hooks_lending_nodes_lent",
            "Kubernetes nodes currently lent to inference.",
            registry=r,
        )
        self.lend_demand = Gauge(
            "slurm_hooks_lending_demand_nodes",
            "Nodes asked for: by Slurm's pending jobs (slurm) or by inference (kubernetes).",
            ["side"],
            registry=r,
        )

    def on_api_call(self, verb: str, path: str, status: int, seconds: float) -> None:
        """Called for every API call (~1,600 in a cold incident pass at
        50,000 nodes): the labelled children are looked up once per
        (verb, status), not through ``labels()`` (a lock and a tuple) each
        time."""
        child = self._api_children.get((verb, status))
        if child is None:
            child = self._api_children[(verb, status)] = (
                self.api_calls.labels(verb, str(status)),
                self.api_seconds.labels(verb),
            )
        child[0].inc()
        child[1].observe(seconds)


def serve(metrics: BridgeMetrics, port: int, addr: str = "0.0.0.0") -> None:  # noqa: S104
    """Start ``/metrics`` in a daemon thread."""
    from prometheus_client import start_http_server

    start_http_server(port, addr=addr, registry=metrics.registry)
