"""``slurm-hooks watch``: the long-running XID/NVML watcher (see slurm_hooks.agent.watch)."""

from __future__ import annotations

import logging
import sys

import click

from slurm_hooks.cli._common import config_option
from slurm_hooks.core.errors import SlurmHooksError


@click.command("watch")
@config_option
@click.option(
    "--node",
    default=None,
    help="Slurm node name to act for (default: $SLURMD_NODENAME, else the short host name).",
)
@click.option(
    "--once",
    is_flag=True,
    help="Roll forward open incidents, look once, act, exit (1 when a check FAILs).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve /metrics on this port (default: [metrics] watch_port; 0: off).",
)
def command(
    config_path: str | None, node: str | None, once: bool, metrics_port: int | None
) -> None:
    """Follow the kernel log for XIDs and poll GPUs through NVML; drain within a second.

    \b
    Runs until SIGTERM/SIGINT (systemd: slurm-hooks-watch.service).  Shares
    the cursor, state and lock with the hooks, so each event is handled once.
    \b
    Example:
      slurm-hooks watch --node gpu017 --metrics-port 9839
    """
    from slurm_hooks.agent.watch import quiet_runner, run_watch

    root = logging.getLogger()
    if root.level > logging.INFO:
        # A daemon's decisions belong in its journal even without -v.
        logging.getLogger("slurm_hooks").setLevel(logging.INFO)
        if not root.handlers:
            logging.basicConfig(stream=sys.stderr)
    quiet_runner(logging.getLogger("slurm_hooks").getEffectiveLevel())
    # -v chose the level; without it, [general] log_level (after the environment).
    verbose = click.get_current_context().find_root().params.get("verbose") or 0
    try:
        rc = run_watch(
            config_path=config_path,
            node=node,
            once=once,
            metrics_port=metrics_port,
            config_log_level=not verbose,
        )
    except SlurmHooksError as exc:
        click.echo(f"slurm-hooks: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(rc)
