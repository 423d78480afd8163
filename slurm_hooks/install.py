"""What ``slurm-hooks install`` writes, and how it compares with a running Slurm.

Three parts, all plain functions so tests need no root and no cluster:

* the hook shims (``render_shim``): slurmd starts Prolog, Epilog and
  HealthCheckProgram with no PATH, and HealthCheckProgram also without
  SLURM_CONF, so each shim sets defaults for both and execs the Python of
  the installation (an absolute path, written in at install time);
* the slurm.conf lines the installation needs (``recommended_settings``);
* a comparison with ``scontrol show config`` (``compare``) that says, line by
  line, what the running Slurm already has and what it lacks.

The shims in the source tree (``prolog.d/50-slurm-hooks`` ...) are
``render_shim(phase)`` with the default ``python3``; a test keeps them equal.
"""

from __future__ import annotations

import enum
import os
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .probes.commands import DEFAULT_PATH

SHIM_NAME = "50-slurm-hooks"
HEALTHCHECK_NAME = "slurm-hooks-healthcheck"
DEFAULT_PREFIX = "/etc/slurm"
DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
#: Seconds added to the hook budget for PrologEpilogTimeout: interpreter
#: start, Slurm calls after the checks, and slack so slurmd never kills a
#: hook that is about to report.
TIMEOUT_MARGIN_S = 30
#: Hook budget when the config's own budgets cannot be read (the default
#: [prolog] budget_s, 60 s; the epilog's default is 60 s too).
DEFAULT_HOOK_BUDGET_S = 60
#: Seconds a requeued job waits before it may start again is cred_expire+1;
#: Slurm's default is 120.
SUGGESTED_CRED_EXPIRE = 30
HEALTHCHECK_INTERVAL = 300


class Phase(enum.StrEnum):
    PROLOG = "prolog"
    EPILOG = "epilog"
    HEALTHCHECK = "healthcheck"


#: phase -> (directory under the prefix, file name)
SHIM_PATHS: Mapping[Phase, tuple[str, str]] = {
    Phase.PROLOG: ("prolog.d", SHIM_NAME),
    Phase.EPILOG: ("epilog.d", SHIM_NAME),
    Phase.HEALTHCHECK: ("healthcheck", HEALTHCHECK_NAME),
}


def render_shim(
    phase: Phase | str,
    *,
    python: str = "python3",
    slurm_conf: str = DEFAULT_SLURM_CONF,
    config: str | None = None,
) -> str:
    """The shim for ``phase``.  Only defaults are set (``${VAR:-...}``): a
    site that starts slurmd with its own PATH or SLURM_CONF keeps them."""
    phase = Phase(phase)
    q = shlex.quote
    exports = [
        f'PATH="${{PATH:-{DEFAULT_PATH}}}"',
        f'SLURM_CONF="${{SLURM_CONF:-{slurm_conf}}}"',
    ]
    if config:
        exports.append(f'SLURM_HOOKS_CONFIG="${{SLURM_HOOKS_CONFIG:-{config}}}"')
    for value in (slurm_conf, config or ""):
        if any(ch in value for ch in '"$`\\\n'):
            raise ValueError(f"path not allowed in a shim: {value!r}")
    return (
        "#!/bin/sh\n"
        f"# slurm-hooks {phase} shim ('slurm-hooks install' puts it in place). slurmd starts\n"
        "# hooks with no PATH (and HealthCheckProgram without SLURM_CONF): set defaults, hand over.\n"
        f"export {' '.join(exports)}\n"
        f'exec {q(python)} -m slurm_hooks hook {phase} "$@"\n'
    )


def shim_path(prefix: str | os.PathLike[str], phase: Phase | str) -> Path:
    sub, name = SHIM_PATHS[Phase(phase)]
    return Path(prefix) / sub / name


# -- slurm.conf -------------------------------------------------------------------


class Match(enum.Enum):
    """How a running value is compared with the wanted one."""

    EQUAL = "equal"
    #: Comma-separated list that must contain the wanted items.
    CONTAINS = "contains"
    #: A number at least as large as the wanted one.
    AT_LEAST = "at_least"
    #: ``key=value`` item inside a comma list (``cred_expire=30`` in AuthInfo),
    #: where any value at most the wanted one is fine.
    ITEM_AT_MOST = "item_at_most"


@dataclass(frozen=True)
class Setting:
    key: str
    value: str
    match: Match = Match.EQUAL
    #: True for lines the hooks need; False for hints that make recovery faster.
    required: bool = True
    why: str = ""

    def line(self, running: str | None = None) -> str:
        """The slurm.conf line, merged into the running value for list keys
        (so a hint never tells an admin to drop their other parameters)."""
        if self.match is Match.CONTAINS and running and not _is_unset(running):
            items = _items(running)
            items += [i for i in _items(self.value) if i.lower() not in map(str.lower, items)]
            return f"{self.key}={','.join(items)}"
        if self.match is Match.ITEM_AT_MOST and running and not _is_unset(running):
            name = self.value.partition("=")[0]
            items = [i for i in _items(running) if i.partition("=")[0] != name]
            return f"{self.key}={','.join([*items, self.value])}"
        return f"{self.key}={self.value}"


def recommended_settings(
    prefix: str | os.PathLike[str] = DEFAULT_PREFIX,
    *,
    hook_budget_s: float = DEFAULT_HOOK_BUDGET_S,
    margin_s: float = TIMEOUT_MARGIN_S,
    healthcheck_interval: int = HEALTHCHECK_INTERVAL,
    cred_expire: int = SUGGESTED_CRED_EXPIRE,
) -> list[Setting]:
    p = Path(prefix)
    timeout = int(hook_budget_s + margin_s + 0.999)
    return [
        Setting(
            "Prolog",
            f"{p}/prolog.d/*",
            why="run every script in prolog.d (Slurm >= 22.05 accepts a glob)",
        ),
        Setting("Epilog", f"{p}/epilog.d/*", why="run every script in epilog.d"),
        Setting(
            "PrologFlags",
            "Alloc",
            Match.CONTAINS,
            why="run the prolog on every node at allocation, before the job starts",
        ),
        Setting(
            "PrologEpilogTimeout",
            str(timeout),
            Match.AT_LEAST,
            why=f"hook budget {hook_budget_s:g}s + {margin_s:g}s margin",
        ),
        Setting(
            "HealthCheckProgram",
            f"{p}/healthcheck/{HEALTHCHECK_NAME}",
            why="periodic checks on idle and busy nodes",
        ),
        Setting("HealthCheckInterval", str(healthcheck_interval), why="seconds between checks"),
        Setting("HealthCheckNodeState", "ANY", why="check busy nodes too, not only idle ones"),
        Setting(
            "SchedulerParameters",
            "nohold_on_prolog_fail",
            Match.CONTAINS,
            required=False,
            why="a job whose prolog failed restarts elsewhere instead of being held",
        ),
        Setting(
            "AuthInfo",
            f"cred_expire={cred_expire}",
            Match.ITEM_AT_MOST,
            required=False,
            why="a requeued job waits cred_expire+1 s before it may start (default 120)",
        ),
    ]


def render_snippet(settings: Sequence[Setting], running: Mapping[str, str] | None = None) -> str:
    """The lines to add; optional hints come with a comment line above them.
    List values are merged into ``running`` when it is known."""
    running = running or {}
    lines = ["# slurm-hooks (slurm-hooks install)"]
    for s in settings:
        if not s.required:
            merge = "" if running.get(s.key) else "; merge with any value you already have"
            lines.append(f"# optional: {s.why}{merge}")
        lines.append(s.line(running.get(s.key)))
    return "\n".join(lines) + "\n"


# -- comparison with the running Slurm -----------------------------------------------


class Verdict(enum.StrEnum):
    OK = "ok"
    MISSING = "missing"
    DIFFERS = "differs"


@dataclass(frozen=True)
class Difference:
    setting: Setting
    running: str | None
    verdict: Verdict

    @property
    def suggested(self) -> str:
        return self.setting.line(self.running)


def _is_unset(value: str | None) -> bool:
    return value is None or value.strip() in ("", "(null)", "NONE", "none", "n/a")


def _items(value: str) -> list[str]:
    return [i.strip() for i in value.split(",") if i.strip()]


def _number(value: str) -> float | None:
    """``300``, ``300 sec``, ``65534`` -> float."""
    head = value.strip().split()[0] if value.strip() else ""
    try:
        return float(head)
    except ValueError:
        return None


def _same_path(a: str, b: str) -> bool:
    return os.path.normpath(a.strip()) == os.path.normpath(b.strip())


def judge(setting: Setting, running: str | None) -> Verdict:
    if _is_unset(running):
        return Verdict.MISSING
    assert running is not None
    if setting.match is Match.CONTAINS:
        have = {i.lower() for i in _items(running)}
        return (
            Verdict.OK
            if all(i.lower() in have for i in _items(setting.value))
            else (Verdict.DIFFERS)
        )
    if setting.match is Match.AT_LEAST:
        have, want = _number(running), _number(setting.value)
        # 65534 is Slurm's "no limit" for PrologEpilogTimeout.
        return (
            Verdict.OK
            if have is not None and want is not None and have >= want
            else (Verdict.DIFFERS)
        )
    if setting.match is Match.ITEM_AT_MOST:
        name, _, want = setting.value.partition("=")
        for item in _items(running):
            k, _, v = item.partition("=")
            if k.strip() == name:
                have = _number(v)
                return Verdict.OK if have is not None and have <= float(want) else (Verdict.DIFFERS)
        return Verdict.MISSING
    if setting.key in ("HealthCheckInterval",):
        have, want = _number(running), _number(setting.value)
        return Verdict.OK if have == want else Verdict.DIFFERS
    if "/" in setting.value:
        return Verdict.OK if _same_path(running, setting.value) else Verdict.DIFFERS
    if setting.key == "HealthCheckNodeState":
        # scontrol shows e.g. "ANY" or "ANY,CYCLE"; ANY must be in it.
        return (
            Verdict.OK
            if setting.value.upper() in {i.upper() for i in _items(running)}
            else (Verdict.DIFFERS)
        )
    return Verdict.OK if running.strip() == setting.value else Verdict.DIFFERS


def compare(settings: Iterable[Setting], running: Mapping[str, str]) -> list[Difference]:
    return [Difference(s, running.get(s.key), judge(s, running.get(s.key))) for s in settings]


def read_running_config(
    *, timeout: float = 10.0, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``scontrol show config`` of the Slurm this host talks to.  Raises
    CommandError/CommandTimeout when scontrol is missing or slurmctld is down."""
    from .probes.commands import run
    from .slurm.parse import parse_show_config

    result = run(["scontrol", "show", "config"], timeout=timeout, env=env)
    return parse_show_config(result.stdout)


# -- files ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FileChange:
    path: Path
    #: created, updated, unchanged, kept (an existing config file is never replaced)
    change: str


def write_file(path: Path, text: str, mode: int, *, dry_run: bool = False) -> FileChange:
    """Write atomically (temp + rename) unless the content is already there."""
    try:
        old = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        old = None
    if old == text:
        if not dry_run and (path.stat().st_mode & 0o777) != mode:
            path.chmod(mode)
        return FileChange(path, "unchanged")
    change = "created" if old is None else "updated"
    if not dry_run:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(mode)
        os.replace(tmp, path)
    return FileChange(path, change)


def install_shims(
    prefix: str | os.PathLike[str],
    *,
    python: str,
    slurm_conf: str = DEFAULT_SLURM_CONF,
    config: str | None = None,
    dry_run: bool = False,
) -> list[FileChange]:
    return [
        write_file(
            shim_path(prefix, phase),
            render_shim(phase, python=python, slurm_conf=slurm_conf, config=config),
            0o755,
            dry_run=dry_run,
        )
        for phase in Phase
    ]


def install_config(path: str | os.PathLike[str], text: str, *, dry_run: bool = False) -> FileChange:
    """Write the commented default config, but never over an existing file."""
    p = Path(path)
    if p.exists():
        return FileChange(p, "kept")
    return write_file(p, text, 0o644, dry_run=dry_run)


def hook_budget_s(cfg: Any = None) -> float:
    """The longest budget of a hook that PrologEpilogTimeout bounds: the
    prolog's ``[prolog] budget_s`` and the epilog's ``[checks] budget_s``
    (their defaults when unset).  ``cfg``: a Config, a config file path, or
    None for the config the hooks load (``$SLURM_HOOKS_CONFIG`` or the
    default file); an unreadable config gives the defaults."""
    from . import config as config_mod
    from .errors import SlurmHooksError

    try:
        if cfg is None or isinstance(cfg, str | os.PathLike):
            cfg = config_mod.load(cfg, validate=False)
    except SlurmHooksError:
        cfg = config_mod.Config(path=None, data={})
    from .checks.settings import DEFAULT_BUDGETS, load_checks_config
    from .model import Phase as RunPhase
    from .prolog import PrologConfig

    try:
        prolog_s = cfg.section("prolog", PrologConfig).budget_s
    except SlurmHooksError:
        prolog_s = PrologConfig.budget_s
    try:
        epilog_s = load_checks_config(cfg).budget(RunPhase.EPILOG)
    except SlurmHooksError:
        epilog_s = DEFAULT_BUDGETS[RunPhase.EPILOG]
    return float(max(prolog_s, epilog_s))


# -- config file rendering (install's commented defaults, ``config show``) -----------


def field_docs(cls: type) -> dict[str, str]:
    """The ``#:`` comments above each field of a dataclass, from its source
    (empty when the source is not available, e.g. in a zipapp)."""
    import inspect
    import re

    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    docs: dict[str, str] = {}
    pending: list[str] = []
    field_re = re.compile(r"^\s+([A-Za-z_]\w*)\s*:")
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip())
            continue
        m = field_re.match(line)
        if m and pending:
            docs.setdefault(m.group(1), " ".join(pending))
        pending = []
    return docs


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


def _field_values(obj_or_cls: object) -> list[tuple[str, object, bool]]:
    """(name, value, has_value) for an instance or, for a class whose fields
    are not all defaulted, its defaults."""
    import dataclasses

    out = []
    for f in dataclasses.fields(obj_or_cls):  # type: ignore[arg-type]
        if not f.init:
            continue
        if not isinstance(obj_or_cls, type):
            out.append((f.name, getattr(obj_or_cls, f.name), True))
        elif f.default is not dataclasses.MISSING:
            out.append((f.name, f.default, True))
        elif f.default_factory is not dataclasses.MISSING:
            out.append((f.name, f.default_factory(), True))
        else:
            out.append((f.name, None, False))
    return out


def _doc_lines(doc: str) -> list[str]:
    import textwrap

    return [f"# {line}" for line in textwrap.wrap(doc, 76)] or ["#"]


def render_table(
    name: str, obj_or_cls: object, *, commented: bool = False, with_docs: bool = True
) -> list[str]:
    """``[name]`` and its keys; nested dataclasses and tables become
    ``[name.key]`` sub-tables.  ``commented`` prefixes every key line with
    ``# `` (the defaults file: every key documented, none set)."""
    import dataclasses

    cls = obj_or_cls if isinstance(obj_or_cls, type) else type(obj_or_cls)
    docs = field_docs(cls) if with_docs else {}
    c = "# " if commented else ""
    lines = [f"{c}[{name}]"]
    subtables: list[tuple[str, object]] = []
    for key, value, has in _field_values(obj_or_cls):
        if dataclasses.is_dataclass(value):
            subtables.append((f"{name}.{_toml_key(key)}", value))
            continue
        if isinstance(value, Mapping):
            if value and all(dataclasses.is_dataclass(v) for v in value.values()):
                for k, v in value.items():
                    subtables.append((f"{name}.{_toml_key(key)}.{_toml_key(str(k))}", v))
                continue
            if value and any(isinstance(v, Mapping) for v in value.values()):
                for k, v in value.items():
                    subtables.append((f"{name}.{_toml_key(key)}.{_toml_key(str(k))}", v))
                continue
            if not value:
                if with_docs and key in docs:
                    lines.extend(_doc_lines(docs[key]))
                lines.append(f"# {_toml_key(key)} = {{}}  (table, empty)")
                continue
            inline = ", ".join(f"{_toml_key(str(k))} = {toml_value(v)}" for k, v in value.items())
            if with_docs and key in docs:
                lines.extend(_doc_lines(docs[key]))
            lines.append(f"{c}{_toml_key(key)} = {{ {inline} }}")
            continue
        if with_docs and key in docs:
            lines.extend(_doc_lines(docs[key]))
        literal = toml_value(value) if has else None
        if literal is None:
            lines.append(f"# {_toml_key(key)} = " + ("(required)" if not has else "(unset)"))
        else:
            lines.append(f"{c}{_toml_key(key)} = {literal}")
    for sub_name, sub in subtables:
        lines.append("")
        if isinstance(sub, Mapping):
            lines.append(f"{c}[{sub_name}]")
            for k, v in sub.items():
                lit = toml_value(v)
                lines.append(f"{c}{_toml_key(str(k))} = {lit}" if lit else f"# {k} = (table)")
        else:
            lines.extend(render_table(sub_name, sub, commented=commented, with_docs=with_docs))
    return lines


def resolve_sections(
    sections: Mapping[str, str] | None = None,
) -> tuple[dict[str, type], dict[str, str]]:
    """(section -> class, section -> import error) for the registered sections."""
    from . import config as config_mod

    specs = sections if sections is not None else config_mod.SECTIONS
    classes: dict[str, type] = {}
    errors: dict[str, str] = {}
    for name, spec in specs.items():
        try:
            classes[name] = config_mod._resolve(spec)
        except (ImportError, AttributeError) as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"
    return classes, errors


def default_config_text(sections: Mapping[str, str] | None = None) -> str:
    """The config file ``install`` writes when there is none: every section
    and key with its default, commented out, so the file changes nothing
    until an admin uncomments a line."""
    classes, _ = resolve_sections(sections)
    out = [
        "# slurm-hooks configuration (TOML).  Every key below is commented out and shows",
        "# its default; uncomment and edit what you need.  Check the file with",
        "#   slurm-hooks config validate /etc/slurm-hooks/config.toml",
        "# Reference: docs/configuration.md",
    ]
    for name in sorted(classes, key=lambda n: (n != "general", n)):
        out.append("")
        out.extend(render_table(name, classes[name], commented=True))
    return "\n".join(out) + "\n"
