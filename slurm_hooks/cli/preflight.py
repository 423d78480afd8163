"""``slurm-hooks preflight``: a multi-node all-reduce across the job's nodes;
when it is slow, pairs with known-good nodes find the culprit, which is
drained with our reason (the job is then requeued by the engine's grace path).

Run it at the start of a job.  Under ``srun`` every task starts it; only
rank 0 (``SLURM_PROCID=0``) measures, the others exit 0 at once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from slurm_hooks.cli._common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_UNHEALTHY,
    config_option,
    exits_on_error,
)

if TYPE_CHECKING:
    from slurm_hooks.core.config import Config
    from slurm_hooks.core.model import Finding


@click.command("preflight")
@click.option("--nodes", metavar="HOSTLIST",
              help="Nodes to test (default: the job's, $SLURM_JOB_NODELIST).")  # fmt: skip
@click.option("--no-drain", is_flag=True, help="Report the culprit, do not drain it.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@config_option
@exits_on_error
def command(nodes: str | None, no_drain: bool, as_json: bool, config_path: str | None) -> None:
    """Check the allocation's inter-node all-reduce bandwidth; find and drain
    the node that makes it slow.

    Exit 0: fast; 1: slow (culprit reported/drained, or none could be
    blamed); 2: could not run.

    \b
    Examples:
      srun slurm-hooks preflight || exit 1          # first line of a batch job
      slurm-hooks preflight --nodes 'gpu[001-016]' --no-drain --json
    """
    from slurm_hooks.agent.preflight import (
        PreflightConfig,
        allocation_nodes,
        make_engine,
        run_preflight,
    )
    from slurm_hooks.core import config, hostlist

    procid = os.environ.get("SLURM_PROCID")
    if procid not in (None, "", "0"):
        raise SystemExit(EXIT_OK)
    cfg = config.load(config_path, validate=False)  # sections validated as read
    pc = cfg.section("preflight", PreflightConfig)
    names = hostlist.expand(nodes) if nodes else allocation_nodes(os.environ)
    if not names:
        click.echo("slurm-hooks: error: no nodes (not in a job? use --nodes)", err=True)
        raise SystemExit(EXIT_ERROR)
    gpus = pc.gpus_per_node or 1
    engine = make_engine(pc, gpus)
    drain = None if no_drain else _drainer(cfg)
    result = run_preflight(names, engine, pc, drain=drain)
    if as_json:
        click.echo(json.dumps(result.to_dict()))
    else:
        w = result.whole
        if w is None:
            click.echo(f"preflight: {result.why}")
        else:
            bw = f"{w.busbw_gbps:.1f} GB/s" if w.busbw_gbps is not None else f"failed ({w.error})"
            click.echo(f"preflight: {len(names)} nodes: {bw} (floor {pc.busbw_floor_gbps:g})")
        for p, m in result.pairs:
            bw = f"{m.busbw_gbps:.1f} GB/s" if m.busbw_gbps is not None else f"failed ({m.error})"
            click.echo(f"  pair {p[0]},{p[1]}: {bw}")
        if not result.ok:
            click.echo(f"preflight: SLOW: {result.why}")
            for n in result.culprits:
                state = "drained" if n in result.drained else "not drained"
                click.echo(f"  culprit {n} ({state})")
    raise SystemExit(EXIT_OK if result.ok else EXIT_UNHEALTHY)


def _drainer(cfg: Config) -> Callable[[str, Finding], bool]:
    def drain(node: str, finding: Finding) -> bool:
        from slurm_hooks.act.engine import Engine
        from slurm_hooks.core.reason import is_ours

        engine = Engine.from_config(cfg, actor="slurm-hooks/preflight")
        decisions = engine.handle(node, [finding])
        if not any(d.kind.drains and not d.observe_only for d in decisions):
            return False
        state = engine.slurm.get_node(node)
        return bool(state.drained and is_ours(state.reason))

    return drain
