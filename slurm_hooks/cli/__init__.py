"""The ``slurm-hooks`` command.

Each subcommand lives in its own module under ``slurm_hooks.cli`` and is
imported only when it runs (``--help`` looks modules up without importing
them), so ``slurm-hooks xid explain 79`` does not pay for requests or NVML.
Exit codes: 0 ok, 1 unhealthy or action needed, 2 usage error or could not run.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
from typing import Any

import click

from slurm_hooks.core.errors import SlurmHooksError
from slurm_hooks.core.exits import (  # noqa: F401 (re-exported: importable from here too)
    EXIT_ERROR,
    EXIT_OK,
    EXIT_UNHEALTHY,
)

#: command name -> (module under slurm_hooks.cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "status": ("status", "Nodes out of service, grouped by owner and fault."),
    "history": ("history", "Incident timelines from the audit log."),
    "job": ("job", "A training job's progress per rank; whether it hangs or straggles."),
    "install": ("install", "Install the hook shims; print the slurm.conf lines."),
    "uninstall": ("uninstall", "Remove the hook shims; print the slurm.conf lines to take out."),
    "config": ("config_cmd", "Validate or show the configuration."),
    "completion": ("completion", "Shell completion script (bash, zsh, fish)."),
    "policy": ("policy", "Explain what the remediation policy would decide, and why."),
    "resume": ("resume", "Resume a node slurm-hooks drained, once it passed acceptance."),
    "breaker": ("breaker", "Show or re-arm the circuit breaker that caps automatic drains."),
    "bridge": ("bridge", "Mirror Slurm drains into Kubernetes: cordon, taint, evict, replace."),
    "burnin": ("burnin", "Parse and judge a gpu_burn output (burn-in results)."),
    "nccl": ("nccl", "Parse and judge an nccl-tests all_reduce_perf output."),
    "xid": ("xid", "Scan kernel logs for NVIDIA XID/SXID events; explain an XID."),
    "check": ("check", "Run a phase's health checks on this node and print the findings."),
    "watch": ("watch", "Follow the kernel log and NVML; drain a failing GPU node within a second."),
    "acceptance": (
        "acceptance",
        "Run the acceptance checks a node must pass before it is resumed.",
    ),
    "preflight": ("preflight", "Multi-node all-reduce check of a job's nodes; drain the slow one."),
    "nhc": ("nhc", "Translate an LBNL NHC config into site checks (nhc import)."),
    "simulate": ("simulate", "Replay a failure trace through the real policy; report ETTR."),
}

#: Entry-point group through which other distributions add commands (the
#: lab adds ``lab`` and ``demo``): looked up only when a name is not ours.
PLUGIN_GROUP = "slurm_hooks.commands"


def _module_name(cmd: str) -> str:
    return f"slurm_hooks.cli.{COMMANDS[cmd][0]}"


def _plugins() -> dict[str, Any]:
    """Installed plug-in commands by name (entry points, not imported yet)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=PLUGIN_GROUP) if ep.name not in COMMANDS}


def _summary(command: click.Command) -> str:
    return command.get_short_help_str(limit=80)


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(super().list_commands(ctx))
        names.update(c for c in COMMANDS if importlib.util.find_spec(_module_name(c)) is not None)
        names.update(_plugins())
        return sorted(names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name not in COMMANDS:
            plugin = _plugins().get(cmd_name)
            return plugin.load() if plugin is not None else None
        if importlib.util.find_spec(_module_name(cmd_name)) is None:
            return None
        module = importlib.import_module(_module_name(cmd_name))
        command: click.Command = module.command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx) if name in COMMANDS]
        for name, plugin in sorted(_plugins().items()):
            rows.append((name, _summary(plugin.load())))
        rows.sort()
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SlurmHooksError as exc:
            click.echo(f"slurm-hooks: error: {exc}", err=True)
            ctx.exit(exc.exit_code)


def setup_logging(verbose: int) -> None:
    """``-v`` wins, else SLURM_HOOKS_LOG_LEVEL, else WARNING.  ``[general]
    log_level`` is not read here: the config is loaded per command (and
    ``slurm-hooks watch`` applies it itself)."""
    level = logging.WARNING - 10 * verbose
    level_name = os.environ.get("SLURM_HOOKS_LOG_LEVEL")
    if level_name and not verbose:
        level = logging.getLevelNamesMapping().get(level_name.upper(), level)
    logging.basicConfig(
        level=max(level, logging.DEBUG),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv for debug).")
@click.version_option(package_name="slurm-hooks")
def main(verbose: int) -> None:
    """Self-healing for GPU clusters run by Slurm.

    \b
    Example:
      slurm-hooks lab up --nodes 4 && slurm-hooks lab status
    """
    setup_logging(verbose)
