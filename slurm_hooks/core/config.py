"""TOML configuration -> frozen, validated dataclasses.

One file (``/etc/slurm-hooks/config.toml`` or ``$SLURM_HOOKS_CONFIG``) holds
every section.  Each stage owns the dataclass for its own section and
registers it in SECTIONS, so that ``load()`` validates the whole file at once
and an error names the file and the dotted key, not a traceback.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import re
import stat
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from slurm_hooks.core.errors import ConfigError
from slurm_hooks.core.record import field, is_table_class, record, table_fields

DEFAULT_CONFIG = "/etc/slurm-hooks/config.toml"
ENV_CONFIG = "SLURM_HOOKS_CONFIG"

T = TypeVar("T")

#: Values of ``[general] slurm_signal`` (how the cli backend signals jobs;
#: ``slurm.cli_backend.CliClient(signal_via=)`` takes the same).
SLURM_SIGNAL_WAYS = ("auto", "scancel")
#: Values of ``[general] slurm_backend`` (slurm_hooks.slurm.factory.BACKENDS
#: is the same tuple; kept here so loading a config imports no backend code).
SLURM_BACKENDS = ("cli", "rest", "pyslurm")


#: The largest number any key takes (about 31 years in seconds): beyond it
#: ``timedelta(seconds=x)`` and deadline arithmetic overflow.
MAX_NUMBER = 1e9
MAX_INT = 2**31 - 1
#: Keys whose 0 breaks the runtime (a timeout of 0, an interval of 0 that
#: spins, an empty window): they must be > 0.  Matched on the key's name,
#: which contains one of :data:`_POSITIVE_PARTS` or is one of
#: :data:`_POSITIVE_NAMES`.  Plain string tests, not a regular expression:
#: every hook start would pay for compiling one.
_POSITIVE_PARTS = (
    "timeout",
    "interval",
    "window",
    "budget",
    "validity",
    "retry_s",
    "retry_max_s",
    "lease_duration",
    "refeed",
    "reservation_minutes",
    "_min_",
    "_tflops",
    "_gbps",
    "memory_gb",
    "_temp_",
)
_POSITIVE_NAMES = ("iters",)
#: Shares of a set of nodes: in (0, 1].
_FRACTION_SUFFIXES = ("_fraction", "_share")
_PORT_SUFFIX = "_port"


@record
class Bounds:
    """The range a numeric key takes.  A field may set its own with
    ``field(metadata={"bounds": Bounds(...)})``; otherwise
    :func:`default_bounds` decides from the key's name."""

    low: float = 0.0
    high: float = MAX_NUMBER
    low_open: bool = False  # True: value must be > low

    def check(self, value: float) -> str | None:
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number, got {value!r}"
        if value < self.low or (self.low_open and value == self.low) or value > self.high:
            lo = "(" if self.low_open else "["
            return f"must be in {lo}{self.low:g}, {self.high:g}], got {value!r}"
        return None

    def describe(self) -> str:
        return f"{'>' if self.low_open else '>='} {self.low:g}, <= {self.high:g}"


def default_bounds(key: str, *, integer: bool = False) -> Bounds:
    """Every number is finite and >= 0; timeouts, intervals, windows and
    budgets > 0; fractions and shares in (0, 1]; ports in [0, 65535]."""
    name = key.rsplit(".", 1)[-1].split("[", 1)[0]
    parts = [p.split("[", 1)[0] for p in key.split(".")]
    high = float(MAX_INT) if integer else MAX_NUMBER
    end = _without_final_newline(name)
    if end.endswith(_PORT_SUFFIX):
        return Bounds(0, 65535)
    if end.endswith(_FRACTION_SUFFIXES):
        return Bounds(0, 1, low_open=True)
    if any(_positive(p) for p in parts[1:] or parts):
        return Bounds(0, high, low_open=True)
    return Bounds(0, high)


def _without_final_newline(name: str) -> str:
    """``name`` as an end-of-name match sees it (a quoted TOML key may hold
    a newline; the rule has always matched just before a final one)."""
    return name[:-1] if name.endswith("\n") else name


def _positive(part: str) -> bool:
    return (
        any(s in part for s in _POSITIVE_PARTS) or _without_final_newline(part) in _POSITIVE_NAMES
    )


class InvalidKey(ValueError):
    """Raised by a section's ``validate()`` about one of its keys, so that
    the ConfigError names ``section.key`` rather than the whole section."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


@record
class GeneralConfig:
    """Settings every stage shares."""

    #: Where the per-node state store, audit log and cursors live.
    state_dir: str = "/var/lib/slurm-hooks"
    #: Shared directory (NFS, Lustre, ...) every host appends a copy of its
    #: audit records to, one ``<node>.jsonl`` per node: ``slurm-hooks history``
    #: on any host then shows the fleet, and an admin's ``resume`` lands in the
    #: node's file.  Absolute path; it must exist (it is never created).
    #: Empty: each host keeps its own log only (docs/history.md).
    audit_dir: str = ""
    #: Log level of the hooks and the watcher: a logging level name (DEBUG,
    #: INFO, WARNING, ERROR, CRITICAL; any case).  ``SLURM_HOOKS_LOG_LEVEL``
    #: wins, and the watcher's ``--log-level`` or ``-v``.  The admin CLI does
    #: not read it (it loads the config per command): ``-v``, else
    #: ``SLURM_HOOKS_LOG_LEVEL``, else WARNING.
    log_level: str = "INFO"
    #: Slurm access backend: "cli" (scontrol/sinfo/squeue/scancel on this
    #: host), "rest" (slurmrestd: for the bridge, and admin hosts without
    #: Slurm's commands; needs ``slurm_rest_url`` or ``slurm_rest_socket``) or
    #: "pyslurm".
    slurm_backend: str = "cli"
    #: How the cli backend signals jobs: "auto" (below Slurm 24.05, where
    #: ``scancel --signal`` reads the whole job table first, through
    #: libslurm's ``slurm_kill_job2``, the call scancel makes after that
    #: read, when the library is found; else scancel) or "scancel" (always).
    slurm_signal: str = "auto"
    #: Log decisions without acting on them.
    observe_only: bool = False
    #: Seconds any one scontrol/sinfo call or slurmrestd request may take.
    slurm_timeout: float = 10.0
    #: With ``slurm_backend = "rest"``: slurmrestd's URL (``http://host:6820``
    #: or ``https://``), sent the JWT named by ``slurm_rest_token_env``.  Give
    #: this or ``slurm_rest_socket``, not both.  The bridge's
    #: ``[bridge] slurm_rest_url``, when set, wins for the bridge.
    slurm_rest_url: str = ""
    #: With ``slurm_backend = "rest"``: absolute path of slurmrestd's unix
    #: socket (``rest_auth/local``: slurmrestd trusts the caller's uid, no
    #: token; needs requests-unixsocket, the ``rest`` extra).
    slurm_rest_socket: str = ""
    #: Sent as ``X-SLURM-USER-NAME`` with the JWT (only when a token is set).
    slurm_rest_user: str = ""
    #: Name of the environment variable holding slurmrestd's JWT (never the
    #: token itself); unset or empty: no token header is sent.
    slurm_rest_token_env: str = "SLURM_JWT"
    #: OpenAPI version to ask slurmrestd for: auto (the default) takes the
    #: newest of v0.0.38..v0.0.44 the server offers (22.05: v0.0.38; 24.11:
    #: v0.0.40-v0.0.42); or a fixed one such as v0.0.42.
    slurm_rest_api: str = "auto"

    def validate(self) -> None:
        if self.slurm_rest_api != "auto" and not re.fullmatch(r"v0\.0\.\d+", self.slurm_rest_api):
            raise InvalidKey(
                "slurm_rest_api", f"must be auto or look like v0.0.42, got {self.slurm_rest_api!r}"
            )
        if self.log_level.upper() not in logging.getLevelNamesMapping():
            raise ValueError(
                f"log_level must be a logging level name (DEBUG, INFO, WARNING, ERROR,"
                f" CRITICAL), got {self.log_level!r}"
            )
        if self.slurm_signal not in SLURM_SIGNAL_WAYS:
            raise InvalidKey("slurm_signal", f"must be auto or scancel, got {self.slurm_signal!r}")
        if self.slurm_backend not in SLURM_BACKENDS:
            raise InvalidKey(
                "slurm_backend",
                f"must be one of {', '.join(SLURM_BACKENDS)}, got {self.slurm_backend!r}",
            )
        # Only "both" is refused here: whether a rest backend without an
        # address is usable depends on the caller (the bridge has its own
        # [bridge] slurm_rest_url), so client_from_config() checks "neither".
        if self.slurm_rest_url and self.slurm_rest_socket:
            raise InvalidKey(
                "slurm_rest_url",
                "give slurm_rest_url or slurm_rest_socket, not both",
            )
        if self.slurm_rest_url and not self.slurm_rest_url.startswith(("http://", "https://")):
            raise InvalidKey(
                "slurm_rest_url",
                f"must be an http:// or https:// URL, got {self.slurm_rest_url!r}",
            )
        if self.audit_dir and not self.audit_dir.startswith("/"):
            raise InvalidKey("audit_dir", f"must be an absolute path, got {self.audit_dir!r}")
        if self.slurm_rest_socket and not self.slurm_rest_socket.startswith("/"):
            raise InvalidKey(
                "slurm_rest_socket",
                f"must be an absolute path, got {self.slurm_rest_socket!r}",
            )


#: section name -> "module:Class", imported only when the section is read or
#: validated.  Stages add their own section here.
SECTIONS: dict[str, str] = {
    "general": "slurm_hooks.core.config:GeneralConfig",
    "metrics": "slurm_hooks.act.metrics:MetricsConfig",
    "policy": "slurm_hooks.decide.config:PolicyConfig",
    "notify": "slurm_hooks.act.notify.config:NotifyConfig",
    "bridge": "slurm_hooks.bridge.settings:BridgeConfig",
    "profiles": "slurm_hooks.detect.profiles:Profiles",
    "checks": "slurm_hooks.detect.checks.settings:ChecksConfig",
    "watch": "slurm_hooks.agent.watch:WatchConfig",
    "prolog": "slurm_hooks.agent.prolog:PrologConfig",
    "acceptance": "slurm_hooks.agent.acceptance:AcceptanceConfig",
    "repair": "slurm_hooks.decide.repair:RepairConfig",
    "preflight": "slurm_hooks.agent.preflight:PreflightConfig",
    "progress": "slurm_hooks.detect.progress.settings:ProgressConfig",
}
#: Sections that are arrays of tables (``[[site_checks]]``), each parsed by
#: its class's ``from_section``; documented by hand (docs/site-checks.md),
#: not by the generated reference, which walks SECTIONS' dataclasses.
ARRAY_SECTIONS: dict[str, str] = {
    "site_checks": "slurm_hooks.detect.site.spec:SiteChecksConfig",
}


def _resolve(spec: str) -> type:
    module, _, attr = spec.partition(":")
    found: type = getattr(importlib.import_module(module), attr)
    return found


def _coerce(value: Any, tp: Any, path: str | None, key: str, bounds: Bounds | None = None) -> Any:
    """Check ``value`` against the annotation ``tp``; convert lists to tuples
    and tables to nested dataclasses; numbers must be within ``bounds``
    (default: :func:`default_bounds` of ``key``).  Raises ConfigError
    naming ``key``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        candidates = [a for a in args if a is not type(None)]
        if len(candidates) == 1:
            return _coerce(value, candidates[0], path, key, bounds)
        for arg in candidates:
            try:
                return _coerce(value, arg, path, key, bounds)
            except ConfigError:
                continue
        raise ConfigError(f"unexpected value {value!r}", path=path, key=key)
    if is_table_class(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(f"expected a table, got {type(value).__name__}", path=path, key=key)
        return from_mapping(tp, value, path=path, prefix=key)
    if origin in (tuple, list):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"expected a list, got {type(value).__name__}", path=path, key=key)
        item_tp = args[0] if args else Any
        return tuple(_coerce(v, item_tp, path, f"{key}[{i}]", bounds) for i, v in enumerate(value))
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise ConfigError(f"expected a table, got {type(value).__name__}", path=path, key=key)
        vt = args[1] if len(args) == 2 else Any
        return types.MappingProxyType(
            {str(k): _coerce(v, vt, path, f"{key}.{k}", bounds) for k, v in value.items()}
        )
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"expected true or false, got {value!r}", path=path, key=key)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"expected a number, got {value!r}", path=path, key=key)
        problem = (bounds or default_bounds(key)).check(float(value))
        if problem:
            raise ConfigError(problem, path=path, key=key)
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"expected an integer, got {value!r}", path=path, key=key)
        problem = (bounds or default_bounds(key, integer=True)).check(value)
        if problem:
            raise ConfigError(problem, path=path, key=key)
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"expected a string, got {value!r}", path=path, key=key)
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        try:
            return tp(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"invalid value {value!r}: {exc}", path=path, key=key) from exc
    return value


_SCHEMAS: dict[type, tuple[dict[str, Any], dict[str, Any]]] = {}


def _schema(cls: type) -> tuple[dict[str, Any], dict[str, Any]]:
    """The resolved annotations and init fields of ``cls``, computed once per
    class: ``get_type_hints`` evaluates every (string) annotation, and a hook
    builds the same few classes many times (one Profile per profile table)."""
    schema = _SCHEMAS.get(cls)
    if schema is None:
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in table_fields(cls) if f.init}
        schema = _SCHEMAS[cls] = (hints, fields)
    return schema


def from_mapping(cls: type[T], data: Mapping[str, Any], *, path: str | None, prefix: str) -> T:
    """Build the frozen dataclass ``cls`` from a TOML table, rejecting
    unknown keys (a typo must not silently fall back to a default).

    A class keyed by user-chosen names (``[profiles.<name>]``) parses
    itself through a ``from_section(data, path=, prefix=)`` classmethod."""
    hook = getattr(cls, "from_section", None)
    if hook is not None:
        built: T = hook(data, path=path, prefix=prefix)
        return built
    if not is_table_class(cls):
        raise TypeError(f"{cls!r} is not a record or dataclass")
    # An empty table (most checks' settings on most nodes) has no key to
    # check: its annotations are not resolved (get_type_hints compiles each).
    hints, fields = _schema(cls) if data else ({}, {})
    errors = ErrorList()
    for name in sorted(set(data) - set(fields)):
        errors.errors.append(
            ConfigError(
                f"unknown key (known: {', '.join(sorted(fields))})",
                path=path,
                key=f"{prefix}.{name}" if prefix else name,
            )
        )
    kwargs = {}
    for name, value in data.items():
        if name not in fields:
            continue
        key = f"{prefix}.{name}" if prefix else name
        with errors:
            kwargs[name] = _coerce(
                value, hints[name], path, key, fields[name].metadata.get("bounds")
            )
    errors.raise_any()
    try:
        obj = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc), path=path, key=prefix) from exc
    validate = getattr(obj, "validate", None)
    if callable(validate):
        try:
            validate()
        except InvalidKey as exc:
            key = f"{prefix}.{exc.key}" if prefix else exc.key
            raise ConfigError(exc.message, path=path, key=key) from exc
        except ValueError as exc:
            raise ConfigError(str(exc), path=path, key=prefix) from exc
    return obj


@record
class Config:
    """The whole file, raw, plus typed access per section."""

    path: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    def section(self, name: str, cls: type[T] | None = None) -> T:
        target = cls if cls is not None else _resolve({**SECTIONS, **ARRAY_SECTIONS}[name])
        return from_mapping(target, self.data.get(name, {}), path=self.path, prefix=name)

    @property
    def general(self) -> GeneralConfig:
        return self.section("general", GeneralConfig)

    def validate(self) -> None:
        """Check every known section and reject unknown ones; every error in
        the file is reported at once (one ConfigErrors listing them)."""
        known = {**SECTIONS, **ARRAY_SECTIONS}
        errors = ErrorList()
        errors.errors.extend(
            ConfigError(
                f"unknown section (known: {', '.join(sorted(known))})",
                path=self.path,
                key=name,
            )
            for name in sorted(set(self.data) - set(known))
        )
        for name in self.data:
            if name not in known:
                continue
            with errors:
                self.section(name)
        errors.raise_any()


#: A config file is a few KiB; anything near this is not one.
MAX_CONFIG_BYTES = 4 * 1024 * 1024


class ConfigErrors(ConfigError):
    """Several errors in one file, all reported at once.  ``errors`` holds
    each (with its own ``key``); the message lists them one per line."""

    def __init__(self, errors: list[ConfigError]) -> None:
        first = errors[0]
        lines = "\n".join(f"  {e}" for e in errors)
        super().__init__(f"{len(errors)} errors:\n{lines}", path=None, key=None)
        self.path = first.path
        self.key = first.key
        self.errors = list(errors)

    @staticmethod
    def of(errors: list[ConfigError]) -> ConfigError:
        """The one error itself, or a ConfigErrors for several."""
        return errors[0] if len(errors) == 1 else ConfigErrors(errors)


class ErrorList:
    """Every error of one pass over a file, so that all are reported at once:
    ``with errors:`` runs a block and keeps what it raised (each error of a
    ConfigErrors) instead of stopping the pass; ``raise_any()`` then raises
    them together."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    def __enter__(self) -> ErrorList:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> bool:
        if isinstance(exc, ConfigErrors):
            self.errors.extend(exc.errors)
        elif isinstance(exc, ConfigError):
            self.errors.append(exc)
        else:
            return False
        return True

    def raise_any(self) -> None:
        if self.errors:
            raise ConfigErrors.of(self.errors)


def parse(text: str, *, path: str | None = None, validate: bool = True) -> Config:
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"file larger than {MAX_CONFIG_BYTES} characters", path=path)
    try:
        data = tomllib.loads(text)
    except ValueError as exc:
        # TOMLDecodeError, and the plain ValueError int() raises for an
        # integer past Python's 4300-digit limit (tomllib lets it through).
        raise ConfigError(f"invalid TOML: {exc}", path=path) from exc
    except RecursionError as exc:
        raise ConfigError("invalid TOML: arrays or tables nested too deep", path=path) from exc
    cfg = Config(path=path, data=data)
    if validate:
        cfg.validate()
    return cfg


def load(path: str | os.PathLike[str] | None = None, *, validate: bool = True) -> Config:
    """Load the config file.  With no path: ``$SLURM_HOOKS_CONFIG``, else the
    default location; a missing default file means all defaults."""
    explicit = path is not None or ENV_CONFIG in os.environ
    p = Path(path if path is not None else os.environ.get(ENV_CONFIG, DEFAULT_CONFIG))
    try:
        # The mode and owner judged are those of the file read (fstat of
        # the open descriptor), not of whatever the path names a moment later.
        with open(p, "rb") as fh:
            _check_owner(p, os.fstat(fh.fileno()))
            text = fh.read().decode("utf-8")
    except FileNotFoundError as exc:
        if explicit:
            raise ConfigError("file not found", path=str(p)) from exc
        return Config(path=None, data={})
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", path=str(p)) from exc
    return parse(text, path=str(p), validate=validate)


def _check_owner(p: Path, st: os.stat_result) -> None:
    """The config names commands root runs (``[notify] mail_argv``) and
    holds credentials (``webhook_url``): a file anyone can write is refused,
    and so is, for root, a file another user owns (docs/security.md).
    Only regular files are judged: ``/dev/null`` (an empty config) is
    world-writable by design and holds nothing."""
    if not stat.S_ISREG(st.st_mode):
        return
    if st.st_mode & 0o002:
        raise ConfigError(
            f"world-writable (mode {st.st_mode & 0o7777:04o}): anyone could make slurm-hooks "
            "run a command as root; chmod o-w it",
            path=str(p),
        )
    if os.geteuid() == 0 and st.st_uid != 0:
        raise ConfigError(
            f"owned by uid {st.st_uid}, not root: that user could make slurm-hooks run a "
            "command as root; chown root it",
            path=str(p),
        )
