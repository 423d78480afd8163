"""One finding per root cause: a lost GPU is reported once, by ``gpu_lost``.

When a GPU falls off the bus every NVML call on it fails, so every other
per-GPU check (ecc, row_remap, nvlink, pcie ...) reports "could not run on
gpuN" as UNKNOWN.  Those rows say nothing the ``gpu_lost`` FAIL does not
already say, and each of them became a row in ``check``, a decision and an
audit line on every run.  ``fold_lost_gpus`` drops them from the run and
names the blinded checks on the root finding instead (``values["blind"]``).

Only a GPU that ``gpu_lost`` itself reported (GPU_LOST or
GPU_RESET_REQUIRED) is folded, and only UNKNOWN findings that come from an
NVML error on that very GPU: a real fault another check found (a FAIL, a
WARN), or an NVML error on another GPU, is never hidden, and with
``gpu_lost`` disabled nothing is folded.  Pure: outcomes in, outcomes out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from slurm_hooks.core.model import Finding, Status
from slurm_hooks.core.record import replace
from slurm_hooks.detect.checks.base import ok

if TYPE_CHECKING:
    from slurm_hooks.detect.outcome import CheckOutcome

ROOT_CHECK = "gpu_lost"
ROOT_CODES = frozenset({"GPU_LOST", "GPU_RESET_REQUIRED"})


def _lost(outcomes: Sequence[CheckOutcome]) -> set[str]:
    return {
        f.component.short()
        for o in outcomes
        if o.name == ROOT_CHECK
        for f in o.findings
        if f.status is Status.FAIL and f.code in ROOT_CODES and f.component.kind == "gpu"
    }


def _blinded(f: Finding, lost: set[str]) -> bool:
    """An UNKNOWN that is only the echo of the lost GPU."""
    return (
        f.status is Status.UNKNOWN
        and f.component.kind == "gpu"
        and f.component.short() in lost
        and bool(f.values)
        and "nvml_error" in f.values
    )


def fold_lost_gpus(outcomes: Sequence[CheckOutcome]) -> tuple[CheckOutcome, ...]:
    """``outcomes`` with every check's "could not run on <lost GPU>" folded
    into ``gpu_lost``'s finding for that GPU.  A check left with no finding
    reports OK for the GPUs it could read."""
    lost = _lost(outcomes)
    if not lost:
        return tuple(outcomes)
    blind: dict[str, list[str]] = {}
    out: list[CheckOutcome] = []
    for o in outcomes:
        if o.name == ROOT_CHECK:
            out.append(o)
            continue
        kept = [f for f in o.findings if not _blinded(f, lost)]
        if len(kept) == len(o.findings):
            out.append(o)
            continue
        gone = sorted({f.component.short() for f in o.findings if _blinded(f, lost)})
        for comp in gone:
            blind.setdefault(comp, []).append(o.name)
        if not kept:
            message = (
                f"ok on the GPUs it could read; {', '.join(gone)} lost (reported by {ROOT_CHECK})"
            )
            kept = [ok(o.name, message, skipped_lost=",".join(gone))]
        out.append(replace(o, findings=tuple(kept)))
    return tuple(_name_blind(o, blind) if o.name == ROOT_CHECK else o for o in out)


def _name_blind(root: CheckOutcome, blind: dict[str, list[str]]) -> CheckOutcome:
    findings = []
    for f in root.findings:
        checks = blind.get(f.component.short()) if f.code in ROOT_CODES else None
        if checks:
            f = replace(f, values={**f.values, "blind": ",".join(checks)})
        findings.append(f)
    return replace(root, findings=tuple(findings))
