"""Sizes and counts as NHC writes them, parsed once at config time.

NHC's ``nhc_common_parse_size``: a number with an optional suffix ``k``,
``m``, ``g``, ``t``, ``p``, ``e`` (an optional trailing ``b``/``B``), each a
power of 1024 over kilobytes; a bare number is kilobytes.  Our config spells
the unit out ("32GB", "512kB", "3%"), so a bare number is refused there and
the translator writes the kilobytes NHC meant.
"""

from __future__ import annotations

import re

from slurm_hooks.core.record import record

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgtpe]?)(i?b?)\s*$", re.IGNORECASE)
_POW = {"": 0, "k": 0, "m": 1, "g": 2, "t": 3, "p": 4, "e": 5}


class BadSize(ValueError):
    """A size or count that does not parse."""


@record
class Size:
    """A number of kilobytes (or of things, for inode counts), or a percentage."""

    value: float
    percent: bool = False

    def of(self, total: float) -> float:
        """The amount this stands for, given the whole (for a percentage)."""
        return total * self.value / 100 if self.percent else self.value

    def __str__(self) -> str:
        return f"{self.value:g}%" if self.percent else f"{self.value:g}kB"


def parse_size(text: str | int | float, *, bare_unit: str = "", allow_percent: bool = True) -> Size:
    """``"32gb"`` -> 33554432 kB; ``"3%"`` -> 3 %; ``"1k"`` -> 1 kB.  A bare
    number takes ``bare_unit`` ("k" for NHC's own syntax); with none, a bare
    number is an error (our config names its unit)."""
    if isinstance(text, bool):
        raise BadSize(f"not a size: {text!r}")
    if isinstance(text, int | float):
        if not bare_unit:
            raise BadSize(f'size {text!r} has no unit (write e.g. "{text}kB" or "{text}GB")')
        text = f"{text}{bare_unit}"
    s = text.strip()
    if s.endswith("%"):
        if not allow_percent:
            raise BadSize(f"a percentage is not allowed here: {text!r}")
        try:
            pct = float(s[:-1])
        except ValueError as exc:
            raise BadSize(f"not a percentage: {text!r}") from exc
        if not 0 <= pct <= 100:
            raise BadSize(f"percentage out of range: {text!r}")
        return Size(pct, percent=True)
    m = _SIZE.match(s)
    if not m:
        raise BadSize(f"not a size: {text!r}")
    number, prefix, suffix = m.groups()
    if not prefix and not suffix and not bare_unit:
        raise BadSize(f'size {text!r} has no unit (write e.g. "{number}kB" or "{number}GB")')
    if not prefix and suffix.lower() == "b" and not bare_unit:
        # "1b": NHC strips the b and reads kilobytes; say so rather than guess.
        prefix = "k"
    unit = prefix.lower() or bare_unit.lower()
    return Size(float(number) * 1024 ** _POW.get(unit, 0))


def parse_count(text: str | int, *, multiplier: int = 1000) -> int:
    """An inode count: ``"1k"`` -> 1000, ``"1M"`` -> 1000000 (NHC's inode
    checks pass 1000 as the multiplier), a bare number as is."""
    if isinstance(text, bool):
        raise BadSize(f"not a count: {text!r}")
    if isinstance(text, int):
        return text
    m = _SIZE.match(text)
    if not m or m.group(3).lower() not in ("", "b"):
        raise BadSize(f"not a count: {text!r}")
    number, prefix, _ = m.groups()
    power = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5, "e": 6}[prefix.lower()]
    return int(float(number) * multiplier**power)
