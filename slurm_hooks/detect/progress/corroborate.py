"""Trusted evidence that a hung or slow rank's *node* is at fault.

Progress records, RAS output, flight-recorder dumps and the state of a pid
a job wrote are all the job's user's to write or cause (a user stops their
own process, backdates a record, names ``pid=1``).  They say which rank the
others wait for; they never say the node is broken.  What can, read here
as root from sources no user writes (docs/security.md):

* NVML: a GPU of this node lost (``GPU_IS_LOST``/``UNKNOWN``), or NVML not
  answering at all (the ``gpu_view`` rows carry ``lost``/``nvml_error``);
* the kernel: a process of the job on this node (found from Slurm's own
  record of the job's steps, ``scontrol listpids JOB NODE``, never from a
  pid the job wrote) in uninterruptible sleep *inside the nvidia driver*
  (``/proc/PID/stack`` names an ``[nvidia*]`` module frame).  D state alone
  is not enough: a user can park their own process in D (``vfork``, a FUSE
  mount of their own).

Each returns a one-line reason, or None.  Bounded: at most ``MAX_PIDS``
processes read, one ``scontrol`` call with a timeout.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from slurm_hooks.core.errors import CommandError
from slurm_hooks.detect.progress.tasks import read_small

log = logging.getLogger(__name__)

#: Processes of one job examined at most per look.
MAX_PIDS = 256
#: Kernel modules of NVIDIA's driver as ``/proc/PID/stack`` tags them.
DRIVER_MODULES = (
    "[nvidia]",
    "[nvidia_uvm]",
    "[nvidia_modeset]",
    "[nvidia_drm]",
    "[nvidia_peermem]",
)
LISTPIDS_TIMEOUT_S = 5.0
#: Frames of the kernel's own waiting (sleep, locks, completions) that may
#: stand above the frame a process is blocked in.
_WAIT_FRAME = re.compile(
    r"^_*(?:schedule|io_schedule|preempt_schedule|down|mutex_lock|rt_mutex|rwsem|"
    r"wait_for_completion|wait_woken|do_wait|msleep|usleep|schedule_timeout|"
    r"schedule_hrtimeout|do_nanosleep|hrtimer_nanosleep|rwsem_down|osq_lock|"
    r"percpu_down|read_lock|write_lock|down_read|down_write)\w*\+"
)
#: Where a user can block their own process inside a driver call: a page
#: fault on memory they serve (a FUSE file, userfaultfd) that the driver's
#: pinning of their pages runs into.
_USER_SERVED = ("fuse_", "request_wait_answer", "handle_userfault", "userfaultfd")


def nvml_evidence(view: Sequence[Mapping[str, Any]]) -> str | None:
    """A lost GPU or a silent NVML, from ``detect.probes.gpu_view`` rows."""
    for row in view:
        if row.get("nvml_error"):
            return f"NVML not answering ({row['nvml_error']})"
    lost = [f"gpu{row.get('index')} ({row['lost']})" for row in view if row.get("lost")]
    if lost:
        return "NVML: " + ", ".join(lost) + " lost"
    return None


def parse_listpids(text: str, job: str) -> list[int]:
    """The pids of ``job`` in ``scontrol listpids`` output (header
    ``PID JOBID STEPID LOCALID GLOBALID``, one process a line)."""
    out: list[int] = []
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 2 and cols[0].isdigit() and cols[1] == job:
            pid = int(cols[0])
            if pid > 1 and pid not in out:
                out.append(pid)
    return out[:MAX_PIDS]


def step_pids(job: str, node: str) -> list[int]:
    """The job's processes on ``node`` as slurmstepd knows them (its
    proctrack container), not as the job says."""
    from slurm_hooks.detect.probes.commands import run

    if not job.isdigit():
        return []
    try:
        res = run(["scontrol", "listpids", job, node], timeout=LISTPIDS_TIMEOUT_S, check=False)
    except CommandError as exc:
        log.info("scontrol listpids %s %s: %s", job, node, exc)
        return []
    return parse_listpids(res.stdout, job) if res.ok else []


def _read(path: str, limit: int = 16384) -> str | None:
    raw = read_small(path, limit)
    return raw.decode("ascii", errors="replace") if raw is not None else None


def in_driver(pid: int, proc: str = "/proc") -> str | None:
    """``pid`` in D state with an nvidia driver frame on its kernel stack:
    the frame's text, else None."""
    stat = _read(f"{proc}/{pid}/stat")
    if stat is None or ")" not in stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if not fields or fields[0] != "D":
        return None
    stack = _read(f"{proc}/{pid}/stack") or ""
    return _blocked_in_driver(stack.splitlines())


def _blocked_in_driver(frames: list[str]) -> str | None:
    """The driver frame a stack is blocked in: the innermost frame that is
    not the kernel's own waiting must be an nvidia module's, and nothing a
    user can serve (FUSE, userfaultfd) may stand anywhere on the stack."""
    texts = [line.strip().split(" ", 1)[-1] for line in frames if line.strip()]
    if any(u in t for t in texts for u in _USER_SERVED):
        return None
    for text in texts:
        if _WAIT_FRAME.match(text):
            continue
        return text[:120] if any(m in text for m in DRIVER_MODULES) else None
    return None


def stuck_pid(pids: Iterable[int], proc: str = "/proc") -> tuple[int, str] | None:
    """The first of ``pids`` stuck inside the nvidia driver, and the reason."""
    for pid in list(pids)[:MAX_PIDS]:
        frame = in_driver(pid, proc)
        if frame is not None:
            return pid, f"process {pid} of the job in D state inside the nvidia driver ({frame})"
    return None


def driver_stuck(pids: Iterable[int], proc: str = "/proc") -> str | None:
    """The first of ``pids`` stuck inside the nvidia driver, as a reason."""
    found = stuck_pid(pids, proc)
    return found[1] if found is not None else None


#: Parents walked at most from a process to the rank's own.
MAX_DEPTH = 16


def ancestors(pid: int, proc: str = "/proc") -> list[int]:
    """``pid`` and its parents (``/proc/PID/stat`` field 4), nearest first,
    up to ``MAX_DEPTH``: a data-loader worker stuck in the driver belongs to
    the rank that forked it."""
    out = [pid]
    while len(out) < MAX_DEPTH:
        stat = _read(f"{proc}/{out[-1]}/stat")
        if stat is None or ")" not in stat:
            break
        fields = stat.rsplit(")", 1)[1].split()
        if len(fields) < 2 or not fields[1].isdigit() or int(fields[1]) <= 1:
            break
        out.append(int(fields[1]))
    return out


#: NVML clock event reasons that are the hardware's doing, not the load's.
HW_THROTTLE = ("hw_slowdown", "hw_thermal", "hw_power_brake")


def slow_evidence(view: Sequence[Mapping[str, Any]]) -> str | None:
    """What NVML shows that explains a slow rank on this node: a lost GPU,
    a silent NVML, a hardware clock slowdown or a PCIe link below its width."""
    gone = nvml_evidence(view)
    if gone is not None:
        return gone
    for row in view:
        thr = [t for t in row.get("throttle", ()) if t in HW_THROTTLE]
        if thr:
            return f"NVML: gpu{row.get('index')} clocks held down by {'+'.join(thr)}"
        width, most = row.get("pcie_width"), row.get("pcie_max_width")
        if isinstance(width, int) and isinstance(most, int) and 0 < width < most:
            return f"NVML: gpu{row.get('index')} PCIe link at x{width} of x{most}"
    return None
