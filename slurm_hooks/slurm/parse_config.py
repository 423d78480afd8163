"""Pure parsers for what Slurm says about itself: ``scontrol show config``,
its release (``SLURM_VERSION``), and the controller's clock (``sdiag``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from slurm_hooks.core.errors import SlurmError
from slurm_hooks.slurm.parse_values import (
    json_epoch,
)

#: ``Prolog[0]``: 24.11 prints a key that takes several values once per value.
_INDEXED_KEY_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\[(\d+)\]$")


def parse_show_config(text: str) -> dict[str, str]:
    """``scontrol show config``: ``Key      = value`` lines; section headers
    and blank lines are skipped.

    Slurm 24.11 prints list keys indexed (``Prolog[0] = /a``, ``Prolog[1] =
    /b``, where 22.05 printed ``Prolog = /a``): those become one ``Prolog``
    entry, the values in index order joined with ``,`` as slurm.conf writes
    them (:func:`config_items` splits them again).  24.11 also leaves unset
    keys out where 22.05 printed ``(null)``: a missing key reads as unset."""
    out: dict[str, str] = {}
    indexed: dict[str, dict[int, str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key or " " in key:
            continue
        m = _INDEXED_KEY_RE.match(key)
        if m:
            indexed.setdefault(m.group(1), {}).setdefault(int(m.group(2)), value.strip())
            continue
        out.setdefault(key, value.strip())
    for key, values in indexed.items():
        out.setdefault(key, ",".join(values[i] for i in sorted(values)))
    return out


def config_items(value: str | None) -> list[str]:
    """The items of a ``show config`` value (``a,b`` -> ``[a, b]``); an unset
    value (missing, ``(null)``, empty) has none."""
    if value is None or value.strip() in ("", "(null)"):
        return []
    return [v.strip() for v in value.split(",") if v.strip()]


_VERSION_RE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, int, int]:
    """``slurm-wlm 22.05.8`` / ``slurm 24.11.5`` -> ``(22, 5, 8)``."""
    m = _VERSION_RE.search(text)
    if not m:
        raise SlurmError(f"cannot find a Slurm version in {text.strip()[:80]!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


#: ``sdiag output at Tue Dec 01 20:23:10 2026 (1796156590)``: the first line
#: of ``sdiag`` on 22.05, 23.x, 24.11 and 25.x; the epoch is slurmctld's
#: clock when it answered (``req_time``).
_SDIAG_TIME = re.compile(r"^sdiag output at .*\((\d+)\)\s*$", re.MULTILINE)


def parse_sdiag_time(text: str) -> datetime:
    """slurmctld's own clock from ``sdiag`` output (aware, local zone)."""
    m = _SDIAG_TIME.search(text)
    if not m:
        raise SlurmError("sdiag: no 'sdiag output at ... (epoch)' line")
    return datetime.fromtimestamp(int(m.group(1))).astimezone()


def server_time_from_diag(doc: Any) -> datetime:
    """slurmctld's clock from a slurmrestd ``/diag`` answer (``statistics.req_time``)."""
    stats = doc.get("statistics") if isinstance(doc, Mapping) else None
    when = json_epoch(stats.get("req_time")) if isinstance(stats, Mapping) else None
    if when is None:
        raise SlurmError("diag: no statistics.req_time in the answer")
    return when
