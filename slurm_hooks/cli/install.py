"""``slurm-hooks install``: put the hook shims in place and say what slurm.conf needs."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import click

from slurm_hooks.cli import installer as inst
from slurm_hooks.cli._common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_UNHEALTHY,
    F,
    exits_on_error,
    styled,
    use_color,
)
from slurm_hooks.core.config import DEFAULT_CONFIG
from slurm_hooks.core.errors import CommandError


def prefix_option(help: str) -> Callable[[F], F]:
    """``--prefix``, the directory of the shims (install and uninstall)."""
    return click.option(
        "--prefix",
        default=inst.DEFAULT_PREFIX,
        show_default=True,
        type=click.Path(file_okay=False),
        help=help,
    )


def config_file_option(help: str) -> Callable[[F], F]:
    """``--config``, the config file install creates (default: the shipped path)."""
    return click.option(
        "--config",
        "config_path",
        default=DEFAULT_CONFIG,
        show_default=True,
        type=click.Path(dir_okay=False),
        help=help,
    )


def check_option(help: str) -> Callable[[F], F]:
    """``--check/--no-check``: whether to ask the running Slurm (on by default)."""
    return click.option("--check/--no-check", default=True, show_default=True, help=help)


@click.command("install")
@prefix_option("Directory that gets prolog.d/, epilog.d/ and healthcheck/.")
@config_file_option("Config file to create (with commented defaults) if it does not exist.")
@click.option(
    "--python",
    default=sys.executable,
    show_default="this interpreter",
    help="Python the shims exec (must have slurm_hooks installed).",
)
@click.option(
    "--slurm-conf",
    default=lambda: os.environ.get("SLURM_CONF") or None,
    show_default="$SLURM_CONF, /etc/slurm/slurm.conf, or configless",
    help="SLURM_CONF the shims default to (HealthCheckProgram gets none from slurmd). "
    "Unset and no /etc/slurm/slurm.conf: configless Slurm when slurmd's cache "
    "(/run/slurm/conf) is there; the shims then set no SLURM_CONF.",
)
@click.option(
    "--chain-healthcheck",
    "chain",
    default=None,
    metavar="PROGRAM",
    help="The site's HealthCheckProgram (LBNL NHC: /usr/sbin/nhc) that our healthcheck "
    "shim runs first, then ours; both always run (docs/nhc.md).  Kept on a re-install; "
    "'none' drops it.",
)
@click.option(
    "--budget",
    type=float,
    default=None,
    help="Hook budget in seconds for PrologEpilogTimeout (default: the runner's).",
)
@check_option("Compare with the running Slurm (scontrol show config).")
@click.option("--dry-run", is_flag=True, help="Show what would be written; write nothing.")
@exits_on_error
def command(
    prefix: str,
    config_path: str,
    python: str,
    slurm_conf: str | None,
    chain: str | None,
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

    Before anything is written, the interpreter must import slurm_hooks and
    the config must validate; after, each shim is run once as slurmd would
    run it (``hook PHASE --dry-run``): a shim that would fail open on every
    node is an error here, not a silently unprotected fleet.

    \b
    Example:
      slurm-hooks install --prefix /etc/slurm --python /opt/slurm-hooks/bin/python3
      slurm-hooks install --chain-healthcheck /usr/sbin/nhc   # keep LBNL NHC
    """
    color = use_color()
    python = str(Path(python).absolute()) if os.sep in python else python
    prefix_abs = str(Path(prefix).absolute())
    config_abs = str(Path(config_path).absolute())
    shim_config = None if config_abs == DEFAULT_CONFIG else config_abs
    verb = "would be " if dry_run else ""
    problem = inst.check_python(python) or _config_problem(config_abs)
    if problem:
        _fail(f"{problem}; nothing written (the shims would fail open on every node)")
    conf = inst.find_slurm_conf(slurm_conf)
    if conf.error and check:
        _fail(conf.error)
    if conf.path is None:
        click.echo(f"configless Slurm: slurmd's config cache {conf.cache}; "
                   "the shims set no SLURM_CONF")  # fmt: skip
    chain = _chain(prefix_abs, chain)
    changes = inst.install_shims(
        prefix_abs, python=python, slurm_conf=conf.path, config=shim_config, dry_run=dry_run,
        chain=chain,
    )  # fmt: skip
    changes.append(
        inst.install_task_prolog(prefix_abs, inst.progress_dir(config_abs), dry_run=dry_run)
    )
    changes.append(inst.install_config(config_abs, inst.default_config_text(), dry_run=dry_run))
    for ch in changes:
        click.echo(f"{ch.path}: {verb}{ch.change}")
    if chain:
        click.echo(f"healthcheck shim runs {chain} first, then slurm-hooks (both always run)")
    broken = _dry_run_shims(
        prefix_abs, python=python, slurm_conf=conf.path, config=shim_config, chain=chain,
        written=not dry_run,
    )  # fmt: skip
    if broken:
        _fail("the shim failed its dry run: " + "; ".join(broken))

    running: dict[str, str] = {}
    check_error = None
    if check:
        try:
            env = {"SLURM_CONF": conf.path} if conf.path else None
            running = inst.read_running_config(env=env)
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
    # Before Slurm answers, merge into what slurm.conf itself says, so a
    # hint never replaces an existing value (AuthInfo=socket=... broke munge).
    known = {**inst.file_values(settings, inst.read_conf_file(conf.path or conf.cache)),
             **running}  # fmt: skip
    click.echo("")
    click.echo(styled("slurm.conf lines for slurm-hooks:", "title", color))
    click.echo(inst.render_snippet(settings, known, version=version), nl=False)
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
        if d.setting.key == "HealthCheckProgram" and d.running and not chain:
            click.echo(f"           to keep running {d.running} (NHC?) beside slurm-hooks: "
                       f"slurm-hooks install --chain-healthcheck {d.running}")  # fmt: skip
        needed = needed or d.setting.required
    from slurm_hooks.cli import xid_advice
    from slurm_hooks.cli.gres_advice import (
        advice,
        evacuate_advice,
        numbering_advice,
        prolog_gpu_settings,
    )
    from slurm_hooks.cli.slurm_settings import hooks_config

    hooks_cfg = hooks_config(config_abs)  # read once for the three
    pro = prolog_gpu_settings(hooks_cfg)
    tips = advice(running.get("GresTypes"), gres_gpus=pro.gres_gpus,
                  gpu_jobs_only=pro.gpu_jobs_only, gpu_sharing=pro.gpu_sharing)  # fmt: skip
    tips += evacuate_advice(running, hooks_cfg) + numbering_advice(running)
    for tip in [*tips, *xid_advice.advice(hooks_cfg)]:
        click.echo(styled(f"  hint     {config_abs}: {tip}", "warn", color))
    if needed:
        click.echo("")
        click.echo("Add the lines above to slurm.conf, then: scontrol reconfigure")
    click.get_current_context().exit(EXIT_UNHEALTHY if needed else EXIT_OK)


def _fail(message: str) -> None:
    click.echo(f"slurm-hooks: error: {message}", err=True)
    click.get_current_context().exit(EXIT_ERROR)


def _config_problem(path: str) -> str:
    """Why the config the shims will load does not validate ("" when it does
    or does not exist yet: install writes the commented defaults)."""
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.core.errors import ConfigError

    if not Path(path).exists():
        return ""
    try:
        config_mod.load(path, validate=True)
    except ConfigError as exc:
        return f"config does not validate: {exc}"
    return ""


def _chain(prefix: str, chain: str | None) -> str | None:
    """The site program to chain: the option ('none' drops it), else the one
    the installed healthcheck shim already chains (a re-install never drops
    NHC silently)."""
    if chain is not None:
        if chain.lower() == "none":
            return None
        try:
            return inst.check_chain_program(chain)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--chain-healthcheck") from exc
    try:
        text = inst.shim_path(prefix, inst.Phase.HEALTHCHECK).read_text(encoding="utf-8")
    except OSError:
        return None
    return inst.chained_program(text)


def _dry_run_shims(
    prefix: str,
    *,
    python: str,
    slurm_conf: str | None,
    config: str | None,
    chain: str | None,
    written: bool,
) -> list[str]:
    """Each shim run once in dry mode: the installed files, or with
    ``--dry-run`` (nothing written) the same texts in a scratch directory."""
    import socket
    import tempfile

    node = socket.gethostname().split(".")[0] or "localhost"
    if written:
        return [
            e
            for ph in inst.Phase
            if (e := inst.dry_run_shim(inst.shim_path(prefix, ph), node=node))
        ]
    with tempfile.TemporaryDirectory(prefix="slurm-hooks-install-") as tmp:
        if config is not None and not Path(config).exists():
            # The config install would create: its commented defaults.
            config = str(Path(tmp) / "config.toml")
            Path(config).write_text(inst.default_config_text(), encoding="utf-8")
        inst.install_shims(tmp, python=python, slurm_conf=slurm_conf, config=config, chain=chain)
        return [
            e for ph in inst.Phase if (e := inst.dry_run_shim(inst.shim_path(tmp, ph), node=node))
        ]
