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

from slurm_hooks.detect.probes.commands import DEFAULT_PATH

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
#: Seconds a requeued job waits before it may start again on Slurm >= 25.11
#: (``SchedulerParameters=requeue_delay=``; the default is cred_expire).
SUGGESTED_REQUEUE_DELAY = 0
#: Slurm releases that know a slurm.conf key or option we suggest (checked in
#: the man pages and ``scontrol show config`` of Debian's 22.05.8, 24.11.5 and
#: 26.05.5; 25.05 is unverified, so it gets the 24.11 lines).  A key Slurm does
#: not know stops slurmctld from starting, so a line is never suggested to an
#: older release.
SINCE_HEALTHCHECK_TIMEOUT = (25, 11)
SINCE_REQUEUE_DELAY = (25, 11)


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
    slurm_conf: str | None = DEFAULT_SLURM_CONF,
    config: str | None = None,
    chain: str | None = None,
) -> str:
    """The shim for ``phase``.  Only defaults are set (``${VAR:-...}``): a
    site that starts slurmd with its own PATH or SLURM_CONF keeps them.
    ``slurm_conf`` None (configless Slurm): no SLURM_CONF at all, so the
    Slurm commands find slurmd's cached config themselves.  ``chain``
    (healthcheck only): the site's own HealthCheckProgram (LBNL NHC), run
    before ours (:func:`chain_lines`)."""
    phase = Phase(phase)
    q = shlex.quote
    exports = [f'PATH="${{PATH:-{DEFAULT_PATH}}}"']
    if slurm_conf is not None:
        exports.append(f'SLURM_CONF="${{SLURM_CONF:-{slurm_conf}}}"')
    if config:
        exports.append(f'SLURM_HOOKS_CONFIG="${{SLURM_HOOKS_CONFIG:-{config}}}"')
    for value in (slurm_conf or "", config or ""):
        if any(ch in value for ch in '"$`\\\n'):
            raise ValueError(f"path not allowed in a shim: {value!r}")
    if chain is not None and phase is not Phase.HEALTHCHECK:
        raise ValueError("only the healthcheck shim chains a site program")
    head = (
        "#!/bin/sh\n"
        f"# slurm-hooks {phase} shim ('slurm-hooks install' puts it in place). slurmd starts\n"
        "# hooks with no PATH (and HealthCheckProgram without SLURM_CONF): set defaults, hand over.\n"
        f"export {' '.join(exports)}\n"
    )
    run = f'{q(python)} -m slurm_hooks hook {phase} "$@"'
    if phase is Phase.HEALTHCHECK and chain is not None:
        return head + chain_lines(chain, run)
    if phase is Phase.HEALTHCHECK:
        return head + f"exec {run}\n"  # slurmd does not read its exit status
    # Prolog/Epilog: a non-zero status drains the node with Slurm's own reason.
    # Only the hook's deliberate "reject" (3) may do that; slurm-hooks failing
    # (not installed, crashed) fails open, logged, so our bug never drains the fleet.
    reject = "exit 1" if phase is Phase.PROLOG else "exit 0"
    return head + (
        f"{run}\n"
        "rc=$?\n"
        "case $rc in\n"
        "  0) exit 0 ;;\n"
        f"  3) {reject} ;;\n"
        f'  *) logger -t slurm-hooks "{phase} hook failed (rc=$rc); job left alone" 2>/dev/null\n'
        "     exit 0 ;;\n"
        "esac\n"
    )


#: The line of a chaining healthcheck shim that names the site's program.
CHAIN_VAR = "SLURM_HOOKS_SITE_HEALTHCHECK"


def check_chain_program(path: str) -> str:
    """The site program to chain, validated: an absolute path with nothing
    a shell would interpret (it is written into a root-run script)."""
    if not os.path.isabs(path) or any(ch in path for ch in "\"$`\\\n'; &|<>*?"):
        raise ValueError(f"--chain-healthcheck needs an absolute plain path, not {path!r}")
    return os.path.normpath(path)


def chain_lines(site: str, run: str) -> str:
    """Slurm runs one HealthCheckProgram: the site's (NHC) first, then ours.
    Both always run, whatever the other returned: NHC failing must not skip
    our checks, ours failing must not skip NHC's.  The exit status is the
    site program's when it failed, else ours (slurmd only logs it).  Each
    marks the node with its own reason (NHC ``NHC:``, ours ``slurm-hooks/``)
    and neither touches the other's.  ``--dry-run`` (install's test) checks
    that the site program is executable and runs only ours, dry."""
    site = check_chain_program(site)
    q = shlex.quote
    return (
        "# Chained ('slurm-hooks install --chain-healthcheck'): the site's program, then ours.\n"
        f"{CHAIN_VAR}={q(site)}\n"
        'if [ "${1:-}" = "--dry-run" ]; then\n'
        f'  [ -x "${CHAIN_VAR}" ] || {{ echo "slurm-hooks: chained HealthCheckProgram '
        f'${CHAIN_VAR} is not executable" >&2; exit 2; }}\n'
        f"  exec {run}\n"
        "fi\n"
        f'"${CHAIN_VAR}"\n'
        "site_rc=$?\n"
        f"{run}\n"
        "rc=$?\n"
        '[ "$site_rc" -ne 0 ] && exit "$site_rc"\n'
        'exit "$rc"\n'
    )


def chained_program(shim_text: str) -> str | None:
    """The site program an installed healthcheck shim chains, if any."""
    for line in shim_text.splitlines():
        if line.startswith(f"{CHAIN_VAR}="):
            words = shlex.split(line.partition("=")[2])
            return words[0] if words else None
    return None


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

    def merged(self, running: str | None) -> str:
        """The value :meth:`line` writes (the part after ``Key=``)."""
        return self.line(running).partition("=")[2]

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
    version: Sequence[int] | None = None,
    healthcheck_budget_s: float | None = None,
    requeue_delay: int = SUGGESTED_REQUEUE_DELAY,
) -> list[Setting]:
    """The slurm.conf lines for the Slurm ``version`` (``(24, 11, 5)``; None:
    unknown, only lines every supported release accepts)."""
    p = Path(prefix)
    timeout = int(hook_budget_s + margin_s + 0.999)
    major_minor = (int(version[0]), int(version[1])) if version else None
    return _base_settings(p, timeout, hook_budget_s, margin_s, healthcheck_interval) + (
        _versioned_settings(
            major_minor, healthcheck_interval, healthcheck_budget_s, cred_expire, requeue_delay
        )
    )


def _versioned_settings(
    major_minor: tuple[int, int] | None,
    healthcheck_interval: int,
    healthcheck_budget_s: float | None,
    cred_expire: int,
    requeue_delay: int,
) -> list[Setting]:
    out: list[Setting] = []
    newer = major_minor is not None
    if newer and major_minor >= SINCE_HEALTHCHECK_TIMEOUT:  # type: ignore[operator]
        if healthcheck_budget_s is None:
            from slurm_hooks.core.model import Phase as RunPhase
            from slurm_hooks.detect.checks.settings import DEFAULT_BUDGETS

            healthcheck_budget_s = DEFAULT_BUDGETS[RunPhase.HEALTHCHECK]
        # Must stay below HealthCheckInterval (slurmctld logs an error otherwise).
        hc_timeout = max(1, min(int(healthcheck_budget_s + 30), healthcheck_interval - 1))
        out.append(
            Setting(
                "HealthCheckTimeout",
                str(hc_timeout),
                Match.AT_LEAST,
                required=False,
                why=f"health-check budget {healthcheck_budget_s:g}s + margin "
                "(slurmd kills the program after 60 s by default)",
            )
        )
    if newer and major_minor >= SINCE_REQUEUE_DELAY:  # type: ignore[operator]
        out.append(
            Setting(
                "SchedulerParameters",
                f"requeue_delay={requeue_delay}",
                Match.ITEM_AT_MOST,
                required=False,
                why="a requeued job may start again after requeue_delay s "
                "(default: cred_expire, 120 s)",
            )
        )
    else:
        out.append(
            Setting(
                "AuthInfo",
                f"cred_expire={cred_expire}",
                Match.ITEM_AT_MOST,
                required=False,
                why="a requeued job waits cred_expire+1 s before it may start (default 120)",
            )
        )
    return out


def _base_settings(
    p: Path, timeout: int, hook_budget_s: float, margin_s: float, healthcheck_interval: int
) -> list[Setting]:
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
    ]


def render_snippet(
    settings: Sequence[Setting],
    running: Mapping[str, str] | None = None,
    *,
    version: Sequence[int] | None = None,
) -> str:
    """The lines to add; optional hints come with a comment line above them.
    List values are merged into ``running`` when it is known.  ``version``:
    the Slurm the lines were chosen for (said in the first line)."""
    running = running or {}
    fit = f", for Slurm {version[0]}.{int(version[1]):02d}" if version else ""
    lines = [f"# slurm-hooks (slurm-hooks install{fit})"]
    merged = merged_values(settings, running)
    written: set[str] = set()
    for s in settings:
        if not s.required:
            merge = "" if running.get(s.key) else "; merge with any value you already have"
            lines.append(f"# optional: {s.why}{merge}")
        last = max(i for i, o in enumerate(settings) if o.key == s.key)
        if settings[last] is s and s.key not in written:
            # One line per key: a second SchedulerParameters= line would
            # replace the first in slurm.conf, not add to it.
            written.add(s.key)
            lines.append(f"{s.key}={merged[s.key]}")
    return "\n".join(lines) + "\n"


def merged_values(settings: Iterable[Setting], running: Mapping[str, str]) -> dict[str, str]:
    """key -> the value to write: the running value with every setting of
    that key merged in, in order (two settings may share SchedulerParameters)."""
    out: dict[str, str] = {}
    for s in settings:
        have = out.get(s.key, running.get(s.key))
        out[s.key] = s.merged(have)
    return out


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
    #: The line to write when other settings share the key (merged); "":
    #: this setting's own line.
    want: str = ""

    @property
    def suggested(self) -> str:
        return self.want or self.setting.line(self.running)


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
        have_items = {i.lower() for i in _items(running)}
        return (
            Verdict.OK
            if all(i.lower() in have_items for i in _items(setting.value))
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
        name, _, limit = setting.value.partition("=")
        for item in _items(running):
            k, _, v = item.partition("=")
            if k.strip() == name:
                have = _number(v)
                return (
                    Verdict.OK if have is not None and have <= float(limit) else (Verdict.DIFFERS)
                )
        return Verdict.MISSING
    if setting.key in ("HealthCheckInterval",):
        have, want = _number(running), _number(setting.value)
        return Verdict.OK if have == want else Verdict.DIFFERS
    if "/" in setting.value:
        # 24.11 lists several Prolog/Epilog scripts (``Prolog[0]``, ``Prolog[1]``;
        # parse.parse_show_config joins them with ","): ours may be any of them.
        found = any(_same_path(item, setting.value) for item in _items(running))
        return Verdict.OK if found else Verdict.DIFFERS
    if setting.key == "HealthCheckNodeState":
        # scontrol shows e.g. "ANY" or "ANY,CYCLE"; ANY must be in it.
        return (
            Verdict.OK
            if setting.value.upper() in {i.upper() for i in _items(running)}
            else (Verdict.DIFFERS)
        )
    return Verdict.OK if running.strip() == setting.value else Verdict.DIFFERS


def compare(settings: Iterable[Setting], running: Mapping[str, str]) -> list[Difference]:
    """One Difference per setting.  ``running`` is ``scontrol show config``
    parsed: a key it lacks is unset (24.11 leaves unset keys out)."""
    settings = list(settings)
    merged = merged_values(settings, running)
    shared = {s.key for s in settings if sum(o.key == s.key for o in settings) > 1}
    return [
        Difference(
            s,
            running.get(s.key),
            judge(s, running.get(s.key)),
            f"{s.key}={merged[s.key]}" if s.key in shared else "",
        )
        for s in settings
    ]


def running_version(running: Mapping[str, str]) -> tuple[int, int, int] | None:
    """The Slurm version ``scontrol show config`` reports (``SLURM_VERSION``),
    None when it says none."""
    from slurm_hooks.core.errors import SlurmError
    from slurm_hooks.slurm.parse import parse_version

    try:
        return parse_version(running.get("SLURM_VERSION") or "")
    except SlurmError:
        return None


def read_running_config(
    *, timeout: float = 10.0, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``scontrol show config`` of the Slurm this host talks to.  Raises
    CommandError/CommandTimeout when scontrol is missing or slurmctld is down."""
    from slurm_hooks.detect.probes.commands import run
    from slurm_hooks.slurm.parse import parse_show_config

    result = run(["scontrol", "show", "config"], timeout=timeout, env=env)
    return parse_show_config(result.stdout)


# -- before writing: what would make the shims fail open everywhere ------------------

#: Where slurmd keeps the config it fetched from slurmctld in configless
#: mode (``slurmd --conf-server`` or a DNS SRV record): /run/slurm/conf
#: since 21.08, ``<SlurmdSpoolDir>/conf-cache`` before (and beside it).
CONFIGLESS_CACHES = (
    "/run/slurm/conf/slurm.conf",
    "/var/spool/slurmd/conf-cache/slurm.conf",
    "/var/spool/slurm/d/conf-cache/slurm.conf",
)


#: Runs a program with the empty environment slurmd gives hooks (absolute:
#: install may run with any PATH).
ENV = "/usr/bin/env"


@dataclass(frozen=True)
class SlurmConf:
    """Which slurm.conf the shims and ``--check`` use.  ``path`` None:
    configless Slurm; the shims set no SLURM_CONF (``cache`` says where
    slurmd keeps its copy)."""

    path: str | None
    cache: str | None = None
    #: Why it cannot be read ("": readable).
    error: str = ""


def _readable(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            fh.read(1)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    return ""


def find_slurm_conf(
    explicit: str | None, *, caches: Sequence[str] = CONFIGLESS_CACHES
) -> SlurmConf:
    """``--slurm-conf`` or $SLURM_CONF as given (an error when unreadable);
    else /etc/slurm/slurm.conf, else slurmd's configless cache; else an
    error naming the file, at once (scontrol would wait for a controller
    it cannot find, then say "unreachable")."""
    if explicit:
        return SlurmConf(explicit, error=_readable(explicit))
    if not _readable(DEFAULT_SLURM_CONF):
        return SlurmConf(DEFAULT_SLURM_CONF)
    for cache in caches:
        if not _readable(cache):
            return SlurmConf(None, cache=cache)
    return SlurmConf(
        DEFAULT_SLURM_CONF,
        error=f"{_readable(DEFAULT_SLURM_CONF)}; no configless cache either "
        f"({', '.join(caches)}); pass --slurm-conf",
    )


def read_conf_file(path: str | None) -> dict[str, str]:
    """``Key=value`` lines of a slurm.conf (keys as written, last wins;
    comments and ``Include`` lines skipped): what the lines printed before
    Slurm answers merge into, so a hint never drops an existing value
    (``AuthInfo=socket=...`` plus ``cred_expire``)."""
    if not path:
        return {}
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        key, eq, value = line.partition("=")
        if eq and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def file_values(settings: Iterable[Setting], conf: Mapping[str, str]) -> dict[str, str]:
    """The values ``conf`` (read_conf_file) has for the keys of ``settings``
    (slurm.conf keys are case-insensitive)."""
    lower = {k.lower(): v for k, v in conf.items()}
    return {s.key: lower[s.key.lower()] for s in settings if s.key.lower() in lower}


def check_python(python: str, *, timeout: float = 30.0) -> str:
    """Empty when ``python`` exists and imports slurm_hooks the way slurmd
    starts it (empty environment, cwd /), else what went wrong."""
    from slurm_hooks.core.errors import CommandError
    from slurm_hooks.detect.probes.commands import run

    try:
        run([ENV, "-i", python, "-c", "import slurm_hooks"], timeout=timeout, cwd="/")
    except CommandError as exc:
        return f"{python} cannot run slurm_hooks: {exc}"
    return ""


def dry_run_shim(path: Path, *, node: str, timeout: float = 60.0) -> str:
    """Run an installed shim once as slurmd would (empty environment but
    SLURMD_NODENAME, cwd /) with ``--dry-run``: empty when the hook said it is
    ready, else why not.  The prolog and epilog shims fail open (exit 0 on
    our own failure), so "ready" on stdout is what counts, not the status."""
    from slurm_hooks.core.errors import CommandError
    from slurm_hooks.detect.probes.commands import run

    try:
        res = run([ENV, "-i", f"SLURMD_NODENAME={node}", "/bin/sh", str(path), "--dry-run"],
                  timeout=timeout, cwd="/", check=False)  # fmt: skip
    except CommandError as exc:
        return f"{path}: {exc}"
    if res.rc == 0 and "--dry-run: ready" in res.stdout:
        return ""
    said = (res.stderr.strip() or res.stdout.strip() or "no output").splitlines()[-1]
    return f"{path} (exit {res.rc}): {said}"


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
        from slurm_hooks.store.atomicfile import write_atomic

        write_atomic(path, text, mode=mode)
    return FileChange(path, change)


def install_shims(
    prefix: str | os.PathLike[str],
    *,
    python: str,
    slurm_conf: str | None = DEFAULT_SLURM_CONF,
    config: str | None = None,
    dry_run: bool = False,
    chain: str | None = None,
) -> list[FileChange]:
    return [
        write_file(
            shim_path(prefix, phase),
            render_shim(
                phase,
                python=python,
                slurm_conf=slurm_conf,
                config=config,
                chain=chain if phase is Phase.HEALTHCHECK else None,
            ),
            0o755,
            dry_run=dry_run,
        )  # fmt: skip
        for phase in Phase
    ]


def install_config(path: str | os.PathLike[str], text: str, *, dry_run: bool = False) -> FileChange:
    """Write the commented default config, but never over an existing file.
    Mode 0640: it will hold the webhook URL (a credential) once filled in."""
    p = Path(path)
    if p.exists():
        return FileChange(p, "kept")
    return write_file(p, text, CONFIG_MODE, dry_run=dry_run)


#: The config's mode: root writes it, the admins' group may read it, nobody else.
CONFIG_MODE = 0o640


def hook_budget_s(cfg: Any = None) -> float:
    """The longest budget of a hook that PrologEpilogTimeout bounds: the
    prolog's ``[prolog] budget_s`` and the epilog's ``[checks] budget_s``
    (their defaults when unset).  ``cfg``: a Config, a config file path, or
    None for the config the hooks load (``$SLURM_HOOKS_CONFIG`` or the
    default file); an unreadable config gives the defaults."""
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.core.errors import SlurmHooksError

    try:
        if cfg is None or isinstance(cfg, str | os.PathLike):
            cfg = config_mod.load(cfg, validate=False)
    except SlurmHooksError:
        cfg = config_mod.Config(path=None, data={})
    from slurm_hooks.agent.prolog import PrologConfig
    from slurm_hooks.core.model import Phase as RunPhase
    from slurm_hooks.detect.checks.settings import DEFAULT_BUDGETS, load_checks_config

    try:
        prolog_s = cfg.section("prolog", PrologConfig).budget_s
    except SlurmHooksError:
        prolog_s = PrologConfig.budget_s
    try:
        epilog_s = load_checks_config(cfg).budget(RunPhase.EPILOG)
    except SlurmHooksError:
        epilog_s = DEFAULT_BUDGETS[RunPhase.EPILOG]
    return float(max(prolog_s, epilog_s))


def healthcheck_budget_s(cfg: Any = None) -> float:
    """``[checks] budget_s`` for the healthcheck phase (its default when the
    config cannot be read): what HealthCheckTimeout must cover."""
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.core.errors import SlurmHooksError
    from slurm_hooks.core.model import Phase as RunPhase
    from slurm_hooks.detect.checks.settings import DEFAULT_BUDGETS, load_checks_config

    try:
        if cfg is None or isinstance(cfg, str | os.PathLike):
            cfg = config_mod.load(cfg, validate=False)
        return float(load_checks_config(cfg).budget(RunPhase.HEALTHCHECK))
    except SlurmHooksError:
        return float(DEFAULT_BUDGETS[RunPhase.HEALTHCHECK])


# -- config file rendering (install's commented defaults, ``config show``, docs) ----
#
# One walk over a section's dataclass (``config_tables``) gives the TOML tables
# and keys with type, default and ``#:`` comment; the commented defaults file,
# ``config show`` and docs/configuration.md (tools/gen_config_docs.py) are all
# rendered from it, so they cannot disagree about which keys exist.

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
