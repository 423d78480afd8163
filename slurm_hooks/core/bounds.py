"""Bounds checks for the numbers of a settings table.

Every ``[section]`` dataclass validates its numbers the same way: a list of
field names that must be positive (intervals, windows, timeouts) or at least
some count.  The message names the config key, so a wrong file says which
line to fix (``ValueError``; config loading turns it into a ConfigError).
"""

from __future__ import annotations


def require_positive(settings: object, *names: str) -> None:
    """ValueError for the first of the ``names`` fields of ``settings`` that is not > 0."""
    for name in names:
        if getattr(settings, name) <= 0:
            raise ValueError(f"{name} must be > 0")


def require_at_least(settings: object, least: int, *names: str) -> None:
    """ValueError for the first of the ``names`` fields of ``settings`` below ``least``."""
    for name in names:
        if getattr(settings, name) < least:
            raise ValueError(f"{name} must be >= {least}")


__all__ = ["require_at_least", "require_positive"]
