"""The arithmetic of the torch burn-in engine, kept free of torch so tests
can check it on a machine without a GPU.

Three independent correctness signals, each cheap:

* **self-consistency**: the same product of the same inputs on the same GPU
  must give the same checksum every time (cuBLAS is deterministic for a
  fixed shape and stream); a drift is a flipped bit somewhere;
* **siblings**: every GPU multiplies identical seeded inputs, so identical
  SKUs must agree; the odd one out is the suspect;
* **reference**: a small product is also computed here in float64 from the
  very same (quantised) inputs; the GPU must match within the precision's
  rounding error.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

#: Normalised error allowed against the float64 reference, by precision.
REFERENCE_TOLERANCE = {"fp32": 1e-4, "tf32": 5e-3, "bf16": 2e-2, "fp16": 5e-3}


def matmul_tflops(
    n: int, iterations: int, seconds: float, m: int | None = None, k: int | None = None
) -> float:
    """TFLOP/s of ``iterations`` products of (m x k) @ (k x n): 2*m*n*k each."""
    if seconds <= 0:
        raise ValueError("seconds must be positive")
    m = n if m is None else m
    k = n if k is None else k
    return 2.0 * m * n * k * iterations / seconds / 1e12


def relative_difference(a: float, b: float) -> float:
    scale = max(abs(a), abs(b))
    if scale == 0.0:
        return 0.0
    return abs(a - b) / scale


def seeded_matrix(n: int, seed: int) -> list[float]:
    """An n x n row-major matrix of values in [-1, 1) from a small LCG, so
    the reference and every GPU start from bit-identical inputs without
    depending on any library's random generator."""
    state = seed & 0xFFFFFFFF
    out = []
    for _ in range(n * n):
        state = (1664525 * state + 1013904223) & 0xFFFFFFFF
        out.append(state / 2147483648.0 - 1.0)
    return out


def reference_matmul(a: Sequence[float], b: Sequence[float], n: int) -> list[float]:
    """Plain float64 product of two n x n row-major matrices (small n only)."""
    out = [0.0] * (n * n)
    for i in range(n):
        row = a[i * n : (i + 1) * n]
        for j in range(n):
            s = 0.0
            for t in range(n):
                s += row[t] * b[t * n + j]
            out[i * n + j] = s
    return out


def normalised_error(got: Sequence[float], want: Sequence[float]) -> float:
    """max |got - want| / max |want|: one number, insensitive to where the
    values happen to be near zero."""
    if len(got) != len(want):
        raise ValueError(f"length mismatch: {len(got)} != {len(want)}")
    if any(g != g or g in (float("inf"), float("-inf")) for g in got):
        return float("inf")  # max() would silently skip a NaN
    scale = max((abs(w) for w in want), default=0.0) or 1.0
    return max((abs(g - w) for g, w in zip(got, want, strict=True)), default=0.0) / scale


def reference_mismatch(got: Sequence[float], want: Sequence[float], dtype: str) -> str | None:
    """A message when the GPU's small product is off the float64 reference."""
    err = normalised_error(got, want)
    tol = REFERENCE_TOLERANCE.get(dtype, 1e-2)
    if not err <= tol:  # also true for NaN/inf
        return f"{dtype} product off the float64 reference by {err:.3g} (tolerance {tol:g})"
    return None


def inconsistent_batches(checksums: Sequence[float], rtol: float = 0.0) -> int:
    """How many repeated results differ from the first one."""
    if not checksums:
        return 0
    first = checksums[0]
    return sum(1 for c in checksums[1:] if c != c or relative_difference(c, first) > rtol)


def sibling_mismatches(checksums: Mapping[int, float], rtol: float) -> dict[int, str]:
    """GPUs whose checksum disagrees with the majority of their siblings.

    With three or more GPUs the consensus is the median; with two, a
    disagreement cannot say which one is wrong, so both are named.
    """
    if len(checksums) < 2:
        return {}
    values = list(checksums.values())
    if len(values) == 2:
        (i, a), (j, b) = checksums.items()
        if a != a or b != b or relative_difference(a, b) > rtol:
            msg = f"gpu{i} and gpu{j} disagree ({a!r} vs {b!r})"
            return {i: msg, j: msg}
        return {}
    consensus = (
        statistics.median(v for v in values if v == v) if any(v == v for v in values) else 0.0
    )
    out = {}
    for idx, v in checksums.items():
        if v != v or relative_difference(v, consensus) > rtol:
            out[idx] = f"checksum {v!r} differs from siblings' {consensus!r}"
    return out
