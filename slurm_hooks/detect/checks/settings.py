"""The ``[checks]`` section: runner settings and one table per check.

::

    [checks]
    timeout_s = 10                    # default per-check timeout
    budget_s = { healthcheck = 30 }   # total per phase (defaults in DEFAULT_BUDGETS)
    nvml = "pynvml"                   # NVML backend by name; "lab:fake" is the lab's
    nvml_scenario = "gpus.toml"       # read by a fake backend only (lab, demo, tests)
    sysfs_root = "/sys"
    [checks.pcie]
    enabled = false                   # every table: enabled, timeout_s, phases
    [checks.gpu_temp]
    warn_c = 80                       # the rest: the check's own Settings

Check names are validated against the registry; the check-specific keys
are validated against the check's ``Settings`` dataclass, eagerly when the
whole file is validated (``slurm-hooks check``, ``Config.validate``) and
lazily, per check, on the hook path so that a hook imports only what it runs.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

from slurm_hooks.core.errors import CheckNotInstalled, ConfigError
from slurm_hooks.core.model import Phase
from slurm_hooks.core.record import field, is_table_class, record
from slurm_hooks.detect.checks.base import COMMON_SETTINGS
from slurm_hooks.detect.checks.registry import CHECKS

#: Seconds each phase may take in total.  Slurm kills a prolog at
#: PrologEpilogTimeout; keep these below it.
DEFAULT_BUDGETS: dict[str, float] = {
    Phase.HEALTHCHECK: 30.0,
    Phase.PROLOG: 60.0,  # the prolog hook passes [prolog] budget_s; this is the CLI's
    Phase.EPILOG: 60.0,
    Phase.ACCEPTANCE: 1800.0,
    Phase.WATCH: 20.0,
}
DEFAULT_TIMEOUT_S = 10.0
_TOP_KEYS = ("timeout_s", "budget_s", "nvml", "nvml_scenario", "sysfs_root")


@record
class ChecksConfig:
    """``[checks]``: time limits, the NVML backend, the sysfs root, and each
    check's own table (``[checks.<name>]``)."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    budget_s: Mapping[str, float] = field(default_factory=dict)
    #: NVML backend by name: "pynvml" (built in), or an entry point of the
    #: ``slurm_hooks.nvml`` group, e.g. the lab's "lab:fake".
    nvml: str = "pynvml"
    nvml_scenario: str | None = None
    sysfs_root: str = "/sys"
    #: check name -> its raw table (validated for the common keys).
    tables: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    path: str | None = None

    @classmethod
    def from_section(
        cls, data: Mapping[str, Any], *, path: str | None, prefix: str, deep: bool = True
    ) -> ChecksConfig:
        """Validate ``[checks]``.  ``deep`` also imports each configured
        check to validate its own keys (skipped on the hook path)."""
        if not isinstance(data, Mapping):
            raise ConfigError("expected a table", path=path, key=prefix)
        kwargs: dict[str, Any] = {}
        tables: dict[str, Mapping[str, Any]] = {}
        for key, value in data.items():
            dotted = f"{prefix}.{key}"
            if key == "timeout_s":
                kwargs[key] = _positive(value, path, dotted)
            elif key == "budget_s":
                if not isinstance(value, Mapping):
                    raise ConfigError("expected a table of phase = seconds", path=path, key=dotted)
                budgets = {}
                for ph, secs in value.items():
                    if ph not in set(Phase):
                        raise ConfigError(
                            f"unknown phase (known: {', '.join(Phase)})",
                            path=path,
                            key=f"{dotted}.{ph}",
                        )
                    budgets[ph] = _positive(secs, path, f"{dotted}.{ph}")
                kwargs[key] = types.MappingProxyType(budgets)
            elif key in ("nvml", "nvml_scenario", "sysfs_root"):
                if not isinstance(value, str):
                    raise ConfigError(f"expected a string, got {value!r}", path=path, key=dotted)
                kwargs[key] = value
            elif key in CHECKS:
                tables[key] = _check_table(key, value, path, dotted, deep)
            else:
                raise ConfigError(
                    f"unknown key or check (settings: {', '.join(_TOP_KEYS)}; checks: "
                    f"{', '.join(CHECKS)})",
                    path=path,
                    key=dotted,
                )
        if kwargs.get("nvml_scenario") and kwargs.get("nvml", "pynvml") == "pynvml":
            raise ConfigError(
                "nvml_scenario is read only by a fake NVML backend: set nvml as well "
                '(e.g. nvml = "lab:fake")',
                path=path,
                key=f"{prefix}.nvml_scenario",
            )
        return cls(**kwargs, tables=types.MappingProxyType(tables), path=path)

    def table(self, name: str) -> Mapping[str, Any]:
        return self.tables.get(name, types.MappingProxyType({}))

    def enabled(self, name: str) -> bool:
        return bool(self.table(name).get("enabled", True))

    def phases(self, name: str) -> frozenset[Phase]:
        t = self.table(name)
        if "phases" in t:
            return frozenset(Phase(p) for p in t["phases"])
        return CHECKS[name].phases

    def timeout(self, name: str) -> float:
        t = self.table(name)
        if "timeout_s" in t:
            return float(t["timeout_s"])
        spec = CHECKS.get(name)
        if spec is not None and spec.timeout_s is not None:
            return spec.timeout_s
        return self.timeout_s

    def budget(self, phase: Phase | str) -> float:
        ph = Phase(phase)
        return float(self.budget_s.get(ph, DEFAULT_BUDGETS[ph]))


def _positive(value: Any, path: str | None, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(
            f"expected a positive number of seconds, got {value!r}", path=path, key=key
        )
    return float(value)


def _check_table(
    name: str, value: Any, path: str | None, key: str, deep: bool
) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"expected a table [{key}], got {type(value).__name__}", path=path, key=key
        )
    if "enabled" in value and not isinstance(value["enabled"], bool):
        raise ConfigError(
            f"expected true or false, got {value['enabled']!r}", path=path, key=f"{key}.enabled"
        )
    if "timeout_s" in value:
        _positive(value["timeout_s"], path, f"{key}.timeout_s")
    if "phases" in value:
        phases = value["phases"]
        if not isinstance(phases, list) or not all(p in set(Phase) for p in phases):
            raise ConfigError(
                f"expected a list of phases ({', '.join(Phase)}), got {phases!r}",
                path=path,
                key=f"{key}.phases",
            )
    if deep:
        validate_check_settings(name, value, path)
    return types.MappingProxyType(dict(value))


def settings_class(cls: type) -> type | None | bool:
    """The dataclass a check validates its own keys with: ``settings_class``
    on the class (None: only the common keys), else a module-level
    ``Settings`` or a single ``*Settings`` dataclass defined in the check's
    module.  False: unknown, so the check validates at run time itself."""
    import importlib

    if "settings_class" in vars(cls) or any("settings_class" in vars(b) for b in cls.__mro__):
        settings: type | None = getattr(cls, "settings_class")  # noqa: B009 - not on `type`
        return settings
    module = importlib.import_module(cls.__module__)
    if isinstance(getattr(module, "Settings", None), type):
        found: type = module.Settings
        return found
    own = [
        v
        for k, v in vars(module).items()
        if k.endswith("Settings")
        and isinstance(v, type)
        and is_table_class(v)
        and v.__module__ == module.__name__
    ]
    return own[0] if len(own) == 1 else False


def validate_check_settings(name: str, table: Mapping[str, Any], path: str | None) -> None:
    """Validate the check-specific keys (see :func:`settings_class`).  A
    check that is not installed accepts anything until it is."""
    from slurm_hooks.core.config import from_mapping
    from slurm_hooks.detect.checks.registry import load_class

    rest = {k: v for k, v in table.items() if k not in COMMON_SETTINGS}
    try:
        cls = load_class(CHECKS[name])
    except CheckNotInstalled:
        return
    target = settings_class(cls)
    if target is False:
        return
    if target is None:
        if rest:
            raise ConfigError(
                f"unknown key (check {name!r} takes only {', '.join(sorted(COMMON_SETTINGS))})",
                path=path,
                key=f"checks.{name}.{sorted(rest)[0]}",
            )
        return
    from_mapping(target, rest, path=path, prefix=f"checks.{name}")  # type: ignore[arg-type]


def load_checks_config(cfg: Any, *, deep: bool = False) -> ChecksConfig:
    """The config's ``[checks]`` section (works with or without the section
    registered in ``config.SECTIONS``)."""
    return ChecksConfig.from_section(
        cfg.data.get("checks", {}), path=cfg.path, prefix="checks", deep=deep
    )
