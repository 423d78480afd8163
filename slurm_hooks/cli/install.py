"""``slurm-hooks install``: put the hook shims in place and say what slurm.conf needs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from slurm_hooks.cli import installer as inst
from slurm_hooks.cli._common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_UNHEALTHY,
    exits_on_error,
    styled,
    use_color,
)
from slurm_hooks.core.config import DEFAULT_CONFIG
from slurm_hooks.core.errors import CommandError


@click.command("install")
@click.option(
    "--prefix",
    default=inst.DEFAULT_PREFIX,
    show_default=True,
    type=click.Path(file_okay=False),
    help="Directory that gets prolog.d/, epilog.d/ and healthcheck/.",
)
@click.option(
    "--config",
    "config_path",
    default=DEFAULT_CONFIG,
    show_default=True,
    type=click.Path(dir_okay=False),
    help="Config file to create (with commented defaults) if it does not exist.",
)
@click.option(
    "--python",
    default=sys.executable,
    show_default="this interpreter",
    help="Python the shims exec (must have slurm_hooks installed).",
)
@click.option(
    "--slurm-conf",
    default=lambda: os.environ.get("SLURM_CONF", inst.DEFAULT_SLURM_CONF),
    show_default="$SLURM_CONF or /etc/slurm/slurm.conf",
    help="SLURM_CONF the shims default to (HealthCheckProgram gets none from slurmd).",
)
@click.option(
    "--budget",
    type=float,
    default=None,
    help="Hook budget in seconds for PrologEpilogTimeout (default: the runner's).",
)
@click.option(
    "--check/--no-check",
    default=True,
    show_default=True,
    help="Compare with the running Slurm (scontrol show config).",
)
@click.option("--dry-run", is_flag=True, help="Show what would be written; write nothing.")
@exits_on_error
def command(
    prefix: str,
    config_path: str,
    python: str,
    slurm_conf: str,
    budget: float | None,
    check: bool,
    dry_run: bool,
) -> None:
    """Install the prolog, epilog and health-check shims and print the
    slurm.conf lines they need.

    Run it on every compute node (or once on a shared /etc/slurm).  It
    never edits slurm.conf: it prints the lines, and with --check says
    which the running Slurm lacks.  Exit status: 0 installed and Slurm
    configured, 1 installed but slurm.conf needs the lines shown, 2 error
    (including: the running Slurm could not be asked).

    \b
    Example:
      slurm-hooks install --prefix /etc/slurm --python /opt/slurm-hooks/bin/python3
    """
    color = use_color()
    python = str(Path(python).absolute()) if os.sep in python else python
    prefix_abs = str(Path(prefix).absolute())
    config_abs = str(Path(config_path).absolute())
    shim_config = None if config_abs == DEFAULT_CONFIG else config_abs
    verb = "would be " if dry_run else ""
    changes = inst.install_shims(
        prefix_abs, python=python, slurm_conf=slurm_conf, config=shim_config, dry_run=dry_run
    )
    changes.append(inst.install_config(config_abs, inst.default_config_text(), dry_run=dry_run))
    for ch in changes:
        click.echo(f"{ch.path}: {verb}{ch.change}")

    running: dict[str, str] = {}
    check_error = None
    if check:
        try:
            running = inst.read_running_config(env={"SLURM_CONF": slurm_conf})
        except CommandError as exc:
            check_error = exc
    # The lines fit the running Slurm (HealthCheckTimeout, requeue_delay from
    # 25.11); without --check only the lines every release accepts.
    version = inst.running_version(running)
    settings = inst.recommended_settings(
        prefix_abs,
        hook_budget_s=budget if budget is not None else inst.hook_budget_s(config_abs),
        version=version,
        healthcheck_budget_s=inst.healthcheck_budget_s(config_abs),
    )
    click.echo("")
    click.echo(styled("slurm.conf lines for slurm-hooks:", "title", color))
    click.echo(inst.render_snippet(settings, running, version=version), nl=False)
    if not check:
        return
    if check_error is not None:
        click.echo("")
        click.echo(
            f"slurm-hooks: error: cannot compare with the running Slurm: {check_error}", err=True
        )
        click.get_current_context().exit(EXIT_ERROR)
    diffs = inst.compare(settings, running)
    click.echo("")
    click.echo(styled("running Slurm (scontrol show config):", "title", color))
    needed = False
    for d in diffs:
        have = d.running if d.running is not None else "(not set)"
        if d.verdict is inst.Verdict.OK:
            click.echo(styled(f"  ok       {d.setting.key} = {have}", "ok", color))
            continue
        tag = "missing" if d.verdict is inst.Verdict.MISSING else "differs"
        style = "bad" if d.setting.required else "warn"
        label = tag if d.setting.required else "hint"
        click.echo(styled(f"  {label:<8} {d.setting.key} = {have}", style, color))
        click.echo(f"           want: {d.suggested}  ({d.setting.why})")
        needed = needed or d.setting.required
    if needed:
        click.echo("")
        click.echo("Add the lines above to slurm.conf, then: scontrol reconfigure")
    click.get_current_context().exit(EXIT_UNHEALTHY if needed else EXIT_OK)
