"""XID check: new XID/SXID events from the kernel log, judged by the
catalogue and the multi-event rules.

``gather`` reads only what is new since the last run (cursor in the state
dir), maps bus ids to GPUs, and moves the incident history forward;
``judge`` is pure.  Settings are the ``[checks.xid]`` table (see
:class:`slurm_hooks.detect.xid.settings.XidSettings`).  Injectable services:

* ``kernel_log`` - a :class:`slurm_hooks.detect.xid.source.Source` (tests, lab);
* ``nvml`` - an ``NvmlSession`` or NVML module, for GPU index and UUID;
  without it they come from ``/proc/driver/nvidia/gpus``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from slurm_hooks.core.model import Finding, Phase
from slurm_hooks.core.record import field, record
from slurm_hooks.detect.checks.base import CheckContext, ok
from slurm_hooks.detect.xid.scan import ScanResult
from slurm_hooks.detect.xid.settings import XidSettings
from slurm_hooks.detect.xid.source import FileSource, JournalSource, KmsgSource, Source, scan_new

if TYPE_CHECKING:
    from slurm_hooks.detect.xid.pci import GpuRef
    from slurm_hooks.detect.xid.rules import Incident

log = logging.getLogger(__name__)


@record
class XidData:
    """What gather hands to judge."""

    scan: ScanResult
    history: tuple[Incident, ...]
    gpus: Mapping[str, GpuRef] = field(default_factory=dict)
    #: When the events were read (epoch seconds); 0.0 when there were none.
    now: float = 0.0
    #: The users of the processes the driver named (pid -> user), those
    #: still there when the events were read.
    owners: Mapping[int, str] = field(default_factory=dict)


def process_owners(pids: set[int], proc: str = "/proc") -> dict[int, str]:
    """Who runs each pid's process now: its real uid (``/proc/PID/status``;
    a uid when passwd has no name).  Not ``/proc/PID``'s owner, which is the
    effective uid: a user's process running a setuid-root program shows as
    root's there and would count as a second user's; its real uid stays its
    user's.  Read as the events are: a process gone by then has no owner
    here."""
    from slurm_hooks.core.identifiers import user_name_of

    out: dict[int, str] = {}
    for pid in sorted(pids)[:256]:
        try:
            uid = _real_uid(f"{proc}/{pid}/status")
        except (OSError, ValueError):
            continue
        if uid is not None:
            out[pid] = user_name_of(uid)
    return out


def _real_uid(status: str) -> int | None:
    """The real uid: the first number of the ``Uid:`` line."""
    with open(status, "rb") as fh:
        for line in fh:
            if line.startswith(b"Uid:"):
                return int(line.split()[1])
    return None


def make_source(settings: XidSettings) -> Source:
    """The configured kernel-log source (``XidSettings.resolved_source``)."""
    kind = settings.resolved_source()
    if kind == "file":
        return FileSource(settings.path, first_run=settings.first_run)
    if kind == "kmsg":
        return KmsgSource(
            settings.kmsg_path, boot_id_path=settings.boot_id_path, first_run=settings.first_run
        )
    return JournalSource(
        journalctl=settings.journalctl,
        timeout=settings.journal_timeout,
        first_run=settings.first_run,
    )


def _nvml_module(ctx: CheckContext, *, only_if_loaded: bool = False) -> Any:
    nvml: Any = ctx.services.get("nvml")
    if nvml is not None and not hasattr(nvml, "nvmlDeviceGetCount"):
        if only_if_loaded and not getattr(nvml, "loaded", False):
            return None
        try:
            nvml = nvml.nvml  # an NvmlSession: the initialised module
        except Exception as exc:  # noqa: BLE001 - fall back to procfs
            log.info("xid: NVML unavailable for GPU names error=%s", exc)
            nvml = None
    return nvml


def _gpus(ctx: CheckContext, settings: XidSettings) -> dict[str, GpuRef]:
    from slurm_hooks.detect.xid.pci import gpu_map, load_known

    return gpu_map(_nvml_module(ctx), settings.proc_gpus, load_known(ctx.state_dir))


def _remember_gpus(ctx: CheckContext) -> None:
    """Keep the GPU map while every GPU answers, for the day one falls off
    the bus.  Only when another check already opened NVML this run: the
    XID fast path never pays for an NVML start."""
    nvml = _nvml_module(ctx, only_if_loaded=True)
    if nvml is None:
        return
    import time

    from slurm_hooks.detect.xid.pci import remember

    remember(ctx.state_dir, nvml, now=time.time())


class XidCheck:
    name: ClassVar[str] = "xid"
    settings_class: ClassVar[type] = XidSettings
    phases: ClassVar[frozenset[Phase]] = frozenset(
        {Phase.HEALTHCHECK, Phase.EPILOG, Phase.PROLOG, Phase.WATCH}
    )

    def gather(self, ctx: CheckContext) -> XidData:
        settings = XidSettings.from_mapping(ctx.settings)
        source = ctx.service("kernel_log", lambda: make_source(settings))
        result = scan_new(source, ctx.state_dir, max_line=settings.max_line)
        if not result.aggregates:
            # The common case: one stat (file) or a short read (kmsg), no
            # rules, catalogue, history or clock (judge needs no time).
            _remember_gpus(ctx)
            return XidData(scan=result, history=())
        now = ctx.now().timestamp()
        from slurm_hooks.detect.xid.history import load_history, save_history
        from slurm_hooks.detect.xid.rules import update_history

        owners = process_owners({a.pid for a in result.aggregates if a.pid and a.pid > 0})
        history = load_history(ctx.state_dir)
        save_history(
            ctx.state_dir, update_history(history, result.aggregates, now, settings, owners)
        )
        return XidData(scan=result, history=tuple(history), gpus=_gpus(ctx, settings), now=now,
                       owners=owners)  # fmt: skip

    def judge(self, data: XidData, ctx: CheckContext) -> list[Finding]:
        settings = XidSettings.from_mapping(ctx.settings)
        stats = data.scan.stats
        counters: dict[str, Any] = {
            "lines": stats.lines,
            "events": stats.events,
            "malformed": stats.malformed,
            "oversized": stats.oversized,
            "lost": stats.lost,
            "reset": data.scan.reset,
        }
        if not data.scan.aggregates:
            return [ok(self.name, "no new XID events", **counters)]
        from slurm_hooks.detect.xid.rules import evaluate

        return evaluate(
            data.scan.aggregates,
            now=data.now,
            history=data.history,
            settings=settings,
            gpus=data.gpus,
            owners=data.owners,
        )
