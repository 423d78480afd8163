"""``slurm-hooks config``: validate a config file, show the effective config."""

from __future__ import annotations

import click

from slurm_hooks.cli import installer as inst
from slurm_hooks.cli._common import EXIT_ERROR, config_option, exits_on_error
from slurm_hooks.core import config as config_mod
from slurm_hooks.core.errors import ConfigError


@click.group("config")
def command() -> None:
    """Check and show the slurm-hooks configuration.

    \b
    Examples:
      slurm-hooks config validate /etc/slurm-hooks/config.toml
      slurm-hooks config show
      slurm-hooks config defaults > config.toml
    """


@command.command("validate")
@click.argument("file", type=click.Path(dir_okay=False))
def validate(file: str) -> None:
    """Load FILE and check every section and key.

    Errors name the file and the dotted key.  Exit status: 0 valid,
    2 invalid or unreadable.

    \b
    Example:
      slurm-hooks config validate /etc/slurm-hooks/config.toml
    """
    _, broken = inst.resolve_sections()
    try:
        cfg = config_mod.load(file)
    except ConfigError as exc:
        click.echo(f"slurm-hooks: invalid: {exc}", err=True)
        click.get_current_context().exit(EXIT_ERROR)
    for name in cfg.data:
        if name in broken:
            click.echo(
                f"slurm-hooks: invalid: {file}:{name}: section cannot be checked ({broken[name]})",
                err=True,
            )
            click.get_current_context().exit(EXIT_ERROR)
    sections = ", ".join(sorted(cfg.data)) or "none (all defaults)"
    click.echo(f"{file}: ok (sections: {sections})")


@command.command("show")
@config_option
@click.option("--no-docs", is_flag=True, help="Leave out the comment above each key.")
@exits_on_error
def show(config_path: str | None, no_docs: bool) -> None:
    """The effective configuration: the file's values over the defaults,
    for every known section, as TOML.

    \b
    Example:
      slurm-hooks config show --config /etc/slurm-hooks/config.toml
    """
    cfg = config_mod.load(config_path)
    classes, broken = inst.resolve_sections()
    click.echo(f"# effective slurm-hooks configuration; file: {cfg.path or '(none, defaults)'}")
    for name in inst.section_order(classes):
        obj: object = cfg.section(name, classes[name])
        click.echo("")
        for line in inst.render_table(name, obj, with_docs=not no_docs):
            click.echo(line)
    # Arrays of tables ([[site_checks]]) have no defaults: the file's rows, as written.
    for name in sorted(config_mod.ARRAY_SECTIONS):
        for row in cfg.data.get(name, ()):
            click.echo(f"\n[[{name}]]")
            for key, value in row.items():
                # Tables inline (a site check's env); nothing TOML reads can fail here.
                literal = inst.toml_literal(value)
                if literal is not None:
                    click.echo(f"{key} = {literal}")
    for name, err in sorted(broken.items()):
        click.echo(f"\n# [{name}] not shown: {err}")


@command.command("defaults")
def defaults() -> None:
    """Every section and key with its default, commented out: the file
    ``install`` writes when there is none.

    \b
    Example:
      slurm-hooks config defaults > /etc/slurm-hooks/config.toml
    """
    click.echo(inst.default_config_text(), nl=False)
