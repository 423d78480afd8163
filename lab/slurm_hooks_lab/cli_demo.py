"""``slurm-hooks demo``: the self-healing loop end to end on this machine, measured.

Brings up a real Slurm lab with the hooks, a watcher per node, fake GPUs, a
spare node and the bridge against a loopback Kubernetes API; runs a 2-node
training job; injects XID 79 under it; prints each step as it is observed,
then the durations and a pass/fail verdict.  ``--slinky``: the platform's
scenario, Slurm on Kubernetes under Slinky (the slurmd pod moved to a spare
machine, the same Slurm node back; lab/slurm_hooks_lab/demo_slinky.py).
Needs root (the lab starts slurmd and munged).
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import click

from slurm_hooks.cli._common import EXIT_ERROR, EXIT_OK, EXIT_UNHEALTHY


@click.command("demo")
@click.option(
    "--grace",
    type=click.FloatRange(0, 3600),
    default=120.0,
    show_default=True,
    help="Seconds the job gets to checkpoint between the signal and the requeue.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report (verdict, every step, every duration) here.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Timeline picture (PNG); default: next to --json, else in the lab dir.",
)
@click.option("--no-plot", is_flag=True, help="Do not draw the timeline picture.")
@click.option("--keep", is_flag=True, help="Leave the lab running afterwards, to explore.")
@click.option(
    "--nodes",
    type=click.IntRange(2, 64),
    default=None,
    help="Lab nodes, the last one being the spare (default 5, at least 4); with "
    "--slinky the Slurm nodes in NodeSet pods (default 2: the job's).",
)
@click.option(
    "--slinky",
    is_flag=True,
    help="Slurm under Slinky: replace the node by moving its slurmd pod to a spare machine.",
)
@click.option(
    "--spare-machines",
    type=click.IntRange(1, 8),
    default=1,
    show_default=True,
    help="With --slinky: Kubernetes machines without a slurmd pod.",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/tmp/slurm-hooks-demo"),
    show_default=True,
    help="Lab directory (its own: a test run's lab may run at the same time).",
)
@click.option(
    "--cred-expire",
    type=click.IntRange(5, 300),
    default=5,
    show_default=True,
    help="Munge credential lifetime; a requeued job waits this long + 1 s.",
)
@click.option(
    "--step-seconds",
    type=click.FloatRange(0.05, 5),
    default=0.3,
    show_default=True,
    help="Wall time per training step.",
)
def command(
    grace: float,
    json_path: Path | None,
    plot_path: Path | None,
    no_plot: bool,
    keep: bool,
    nodes: int | None,
    slinky: bool,
    spare_machines: int,
    directory: Path,
    cred_expire: int,
    step_seconds: float,
) -> None:
    """Reproduce the self-healing demo end to end and measure it.

    \b
    Example:
      slurm-hooks demo --json /tmp/demo-report.json --plot /tmp/demo-timeline.png
      slurm-hooks demo --grace 10 --keep
      slurm-hooks demo --slinky --grace 10 --json /tmp/slinky-report.json
    """
    from slurm_hooks_lab.demo import Demo, DemoOptions, summary_table

    if nodes is None:
        nodes = 2 if slinky else 5
    if not slinky and nodes < 4:
        raise click.BadParameter(
            "at least 4 (2 for the job, 1 to fail over, 1 spare)", param_hint="--nodes"
        )

    def on_term(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    if logging.getLogger().getEffectiveLevel() >= logging.WARNING:
        # The live lines say what the bridge did; its own warnings would repeat them.
        for name in ("slurm_hooks.bridge.service", "slurm_hooks.bridge.slinky_exec"):
            logging.getLogger(name).setLevel(logging.ERROR)
    options = DemoOptions(
        grace=grace,
        nodes=nodes,
        base_dir=directory,
        keep=keep,
        json_path=json_path,
        plot_path=plot_path,
        plot=not no_plot,
        cred_expire=cred_expire,
        step_seconds=step_seconds,
        slinky=slinky,
        spare_machines=spare_machines,
    )
    demo = Demo(options, echo=lambda line: click.echo(line))
    try:
        report = demo.run()
    except KeyboardInterrupt:
        click.echo(
            "\ninterrupted: every process the demo started was stopped"
            + ("" if keep else " and the lab taken down"),
            err=True,
        )
        raise SystemExit(EXIT_ERROR) from None
    click.echo("")
    click.echo(summary_table(report))
    for kind, path in report.files.items():
        click.echo(f"{kind}: {path}")
    if keep:
        click.echo("")
        click.echo(demo.explore_hint())
    raise SystemExit(EXIT_OK if report.passed else EXIT_UNHEALTHY)
