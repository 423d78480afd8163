"""core/bounds.py: the settings tables' number checks name the key at fault."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from slurm_hooks.core.bounds import require_at_least, require_positive


@dataclass
class _Table:
    interval_s: float = 1.0
    window_s: float = 60.0
    count: int = 2


def test_positive_names_the_first_field_not_above_zero() -> None:
    require_positive(_Table(), "interval_s", "window_s")
    with pytest.raises(ValueError, match="^window_s must be > 0$"):
        require_positive(_Table(window_s=0.0), "interval_s", "window_s")
    with pytest.raises(ValueError, match="^interval_s must be > 0$"):
        require_positive(_Table(interval_s=-1.0), "interval_s", "window_s")


def test_at_least_names_the_field_below_the_floor() -> None:
    require_at_least(_Table(count=1), 1, "count")
    with pytest.raises(ValueError, match="^count must be >= 1$"):
        require_at_least(_Table(count=0), 1, "count")
