"""What a progress pass cost: Slurm reads, files, bytes, CPU, what it skipped.

The record directory is every user's to fill; the pass's cost must not be.
:class:`PassStats` is one pass's account, :class:`PassTotals` the sums the
watcher serves at ``/metrics`` (``slurm_hooks_progress_*``), and
:class:`PassReads` the Slurm client as the pass sees it: every read counted,
a node read once per pass however many suspects ask about it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class PassCounts:
    """The counters a pass keeps and the totals sum: one list, so that a new
    counter is added to both at once."""

    #: Job directories not read: no job of theirs runs here, or the budget ran out.
    skipped_dirs: int = 0
    #: Record or evidence files not read (the file, byte or CPU budget ran out).
    skipped_files: int = 0
    #: Suspects left for a later pass (``max_job_reads``).
    deferred_suspects: int = 0
    #: Slurm reads the pass made (node jobs, suspect jobs, nodes).
    slurm_reads: int = 0
    #: Processes sampled (``/proc``) for zero-touch signals.
    sampled_pids: int = 0
    #: Processes left unsampled (``max_pids``; their jobs' turn comes).
    skipped_pids: int = 0
    files: int = 0
    bytes: int = 0
    cpu_s: float = 0.0

    def add_counts(self, other: PassCounts) -> None:
        for f in fields(PassCounts):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass
class PassStats(PassCounts):
    """One pass."""

    #: Job directories seen in the record directory (at most ``max_dirs``).
    dirs: int = 0
    #: Jobs judged from their records, or from their processes' activity.
    judged: int = 0
    #: ... of which from their processes' activity (no records: zero-touch).
    signal_jobs: int = 0
    #: (path, why) of the files a parser refused.
    rejected: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class PassTotals(PassCounts):
    """Every pass since the watcher started."""

    passes: int = 0
    rejected: int = 0
    #: Passes that raised (the progress thread survives them).
    crashes: int = 0
    #: Passes that took longer than ``interval_s``.
    overruns: int = 0
    #: Job reports audited but not sent (``reports_per_user_hour``).
    held_reports: int = 0
    last_rejected: tuple[tuple[str, str], ...] = ()

    def add(self, s: PassStats) -> None:
        self.passes += 1
        self.add_counts(s)
        self.rejected += len(s.rejected)
        if s.rejected:
            self.last_rejected = tuple(s.rejected[-16:])

    def metric_families(self) -> list[Any]:
        from prometheus_client.core import CounterMetricFamily

        def counter(name: str, doc: str, value: float) -> Any:
            return CounterMetricFamily(f"slurm_hooks_progress_{name}", doc, value=value)

        return [
            counter("passes", "Progress passes made.", self.passes),
            counter("skipped_dirs", "Job record directories not read: no job of theirs runs "
                    "on this node, or the pass's budget ran out.", self.skipped_dirs),
            counter("skipped_files", "Record or evidence files not read: the pass's file, "
                    "byte or CPU budget ran out.", self.skipped_files),
            counter("deferred_suspects", "Suspect jobs left for a later pass (max_job_reads).",
                    self.deferred_suspects),
            counter("slurm_reads", "Slurm reads made by progress passes.", self.slurm_reads),
            counter("sampled_pids", "Job processes sampled for zero-touch signals.",
                    self.sampled_pids),
            counter("skipped_pids", "Job processes left unsampled by a pass (max_pids).",
                    self.skipped_pids),
            counter("files_read", "Record and evidence files read.", self.files),
            counter("bytes_read", "Bytes of record and evidence files read.", self.bytes),
            counter("rejected_files", "User-written files a parser refused (size, depth, "
                    "items, memo, CPU or content).", self.rejected),
            counter("cpu_seconds", "CPU seconds of the progress thread's passes.", self.cpu_s),
            counter("crashes", "Progress passes that raised (the watcher goes on).", self.crashes),
            counter("overruns", "Progress passes longer than interval_s.", self.overruns),
            counter("held_reports", "Job reports audited but not sent: past a user's "
                    "reports_per_user_hour.", self.held_reports),
        ]  # fmt: skip


class PassReads:
    """The Slurm client for one pass: reads counted, each node read once."""

    def __init__(self, slurm: Any, stats: PassStats):
        self._slurm = slurm
        self._stats = stats
        self._nodes: dict[str, Any] = {}

    def get_job(self, job_id: str) -> Any:
        self._stats.slurm_reads += 1
        return self._slurm.get_job(job_id)

    def job_steps(self, job_id: str) -> Any:
        self._stats.slurm_reads += 1
        return self._slurm.job_steps(job_id)

    def get_node(self, name: str) -> Any:
        if name not in self._nodes:
            self._stats.slurm_reads += 1
            self._nodes[name] = self._slurm.get_node(name)
        return self._nodes[name]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._slurm, name)
