"""``[progress]``: hang and straggler detection from the job's progress records."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_hooks.detect.progress.claim import DEFAULT_DIR
from slurm_hooks.detect.progress.judge import HangSettings, SlowSettings

#: What a straggler verdict does: tell only; drain the node when the job has
#: ended (DRAINING: the job keeps running, nothing new starts); drain now and
#: requeue the job like any fault.
SLOW_POLICIES = ("report", "drain_at_end", "drain_now")
#: Slurm's answer about a job's step (asked once the node's ranks of it are
#: all gone: agent/progress_steps.py) is asked again before a hang is acted
#: on when it is older than this.
STEP_RECHECK_S = 60.0


@dataclass(frozen=True)
class ProgressConfig:
    """``[progress]``: judge jobs that write progress records (docs/progress.md)."""

    #: Judge jobs' progress in the watcher at all.
    enabled: bool = True
    #: The node-local directory jobs write their records to (what
    #: ``SLURM_HOOKS_PROGRESS_DIR`` tells the job; tmpfs: a write per step).
    dir: str = DEFAULT_DIR
    #: Seconds between two passes of the watcher over the records.
    interval_s: float = 5.0
    #: No rank recorded a step for this long: the job hangs.  Healthy jobs
    #: write no record for minutes while they checkpoint (2-10 min) or
    #: evaluate: the false-alarm replay (docs/progress.md) found their longest
    #: gap 668 s in 10,000 job-hours and 3,031 false alarms per 10,000
    #: job-hours at 120 s (2,746 of them checkpoints), none at 900 s.
    hang_s: float = 900.0
    #: ... but a stall with a rank of this node stopped (state T) is a hang
    #: after this long: no healthy job in the replay ever had a stopped rank,
    #: and a rank its owner stopped is told within two minutes.  Acts like any
    #: user-side stall: the owner and the admins told, an opted-in job requeued.
    stopped_s: float = 120.0
    #: A stall with a rank of this node gone this long (since the watcher
    #: first saw it gone) while other ranks of the job are alive, rank 0 alone
    #: excepted, is a hang: ranks that finish leave within seconds of each
    #: other (the replay's healthy jobs never had one gone beside live peers
    #: but rank 0 finishing alone, which waits ``hang_s``; docs/progress.md).
    #: Acts like ``stopped_s``: the owner and the admins told, an opted-in job
    #: requeued, no drain.
    exited_s: float = 120.0
    #: A rank of this node whose TCP connection to a peer on this node's
    #: networks has had no acknowledgement for this long (the kernel's
    #: retransmission count, ``detect/progress/sockets.py``) is a hang
    #: whatever its CPU shows: a network partition, or its peer's host gone,
    #: while ranks that busy-poll look busy.  Healthy traffic recovers a lost
    #: segment within seconds, and TCP gives up on the connection after about
    #: 15 minutes (``tcp_retries2``), when the evidence goes with it.  Acts
    #: like ``stopped_s``: the owner and the admins told, an opted-in job
    #: requeued, no drain (the owner can cause it; the node is not to blame).
    unacked_s: float = 120.0
    #: No hang is judged before this long after the job's first completed step.
    first_step_allowance_s: float = 60.0
    #: A job stalled this long while this node shows trusted evidence (a GPU
    #: NVML reports lost or not answering, a process of the job stuck in the
    #: nvidia driver), seen on two consecutive passes, is a hang at once: no
    #: ``hang_s``, no first-step allowance.  The default is two passes at the
    #: default ``interval_s``: found 10-15 s after the last step, which leaves
    #: a 10 s checkpoint grace and the requeue inside a minute (docs/progress.md).
    trusted_confirm_s: float = 10.0
    #: Drain the culprit's node of a hang and requeue the job (false: tell the
    #: owner and the admins only).
    drain_hang: bool = True
    #: A stall with no culprit is reported (owner and admins, no drain) by the
    #: job's batch host this long after ``hang_s``, unless another node named one.
    no_culprit_report_s: float = 30.0
    #: A rank this much slower than its peers' median busy time is slow (percent).
    slow_percent: float = 20.0
    #: ... for this many consecutive windows
    slow_windows: int = 3
    #: ... of this many steps each.
    window_steps: int = 10
    #: What a straggler does: "report", "drain_at_end" or "drain_now".
    slow_policy: str = "report"
    #: Watch jobs that write no progress records through what root sees of
    #: their processes (Slurm's ``listpids``; CPU time, state, context
    #: switches, NVML per-process utilisation): no change to the job.  A job
    #: opts out with ``--comment slurm-hooks:no-watch`` or
    #: ``SLURM_HOOKS_WATCH=0`` in its environment (docs/progress.md).
    zero_touch: bool = True
    #: Processes sampled per pass at most, over all jobs (the rest wait for
    #: their job's turn in a later pass).
    max_pids: int = 512
    #: Bytes read from the end of each rank's file per pass.
    tail_bytes: int = 65536
    #: NCCL RAS text status of a job (what ``ncclras`` prints), read on a stall
    #: as extra evidence of the rank the others wait for; a glob where
    #: ``{job}`` is the job id, e.g. ``/dev/shm/slurm-hooks-progress/{job}/ras*.txt``
    #: ("": not read).  Only files owned by the job's owner count; only the
    #: file name may hold wildcards.
    ras_path: str = ""
    #: PyTorch flight-recorder dumps of a job, one per rank, the global rank
    #: the file name's trailing digits (``TORCH_FR_DUMP_TEMP_FILE`` prefix):
    #: a glob with ``{job}``; the default is where the TaskProlog that
    #: ``slurm-hooks install`` writes has PyTorch put them ("": not read);
    #: only the file name may hold wildcards.
    flight_recorder_path: str = "/dev/shm/slurm-hooks-progress/{job}/nccl_trace_rank_*"
    #: What one pass may cost, however many directories and files users
    #: create: its job list comes from one Slurm read of this node's jobs
    #: (kept this many seconds unless a new job directory appears: a job
    #: requeued onto this node into an existing directory waits at most
    #: this long), and only directories of jobs running here are read.
    jobs_cache_s: float = 15.0
    #: Directory entries looked at per pass (the rest counted as skipped).
    max_dirs: int = 100_000
    #: Rank and evidence files read per pass.
    max_files: int = 2048
    #: Bytes read per pass.
    max_bytes: int = 32 << 20
    #: Seconds of the progress thread's CPU per pass.
    max_cpu_s: float = 2.0
    #: Slurm reads of suspect jobs per pass (one ``get_job``); other
    #: suspects wait for the next pass, in turn.
    max_job_reads: int = 1
    #: Job reports (hang, stall, straggler) about one user's jobs this node
    #: sends per hour at most.  Past it they are audited but not sent, and
    #: one alert says so: each is evidence the user writes, and many jobs (or
    #: requeues of one) must not bury the admins' chat and mail.  0: no cap.
    reports_per_user_hour: int = 20
    #: A SLOW report this recent makes the prolog run its full check instead
    #: of its cached pass, and acceptance report it (seconds).
    slow_history_s: float = 7 * 86400.0

    def validate(self) -> None:
        if self.slow_policy not in SLOW_POLICIES:
            raise ValueError(f"slow_policy must be one of {', '.join(SLOW_POLICIES)}")
        if not self.dir.startswith("/"):
            raise ValueError("dir must be an absolute path")
        for name in ("hang_s", "stopped_s", "exited_s", "unacked_s", "interval_s", "trusted_confirm_s", "slow_percent", "tail_bytes", "jobs_cache_s",
                     "max_dirs", "max_files", "max_bytes", "max_cpu_s", "max_job_reads", "max_pids"):  # fmt: skip
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        for name in ("ras_path", "flight_recorder_path"):
            value = getattr(self, name)
            if value and (not value.startswith("/") or "{job}" not in value):
                raise ValueError(f"{name} must be an absolute glob containing {{job}}")
            if value and any(c in value.rpartition("/")[0] for c in "*?["):
                # The directories are opened one name at a time (never
                # across a mount point a user made): no wildcard there.
                raise ValueError(f"{name}: only the file name may hold wildcards (*, ?, [)")
        if self.slow_history_s < 0 or self.reports_per_user_hour < 0:
            raise ValueError("slow_history_s and reports_per_user_hour must be >= 0")
        if self.slow_windows < 1 or self.window_steps < 1:
            raise ValueError("slow_windows and window_steps must be >= 1")

    @property
    def hang(self) -> HangSettings:
        return HangSettings(
            self.hang_s,
            self.first_step_allowance_s,
            self.trusted_confirm_s,
            self.stopped_s,
            self.exited_s,
            self.unacked_s,
        )

    @property
    def slow(self) -> SlowSettings:
        return SlowSettings(self.slow_percent, self.slow_windows, self.window_steps)
