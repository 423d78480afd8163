"""The slurm.conf lines an installation needs, and how a running Slurm compares.

``recommended_settings`` says which lines (by Slurm release), ``compare``
judges ``scontrol show config`` against them line by line, and
``find_slurm_conf``/``read_conf_file`` find and read the slurm.conf the
printed lines merge into, so a hint never drops an admin's other values.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
            "Alloc,DeferBatch",
            Match.CONTAINS,
            why="run the prolog on every node at allocation, and send the batch script only "
            "once every prolog ended: a job the prolog requeued never starts on its node",
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
            "TaskProlog",
            f"{p}/task-prolog/slurm-hooks-task-prolog",
            required=False,
            why="PyTorch jobs dump their flight recorder on a collective timeout where the "
            "watcher reads it (a site TaskProlog of its own can run this one)",
        ),
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
    from slurm_hooks.slurm.parse_config import parse_version

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
    from slurm_hooks.slurm.parse_config import parse_show_config

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


def hooks_config(cfg: Any = None) -> Any:
    """``cfg`` as a Config: a Config as it is, a config file path loaded
    (unvalidated), None for the config the hooks load
    (``$SLURM_HOOKS_CONFIG`` or the default file); an empty Config (every
    default) when it cannot be read: install reports that on its own."""
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.core.errors import SlurmHooksError

    if cfg is not None and not isinstance(cfg, str | os.PathLike):
        return cfg
    try:
        return config_mod.load(cfg, validate=False)
    except SlurmHooksError:
        return config_mod.Config(path=None, data={})


def hook_budget_s(cfg: Any = None) -> float:
    """The longest budget of a hook that PrologEpilogTimeout bounds: the
    prolog's ``[prolog] budget_s`` and the epilog's ``[checks] budget_s``
    (their defaults when unset).  ``cfg``: a Config, a config file path, or
    None for the config the hooks load (``$SLURM_HOOKS_CONFIG`` or the
    default file); an unreadable config gives the defaults."""
    from slurm_hooks.core.errors import SlurmHooksError

    cfg = hooks_config(cfg)
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
    from slurm_hooks.core.errors import SlurmHooksError
    from slurm_hooks.core.model import Phase as RunPhase
    from slurm_hooks.detect.checks.settings import DEFAULT_BUDGETS, load_checks_config

    try:
        return float(load_checks_config(hooks_config(cfg)).budget(RunPhase.HEALTHCHECK))
    except SlurmHooksError:
        return float(DEFAULT_BUDGETS[RunPhase.HEALTHCHECK])
