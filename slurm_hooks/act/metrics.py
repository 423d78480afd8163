"""Prometheus metrics: a textfile per hook phase, and ``/metrics`` for daemons.

Hooks are short-lived, so they cannot be scraped: each run writes a file for
node_exporter's textfile collector (``--collector.textfile.directory``),
atomically (``store.atomicfile``: a temp file in the same directory, then a
rename), so node_exporter never reads half a file.  One file per phase
(``slurm_hooks_prolog.prom`` ...) and a ``phase`` label on every sample keep
the files from overwriting each other's numbers and from colliding in
node_exporter, which refuses the same series from two files.

The long-running watcher and bridge expose ``/metrics`` over HTTP instead
(``serve``).  prometheus_client is imported only inside the functions: the
hook path pays for it only when it actually writes metrics.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_hooks.core.model import Finding

log = logging.getLogger(__name__)

NAMESPACE = "slurm_hooks"
DEFAULT_TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"


@dataclass(frozen=True)
class MetricsConfig:
    """``[metrics]``."""

    #: Write a textfile after each hook run.
    enabled: bool = True
    #: node_exporter's ``--collector.textfile.directory`` (Debian's
    #: prometheus-node-exporter reads /var/lib/prometheus/node-exporter).
    textfile_dir: str = DEFAULT_TEXTFILE_DIR
    #: Address ``slurm-hooks watch`` serves ``/metrics`` on.  The watcher
    #: only: the bridge serves on ``[bridge] metrics_port``, on all addresses.
    listen_addr: str = "0.0.0.0"
    #: Port of ``slurm-hooks watch``'s ``/metrics``; 0 turns it off (the
    #: ``--metrics-port`` option wins).
    watch_port: int = 9839

    def validate(self) -> None:
        if not 0 <= self.watch_port <= 65535:
            raise ValueError("watch_port must be a port number (0 turns it off)")
        if not self.textfile_dir:
            raise ValueError("textfile_dir must not be empty")


#: Local state writes that failed in this process, by what was being
#: written (journal, node, lock, cursor): remediation went on without them
#: (``slurm_hooks_state_failures_total``; the watcher serves it, a hook logs it).
STATE_FAILURES: dict[str, int] = {}


#: Faults the circuit breaker holds on this node, by code, as this process
#: last saw them (``act/held.py``; the engine sets it on each run).
HELD_FAULTS: dict[str, int] = {}


def set_held(codes: Iterable[str]) -> None:
    """The held faults of this node now (``slurm_hooks_held_faults``)."""
    HELD_FAULTS.clear()
    for code in codes:
        HELD_FAULTS[code] = HELD_FAULTS.get(code, 0) + 1


def count_state_failure(what: str) -> None:
    """Count one failed local state write (the caller logs it loudly)."""
    STATE_FAILURES[what] = STATE_FAILURES.get(what, 0) + 1


@dataclass(frozen=True)
class PhaseRun:
    """What one hook run reports."""

    phase: str
    findings: Sequence[Finding]
    #: Unix time the run finished.
    timestamp: float
    #: Seconds the whole phase took.
    duration_s: float
    #: Seconds per check (optional).
    check_durations: Mapping[str, float] = field(default_factory=dict)
    #: Cumulative XID events seen on this node, by XID code (the watcher
    #: keeps the counts in its state; hooks may pass none).
    xid_counts: Mapping[str | int, int] = field(default_factory=dict)
    #: Failed local state writes by kind (defaults to this process's counts).
    state_failures: Mapping[str, int] = field(default_factory=lambda: dict(STATE_FAILURES))
    #: Repeats of a fault on a node we already drained for it, absorbed
    #: without a Slurm call, by fault code.
    repeats: Mapping[str, int] = field(default_factory=dict)
    #: Faults held by the circuit breaker, by code (defaults to this process's view).
    held: Mapping[str, int] = field(default_factory=lambda: dict(HELD_FAULTS))


def textfile_name(phase: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in phase)
    return f"{NAMESPACE}_{safe}.prom"


#: A family's samples: label values, then the number.
Rows = Iterable[tuple[Sequence[str], float]]


def _family(kind: Any, name: str, doc: str, labels: list[str], rows: Rows) -> Any:
    """One metric family of ``kind`` (``GaugeMetricFamily``,
    ``CounterMetricFamily``) named ``slurm_hooks_<name>``, with ``rows``."""
    family = kind(f"{NAMESPACE}_{name}", doc, labels=labels)
    for values, n in rows:
        family.add_metric(list(values), n)
    return family


def _families(run: PhaseRun) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily as Gauge

    counts: dict[tuple[str, str, str], int] = {}
    for f in run.findings:
        key = (f.check, str(f.status), f.code)
        counts[key] = counts.get(key, 0) + 1
    yield _family(
        Gauge,
        "findings",
        "Findings of the last run, by check, status and fault code.",
        ["phase", "check", "status", "code"],
        (([run.phase, *key], n) for key, n in sorted(counts.items())),
    )

    ranks: dict[str, int] = {}
    for f in run.findings:
        ranks[f.check] = max(ranks.get(f.check, 0), f.status.rank)
    yield _family(
        Gauge,
        "check_status",
        "Worst status of each check in the last run (0 OK, 1 UNKNOWN, 2 WARN, 3 FAIL).",
        ["phase", "check"],
        (([run.phase, check], rank) for check, rank in sorted(ranks.items())),
    )
    for name, doc, value in (
        (
            "last_check_timestamp_seconds",
            "Unix time the phase last finished its checks.",
            run.timestamp,
        ),
        ("phase_duration_seconds", "Seconds the last run of the phase took.", run.duration_s),
    ):
        yield _family(Gauge, name, doc, ["phase"], [([run.phase], value)])
    if run.check_durations:
        yield _family(
            Gauge,
            "check_duration_seconds",
            "Seconds each check took in the last run.",
            ["phase", "check"],
            (([run.phase, check], secs) for check, secs in sorted(run.check_durations.items())),
        )

    yield from _event_families(run)


def _by_label(counts: Mapping[str, int]) -> Rows:
    return (([label], n) for label, n in sorted(counts.items()))


def _event_families(run: PhaseRun) -> Iterator[Any]:
    """The node's event counts and held faults (kept across runs)."""
    # CounterMetricFamily without ``created`` writes no _created sample: the
    # counts come from the watcher's persistent state, not this process.
    from prometheus_client.core import CounterMetricFamily as Counter
    from prometheus_client.core import GaugeMetricFamily as Gauge

    if run.xid_counts:
        yield _family(
            Counter,
            "xid_events",
            "NVIDIA XID events seen in the kernel log, by XID code.",
            ["xid"],
            (
                ([str(code)], n)
                for code, n in sorted(run.xid_counts.items(), key=lambda kv: int(str(kv[0])))
            ),
        )
    if run.state_failures:
        yield _family(
            Counter,
            "state_failures",
            "Local state writes that failed (remediation went on without them), by kind.",
            ["what"],
            _by_label(run.state_failures),
        )
    yield _family(
        Gauge,
        "held_faults",
        "Faults the circuit breaker held (seen, not drained) on this node, by code.",
        ["code"],
        _by_label(run.held),
    )
    if run.repeats:
        yield _family(
            Counter,
            "repeats_absorbed",
            "Repeats of a fault on a node already drained for it (no Slurm call), by code.",
            ["code"],
            _by_label(run.repeats),
        )


class _RunCollector:
    def __init__(self, run: PhaseRun) -> None:
        self.run = run

    def collect(self) -> Iterable[Any]:
        return list(_families(self.run))


def build_registry(run: PhaseRun) -> Any:
    """A fresh CollectorRegistry holding only this run's metrics (never the
    global one: a hook must not export the interpreter's process metrics)."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_RunCollector(run))
    return registry


def render(run: PhaseRun) -> str:
    """The exposition text for ``run`` (what the textfile will contain)."""
    from prometheus_client import generate_latest

    return generate_latest(build_registry(run)).decode("utf-8")


def write_textfile(directory: str | os.PathLike[str], run: PhaseRun) -> Path:
    """Write ``<directory>/slurm_hooks_<phase>.prom`` atomically; returns the path.

    Raises OSError when the directory is missing or not writable: the caller
    (the hook) logs it and carries on, metrics never fail a hook.
    """
    from slurm_hooks.store.atomicfile import write_atomic

    if not os.path.isdir(directory):  # never create node_exporter's directory
        raise FileNotFoundError(f"no such directory: {os.fspath(directory)}")
    path = Path(directory) / textfile_name(run.phase)
    # Not fsynced: a textfile lost to a power cut is rewritten by the next
    # run; world-readable, node_exporter runs as its own user.
    write_atomic(path, render(run), mode=0o644, durable=False)
    return path


def try_write_textfile(directory: str | os.PathLike[str], run: PhaseRun) -> Path | None:
    """``write_textfile`` for the hook path: logs and returns None on failure."""
    try:
        return write_textfile(directory, run)
    except (OSError, ImportError) as exc:
        log.warning(
            "metrics textfile not written dir=%s phase=%s error=%s", directory, run.phase, exc
        )
        return None


def serve(port: int, addr: str = "0.0.0.0", registry: Any = None) -> tuple[Any, Any]:
    """Serve ``/metrics`` from a daemon thread (watcher, bridge).  Returns
    (server, thread); ``server.server_port`` is the bound port (useful with
    port 0) and ``server.shutdown()`` stops it."""
    from prometheus_client import REGISTRY, start_http_server

    result = start_http_server(port, addr=addr, registry=registry or REGISTRY)
    if not isinstance(result, tuple):  # older prometheus_client returned None
        return (None, None)
    return result
