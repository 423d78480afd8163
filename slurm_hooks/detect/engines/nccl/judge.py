"""Pure judgement of an all-reduce run against the node's profile.

* Wrong elements or out-of-bounds values: data corrupted on the way between
  GPUs (NVLink, NVSwitch, a GPU's memory).  Always FAIL.
* A run that did not complete on a single node (NCCL/CUDA failure, hang) is
  a FAIL too: intra-node all-reduce depends on nothing outside the box, so
  a failure there is the box (fabric manager, NVSwitch, a GPU off the bus).
* Bandwidth is judged on the large-message rows (``large_min_bytes`` and
  up, else the largest size), not the average over all sizes, which mostly
  measures latency: below the profile floor is WARN, below
  ``floor * floor_fail_fraction`` FAIL.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slurm_hooks.core.model import Action, Component, Finding, Status
from slurm_hooks.detect.engines.judging import expected_gpus, finding
from slurm_hooks.detect.engines.nccl.model import NcclRun

CHECK = "nccl"
NODE = Component("node")


@dataclass(frozen=True)
class NcclThresholds:
    #: Healthy floor of the large-message bus bandwidth, GB/s (None: not judged).
    busbw_floor_gbps: float | None = None
    floor_fail_fraction: float = 0.85
    #: Rows at or above this size count as "large" (default 256 MiB).
    large_min_bytes: int = 256 * 1024 * 1024
    #: Expected number of ranks (the profile's gpu_count).
    gpu_count: int | None = None

    def validate(self) -> None:
        if not 0 < self.floor_fail_fraction <= 1:
            raise ValueError("floor_fail_fraction must be in (0, 1]")


_DEFAULTS = NcclThresholds()


def thresholds_from(profile: Mapping[str, Any], settings: Mapping[str, Any]) -> NcclThresholds:
    """``settings["busbw_floor_gbps"]`` wins over the profile's ``nccl_min_busbw_gbps``."""
    floor = settings.get("busbw_floor_gbps", profile.get("nccl_min_busbw_gbps"))
    # Unset keys take NcclThresholds' defaults, which [checks.nccl]'s settings
    # class (checks/nccl.py NcclSettings) takes too: one place.
    d = _DEFAULTS
    t = NcclThresholds(
        busbw_floor_gbps=None if floor is None else float(floor),
        floor_fail_fraction=float(settings.get("floor_fail_fraction", d.floor_fail_fraction)),
        large_min_bytes=int(settings.get("large_min_bytes", d.large_min_bytes)),
        gpu_count=expected_gpus(profile, settings),
    )
    t.validate()
    return t


def _f(
    status: Status, code: str, message: str, action: Action, check: str, **values: Any
) -> Finding:
    return finding(status, code, message, NODE, action, check, **values)


def judge_nccl(
    run: NcclRun, thresholds: NcclThresholds | None = None, *, check: str = CHECK
) -> list[Finding]:
    t = thresholds or NcclThresholds()
    out: list[Finding] = []
    wrong = run.wrong
    if wrong > 0 or (run.out_of_bounds or 0) > 0:
        bad = [r.size for r in run.rows if (r.wrong or 0) > 0]
        out.append(
            _f(
                Status.FAIL,
                "NCCL_WRONG",
                f"all-reduce returned wrong data: {wrong} wrong elements"
                + (f" at sizes {bad[:5]}" if bad else "")
                + (f", {run.out_of_bounds} out-of-bounds values" if run.out_of_bounds else ""),
                Action.DRAIN,
                check,
                wrong=wrong,
                out_of_bounds=run.out_of_bounds,
            )
        )

    if not run.completed or run.errors:
        why = list(run.errors) or [f"NCCL WARN {w}" for w in run.warnings[:3]]
        if not run.completed and not why:
            why = ["no final summary: the run hung or was cut short"]
        if not run.rows and not run.completed and not run.errors and not run.warnings:
            # Nothing ran and nothing says why: we know nothing of the node.
            return out + [
                _f(
                    Status.UNKNOWN,
                    "NCCL_FAILED",
                    "all-reduce produced no output",
                    Action.NONE,
                    check,
                )
            ]
        out.append(
            _f(
                Status.FAIL,
                "NCCL_FAILED",
                f"all-reduce ({run.engine}) failed: " + "; ".join(why)[:400],
                Action.DRAIN,
                check,
                completed=run.completed,
                rows=len(run.rows),
            )
        )

    if t.gpu_count is not None and run.nranks is not None and run.nranks < t.gpu_count:
        out.append(
            _f(
                Status.WARN,
                "NCCL_PARTIAL",
                f"all-reduce covered {run.nranks} GPUs, profile expects {t.gpu_count}",
                Action.NONE,
                check,
                nranks=run.nranks,
                expected=t.gpu_count,
            )
        )

    large = run.large_busbw(t.large_min_bytes)
    trivial = run.nranks is not None and run.nranks < 2  # one rank moves no data
    if t.busbw_floor_gbps is not None and large is not None and run.completed and not trivial:
        if large < t.busbw_floor_gbps:
            fail = large < t.busbw_floor_gbps * t.floor_fail_fraction
            out.append(
                _f(
                    Status.FAIL if fail else Status.WARN,
                    "NCCL_SLOW",
                    f"all-reduce bus bandwidth {large:.1f} GB/s at {run.max_size} B is below"
                    f" the floor {t.busbw_floor_gbps:g} GB/s",
                    Action.DRAIN if fail else Action.NONE,
                    check,
                    busbw_gbps=round(large, 2),
                    floor_gbps=t.busbw_floor_gbps,
                    avg_busbw_gbps=run.avg_busbw,
                )
            )

    if not any(f.is_problem or f.status is Status.UNKNOWN for f in out):
        out.append(
            _f(
                Status.OK,
                "OK",
                f"all-reduce over {run.nranks or '?'} GPUs: {large or 0:.1f} GB/s busbw"
                + ("" if run.validated else " (not validated)"),
                Action.NONE,
                check,
                busbw_gbps=None if large is None else round(large, 2),
                avg_busbw_gbps=run.avg_busbw,
                nranks=run.nranks,
                validated=run.validated,
            )
        )
    return out
