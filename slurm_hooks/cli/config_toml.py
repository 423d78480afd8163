"""A small TOML writer: Python values as TOML literals.

The commented defaults file, ``config show`` and docs/configuration.md write
each key's default through these, so the text they print is TOML that
``tomllib`` reads back as the same value.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


def _toml_key(key: str) -> str:
    import re

    return key if re.match(r"^[A-Za-z0-9_-]+$", key) else _toml_str(key)


def _toml_str(value: str) -> str:
    out = value.replace("\\", "\\\\").replace('"', '\\"')
    out = out.replace("\n", "\\n").replace("\t", "\\t")
    return f'"{out}"'


def toml_value(value: object) -> str | None:
    """A TOML literal, or None for values TOML cannot express inline (None,
    tables)."""
    import dataclasses
    import math

    if value is None or dataclasses.is_dataclass(value) or isinstance(value, Mapping):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, enum.Enum):
        return toml_value(value.value)
    if isinstance(value, list | tuple | frozenset | set):
        items = [toml_value(v) for v in value]
        if any(i is None for i in items):
            return None
        return "[" + ", ".join(items) + "]"  # type: ignore[arg-type]
    return _toml_str(str(value))


def toml_literal(value: object) -> str | None:
    """:func:`toml_value`, with plain tables as inline tables (``{}``,
    ``{ prolog = 60.0 }``)."""
    import dataclasses

    if isinstance(value, Mapping) and not dataclasses.is_dataclass(value):
        items = []
        for k, v in value.items():
            lit = toml_literal(v)
            if lit is None:
                return None
            items.append(f"{_toml_key(str(k))} = {lit}")
        return "{ " + ", ".join(items) + " }" if items else "{}"
    return toml_value(value)
