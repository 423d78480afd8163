"""``slurm-hooks nhc import``: an nhc.conf -> ``[[site_checks]]``, nothing dropped.

Pure: text in, an :class:`Import` out.  Every line NHC would read ends up
in exactly one list: translated (with notes on what was left behind, such
as NHC's repair actions), a setting (applied, or listed as without effect
here), or untranslated with the reason.  The translations follow NHC's
documented semantics (NHC's README, "Built-in Checks"); NHC's own code is
not used.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slurm_hooks.detect.site.args import SHELL_NAME, SHIM_OWNS
from slurm_hooks.detect.site.nhc_checks import (
    GPU_MAP,
    NOT_CARRIED,
    TRANSLATORS,
    Row,
    Untranslatable,
)
from slurm_hooks.detect.site.nhc_conf import (
    ConfLine,
    ShellSyntax,
    assignment,
    expand,
    read_conf,
    words,
)


@dataclass(frozen=True)
class Translated:
    line: ConfLine
    checks: tuple[Row, ...]
    notes: tuple[str, ...] = ()
    #: Covered by built-in checks rather than site checks (nVidia healthmon).
    builtin: str = ""

    @property
    def site_functions(self) -> tuple[str, ...]:
        """The site's own NHC functions this line keeps running (its code,
        not a translation: kind ``nhc_function``)."""
        return tuple(r["function"] for r in self.checks if r["kind"] == "nhc_function")


@dataclass(frozen=True)
class Untranslated:
    line: ConfLine
    reason: str


@dataclass(frozen=True)
class Setting:
    line: ConfLine
    name: str
    value: str
    effect: str


@dataclass(frozen=True)
class Import:
    translated: tuple[Translated, ...] = ()
    untranslated: tuple[Untranslated, ...] = ()
    settings: tuple[Setting, ...] = ()
    #: Other sections the settings map to ({"general": {"observe_only": True}}).
    extra: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def check_lines(self) -> int:
        return len(self.translated) + len(self.untranslated)

    @property
    def ratio(self) -> float:
        return len(self.translated) / self.check_lines if self.check_lines else 1.0

    @property
    def complete(self) -> bool:
        return not self.untranslated

    @property
    def rows(self) -> list[Row]:
        return [r for t in self.translated for r in t.checks]

    @property
    def site_functions(self) -> list[str]:
        """Each site function the translated lines run, once, in file order."""
        return list(dict.fromkeys(f for t in self.translated for f in t.site_functions))


# -- settings -------------------------------------------------------------------------

#: Variables that change nothing a site check judges: NHC's own logging,
#: modes and the commands it uses for its own work.
_NO_EFFECT_BY_WHY: dict[str, tuple[str, ...]] = {
    "NHC's debug output": ("DEBUG",),
    "NHC's verbose output": ("VERBOSE",),
    "NHC's logging": ("SILENT",),
    "NHC's log file": ("LOGFILE",),
    "slurm-hooks always runs every check": ("NHC_CHECK_ALL",),
    "every site check is bounded by its own timeout": ("NHC_CHECK_FORKED",),
    "slurm-hooks runs in the foreground within its budget": ("DETACHED_MODE",),
    "as DETACHED_MODE": ("DETACHED_MODE_FAIL_NODATA",),
    "space is read with statvfs": ("DF_CMD", "DF_FLAGS"),
    "inodes are read with statvfs": ("DFI_CMD", "DFI_FLAGS"),
    "files are read with stat()": ("STAT_CMD", "STAT_FMT_ARGS"),
    "commands run with the hook's PATH": ("PATH",),
    "hosts are matched on the Slurm node name": ("HOSTNAME", "HOSTNAME_S"),
    "drains go through slurm-hooks' own door": ("OFFLINE_NODE",),
    "resumes go through slurm-hooks' acceptance": ("ONLINE_NODE",),
    "as ONLINE_NODE": ("IGNORE_EMPTY_NOTE",),
    "slurm-hooks' Slurm backend": (
        "SLURM_SCONTROL",
        "SLURM_SINFO",
        "SLURM_SC_OFFLINE_ARGS",
        "SLURM_SC_ONLINE_ARGS",
    ),
    "not used": ("SLURM_SERVER_HOME",),
    "job users are found from slurmstepd's children": ("JOBFILE_PATH",),
    "users are read through the system's name service": ("PASSWD_DATA_SRC",),
}
NO_EFFECT = {name: why for why, names in _NO_EFFECT_BY_WHY.items() for name in names}
#: NHC's defaults of variables a config may expand (README, "Supported
#: Variables"); node-specific ones ($HOSTNAME, $HW_*) are not here.
NHC_DEFAULTS = {"PBS_SERVER_HOME": "/var/spool/torque", "SLURM_SERVER_HOME": "/var/spool/slurmd",
                "CONFDIR": "/etc/nhc", "INCDIR": "/etc/nhc/scripts", "HELPERDIR": "/usr/libexec/nhc",
                "NAME": "nhc"}  # fmt: skip
#: Variables a translated check reads (kept for the lines after them).
USED = {"MAX_SYS_UID", "NHC_AUTH_USERS", "RM_DAEMON_MATCH", "MCELOG", "MCELOG_ARGS",
        "MCELOG_MAX_CORRECTED_RATE", "MCELOG_MAX_UNCORRECTED_RATE", "NVIDIA_HEALTHMON",
        "NVIDIA_HEALTHMON_ARGS", "NHC_RM"}  # fmt: skip


def _setting(line: ConfLine, name: str, value: str, extra: dict[str, dict[str, Any]]) -> Setting:
    if name == "TIMEOUT":
        try:
            secs = float(value)
        except ValueError:
            return Setting(line, name, value, "ignored: not a number of seconds")
        extra.setdefault("checks", {}).setdefault("budget_s", {})["healthcheck"] = secs
        return Setting(line, name, value, f"[checks] budget_s.healthcheck = {secs:g}")
    if name == "MARK_OFFLINE":
        off = value.strip() in ("0", "")
        if off:
            extra.setdefault("general", {})["observe_only"] = True
        return Setting(
            line, name, value, "[general] observe_only = true" if off else "drains as usual"
        )
    if name == "NHC_RM":
        if value.lower() == "slurm":
            return Setting(line, name, value, "Slurm: what slurm-hooks speaks")
        return Setting(line, name, value, f"ignored: slurm-hooks speaks Slurm only, not {value}")
    if name in NO_EFFECT:
        return Setting(line, name, value, f"no effect here: {NO_EFFECT[name]}")
    if name in USED:
        return Setting(line, name, value, "read by the checks that follow")
    return Setting(line, name, value, "kept for $-expansion in the lines that follow")


def read_sysconfig(text: str) -> dict[str, str]:
    """``VAR=value`` lines of /etc/sysconfig/nhc (read by NHC before its
    config): the values the config's ``$VAR`` expand to."""
    out = {}
    for raw in text.splitlines():
        a = assignment(raw.strip())
        if a is not None and not raw.lstrip().startswith("#"):
            out[a[0]] = a[1]
    return out


# -- checks ---------------------------------------------------------------------------


def translate_line(
    line: ConfLine, variables: dict[str, str], groups: Mapping[str, str]
) -> Translated:
    """One check line; raises Untranslatable."""
    hosts = _hosts(line.target, groups)
    first = line.check.split()[0]
    guarded = _guard(line.check, variables)
    if guarded is not None:
        if guarded == "":
            return Translated(line, (), ("runs nothing: the variable it tests is not set",),
                              builtin="nothing (NHC skips it too)")  # fmt: skip
        return translate_line(
            ConfLine(line.lineno, line.text, line.target, guarded), variables, groups
        )
    if first in ("if", "for", "while", "case", "[", "[[", "test", "source", "."):
        raise Untranslatable(
            f"a shell statement ({first} ...), not a check: write the check it runs"
        )
    if first in GPU_MAP:
        covered, note = GPU_MAP[first]
        return Translated(line, (), (note,), builtin=covered)
    if first in NOT_CARRIED:
        raise Untranslatable(f"{first}: {NOT_CARRIED[first]}")
    try:
        argv = words(line.check, variables)
    except ShellSyntax as exc:
        raise Untranslatable(f"the check {exc}") from exc
    if not argv:
        raise Untranslatable("empty check")
    fn, args = argv[0], argv[1:]
    if fn in NOT_CARRIED:
        raise Untranslatable(f"{fn}: {NOT_CARRIED[fn]}")
    translator = TRANSLATORS.get(fn)
    if translator is None and not (fn.startswith("check_") and SHELL_NAME.match(fn)):
        raise Untranslatable(
            f"{fn} is not an NHC check function (check_*): rewrite it as a 'command' site check"
        )
    try:
        rows, notes = (translator or site_function)(fn, args, variables)
    except (ValueError, IndexError) as exc:
        if isinstance(exc, Untranslatable):
            raise
        raise Untranslatable(f"{fn}: {exc}") from exc
    for r in rows:
        r.update(hosts)
        r["origin"] = f"nhc.conf:{line.lineno}: {line.text}"[:300]
    return Translated(line, tuple(rows), tuple(notes))


#: Variables the shim of ``nhc_function`` sets from the node as NHC does.
_FROM_THE_NODE = frozenset({"HOSTNAME", "HOSTNAME_S"})


def site_function(fn: str, args: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    """A ``check_*`` function that is none of NHC's: the site's own, defined
    in its scripts directory, whose code is not in nhc.conf.  It keeps
    running through the ``nhc_function`` kind, with the variables the file
    (and ``--sysconfig``) set before this line."""
    incdir = v.get("INCDIR", NHC_DEFAULTS["INCDIR"])
    if incdir == NHC_DEFAULTS["INCDIR"] and v.get("CONFDIR", "/etc/nhc") != NHC_DEFAULTS["CONFDIR"]:
        incdir = v["CONFDIR"] + "/scripts"  # NHC: INCDIR defaults to $CONFDIR/scripts
    try:
        scripts = expand(incdir, v)
    except ShellSyntax as exc:
        raise Untranslatable(f"its scripts directory (INCDIR={incdir}) {exc}") from exc
    if not scripts.startswith("/"):
        raise Untranslatable(f"its scripts directory {scripts!r} is not an absolute path")
    row: Row = {"kind": "nhc_function", "function": fn}
    if args:
        row["args"] = list(args)
    if scripts != NHC_DEFAULTS["INCDIR"]:
        row["scripts_dir"] = scripts
    env: dict[str, str] = {}
    notes = [
        f"runs the site's own NHC function {fn} from {scripts}/*.nhc (its code, not a "
        "translation): keep the scripts on the nodes, or rewrite it as site checks"
    ]
    for name, value in v.items():
        if (
            name == SYSCONFIG_GIVEN
            or name in SHIM_OWNS
            or name in _FROM_THE_NODE
            or NHC_DEFAULTS.get(name) == value
            or not SHELL_NAME.match(name)
        ):
            continue
        try:
            # Not itself: PATH=/x:$PATH meant the value before, unknown here.
            env[name] = expand(value, {k: x for k, x in v.items() if k != name})
        except ShellSyntax as exc:
            notes.append(f"${name} is not passed to {fn}: its value {exc}")
    if env:
        row["env"] = env
    return [row], notes


_GUARD = re.compile(
    r'^if\s+\[\[?\s+(?:!\s+-z|-n)\s+"?\$\{(\w+)\+x\}"?\s+\]\]?\s*;\s*then\s+(.+?)\s*;\s*fi$'
)
#: Set among the variables when the caller read the site's sysconfig.
SYSCONFIG_GIVEN = "__sysconfig_given__"


def _guard(check: str, variables: Mapping[str, str]) -> str | None:
    """``if [ ! -z ${VAR+x} ]; then CHECK; fi`` (run CHECK when VAR is set):
    CHECK when VAR is known, "" when the caller gave the sysconfig values
    and VAR is not among them; None for any other line.  Raises
    Untranslatable when whether VAR is set is not known."""
    m = _GUARD.match(check.strip())
    if m is None:
        return None
    name, body = m.groups()
    if name in variables:
        return body
    if variables.get(SYSCONFIG_GIVEN):
        return ""
    raise Untranslatable(f"runs only when ${name} is set (in /etc/sysconfig/nhc): pass --sysconfig")


def _hosts(target: str, groups: Mapping[str, str]) -> Row:
    if not target:
        raise Untranslatable("no '||': NHC would read the whole line as a target")
    neg = target.startswith("!")
    body = target[1:] if neg else target
    if body.startswith("@"):
        name = body[1:]
        if name not in groups:
            raise Untranslatable(
                f"node group @{name}: give its hosts with --group {name}=HOSTLIST (or feature:NAME)"
            )
        spec = groups[name]
        if spec.startswith("feature:"):
            if neg:
                raise Untranslatable(f"!@{name} as a Slurm feature: a feature cannot be negated")
            return {"feature": spec.partition(":")[2]}
        return {"hosts": ("!" if neg else "") + "{" + spec + "}"}
    if target == "*":
        return {}
    from slurm_hooks.detect.site.match import validate_mstr

    try:
        validate_mstr(target)
    except Exception as exc:  # noqa: BLE001 - ConfigError from a bad regex or hostlist
        raise Untranslatable(f"target {target!r}: {exc}") from exc
    return {"hosts": target}


def import_conf(
    text: str,
    *,
    groups: Mapping[str, str] | None = None,
    variables: Mapping[str, str] | None = None,
) -> Import:
    """Translate an nhc.conf.  Variables are tracked in file order and apply
    to the lines after them (per target, as NHC would on each node: a
    setting under a narrower target is applied to every later line with a
    note, since it cannot be split per host here)."""
    groups = groups or {}
    variables = {**NHC_DEFAULTS, **(variables or {})}
    translated: list[Translated] = []
    untranslated: list[Untranslated] = []
    settings: list[Setting] = []
    extra: dict[str, dict[str, Any]] = {}
    for line in read_conf(text):
        if not line.target:
            # No "||": NHC reads the whole line as a target, which no host
            # name matches, so NHC ignores it too.
            settings.append(
                Setting(
                    line,
                    "",
                    "",
                    "ignored, as NHC ignores it (no '||': no host matches the line as a target)",
                )
            )
            continue
        assign = assignment(line.check)
        if assign is not None and line.target:
            name, value = assign
            variables[name] = value
            s = _setting(line, name, value, extra)
            if line.target != "*":
                s = Setting(
                    line,
                    name,
                    value,
                    f"{s.effect} (set for {line.target} only in NHC; applied to all here)",
                )
            settings.append(s)
            continue
        try:
            t = translate_line(line, variables, groups)
            for r in t.checks:
                _validate(r)
            translated.append(t)
        except Untranslatable as exc:
            untranslated.append(Untranslated(line, str(exc)))
    _number(translated)
    return Import(tuple(translated), tuple(untranslated), tuple(settings), extra)


def _validate(row: Row) -> None:
    """The row as the config loader will read it: a value it would refuse
    (a regex Python cannot compile, a size without a number) makes the
    line untranslated here rather than the config invalid later."""
    from slurm_hooks.core.errors import ConfigError
    from slurm_hooks.detect.site.spec import parse_row

    try:
        parse_row(row, 0, path=None, key="site_checks")
    except ConfigError as exc:
        raise Untranslatable(f"translated, but the result is not valid: {exc}") from exc


def _number(translated: list[Translated]) -> None:
    """Unique, readable names: <kind>-<nhc.conf line>[-n]."""
    for t in translated:
        for i, r in enumerate(t.checks):
            suffix = f"-{i + 1}" if len(t.checks) > 1 else ""
            r["name"] = f"{r['kind'].replace('_', '-')}-l{t.line.lineno}{suffix}"


# -- output ---------------------------------------------------------------------------


def _toml_value(v: Any) -> str:
    import json

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {v!r} as TOML")


_FIRST = ("name", "kind", "hosts", "hostlist", "feature", "fatal")


def to_toml(imp: Import, source: str = "nhc.conf") -> str:
    """The equivalent config: ``[[site_checks]]`` tables, the sections the
    settings map to, and every other line as a comment with its reason."""
    out = [
        f"# Imported from {source} by slurm-hooks nhc import: {len(imp.translated)} of "
        f"{imp.check_lines} check line(s) translated ({imp.ratio:.0%}).",
        "# NHC matched its targets against the host name; these match the Slurm node name.",
    ]
    if imp.site_functions:
        lines = sum(1 for t in imp.translated if t.site_functions)
        out.append(
            f"# {lines} line(s) run the site's own NHC functions, not a translation of them "
            f"(kind nhc_function): {', '.join(imp.site_functions)}."
        )
    for section, table in imp.extra.items():
        out += ["", f"[{section}]"] + [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    for s in imp.settings:
        what = f"{s.name}={s.value}" if s.name else s.line.text
        out.append(f"# setting, nhc.conf:{s.line.lineno}: {what}: {s.effect}")
    for t in imp.translated:
        if t.builtin:
            out += ["", f"# nhc.conf:{t.line.lineno}: {t.line.text}", f"#   covered by {t.builtin}"]
        for r in t.checks:
            out += ["", "[[site_checks]]"]
            keys = [k for k in _FIRST if k in r] + [
                k for k in r if k not in _FIRST and k != "origin"
            ]
            out += [f"{k} = {_toml_value(r[k])}" for k in keys]
            out.append(f"origin = {_toml_value(r['origin'])}")
        out += [f"# note: {n}" for n in t.notes if not t.builtin]
    if imp.untranslated:
        out += ["", "# NOT TRANSLATED (each needs a decision):"]
        out += [
            f"# nhc.conf:{u.line.lineno}: {u.line.text}\n#   why: {u.reason}"
            for u in imp.untranslated
        ]
    return "\n".join(out) + "\n"


def to_json(imp: Import) -> dict[str, Any]:
    def line(x: ConfLine) -> dict[str, Any]:
        return {"line": x.lineno, "text": x.text, "target": x.target}

    return {
        "check_lines": imp.check_lines,
        "translated_lines": len(imp.translated),
        "ratio": round(imp.ratio, 4),
        "complete": imp.complete,
        "site_functions": imp.site_functions,
        "site_checks": imp.rows,
        "sections": {k: dict(v) for k, v in imp.extra.items()},
        "translated": [{**line(t.line), "names": [r["name"] for r in t.checks], "notes": list(t.notes), "builtin": t.builtin, "runs_site_code": bool(t.site_functions)} for t in imp.translated],
        "untranslated": [{**line(u.line), "reason": u.reason} for u in imp.untranslated],
        "settings": [{**line(s.line), "name": s.name, "value": s.value, "effect": s.effect} for s in imp.settings],
    }  # fmt: skip
