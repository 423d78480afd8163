"""Pure judgement of a burn-in run against the node's profile.

Why these rules:

* Any miscompare is silent data corruption: the worst fault a GPU can have,
  because jobs keep running and produce wrong answers.  Always FAIL.
* Throughput is judged twice.  Against the siblings on the same node (the
  strongest signal: same SKU, same cooling, same driver; a spread of ~5%
  is normal, a GPU at 70% of its siblings is sick) and against the
  profile's floor (catches a node where every GPU is slow: power capping,
  a bad firmware, clocks stuck low).
* A GPU that never produced a result while its siblings did is a fault; a
  run where nothing at all ran is "could not run" (UNKNOWN), never healthy.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slurm_hooks.core.model import Action, Component, Finding, Status
from slurm_hooks.detect.engines.burnin.model import BurninRun, GpuBurnin
from slurm_hooks.detect.engines.judging import expected_gpus, finding

CHECK = "burnin"


@dataclass(frozen=True)
class BurninThresholds:
    #: WARN when a GPU is this fraction below its siblings' median.
    warn_below_median: float = 0.10
    #: FAIL when a GPU is this fraction below its siblings' median.
    fail_below_median: float = 0.20
    #: Sibling comparison needs at least this many *other* GPUs.
    min_siblings: int = 2
    #: Per-GPU TFLOP/s floors by precision ("fp32", "bf16", "tf32", "fp64"):
    #: a floor applies only to a precision the engine measured.
    floors: tuple[tuple[str, float], ...] = ()
    #: Below a floor is WARN; below floor * this fraction is FAIL.
    floor_fail_fraction: float = 0.85
    #: WARN when a GPU got hotter than this during the run (None: not judged).
    max_temp_c: float | None = None
    #: Expected number of GPUs (the profile's gpu_count); fewer is a FAIL.
    gpu_count: int | None = None

    def validate(self) -> None:
        if not 0 <= self.warn_below_median <= self.fail_below_median < 1:
            raise ValueError("need 0 <= warn_below_median <= fail_below_median < 1")
        if not 0 < self.floor_fail_fraction <= 1:
            raise ValueError("floor_fail_fraction must be in (0, 1]")


_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp64")
_DEFAULTS = BurninThresholds()


def thresholds_from(profile: Mapping[str, Any], settings: Mapping[str, Any]) -> BurninThresholds:
    """Thresholds from the profile (per-SKU facts) and the check's settings
    (policy knobs).

    The profile's ``burnin_min_tflops`` is the FP32 floor (what gpu_burn
    measures by default and the torch engine measures as "fp32"); other
    precisions take ``burnin_min_tflops_<dtype>`` from the profile's
    ``extra`` table.  ``settings["tflops_floor"]`` / ``tflops_floor_<dtype>``
    override them.
    """
    extra = profile.get("extra") or {}
    floors: dict[str, float] = {}
    base = settings.get("tflops_floor", profile.get("burnin_min_tflops"))
    if base is not None:
        floors["fp32"] = float(base)
    for d in _DTYPES:
        v = settings.get(f"tflops_floor_{d}", extra.get(f"burnin_min_tflops_{d}"))
        if v is not None:
            floors[d] = float(v)
    max_temp = settings.get("max_temp_c", profile.get("gpu_temp_warn_c"))
    # Unset keys take BurninThresholds' defaults, which [checks.burnin]'s
    # settings class (checks/burnin.py BurninSettings) takes too: one place.
    dflt = _DEFAULTS
    t = BurninThresholds(
        warn_below_median=float(settings.get("warn_below_median", dflt.warn_below_median)),
        fail_below_median=float(settings.get("fail_below_median", dflt.fail_below_median)),
        min_siblings=int(settings.get("min_siblings", dflt.min_siblings)),
        floors=tuple(sorted(floors.items())),
        floor_fail_fraction=float(settings.get("floor_fail_fraction", dflt.floor_fail_fraction)),
        max_temp_c=None if max_temp is None else float(max_temp),
        gpu_count=expected_gpus(profile, settings),
    )
    t.validate()
    return t


def _component(g: GpuBurnin) -> Component:
    return Component("gpu", index=g.index, uuid=g.uuid, name=g.name)


def judge_burnin(
    run: BurninRun, thresholds: BurninThresholds | None = None, *, check: str = CHECK
) -> list[Finding]:
    """Findings for one run; a healthy run gives one OK finding with the figures."""
    t = thresholds or BurninThresholds()
    out: list[Finding] = []
    node = Component("node")
    ran = [g for g in run.gpus if g.ran]

    if not ran:
        why = "; ".join(run.errors) or "no GPU produced a result"
        return [
            finding(
                Status.UNKNOWN,
                "BURNIN_FAILED",
                f"burn-in ({run.engine}) could not run: {why}",
                node,
                Action.NONE,
                check,
                engine=run.engine,
            )
        ]

    if t.gpu_count is not None and len(run.gpus) < t.gpu_count:
        out.append(
            finding(
                Status.FAIL,
                "BURNIN_FAILED",
                f"burn-in saw {len(run.gpus)} GPUs, profile expects {t.gpu_count}",
                node,
                Action.DRAIN,
                check,
                seen=len(run.gpus),
                expected=t.gpu_count,
            )
        )

    figures = {g.index: g.tflops for g in run.gpus if g.tflops is not None}

    for g in run.gpus:
        comp = _component(g)
        if g.mismatch:
            out.append(
                finding(
                    Status.FAIL,
                    "BURNIN_MISMATCH",
                    f"gpu{g.index}: wrong results (silent data corruption): {g.mismatch}",
                    comp,
                    Action.DRAIN,
                    check,
                    engine=run.engine,
                )
            )
        if g.errors > 0 or g.verdict == "FAULTY":
            out.append(
                finding(
                    Status.FAIL,
                    "BURNIN_ERRORS",
                    f"gpu{g.index}: {g.errors} computation errors during burn-in"
                    + (" (gpu_burn: FAULTY)" if g.verdict == "FAULTY" else ""),
                    comp,
                    Action.DRAIN,
                    check,
                    errors=g.errors,
                    engine=run.engine,
                )
            )
        if g.died or not g.ran:
            what = "worker died" if g.died else "produced no result while its siblings did"
            detail = f": {g.error_text}" if g.error_text else ""
            out.append(
                finding(
                    Status.FAIL,
                    "BURNIN_FAILED",
                    f"gpu{g.index}: burn-in {what}{detail}",
                    comp,
                    Action.DRAIN,
                    check,
                    engine=run.engine,
                )
            )
        tf = figures.get(g.index)
        if tf is not None or g.tflops_by_dtype:
            out.extend(_judge_speed(g, tf, figures, t, check))
        if t.max_temp_c is not None and g.max_temp_c is not None and g.max_temp_c > t.max_temp_c:
            out.append(
                finding(
                    Status.WARN,
                    "BURNIN_HOT",
                    f"gpu{g.index}: reached {g.max_temp_c} C during burn-in (limit {t.max_temp_c} C)",
                    comp,
                    Action.NONE,
                    check,
                    max_temp_c=g.max_temp_c,
                    limit_c=t.max_temp_c,
                )
            )

    if not run.completed:
        errs = "; ".join(run.errors)
        out.append(
            finding(
                Status.FAIL if any(f.status is Status.FAIL for f in out) else Status.WARN,
                "BURNIN_INCOMPLETE",
                "burn-in did not complete"
                + (f": {errs}" if errs else "")
                + "; figures are partial",
                node,
                Action.NONE,
                check,
                engine=run.engine,
            )
        )

    if not any(f.is_problem for f in out):
        vals = [v for v in figures.values()]
        out.append(
            finding(
                Status.OK,
                "OK",
                f"{len(run.gpus)} GPUs passed burn-in ({run.engine})",
                node,
                Action.NONE,
                check,
                engine=run.engine,
                gpus=len(run.gpus),
                tflops_min=round(min(vals), 3) if vals else None,
                tflops_median=round(statistics.median(vals), 3) if vals else None,
                max_temp_c=max((g.max_temp_c for g in run.gpus if g.max_temp_c), default=None),
            )
        )
    return out


def _judge_speed(
    g: GpuBurnin, tf: float | None, figures: Mapping[int, float], t: BurninThresholds, check: str
) -> list[Finding]:
    out: list[Finding] = []
    comp = _component(g)
    others = [v for i, v in figures.items() if i != g.index]
    if tf is not None and len(others) >= t.min_siblings:
        med = statistics.median(others)
        if med > 0:
            ratio = tf / med
            status = None
            if ratio < 1 - t.fail_below_median:
                status = Status.FAIL
            elif ratio < 1 - t.warn_below_median:
                status = Status.WARN
            if status is not None:
                out.append(
                    finding(
                        status,
                        "BURNIN_SLOW",
                        f"gpu{g.index}: {tf:.1f} TFLOP/s is {ratio:.0%} of its siblings' median"
                        f" ({med:.1f})",
                        comp,
                        Action.DRAIN if status is Status.FAIL else Action.NONE,
                        check,
                        tflops=round(tf, 3),
                        siblings_median=round(med, 3),
                        ratio=round(ratio, 4),
                    )
                )
    measured = dict(g.tflops_by_dtype)
    for dtype, floor in t.floors:
        value = measured.get(dtype)
        if value is None or value >= floor:
            continue
        fail = value < floor * t.floor_fail_fraction
        out.append(
            finding(
                Status.FAIL if fail else Status.WARN,
                "BURNIN_SLOW",
                f"gpu{g.index}: {value:.1f} {dtype} TFLOP/s is below the profile floor {floor:g}",
                comp,
                Action.DRAIN if fail else Action.NONE,
                check,
                tflops=round(value, 3),
                dtype=dtype,
                floor=floor,
            )
        )
    # One BURNIN_SLOW per GPU: the worse of the two views.
    return sorted(out, key=lambda f: f.status.rank, reverse=True)[:1]
