"""One key of ours in a node's ``Extra`` field, never anyone else's.

Slurm's node ``Extra`` (``scontrol update NodeName=X Extra=...``, shown by
``scontrol show node`` and ``sinfo -O NodeList,Extra``; present on 22.05.8,
measured on the lab) is one free-text slot that sites use for their own
notes and, from 23.11, for jobs' ``--extra`` constraints, which read it as
JSON.  We publish the health grade there (``[repair] health_extra``), so the
slot is shared: the value is parsed, only our key changes, and a value we
cannot parse is someone else's and is left alone.

Pure: text in, text out (``SlurmDoor.set_extra`` reads and writes).
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
_VALUE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_PAIR = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*=[^\s,=]*$")


class ExtraFormat(enum.StrEnum):
    """How the current ``Extra`` is written (kept when our key is added)."""

    EMPTY = "empty"
    JSON = "json"
    PAIRS = "pairs"
    #: Free text (or JSON that is not an object): someone else's, not merged.
    FOREIGN = "foreign"


@dataclass(frozen=True)
class ExtraMerge:
    """The result of setting our key: ``value`` None when not mergeable."""

    format: ExtraFormat
    value: str | None
    changed: bool


def extra_format(current: str | None) -> ExtraFormat:
    text = (current or "").strip()
    if not text:
        return ExtraFormat.EMPTY
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            return ExtraFormat.FOREIGN
        return ExtraFormat.JSON if isinstance(doc, dict) else ExtraFormat.FOREIGN
    tokens = [t for t in re.split(r"[,\s]+", text) if t]
    return ExtraFormat.PAIRS if all(_PAIR.match(t) for t in tokens) else ExtraFormat.FOREIGN


def merge_extra(current: str | None, key: str, value: str) -> ExtraMerge:
    """``current`` with ``key`` set to ``value``, in the format it already has.

    An empty Extra gets a JSON object: the form 23.11's ``--extra`` job
    constraints match, so ``--extra slurm_hooks_health=ok`` works where a
    site enables them.  Pairs stay pairs (``site=rack4 slurm_hooks_health=ok``),
    joined as they were (commas or blanks).  Free text: not merged."""
    if not _KEY.match(key) or not _VALUE.match(value):
        raise ValueError(f"not an Extra key/value we write: {key!r}={value!r}")
    fmt = extra_format(current)
    text = (current or "").strip()
    if fmt is ExtraFormat.FOREIGN:
        return ExtraMerge(fmt, None, False)
    if fmt is ExtraFormat.EMPTY:
        return ExtraMerge(fmt, json.dumps({key: value}, separators=(",", ":")), True)
    if fmt is ExtraFormat.JSON:
        doc = json.loads(text)
        if doc.get(key) == value:
            return ExtraMerge(fmt, text, False)
        doc[key] = value
        return ExtraMerge(fmt, json.dumps(doc, separators=(",", ":")), True)
    sep = "," if "," in text else " "
    tokens = [t for t in re.split(r"[,\s]+", text) if t]
    mine = f"{key}={value}"
    if mine in tokens:
        return ExtraMerge(fmt, text, False)
    kept = [t for t in tokens if t.partition("=")[0] != key]
    return ExtraMerge(fmt, sep.join([*kept, mine]), True)


def extra_value(current: str | None, key: str) -> str | None:
    """Our ``key``'s value in ``current`` (None: absent or not parseable)."""
    fmt = extra_format(current)
    text = (current or "").strip()
    if fmt is ExtraFormat.JSON:
        got = json.loads(text).get(key)
        return str(got) if got is not None else None
    if fmt is ExtraFormat.PAIRS:
        for t in re.split(r"[,\s]+", text):
            k, _, v = t.partition("=")
            if k == key:
                return v
    return None


__all__ = ["ExtraFormat", "ExtraMerge", "extra_format", "extra_value", "merge_extra"]
