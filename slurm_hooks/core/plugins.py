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
uses the built-in names never pays for it.  A process that names a state
directory (:func:`remember_in`, as the check runner does) keeps each answer
there (``plugins.json``: the entry point's ``module:attr``), valid while no
directory on ``sys.path`` changed (installing or removing any distribution
changes its site directory): later runs import the plug-in's module
directly, without the scan.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from slurm_hooks.core.errors import ConfigError

log = logging.getLogger(__name__)

#: File in the state directory that remembers resolved entry points.
CACHE_FILE = "plugins.json"
_CACHE_VERSION = 1
_cache_dir: str | None = None


def remember_in(state_dir: str | None) -> None:
    """Remember entry-point answers in ``state_dir`` for this process's
    later look-ups (None: scan every time, the default)."""
    global _cache_dir
    _cache_dir = state_dir


def _stamp() -> list[list[Any]]:
    """Each ``sys.path`` directory with its mtime: a distribution installed
    into or removed from any of them changes its entry.  The working
    directory (``python -m`` puts it first) is left out: any file written
    there would change its mtime, and no installed distribution lives there."""
    out: list[list[Any]] = []
    cwd = os.getcwd()
    for entry in sys.path:
        if entry in ("", cwd):
            continue
        try:
            out.append([entry, os.stat(entry or ".").st_mtime_ns])
        except OSError:
            out.append([entry, None])
    return out


def _read_cache(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != _CACHE_VERSION:
        return {}
    if data.get("stamp") != _stamp() or not isinstance(data.get("entries"), dict):
        return {}
    return data["entries"]


def _load_value(value: str) -> Any:
    """What ``EntryPoint.load`` does for ``module:attr.sub``, without
    importing importlib.metadata."""
    module, _, attrs = value.partition(":")
    module = module.strip()
    __import__(module)  # the import statement's path (seen by -X importtime)
    obj: Any = sys.modules[module]
    for attr in filter(None, attrs.strip().split(".")):
        obj = getattr(obj, attr)
    return obj


def _remembered(group: str, name: str) -> Callable[..., Any] | None:
    if _cache_dir is None:
        return None
    value = _read_cache(os.path.join(_cache_dir, CACHE_FILE)).get(f"{group}:{name}")
    if not isinstance(value, str):
        return None
    try:
        factory = _load_value(value)
    except Exception as exc:  # noqa: BLE001 - stale answer: scan as without a cache
        log.debug("plugins: remembered %s:%s=%s failed: %s", group, name, value, exc)
        return None
    return factory if callable(factory) else None


def _remember(group: str, name: str, value: str) -> None:
    if _cache_dir is None or not os.path.isdir(_cache_dir):
        return
    path = os.path.join(_cache_dir, CACHE_FILE)
    entries = dict(_read_cache(path))
    entries[f"{group}:{name}"] = value
    doc = {"version": _CACHE_VERSION, "stamp": _stamp(), "entries": entries}
    # Replaced whole (never read half-written); not fsynced: losing it costs one scan.
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:  # a cache: the next run scans again
        log.debug("plugins: cannot remember in %s: %s", path, exc)
        with contextlib.suppress(OSError):
            os.unlink(tmp)


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
    remembered = _remembered(group, name)
    if remembered is not None:
        return remembered
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
    _remember(group, name, found[0].value)
    return factory
