"""What ``slurm-hooks install`` writes: the hook shims and the files.

* the hook shims (``render_shim``): slurmd starts Prolog, Epilog and
  HealthCheckProgram with no PATH, and HealthCheckProgram also without
  SLURM_CONF, so each shim sets defaults for both and execs the Python of
  the installation (an absolute path, written in at install time);
* writing them and the config file (``install_shims``, ``install_config``),
  and trying them once before slurmd does (``check_python``, ``dry_run_shim``).

The slurm.conf lines the installation needs and the comparison with
``scontrol show config`` live in ``slurm_settings``, the commented config
file in ``config_tables`` (TOML literals: ``config_toml``); their names are
importable from here too.  All plain functions, so tests need no root and no
cluster.

The shims in the source tree (``prolog.d/50-slurm-hooks`` ...) are
``render_shim(phase)`` with the default ``python3``; a test keeps them equal.
"""

from __future__ import annotations

import enum
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from slurm_hooks.cli.config_tables import (  # noqa: F401 (re-exported: importable from here too)
    CHECKS_KEY_DOCS,
    COMMON_CHECK_KEY_DOCS,
    PLACEHOLDER,
    KeyDoc,
    TableDoc,
    check_settings_class,
    config_tables,
    default_config_text,
    field_docs,
    render_table,
    resolve_sections,
    section_order,
    type_name,
)
from slurm_hooks.cli.config_toml import (  # noqa: F401 (re-exported: importable from here too)
    toml_literal,
    toml_value,
)
from slurm_hooks.cli.slurm_settings import (  # noqa: F401 (re-exported: importable from here too)
    CONFIGLESS_CACHES,
    DEFAULT_HOOK_BUDGET_S,
    DEFAULT_PREFIX,
    DEFAULT_SLURM_CONF,
    HEALTHCHECK_INTERVAL,
    HEALTHCHECK_NAME,
    SHIM_NAME,
    SINCE_HEALTHCHECK_TIMEOUT,
    SINCE_REQUEUE_DELAY,
    SUGGESTED_CRED_EXPIRE,
    SUGGESTED_REQUEUE_DELAY,
    TIMEOUT_MARGIN_S,
    Difference,
    Match,
    Setting,
    SlurmConf,
    Verdict,
    compare,
    file_values,
    find_slurm_conf,
    healthcheck_budget_s,
    hook_budget_s,
    judge,
    merged_values,
    read_conf_file,
    read_running_config,
    recommended_settings,
    render_snippet,
    running_version,
)
from slurm_hooks.detect.probes.commands import DEFAULT_PATH


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
        "# A working directory of root's: Python looks for modules there first.\n"
        "cd /\n"
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


#: Runs a program with the empty environment slurmd gives hooks (absolute:
#: install may run with any PATH).
ENV = "/usr/bin/env"


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


def install_task_prolog(
    prefix: str | os.PathLike[str], progress_dir: str, *, dry_run: bool = False
) -> FileChange:
    """The TaskProlog (``cli/task_prolog.py``) for a watcher reading ``progress_dir``."""
    from slurm_hooks.cli.task_prolog import render_task_prolog, task_prolog_path

    return write_file(
        task_prolog_path(prefix), render_task_prolog(progress_dir), 0o755, dry_run=dry_run
    )


def progress_dir(cfg: str | os.PathLike[str] | None) -> str:
    """``[progress] dir`` of the config the hooks load (its default when the
    config cannot be read: install refuses an invalid one before this)."""
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.core.errors import SlurmHooksError
    from slurm_hooks.detect.progress.settings import ProgressConfig

    try:
        return config_mod.load(cfg, validate=False).section("progress", ProgressConfig).dir
    except SlurmHooksError:
        return ProgressConfig.dir


def install_config(path: str | os.PathLike[str], text: str, *, dry_run: bool = False) -> FileChange:
    """Write the commented default config, but never over an existing file.
    Mode 0640: it will hold the webhook URL (a credential) once filled in."""
    p = Path(path)
    if p.exists():
        return FileChange(p, "kept")
    return write_file(p, text, CONFIG_MODE, dry_run=dry_run)


#: The config's mode: root writes it, the admins' group may read it, nobody else.
CONFIG_MODE = 0o640
