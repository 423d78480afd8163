"""Time left for a check, from whatever deadline the caller passed.

The prolog has a strict budget: a step that cannot finish in the time left
must not start (a 10 s burn with 3 s left only makes the prolog overrun and
slurmd kill it, draining the node for the wrong reason).  The runner passes
the deadline as ``ctx.services["deadline"]`` or ``ctx.settings["deadline"]``:
a ``time.monotonic()`` value, a callable returning seconds left, or an
object with ``remaining()``.
"""

from __future__ import annotations

import time
from typing import Any

from slurm_hooks.detect.checks.base import CheckContext


def time_left(ctx: CheckContext, *, now: float | None = None) -> float | None:
    """Seconds left before the deadline, or None when there is no deadline."""
    d: Any = ctx.services.get("deadline", ctx.settings.get("deadline"))
    if d is None:
        return None
    if hasattr(d, "remaining"):
        return float(d.remaining())
    if callable(d):
        return float(d())
    t = time.monotonic() if now is None else now
    return float(d) - t


def budget_shortfall(ctx: CheckContext, needed_s: float, *, now: float | None = None) -> str | None:
    """Why the step must be skipped, or None when it fits."""
    left = time_left(ctx, now=now)
    if left is None or left >= needed_s:
        return None
    return f"skipped: budget ({max(left, 0.0):.1f}s left, needs {needed_s:.1f}s)"


class Skipped:
    """What ``gather`` returns instead of data when it chose not to run."""

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return f"Skipped({self.reason!r})"


def command_timeout(ctx: CheckContext, wanted: float, *, margin: float = 2.0) -> float:
    """``wanted``, capped by the time left and by the runner's per-check
    ``timeout_s`` (less ``margin``), so that our subprocess is killed by us,
    with its output parsed, before the runner gives up on the check."""
    caps = [wanted]
    left = time_left(ctx)
    if left is not None:
        caps.append(left - margin)
    per_check = ctx.settings.get("timeout_s")
    if isinstance(per_check, int | float) and per_check > 0:
        caps.append(float(per_check) - margin)
    return max(1.0, min(caps))
