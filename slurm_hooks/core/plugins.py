"""Backends by name: built-in ones in a dict, others through entry points.

A registry maps a configured name (``[checks] nvml = "pynvml"``,
``[checks.burnin] engine = "gpu_burn"``) to a callable that builds the
backend.  Names a registry does not hold are looked up in an entry-point
group of the installed distributions (``slurm_hooks.nvml``,
``slurm_hooks.engines``), which is how the lab's fakes plug in
(``nvml = "lab:fake"``) without the product importing the lab or switching
to a fake by itself (ReFrame's scheduler registry is the model).

Scanning entry points imports :mod:`importlib.metadata` and reads every
installed distribution's metadata (tens of ms), so it happens only when a
name that is not built in is configured: a hook on a production node that
uses the built-in names never pays for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from slurm_hooks.core.errors import ConfigError


def plugin_names(group: str) -> list[str]:
    """Names installed in entry-point ``group`` (scans: not for hook paths)."""
    from importlib.metadata import entry_points

    return sorted({ep.name for ep in entry_points(group=group)})


def resolve(
    group: str,
    name: str,
    builtins: Mapping[str, Callable[..., Any]],
    *,
    key: str | None = None,
    path: str | None = None,
    also_known: Sequence[str] = (),
) -> Callable[..., Any]:
    """The factory registered as ``name``: a built-in one, else the object an
    entry point of ``group`` names (loaded, i.e. its module imported).

    Raises ConfigError naming ``key`` (and the config ``path``) with the
    names that exist (``also_known``: names the caller handles itself) when
    none matches or the plug-in cannot be loaded."""
    if name in builtins:
        return builtins[name]
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group=group) if ep.name == name]
    if not found:
        known = sorted({*builtins, *also_known, *plugin_names(group)})
        raise ConfigError(
            f"unknown backend {name!r} (known: {', '.join(known)}; plug-ins register in "
            f"the entry-point group {group!r})",
            path=path,
            key=key,
        )
    try:
        factory = found[0].load()
    except Exception as exc:  # noqa: BLE001 - any import failure of a plug-in
        raise ConfigError(
            f"backend {name!r} ({found[0].value}) cannot be loaded: {type(exc).__name__}: {exc}",
            path=path,
            key=key,
        ) from exc
    if not callable(factory):
        raise ConfigError(
            f"backend {name!r} ({found[0].value}) is not callable", path=path, key=key
        )
    return factory
