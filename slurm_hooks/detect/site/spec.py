"""The ``[[site_checks]]`` section: one table per check.

::

    [[site_checks]]
    name = "scratch-rw"            # optional; unique; names the finding's component
    kind = "fs_mount"              # slurm_hooks.detect.site.kinds
    hosts = "gpu*"                 # NHC match string: glob, /regex/, {hostlist}, !negated
    feature = "nvme"               # and/or hostlist = "...", glob = "...", regex = "..."
    paths = ["/scratch"]           # the rest: the kind's arguments (site/args.py)
    mode = "rw"

Common keys: ``action`` ("drain", the default, or "none": report only),
``fatal`` (false: a failure is a WARN that drains nothing, NHC's ``-0``),
``enabled``, ``phases`` (default healthcheck and acceptance), and
``origin`` (free text; the translator writes the nhc.conf line here).
"""

from __future__ import annotations

import re
import types
from collections.abc import Mapping, Sequence
from typing import Any

from slurm_hooks.core.errors import ConfigError
from slurm_hooks.core.model import Action, Phase
from slurm_hooks.core.record import field, record
from slurm_hooks.detect.site.match import Hosts

COMMON_KEYS = frozenset(
    {"name", "kind", "hosts", "hostlist", "glob", "regex", "feature", "action", "fatal",
     "enabled", "phases", "origin"}
)  # fmt: skip
DEFAULT_PHASES = frozenset({Phase.HEALTHCHECK, Phase.ACCEPTANCE})
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,47}$")
_ACTIONS = {"drain": Action.DRAIN, "none": Action.NONE}


@record
class SiteCheck:
    name: str
    kind: str
    args: Any
    hosts: Hosts = Hosts()
    action: Action = Action.DRAIN
    fatal: bool = True
    enabled: bool = True
    phases: frozenset[Phase] = DEFAULT_PHASES
    origin: str = ""


@record
class SiteChecksConfig:
    checks: tuple[SiteCheck, ...] = ()
    path: str | None = field(default=None, compare=False)

    @classmethod
    def from_section(cls, data: Any, *, path: str | None, prefix: str) -> SiteChecksConfig:
        if isinstance(data, Mapping) and not data:
            return cls((), path)
        if not isinstance(data, Sequence) or isinstance(data, str):
            raise ConfigError(
                "expected an array of tables ([[site_checks]])", path=path, key=prefix
            )
        checks: list[SiteCheck] = []
        seen: set[str] = set()
        errors: list[ConfigError] = []
        for i, row in enumerate(data):
            key = f"{prefix}[{i}]"
            try:
                check = parse_row(row, i, path=path, key=key)
            except ConfigError as exc:
                errors.extend(getattr(exc, "errors", [exc]))
                continue
            if check.name in seen:
                errors.append(
                    ConfigError(f"duplicate name {check.name!r}", path=path, key=f"{key}.name")
                )
            seen.add(check.name)
            checks.append(check)
        if errors:
            from slurm_hooks.core.config import ConfigErrors

            raise ConfigErrors.of(errors)
        return cls(tuple(checks), path)

    def for_node(self, node: str, phase: Phase, features: Sequence[str] | None) -> list[SiteCheck]:
        return [
            c
            for c in self.checks
            if c.enabled and phase in c.phases and c.hosts.applies(node, features)
        ]

    @property
    def wants_features(self) -> bool:
        return any(c.hosts.feature for c in self.checks)


def parse_row(row: Any, index: int, *, path: str | None, key: str) -> SiteCheck:
    """One ``[[site_checks]]`` table -> a SiteCheck; ConfigError names ``key``."""
    from slurm_hooks.core.config import from_mapping
    from slurm_hooks.detect.site.kinds import KINDS

    if not isinstance(row, Mapping):
        raise ConfigError(f"expected a table, got {type(row).__name__}", path=path, key=key)
    kind = row.get("kind")
    if kind not in KINDS:
        raise ConfigError(
            f"unknown kind {kind!r} (known: {', '.join(KINDS)})", path=path, key=f"{key}.kind"
        )
    name = row.get("name", f"{kind}-{index + 1}")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"name must be 1-48 of A-Z a-z 0-9 _ . - (starting with a letter or digit), got {name!r}",
            path=path,
            key=f"{key}.name",
        )
    rest = {k: v for k, v in row.items() if k not in COMMON_KEYS}
    args: Any = from_mapping(KINDS[kind].args, rest, path=path, prefix=key)
    sel = {k: row[k] for k in ("hostlist", "glob", "regex", "feature") if k in row}
    if "hosts" in row:
        sel["match"] = row["hosts"]
    hosts = from_mapping(Hosts, sel, path=path, prefix=key)
    action = row.get("action", "drain")
    if action not in _ACTIONS:
        raise ConfigError(
            f"must be one of {', '.join(_ACTIONS)}, got {action!r}", path=path, key=f"{key}.action"
        )
    for flag in ("fatal", "enabled"):
        if flag in row and not isinstance(row[flag], bool):
            raise ConfigError(
                f"expected true or false, got {row[flag]!r}", path=path, key=f"{key}.{flag}"
            )
    phases = DEFAULT_PHASES
    if "phases" in row:
        raw = row["phases"]
        if not isinstance(raw, list) or not raw or not all(p in set(Phase) for p in raw):
            raise ConfigError(
                f"expected a list of phases ({', '.join(Phase)}), got {raw!r}",
                path=path,
                key=f"{key}.phases",
            )
        phases = frozenset(Phase(p) for p in raw)
    origin = row.get("origin", "")
    if not isinstance(origin, str):
        raise ConfigError(f"expected a string, got {origin!r}", path=path, key=f"{key}.origin")
    return SiteCheck(
        name=name,
        kind=kind,
        args=args,
        hosts=hosts,
        action=_ACTIONS[action],
        fatal=row.get("fatal", True),
        enabled=row.get("enabled", True),
        phases=frozenset(phases),
        origin=origin,
    )


def load_site_checks(cfg: Any) -> SiteChecksConfig:
    """The config's ``[[site_checks]]`` (empty when the section is absent)."""
    data = cfg.data.get("site_checks", types.MappingProxyType({}))
    return SiteChecksConfig.from_section(data, path=cfg.path, prefix="site_checks")
