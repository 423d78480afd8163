"""``slurm-hooks completion``: shell completion scripts from click."""

from __future__ import annotations

import click

COMPLETE_VAR = "_SLURM_HOOKS_COMPLETE"
PROG = "slurm-hooks"


def completion_script(shell: str) -> str:
    """The script click would print for ``_SLURM_HOOKS_COMPLETE=<shell>_source
    slurm-hooks``; it calls back into slurm-hooks with ``<shell>_complete``."""
    from click.shell_completion import get_completion_class

    from slurm_hooks.cli import main

    cls = get_completion_class(shell)
    if cls is None:
        raise click.BadParameter(f"unsupported shell {shell!r}")
    return cls(main, {}, PROG, COMPLETE_VAR).source()


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def command(shell: str) -> None:
    """Print the completion script for SHELL.

    \b
    Examples:
      eval "$(slurm-hooks completion bash)"                     # this shell
      slurm-hooks completion bash > /etc/bash_completion.d/slurm-hooks
      slurm-hooks completion zsh > "${fpath[1]}/_slurm-hooks"
    """
    click.echo(completion_script(shell), nl=False)
