"""Settings for XID detection: the ``[checks.xid]`` table (or the ``xid``
config section).  Defaults suit a production GPU node; the lab and tests set
``source = "file"`` and a per-node ``path``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from slurm_hooks.core.record import record
from slurm_hooks.detect.xid.limits import BOOT_ID_PATH, FIRST_RUN, KMSG_PATH, MAX_LINE

SOURCES = ("auto", "kmsg", "journal", "file")
#: Keys every ``[checks.<name>]`` table may carry for the runner (validated there).
RUNNER_KEYS = frozenset({"timeout_s", "phases"})


@record
class XidSettings:
    """``[checks.xid]``: where the kernel log is read and how XID events are
    counted and kept."""

    enabled: bool = True
    #: auto: ``path`` if set, else /dev/kmsg if readable, else the journal.
    source: str = "auto"
    #: The kernel-log file for ``source = "file"`` (syslog, kern.log, lab file).
    path: str = ""
    #: The kernel's record device for ``source = "kmsg"`` (and for ``auto``,
    #: which uses it when it is readable).
    kmsg_path: str = KMSG_PATH
    #: This boot's id: a kmsg cursor saved under another boot id is dropped
    #: (sequence numbers restart at boot) and the log is read from its start.
    boot_id_path: str = BOOT_ID_PATH
    #: The journalctl binary for ``source = "journal"`` (``journalctl -k -o
    #: json``, resumed with ``--after-cursor``).
    journalctl: str = "journalctl"
    #: Seconds one journalctl call may take before it is killed (> 0).
    journal_timeout: float = 30.0
    #: First run without a cursor: read everything there is, or start at the end.
    first_run: str = "all"
    #: Longest kernel-log line (bytes) to parse; longer ones are skipped and
    #: counted as oversized (journal JSON: the whole record).  At least 1024.
    #: /dev/kmsg records are read into 16 KiB (the kernel's own are ~1 KiB):
    #: a larger value matters only for files and the journal.
    max_line: int = MAX_LINE
    #: Where GPU index/UUID come from when NVML is not injected.
    proc_gpus: str = "/proc/driver/nvidia/gpus"
    #: XIDs that count as hardware only when repeated on one GPU (WORKFLOW_XID_13/31).
    repeat_xids: tuple[int, ...] = (13, 31)
    #: ... this many distinct incidents (different processes, or bursts
    #: further apart than ``burst_s``) ...
    repeat_count: int = 3
    #: ... within this many seconds ...
    repeat_window_s: float = 86400.0
    #: ... raised by the processes of at least this many different users (the
    #: owner of the pid the driver names, read when the XID is): a user's own
    #: code raises XID 13 and 31 at will.  1 counts any incidents.
    repeat_users: int = 2
    #: Events with no process id that follow the previous one within this
    #: many seconds belong to the same burst (one incident).
    burst_s: float = 60.0
    #: XID 48 with XID 63/64 on the same GPU within this window: drain and reset.
    pair_window_s: float = 3600.0
    #: History of incidents kept in the state dir (entries).
    history_max: int = 2000

    def validate(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}")
        if self.source == "file" and not self.path:
            raise ValueError('source = "file" needs path')
        if self.first_run not in FIRST_RUN:
            raise ValueError(f"first_run must be one of {', '.join(FIRST_RUN)}")
        if self.repeat_count < 1:
            raise ValueError("repeat_count must be at least 1")
        if self.repeat_users < 1:
            raise ValueError("repeat_users must be at least 1")
        for name in ("repeat_window_s", "burst_s", "pair_window_s", "journal_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.max_line < 1024:
            raise ValueError("max_line must be at least 1024")

    def resolved_source(self) -> str:
        """The source read on this machine: ``auto`` becomes "file" when
        ``path`` is set, else "kmsg" when /dev/kmsg is readable, else
        "journal"."""
        if self.source != "auto":
            return self.source
        if self.path:
            return "file"
        return "kmsg" if os.access(self.kmsg_path, os.R_OK) else "journal"

    @property
    def history_window_s(self) -> float:
        return max(self.repeat_window_s, self.pair_window_s)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, path: str | None = None) -> XidSettings:
        """Validated settings from a TOML table; errors name ``checks.xid.<key>``."""
        from slurm_hooks.core.config import from_mapping

        own = {k: v for k, v in data.items() if k not in RUNNER_KEYS}
        return from_mapping(cls, own, path=path, prefix="checks.xid")
