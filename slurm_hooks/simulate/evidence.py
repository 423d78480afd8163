"""A failure as the evidence its node would show, judged by the product's own
judges (the same code a health check or the watcher runs on a real node).

* ``xid``: a kernel-log line in the driver's format (``NVRM: Xid (PCI:...):
  79, pid=..., GPU has fallen off the bus.``) goes through the XID scanner
  and the XID rules with the packaged catalogue (or the one passed in);
* ``gpu_lost`` / ``gpu_reset``: an NVML error ``GPU_IS_LOST`` /
  ``RESET_REQUIRED`` through the gpu_lost check;
* ``ecc``: a volatile uncorrectable ECC count through the ecc check's judge;
* ``thermal``: a GPU temperature through the gpu_temp check's judge;
* ``link``: an InfiniBand port DOWN in sysfs terms through the ib check;
* ``hang``: progress records where one rank stopped, through the hang judge
  (the Finding built as the watcher's progress pass builds it);
* ``silent`` (silent data corruption) and ``node_down`` (the node stops
  answering: Slurm's own ``Not responding``) show nothing to our checks.

Only the gather step (reading the machine) is replaced; every verdict is
the product's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurm_hooks.core.model import Action, Component, Finding, Phase, Status
from slurm_hooks.core.reason import job_component
from slurm_hooks.detect.checks.base import CheckContext
from slurm_hooks.detect.checks.ecc import EccCheck
from slurm_hooks.detect.checks.gpu_lost import GpuLostCheck
from slurm_hooks.detect.checks.gpu_temp import GpuTempCheck
from slurm_hooks.detect.checks.gpubase import GpuSample
from slurm_hooks.detect.checks.ib import IbCheck
from slurm_hooks.detect.probes.nvml import ERROR_GPU_IS_LOST, ERROR_RESET_REQUIRED
from slurm_hooks.detect.probes.sysfs import IbPort
from slurm_hooks.detect.progress.judge import HangSettings, ProcState, Verdict, judge_hang
from slurm_hooks.detect.progress.records import RankView
from slurm_hooks.detect.progress.settings import ProgressConfig
from slurm_hooks.detect.xid.catalogue import Catalogue, load_catalogue
from slurm_hooks.detect.xid.pci import GpuRef
from slurm_hooks.detect.xid.rules import Incident, evaluate, incidents_from
from slurm_hooks.detect.xid.scan import scan_text

#: Evidence kinds that none of our checks can see.
INVISIBLE = frozenset({"silent", "node_down"})
#: Kinds a periodic node health check (NHC-style: nvidia-smi, ports,
#: temperatures, ECC counters) sees; a kernel-log XID only when it left the
#: GPU unusable (reset or reboot needed).
NHC_SEES = frozenset({"gpu_lost", "thermal", "link"})


class NVMLError_Simulated(Exception):  # noqa: N801 - is_nvml_error() keys on the NVMLError prefix
    """An NVML error as pynvml raises it (``value`` is the return code)."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


@dataclass(frozen=True)
class Evidence:
    kind: str
    xid: int | None = None
    message: str = ""
    temp_c: float = 95.0

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> Evidence:
        return cls(str(spec["kind"]), spec.get("xid"), str(spec.get("message", "")),
                   float(spec.get("temp_c", 95.0)))  # fmt: skip

    @classmethod
    def from_code(cls, code: str, catalogue: Catalogue | None = None) -> Evidence | None:
        """The evidence behind a code a site's audit log recorded (None:
        a code the replay has no evidence model for)."""
        if code.startswith("XID") and code[3:].isdigit():
            xid = int(code[3:])
            info = (catalogue or load_catalogue()).get(xid)
            return cls("xid", xid, info.name if info else "")
        return _BY_CODE.get(code)


_BY_CODE = {
    "GPU_LOST": Evidence("gpu_lost"),
    "GPU_RESET_REQUIRED": Evidence("gpu_reset"),
    "ECC_DBE": Evidence("ecc"),
    "GPU_TEMP": Evidence("thermal"),
    "IB_PORT_DOWN": Evidence("link"),
    "HANG": Evidence("hang"),
}


def _pci(gpu: int) -> str:
    # HGX H100 bus ids differ per board; any distinct ids do for the rules.
    return f"0000:{0x18 + 0x10 * gpu:02x}:00"


def xid_line(xid: int, gpu: int, message: str, uptime: float, pid: int = 4242) -> str:
    """A kernel-log line in the NVIDIA driver's format (tests/data/kernel-logs)."""
    return f"[{uptime:.6f}] NVRM: Xid (PCI:{_pci(gpu)}): {xid}, pid={pid}, name=python3, {message}"


def findings(
    ev: Evidence,
    *,
    node: str,
    gpu: int,
    now: float,
    catalogue: Catalogue | None = None,
    xid_history: Sequence[Incident] = (),
    hang_s: float = ProgressConfig.hang_s,
    job: str = "1",
) -> tuple[list[Finding], list[Incident]]:
    """The problems the judges find, and the XID incidents to remember for
    the next scan on this node (repeat rules: XID 13/31)."""
    comp = Component("gpu", index=gpu)
    ctx = CheckContext(node=node, phase=Phase.WATCH)
    if ev.kind == "xid" and ev.xid is not None:
        result = scan_text(xid_line(ev.xid, gpu, ev.message, uptime=now % 1e6) + "\n")
        pci = f"{_pci(gpu)}.0"
        found = evaluate(result.aggregates, now=now, history=xid_history, catalogue=catalogue,
                         gpus={pci: GpuRef(pci, gpu)})  # fmt: skip
        # The scan saw no wall clock (a dmesg line): stamp its incidents now.
        return [f for f in found if f.is_problem], incidents_from(result.aggregates, now)
    if ev.kind in ("gpu_lost", "gpu_reset"):
        code = ERROR_GPU_IS_LOST if ev.kind == "gpu_lost" else ERROR_RESET_REQUIRED
        sample = GpuSample(comp, error=NVMLError_Simulated(code))
        return [GpuLostCheck().on_gpu_error(sample, ctx)], []
    if ev.kind == "ecc":
        counts = {"volatile_uncorrected": 1, "aggregate_uncorrected": 1, "volatile_corrected": 0}
        return list(EccCheck().judge_gpu(comp, counts, ctx)), []
    if ev.kind == "thermal":
        return list(GpuTempCheck().judge_gpu(comp, int(ev.temp_c), ctx)), []
    if ev.kind == "link":
        port = IbPort("mlx5_0", 1, 1, "DOWN", 3, "Disabled", 400.0, "400 Gb/sec (4X NDR)",
                      "InfiniBand")  # fmt: skip
        ib_ctx = CheckContext(node=node, phase=Phase.HEALTHCHECK, profile={"ib": {"count": 1}})
        return [f for f in IbCheck().judge([port], ib_ctx) if f.is_problem], []
    if ev.kind == "hang":
        return _hang(node, job, now, hang_s), []
    return [], []


def _hang(node: str, job: str, now: float, hang_s: float) -> list[Finding]:
    """One rank stopped at step 40 while its peers wait at 41, ``hang_s``
    ago: what the watcher's progress pass reads from the records."""
    last = now - hang_s - 1.0
    ranks = {
        0: RankView(0, node, 100, 0, last - 500, 40, last - 10, last - 490),
        **{
            r: RankView(r, f"{node}-peer{r}", 100 + r, 0, last - 500, 41, last, last - 490)
            for r in (1, 2, 3)
        },  # fmt: skip
    }
    procs = {0: ProcState.RUNNING, 1: ProcState.REMOTE, 2: ProcState.REMOTE, 3: ProcState.REMOTE}
    v = judge_hang(job, ranks, procs, now, HangSettings(hang_s, 60.0))
    if v.verdict is not Verdict.HANG or v.rank is None:
        return []
    # As agent/progress_pass.py builds it (drain_hang = true, the default).
    return [
        Finding(
            check="progress", status=Status.FAIL, code="HANG", message=v.explanation,
            component=Component("job", name=job_component(job, v.rank)[4:]),
            action=Action.DRAIN,
            values={"job": job, "rank": v.rank, "cause": v.cause or "",
                    "stalled_s": round(v.stalled_s, 1)},
        )
    ]  # fmt: skip


__all__ = ["INVISIBLE", "NHC_SEES", "Evidence", "findings", "xid_line"]
