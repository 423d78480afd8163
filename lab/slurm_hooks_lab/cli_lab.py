"""``slurm-hooks lab``: a real Slurm cluster on this machine.

For tests, the demo and admins who want to try slurm-hooks against real
slurmctld/slurmd daemons without touching a production cluster.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

DIR_HELP = "Lab directory (default: $SLURM_HOOKS_LAB_DIR or /tmp/slurm-hooks-lab)."


def _lab(directory: str | None, nodes: int | None = None, **opts):  # type: ignore[no-untyped-def]
    from slurm_hooks_lab.lab import Lab, default_dir

    return Lab(directory or default_dir(), nodes, **opts)


@click.group()
def command() -> None:
    """Run a real Slurm cluster (munged, slurmctld, N slurmd) on this machine.

    \b
    Example:
      slurm-hooks lab up --nodes 4
      eval "$(slurm-hooks lab env)" && sinfo -N
      slurm-hooks lab down
    """


@command.command()
@click.option("--nodes", "-n", type=click.IntRange(1, 512), default=4, show_default=True)
@click.option(
    "--extra-conf",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="File appended to the generated slurm.conf (Prolog=, HealthCheckProgram=, ...).",
)
@click.option("--dir", "directory", type=click.Path(file_okay=False), help=DIR_HELP)
@click.option("--rest", is_flag=True, help="Also start slurmrestd on a unix socket.")
def up(nodes: int, extra_conf: Path | None, directory: str | None, rest: bool) -> None:
    """Start the lab and wait until every node is idle.

    \b
    Example:
      slurm-hooks lab up --nodes 8 --extra-conf hooks.conf --dir /tmp/mylab
    """
    text = extra_conf.read_text(encoding="utf-8") if extra_conf else ""
    lab = _lab(directory, nodes, extra_conf=text)
    seconds = lab.up()
    click.echo(f"lab up: {nodes} nodes idle after {seconds:.2f} s in {lab.base_dir}")
    if rest:
        click.echo(f"slurmrestd: {lab.start_rest()}")
    click.echo(f"export SLURM_CONF={lab.slurm_conf}")


@command.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False), help=DIR_HELP)
def down(directory: str | None) -> None:
    """Stop the lab's daemons (by recorded PID); safe to run twice.

    \b
    Example:
      slurm-hooks lab down --dir /tmp/mylab
    """
    lab = _lab(directory)
    click.echo("lab down" if lab.down() else f"no lab running in {lab.base_dir}")


@command.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False), help=DIR_HELP)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(directory: str | None, as_json: bool) -> None:
    """Show the lab's daemons, ports and nodes.  Exit 1 when it is not running.

    \b
    Example:
      slurm-hooks lab status --json
    """
    st = _lab(directory).status()
    if as_json:
        click.echo(json.dumps(st.to_dict(), indent=2, default=str))
    else:
        click.echo(f"lab {st.base_dir}: {'running' if st.running else 'not running'}")
        if st.slurm_version:
            click.echo(f"  slurm {st.slurm_version}, slurmctld port {st.ctld_port}")
        if st.startup_seconds is not None:
            click.echo(f"  start-up: {st.startup_seconds:.2f} s to all nodes idle")
        for name, (pid, alive) in st.processes.items():
            click.echo(f"  {name:<12} pid {pid:<8} {'alive' if alive else 'gone'}")
        for node in st.nodes:
            flags = "+".join(sorted(node.flags))
            state = f"{node.state}+{flags}" if flags else node.state
            reason = "  " + node.reason.replace("\n", "\\n") if node.reason else ""
            click.echo(f"  {node.name:<6} {state:<24}{reason}")
        if st.rest_socket:
            click.echo(f"  slurmrestd: {st.rest_socket}")
        if st.error:
            click.echo(f"  error: {st.error}")
    if not st.running:
        raise SystemExit(1)


@command.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False), help=DIR_HELP)
def env(directory: str | None) -> None:
    """Print shell exports for Slurm clients talking to the lab.

    \b
    Example:
      eval "$(slurm-hooks lab env)" && squeue
    """
    from shlex import quote

    for key, value in _lab(directory).env().items():
        click.echo(f"export {key}={quote(value)}")


@command.command("k8s-standin")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8001, show_default=True, type=int)
@click.option("--token", help="Require this bearer token (401 otherwise).")
def k8s_standin(host: str, port: int, token: str | None) -> None:
    """Run the loopback Kubernetes API stand-in, for ``slurm-hooks bridge``
    trials and the demo.

    \b
    Example:
      slurm-hooks lab k8s-standin --port 8001
    """
    from slurm_hooks_lab.k8s_standin import serve

    click.echo(f"Kubernetes API stand-in on http://{host}:{port} (Ctrl-C to stop)")
    try:
        serve(host, port, token)
    except KeyboardInterrupt:
        pass
