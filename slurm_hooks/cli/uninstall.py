"""``slurm-hooks uninstall``: take away what ``install`` put in place.

The shims' and the TaskProlog's paths come from the installer itself
(``installer.shim_path``, ``task_prolog.task_prolog_path``), so what install
writes and what uninstall removes cannot drift apart.  Like
install it never edits slurm.conf: it prints the lines to take out.  Order
matters, so it checks it: a shim the running Slurm still calls
(``HealthCheckProgram`` naming it, ``Prolog``/``Epilog`` whose glob would
match nothing once it is gone) is kept, because slurmd running a missing
program fails jobs or drains nodes.  Remove the lines, ``scontrol
reconfigure``, then uninstall; ``--force`` skips that check.  A file at a
shim's path that is not a slurm-hooks shim is never removed.  Config, state
and audit log stay (they are the record of what happened) unless
``--purge``.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from slurm_hooks.cli import installer as inst
from slurm_hooks.cli._common import EXIT_ERROR, EXIT_OK, EXIT_UNHEALTHY, exits_on_error
from slurm_hooks.cli.install import check_option, config_file_option, prefix_option
from slurm_hooks.core.errors import CommandError

#: Text every shim ``render_shim`` writes carries; a file without it is not ours.
SHIM_MARK = "-m slurm_hooks hook "
#: The slurm.conf keys whose value names a shim.
SHIM_KEYS = {
    inst.Phase.PROLOG: "Prolog",
    inst.Phase.EPILOG: "Epilog",
    inst.Phase.HEALTHCHECK: "HealthCheckProgram",
}
#: Directories --purge never removes, whatever the config says.
_NEVER_PURGE = frozenset(
    Path(p) for p in ("/", "/etc", "/var", "/var/lib", "/var/log", "/usr", "/opt", "/tmp", "/home")
)


@dataclass(frozen=True)
class Step:
    path: Path
    #: removed, absent, kept (with why)
    change: str
    why: str = ""


def is_our_shim(path: Path) -> bool:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return text.startswith("#!/bin/sh") and "slurm-hooks" in text and SHIM_MARK in text


def still_called(phase: inst.Phase, path: Path, running: dict[str, str]) -> str:
    """Why the running Slurm would still run ``path`` (empty: it would not)."""
    key = SHIM_KEYS[phase]
    value = (running.get(key) or "").strip()
    if not value or value.lower() in ("(null)", "none"):
        return ""
    if value == str(path):
        return f"{key}={value} still names it"
    if value == f"{path.parent}/*":
        others = [p for p in path.parent.iterdir() if p != path] if path.parent.is_dir() else []
        if not others:
            return f"{key}={value} would match nothing once it is gone"
    return ""


def remove_shims(
    prefix: Path, running: dict[str, str] | None, *, force: bool, dry_run: bool
) -> list[Step]:
    steps = []
    for phase in inst.Phase:
        path = inst.shim_path(prefix, phase)
        if not path.exists() and not path.is_symlink():
            steps.append(Step(path, "absent"))
            continue
        if not is_our_shim(path):
            steps.append(Step(path, "kept", "not a slurm-hooks shim"))
            continue
        why = "" if force or running is None else still_called(phase, path, running)
        if why:
            steps.append(Step(path, "kept", f"{why}: remove the line and reconfigure first"))
            continue
        if not dry_run:
            path.unlink()
        steps.append(Step(path, "removed"))
    return steps


#: Text the TaskProlog ``task_prolog.render_task_prolog`` writes carries.
TASK_PROLOG_MARK = "# slurm-hooks TaskProlog "


def remove_task_prolog(
    prefix: Path, running: dict[str, str] | None, *, force: bool, dry_run: bool
) -> Step:
    """The TaskProlog install wrote, unless the running Slurm still names it
    (slurmstepd running a missing TaskProlog fails every task)."""
    from slurm_hooks.cli.task_prolog import task_prolog_path

    path = task_prolog_path(prefix)
    if not path.exists() and not path.is_symlink():
        return Step(path, "absent")
    try:
        ours = TASK_PROLOG_MARK in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        ours = False
    if path.is_symlink() or not ours:
        return Step(path, "kept", "not the slurm-hooks TaskProlog")
    named = (running or {}).get("TaskProlog", "").strip() == str(path)
    if named and not force:
        return Step(path, "kept", f"TaskProlog={path} still names it: remove the line and "
                    "reconfigure first")  # fmt: skip
    if not dry_run:
        path.unlink()
    return Step(path, "removed")


def purge_paths(config_path: Path) -> list[Path]:
    """The config file, the state dir and the audit log (with its rotated
    copies) named by the config."""
    paths = [config_path]
    from slurm_hooks.cli.history import audit_path
    from slurm_hooks.core import config as config_mod

    cfg: Any = (
        config_mod.load(str(config_path), validate=False)
        if config_path.exists()
        else config_mod.parse("", validate=False)
    )
    state = Path(cfg.general.state_dir)
    audit = audit_path(cfg)
    paths.append(state)
    if state not in audit.parents:
        paths.append(audit)
        paths.extend(sorted(audit.parent.glob(audit.name + ".*")))
    return paths


def purge(paths: list[Path], *, dry_run: bool) -> list[Step]:
    steps = []
    for p in paths:
        if p.resolve() in _NEVER_PURGE or p.resolve() == Path.home():
            steps.append(Step(p, "kept", "refusing to remove a system directory"))
        elif not p.exists():
            steps.append(Step(p, "absent"))
        else:
            if not dry_run:
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
            steps.append(Step(p, "removed"))
    return steps


@click.command("uninstall")
@prefix_option("The --prefix install was given.")
@config_file_option(
    "Config file (removed only with --purge; it names the state dir and audit log)."
)
@click.option(
    "--purge", is_flag=True, help="Also remove the config file, the state dir and the audit log."
)
@check_option("Keep a shim the running Slurm still calls (scontrol show config).")
@click.option("--force", is_flag=True, help="Remove shims even if Slurm still calls them.")
@click.option("--dry-run", is_flag=True, help="Show what would be removed; remove nothing.")
@exits_on_error
def command(
    prefix: str, config_path: str, purge: bool, check: bool, force: bool, dry_run: bool
) -> None:
    """Remove the hook shims install wrote and print the slurm.conf lines
    to take out.  It never edits slurm.conf.

    Take the lines out and `scontrol reconfigure` first: a shim the
    running Slurm still calls is kept (exit 1).  Config, state and audit
    log stay unless --purge.  Exit status: 0 removed (or nothing to
    remove), 1 something was kept, 2 error (Slurm could not be asked:
    use --no-check or --force).

    \b
    Example:
      slurm-hooks uninstall --prefix /etc/slurm --dry-run
    """
    prefix_p = Path(prefix).absolute()
    verb = "would be " if dry_run else ""
    click.echo("slurm.conf lines to take out (or restore to your site's values):")
    for key, value in _conf_lines(prefix_p):
        click.echo(f"  {key}={value}")
    click.echo("then: scontrol reconfigure;  systemctl disable --now slurm-hooks-watch")
    click.echo("")
    running: dict[str, str] | None = None
    if check and not force:
        try:
            running = inst.read_running_config()
        except CommandError as exc:
            click.echo(
                f"slurm-hooks: error: cannot ask the running Slurm ({exc}); "
                "use --no-check or --force if slurmd no longer calls the shims",
                err=True,
            )
            click.get_current_context().exit(EXIT_ERROR)
    steps = remove_shims(prefix_p, running, force=force, dry_run=dry_run)
    steps.append(remove_task_prolog(prefix_p, running, force=force, dry_run=dry_run))
    if purge:
        steps += purge_paths_steps(Path(config_path).absolute(), dry_run=dry_run)
    kept = False
    for s in steps:
        tail = f" ({s.why})" if s.why else ""
        click.echo(f"{s.path}: {verb if s.change == 'removed' else ''}{s.change}{tail}")
        kept = kept or (s.change == "kept")
    if not purge:
        click.echo(f"kept: {config_path} and the state dir (--purge removes them)")
    click.get_current_context().exit(EXIT_UNHEALTHY if kept else EXIT_OK)


def purge_paths_steps(config_path: Path, *, dry_run: bool) -> list[Step]:
    return purge(purge_paths(config_path), dry_run=dry_run)


def _conf_lines(prefix: Path) -> list[tuple[str, str]]:
    """The keys install asks for that exist only for slurm-hooks (the
    others, PrologFlags=Alloc or a timeout, may be the site's own)."""
    keys = {"Prolog", "Epilog", "HealthCheckProgram", "HealthCheckInterval",
            "HealthCheckNodeState", "TaskProlog"}  # fmt: skip
    seen: dict[str, str] = {}
    for s in inst.recommended_settings(prefix):
        if s.key in keys:
            seen.setdefault(s.key, s.value)
    return list(seen.items())
