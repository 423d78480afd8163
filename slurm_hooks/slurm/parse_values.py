"""The values inside Slurm's records: node states with their flags, times
(text and JSON), numbers and the many spellings of "unset".

The smallest pieces the record parsers (``parse``, ``parse_config``) and
the backends share; pure, like them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

#: Suffix characters ``sinfo``/``scontrol`` append to a base state, and the
#: flag each one stands for (``DOWN*`` = down and not responding).
STATE_SUFFIXES: Mapping[str, str] = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "%": "POWERING_DOWN",
    "!": "POWER_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}

#: Base states as Slurm names them (node_state_base_string).  Anything else in
#: a ``+``-joined state string is a flag.
BASE_STATES = frozenset(
    {"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN", "COMPLETING"}
)
#: ``sinfo -o %T`` shows these compound words as if they were states.
_COMPOUND = {
    "DRAINED": ("IDLE", "DRAIN"),
    "DRAINING": ("ALLOCATED", "DRAIN"),
    "DRAIN": ("IDLE", "DRAIN"),
    "ALLOC": ("ALLOCATED", None),
}
_NULL = ("", "(null)", "None", "N/A", "n/a")


def parse_state(text: str) -> tuple[str, frozenset[str]]:
    """``DOWN*+DRAIN`` -> ``('down', {'DRAIN', 'NOT_RESPONDING'})``.

    Works for ``scontrol``'s ``State=`` (``IDLE+DRAIN``), ``sinfo -o %T``
    (``drained``, ``idle*``) and JSON state lists (``['IDLE', 'DRAIN']``).
    """
    parts = [p for p in text.strip().upper().split("+") if p]
    if not parts:
        return "unknown", frozenset()
    flags: set[str] = set()
    cleaned: list[str] = []
    for part in parts:
        while part and part[-1] in STATE_SUFFIXES:
            flags.add(STATE_SUFFIXES[part[-1]])
            part = part[:-1]
        if part:
            cleaned.append(part)
    base: str | None = None
    for part in cleaned:
        if base is None and part in BASE_STATES:
            base = part
        elif base is None and part in _COMPOUND:
            base, flag = _COMPOUND[part]
            if flag:
                flags.add(flag)
        else:
            flags.add("DRAIN" if part in ("DRAINED", "DRAINING") else part)
    if base is None:
        base = "UNKNOWN"
    # COMPLETING is a flag on top of a base state, except when it is the only word.
    if base == "COMPLETING" and len(cleaned) == 1:
        flags.add("COMPLETING")
    return base.lower(), frozenset(flags)


def parse_time(text: str | None) -> datetime | None:
    """Slurm's ``2024-05-01T10:00:00`` (local time) as an aware datetime."""
    if not text or text in _NULL or text in ("Unknown", "None"):
        return None
    try:
        return datetime.fromisoformat(text).astimezone()
    except ValueError:
        return None


def json_epoch(value: Any) -> datetime | None:
    """JSON times: a plain int (v0.0.38) or ``{"set": .., "number": ..}``."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return datetime.fromtimestamp(value).astimezone()


def json_int(value: Any) -> int | None:
    """JSON numbers: a plain int (v0.0.38) or ``{"set": .., "number": ..}``;
    None when unset, absent or not a number."""
    if isinstance(value, Mapping):
        if not value.get("set", True):
            return None
        value = value.get("number")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        # At most 20 digits: a longer run is no Slurm number (and int() of
        # 4,301 digits raises ValueError).
        m = re.match(r"\s*(\d{1,20})(?!\d)", value)
        return int(m.group(1)) if m else None
    return None


def _none_if_null(value: str | None) -> str | None:
    if value is None:
        return None
    return None if value in _NULL else value
