"""Result types of one burn-in run, whatever engine produced it."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GpuBurnin:
    """What one GPU did during the run.

    ``tflops_samples`` are the engine's periodic throughput readings
    (gpu_burn prints one per progress line; the torch engine one per timed
    batch).  ``verdict`` is the engine's own word where it gives one
    (gpu_burn's ``OK``/``FAULTY`` summary), None otherwise.
    """

    index: int
    uuid: str | None = None
    name: str | None = None
    errors: int = 0
    died: bool = False
    processed: int = 0
    tflops_samples: tuple[float, ...] = ()
    temps_c: tuple[int, ...] = ()
    sm_clocks_mhz: tuple[int, ...] = ()
    verdict: str | None = None
    #: Set when this GPU's result disagrees with the reference or with its
    #: siblings (silent data corruption); the text says how.
    mismatch: str | None = None
    #: Per-precision figures, e.g. {"bf16": 650.1, "fp32": 48.2} (TFLOP/s).
    tflops_by_dtype: tuple[tuple[str, float], ...] = ()
    error_text: str | None = None

    @property
    def tflops(self) -> float | None:
        """Representative throughput: the median of the samples, leaving out
        the first one when there are at least three (it includes ramp-up)."""
        samples = [s for s in self.tflops_samples if s > 0]
        if not samples:
            return None
        if len(samples) >= 3:
            samples = samples[1:]
        return float(statistics.median(samples))

    @property
    def max_temp_c(self) -> int | None:
        return max(self.temps_c) if self.temps_c else None

    @property
    def ran(self) -> bool:
        """True when the GPU produced at least one throughput reading."""
        return any(s > 0 for s in self.tflops_samples) or self.processed > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "verdict": self.verdict,
            "errors": self.errors,
            "died": self.died,
            "processed": self.processed,
            "tflops": None if self.tflops is None else round(self.tflops, 3),
            "tflops_samples": [round(s, 3) for s in self.tflops_samples],
            "tflops_by_dtype": {k: round(v, 3) for k, v in self.tflops_by_dtype},
            "max_temp_c": self.max_temp_c,
            "temps_c": list(self.temps_c),
            "sm_clocks_mhz": list(self.sm_clocks_mhz),
            "mismatch": self.mismatch,
            "error_text": self.error_text,
        }


@dataclass(frozen=True)
class BurninRun:
    """One burn-in run.  ``completed`` is False for a run that was killed,
    timed out, aborted or whose output is truncated: its per-GPU figures are
    then partial and the judge says so."""

    engine: str
    gpus: tuple[GpuBurnin, ...] = ()
    completed: bool = False
    duration_s: float | None = None
    #: Problems that are not tied to one GPU (tool missing, init failures
    #: whose GPU is unknown, "No clients are alive").
    errors: tuple[str, ...] = ()
    #: Engine details worth logging (gpu_burn's compare file, precision, ...).
    info: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def gpu(self, index: int) -> GpuBurnin | None:
        for g in self.gpus:
            if g.index == index:
                return g
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "completed": self.completed,
            "duration_s": self.duration_s,
            "errors": list(self.errors),
            "info": dict(self.info),
            "gpus": [g.to_dict() for g in self.gpus],
        }
