"""The configuration as documented TOML tables: install's commented defaults,
``config show`` and docs/configuration.md.

One walk over a section's dataclass (``config_tables``) gives the TOML tables
and keys with type, default and ``#:`` comment; the commented defaults file,
``config show`` and docs/configuration.md (tools/gen_config_docs.py) are all
rendered from it, so they cannot disagree about which keys exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from slurm_hooks.cli.config_toml import (
    _toml_key,
    toml_literal,
)

#: Placeholder for a user-chosen table name (``[profiles.<name>]``).
PLACEHOLDER = "<name>"

#: ``[checks]`` keys: ChecksConfig parses itself and has no ``#:`` comments.
CHECKS_KEY_DOCS: Mapping[str, str] = {
    "timeout_s": "Seconds one check may take when neither its table nor the check itself "
    "sets timeout_s.",
    "budget_s": "Seconds each phase may take in total, per phase (healthcheck, prolog, "
    "epilog, acceptance, watch); a phase left out keeps its default. The prolog hook "
    "uses [prolog] budget_s instead.",
    "nvml": "NVML backend by name: pynvml (built in, the real library), or an entry "
    "point of the slurm_hooks.nvml group, such as the lab's lab:fake (lab, demo and tests).",
    "nvml_scenario": "Scenario file for a fake NVML backend (relative to the config file); "
    "an error with nvml = pynvml.",
    "sysfs_root": "Where sysfs is mounted (PCIe and InfiniBand checks read it).",
}
#: Keys every ``[checks.<name>]`` table takes (``checks.base.COMMON_SETTINGS``);
#: the runner reads them, not the check.
COMMON_CHECK_KEY_DOCS: Mapping[str, str] = {
    "enabled": "false: the check never runs, in any phase.",
    "timeout_s": "Seconds one run may take; unset: [checks] timeout_s.",
    "phases": "Phases the check runs in (default: the ones it is registered for).",
}


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


@dataclass(frozen=True)
class KeyDoc:
    """One key of a TOML table: what the docs and the defaults file show."""

    name: str
    #: Human-readable type ("float", "list of str", "str or unset").
    type: str
    value: object
    #: False for a required key (no default).
    has_value: bool = True
    doc: str = ""
    #: The key holds one sub-table per name (``[policy.repeat.<name>]``):
    #: those tables follow; the key itself is not written as ``key = ...``.
    tables: bool = False


@dataclass(frozen=True)
class TableDoc:
    """One TOML table (``[bridge.lending]``) and its keys, in field order."""

    name: str
    summary: str = ""
    #: "module:Class" defining the keys ("" for raw tables).
    source: str = ""
    keys: tuple[KeyDoc, ...] = ()


def type_name(tp: Any) -> str:
    """A TOML-minded name for a field annotation."""
    import dataclasses
    import types as pytypes
    import typing

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return "any"
    if origin in (typing.Union, pytypes.UnionType):
        rest = [a for a in args if a is not type(None)]
        name = " or ".join(type_name(a) for a in rest)
        return name + (" or unset" if len(rest) < len(args) else "")
    if origin in (tuple, list):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        vt = args[1] if len(args) == 2 else Any
        if dataclasses.is_dataclass(vt):
            return "tables"
        return "table" if vt is Any else f"table of {type_name(vt)}"
    if dataclasses.is_dataclass(tp):
        return "table"
    if isinstance(tp, type):
        return tp.__name__
    return str(tp)


def _spec_of(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _summary(cls: type) -> str:
    """The class docstring as one line, without a leading ``[name]`` label
    (the heading says it) and without dataclass's generated signature."""
    import inspect
    import re

    doc = cls.__dict__.get("__doc__") or ""
    if not doc.strip() or doc.startswith(f"{cls.__name__}("):
        return ""
    text = " ".join(inspect.cleandoc(doc).split())
    text = re.sub(r"^``\[[^\]]+\]``\s*[.:]?\s*", "", text)
    return text[:1].upper() + text[1:]


def _hints(cls: type) -> dict[str, Any]:
    import typing

    try:
        return typing.get_type_hints(cls)
    except (NameError, TypeError):
        return {}


def _dataclass_arg(tp: Any, *, mapping: bool) -> type | None:
    """``DC`` for ``Mapping[str, DC]`` (mapping) or ``DC | None`` (not)."""
    import dataclasses
    import types as pytypes
    import typing

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if mapping:
        ok = origin in (dict, Mapping) and len(args) == 2
        cand = args[1] if ok else None
    else:
        ok = origin in (typing.Union, pytypes.UnionType) and type(None) in args
        rest = [a for a in args if a is not type(None)] if ok else []
        cand = rest[0] if len(rest) == 1 else None
    return cand if isinstance(cand, type) and dataclasses.is_dataclass(cand) else None


def _field_values(obj_or_cls: object) -> list[tuple[str, object, bool]]:
    """(name, value, has_value) for an instance or, for a class, its
    defaults (has_value False: the field has none)."""
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


def config_tables(name: str, obj_or_cls: object) -> list[TableDoc]:
    """The TOML tables of section ``name``: for a class, every key with its
    default (user-named tables as ``<name>`` templates); for an instance,
    its values.  ``[checks]`` and ``[profiles]`` parse themselves and are
    walked through their registries."""
    cls = obj_or_cls if isinstance(obj_or_cls, type) else type(obj_or_cls)
    spec = _spec_of(cls)
    if spec == "slurm_hooks.detect.checks.settings:ChecksConfig":
        return _checks_tables(name, obj_or_cls)
    if spec == "slurm_hooks.detect.profiles:Profiles":
        return _profiles_tables(name, obj_or_cls)
    return _dataclass_tables(name, obj_or_cls)


def _dataclass_tables(
    name: str, obj_or_cls: object, *, skip: Iterable[str] = (), fallback_summary: str = ""
) -> list[TableDoc]:
    import dataclasses

    is_cls = isinstance(obj_or_cls, type)
    cls = obj_or_cls if is_cls else type(obj_or_cls)
    hints = _hints(cls)  # type: ignore[arg-type]
    docs = field_docs(cls)  # type: ignore[arg-type]
    skip = set(skip)
    keys: list[KeyDoc] = []
    subs: list[TableDoc] = []
    for key, value, has in _field_values(obj_or_cls):
        if key in skip:
            continue
        tp = hints.get(key, Any)
        doc = docs.get(key, "")
        sub = f"{name}.{_toml_key(key)}"
        if dataclasses.is_dataclass(value):
            subs.extend(_dataclass_tables(sub, value, fallback_summary=doc))
            continue
        optional_dc = _dataclass_arg(tp, mapping=False)
        if is_cls and value is None and optional_dc is not None:
            subs.extend(_dataclass_tables(sub, optional_dc, fallback_summary=doc))
            continue
        per_name = _dataclass_arg(tp, mapping=True)
        if per_name is not None and isinstance(value, Mapping):
            keys.append(KeyDoc(key, type_name(tp), value, has, doc, tables=True))
            if is_cls:
                subs.extend(
                    _dataclass_tables(f"{sub}.{PLACEHOLDER}", per_name, fallback_summary=doc)
                )
            for k, v in value.items():
                subs.extend(_dataclass_tables(f"{sub}.{_toml_key(str(k))}", v))
            continue
        if isinstance(value, Mapping) and any(isinstance(v, Mapping) for v in value.values()):
            keys.append(KeyDoc(key, type_name(tp), value, has, doc, tables=True))
            for k, v in value.items():
                raw = tuple(KeyDoc(str(kk), "", vv) for kk, vv in v.items())
                subs.append(TableDoc(f"{sub}.{_toml_key(str(k))}", keys=raw))
            continue
        keys.append(KeyDoc(key, type_name(tp), value, has, doc))
    summary = _summary(cls) or fallback_summary  # type: ignore[arg-type]
    return [TableDoc(name, summary, _spec_of(cls), tuple(keys)), *subs]  # type: ignore[arg-type]


def check_settings_class(check: str) -> type | None:
    """The dataclass holding ``[checks.<check>]``'s own keys (None: only the
    common ones).  A check that validates its table itself (no
    ``settings_class``) counts when its module uses exactly one
    ``*Settings`` dataclass (the xid check's ``XidSettings``)."""
    import dataclasses
    import importlib

    from slurm_hooks.detect.checks.registry import CHECKS, load_class
    from slurm_hooks.detect.checks.settings import settings_class

    check_cls = load_class(CHECKS[check])
    target = settings_class(check_cls)
    if target is not False:
        return target  # type: ignore[return-value]
    module = importlib.import_module(check_cls.__module__)
    found = [
        v
        for k, v in vars(module).items()
        if k.endswith("Settings") and isinstance(v, type) and dataclasses.is_dataclass(v)
    ]
    return found[0] if len(found) == 1 else None


def _checks_tables(name: str, obj_or_cls: object) -> list[TableDoc]:
    from slurm_hooks.core.config import from_mapping
    from slurm_hooks.core.errors import CheckNotInstalled
    from slurm_hooks.core.model import Phase
    from slurm_hooks.detect.checks.base import COMMON_SETTINGS
    from slurm_hooks.detect.checks.registry import CHECKS
    from slurm_hooks.detect.checks.settings import DEFAULT_BUDGETS

    is_cls = isinstance(obj_or_cls, type)
    cls = obj_or_cls if is_cls else type(obj_or_cls)
    hints = _hints(cls)  # type: ignore[arg-type]
    top: list[KeyDoc] = []
    for key, value, has in _field_values(obj_or_cls):
        if key in ("tables", "path"):  # the per-check tables below; the file's path
            continue
        if key == "budget_s":
            value = {str(ph): s for ph, s in DEFAULT_BUDGETS.items()} | {
                str(ph): s
                for ph, s in value.items()  # type: ignore[attr-defined]
            }
        top.append(KeyDoc(key, type_name(hints.get(key, Any)), value, has, CHECKS_KEY_DOCS[key]))
    summary = (
        "Runner settings. Each check also reads its own table, [checks.<check>], "
        "below: the common keys enabled, timeout_s and phases, and the check's own."
    )
    tables = [TableDoc(name, summary, _spec_of(cls), tuple(top))]  # type: ignore[arg-type]
    for check, spec in CHECKS.items():
        table = f"{name}.{check}"
        if is_cls:
            enabled, timeout, phases, raw = True, spec.timeout_s, spec.phases, {}
        else:
            cfg: Any = obj_or_cls
            enabled, timeout = cfg.enabled(check), cfg.timeout(check)
            phases, raw = cfg.phases(check), cfg.table(check)
        keys = [
            KeyDoc("enabled", "bool", enabled, True, COMMON_CHECK_KEY_DOCS["enabled"]),
            KeyDoc(
                "timeout_s", "float or unset", timeout, True, COMMON_CHECK_KEY_DOCS["timeout_s"]
            ),
            KeyDoc(
                "phases",
                "list of str",
                [str(p) for p in Phase if p in phases],
                True,
                COMMON_CHECK_KEY_DOCS["phases"],
            ),
        ]
        source, subs = "", []
        try:
            target = check_settings_class(check)
        except CheckNotInstalled:
            target = None
        if target is not None:
            own = {k: v for k, v in raw.items() if k not in COMMON_SETTINGS}
            settings = target if is_cls else from_mapping(target, own, path=cfg.path, prefix=table)
            walked = _dataclass_tables(table, settings, skip=COMMON_SETTINGS)
            keys.extend(walked[0].keys)
            source, subs = walked[0].source, walked[1:]
        tables.append(
            TableDoc(table, spec.summary[:1].upper() + spec.summary[1:] + ".", source, tuple(keys))
        )
        tables.extend(subs)
    return tables


def _profiles_tables(name: str, obj_or_cls: object) -> list[TableDoc]:
    from slurm_hooks.detect.profiles import Profile

    is_cls = isinstance(obj_or_cls, type)
    cls = obj_or_cls if is_cls else type(obj_or_cls)
    tables = [TableDoc(name, _summary(cls), _spec_of(cls))]  # type: ignore[arg-type]
    named = {PLACEHOLDER: Profile} if is_cls else dict(obj_or_cls.profiles)  # type: ignore[attr-defined]
    for key, prof in named.items():
        sub = PLACEHOLDER if key == PLACEHOLDER else _toml_key(key)
        tables.extend(_dataclass_tables(f"{name}.{sub}", prof, skip=("name",)))
    return tables


def _doc_lines(doc: str) -> list[str]:
    import textwrap

    lines = textwrap.wrap(doc, 76, break_long_words=False, break_on_hyphens=False)
    return [f"# {line}" for line in lines] or ["#"]


def render_table(
    name: str, obj_or_cls: object, *, commented: bool = False, with_docs: bool = True
) -> list[str]:
    """``[name]`` and its keys, then its sub-tables (``[name.key]``,
    ``[checks.<check>]``, ``[profiles.<name>]``).  ``commented`` prefixes
    every key line with ``# `` (the defaults file: every key documented,
    none set)."""
    c = "# " if commented else ""
    lines: list[str] = []
    said: set[tuple[str, str]] = set()  # (key, doc) already written: said once is enough
    for i, table in enumerate(config_tables(name, obj_or_cls)):
        if i:
            lines.append("")
        lines.append(f"{c}[{table.name}]")
        if with_docs and table.summary:
            lines.extend(_doc_lines(table.summary))
        for key in table.keys:
            if key.tables:
                continue
            if with_docs and key.doc and (key.name, key.doc) not in said:
                said.add((key.name, key.doc))
                lines.extend(_doc_lines(key.doc))
            literal = toml_literal(key.value) if key.has_value else None
            if literal is None:
                state = "(unset)" if key.has_value else "(required)"
                lines.append(f"# {_toml_key(key.name)} = {state}")
            else:
                lines.append(f"{c}{_toml_key(key.name)} = {literal}")
    return lines


def resolve_sections(
    sections: Mapping[str, str] | None = None,
) -> tuple[dict[str, type], dict[str, str]]:
    """(section -> class, section -> import error) for the registered sections."""
    from slurm_hooks.core import config as config_mod

    specs = sections if sections is not None else config_mod.SECTIONS
    classes: dict[str, type] = {}
    errors: dict[str, str] = {}
    for name, spec in specs.items():
        try:
            classes[name] = config_mod._resolve(spec)
        except (ImportError, AttributeError) as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"
    return classes, errors


def section_order(names: Iterable[str]) -> list[str]:
    """``general`` first, then alphabetical: the defaults file, ``config
    show`` and the reference all list sections in this order."""
    return sorted(names, key=lambda n: (n != "general", n))


def default_config_text(sections: Mapping[str, str] | None = None) -> str:
    """The config file ``install`` writes when there is none: every section
    and key with its default, commented out, so the file changes nothing
    until an admin uncomments a line."""
    classes, _ = resolve_sections(sections)
    out = [
        "# slurm-hooks configuration (TOML).  Every key below is commented out and shows",
        "# its default; uncomment and edit what you need.  Check the file with",
        "#   slurm-hooks config validate /etc/slurm-hooks/config.toml",
        f"# {PLACEHOLDER} in a table name stands for a name of your choice",
        "# ([profiles.h100], [policy.repeat.XID13]).  Reference: docs/configuration.md",
    ]
    for name in section_order(classes):
        out.append("")
        out.extend(render_table(name, classes[name], commented=True))
    return "\n".join(out) + "\n"
