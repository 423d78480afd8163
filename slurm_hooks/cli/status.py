"""``slurm-hooks status``: the fleet as Slurm sees it, grouped for a human."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from slurm_hooks.cli import fleet
from slurm_hooks.cli._common import (
    EXIT_OK,
    EXIT_UNHEALTHY,
    config_option,
    exits_on_error,
    load_config,
    slurm_client,
    styled,
    use_color,
)
from slurm_hooks.core import hostlist
from slurm_hooks.core.errors import NodeNotFound
from slurm_hooks.core.model import NodeState
from slurm_hooks.slurm.base import SlurmClient

log = logging.getLogger(__name__)


def breaker_state(cfg: Any, nodes: list[NodeState], now: datetime) -> tuple[str, dict[str, Any]]:
    """("armed" | "tripped" | "unknown", per-partition detail).

    The words of ``slurm-hooks breaker status``: armed, with ``at_limit`` in
    a partition's detail when it holds as many of our drains in the window
    as the breaker allows (the next drain there trips it); tripped: a latch
    file holds a trip until ``slurm-hooks breaker reset``.
    """
    from slurm_hooks.cli.breaker import ARMED, TRIPPED

    try:
        from slurm_hooks.decide import breaker
        from slurm_hooks.decide.config import PolicyConfig
    except ImportError:
        return "unknown", {}
    try:
        pcfg = cfg.section("policy", PolicyConfig)
    except Exception as exc:  # a bad [policy] must not hide the fleet
        log.warning("cannot read [policy]: %s", exc)
        return "unknown", {"error": str(exc)}
    partitions = sorted({p for n in nodes for p in n.partitions}) or [breaker.ALL]
    detail: dict[str, Any] = {}
    state = ARMED
    for part in partitions:
        counted, size, limit, names = breaker.partition_usage(nodes, part, pcfg, now)
        detail[part] = {
            "counted": counted,
            "size": size,
            "limit": limit,
            "nodes": list(names),
            "at_limit": bool(size and counted >= limit),
        }
    latch = _latch(pcfg, cfg)
    if latch:
        detail["latch"] = latch
        state = TRIPPED
    return state, detail


def _latch(pcfg: Any, cfg: Any) -> dict[str, Any] | None:
    """Latched trips, read through the state store's BreakerLatch (the same
    file ``slurm-hooks breaker reset`` clears)."""
    from slurm_hooks.core.errors import StateError
    from slurm_hooks.store.state import BreakerLatch

    path = Path(pcfg.breaker_state_file or Path(cfg.general.state_dir) / "breaker.json")
    try:
        trips = BreakerLatch(path).read()
    except (OSError, StateError) as exc:
        log.warning("cannot read breaker latch %s: %s", path, exc)
        return None
    if not trips:
        return None
    return {
        "path": str(path),
        "trips": {
            part: {"at": t.at.isoformat(), "node": t.node, "counted": t.counted, "limit": t.limit}
            for part, t in trips.items()
        },
    }


@click.command("status")
@click.argument("nodes", required=False, metavar="[HOSTLIST]")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@config_option
@exits_on_error
def command(nodes: str | None, as_json: bool, config_path: str | None) -> None:
    """Nodes out of service, grouped by who drained them and why.

    Shows drained and down nodes grouped by owner (slurm-hooks, NHC, admin,
    slurm-operator, Slurm itself) and fault code, with age, incident, GPU and
    replacement state; lent nodes; the circuit breaker.  Exit status: 0 all
    in service, 1 some node out of service or the breaker tripped, 2 unknown
    node or could not run.

    \b
    Examples:
      slurm-hooks status
      slurm-hooks status 'gpu[001-064]' --json | jq '.groups[].nodes'
    """
    cfg = load_config(config_path)
    client = slurm_client(cfg)
    now = datetime.now(UTC)
    all_nodes = client.list_nodes()
    selected = all_nodes
    if nodes:
        wanted = set(hostlist.expand(nodes))
        unknown = wanted - {n.name for n in all_nodes}
        if unknown:
            folded = hostlist.fold(unknown)
            raise NodeNotFound(folded, f"unknown node(s): {folded} (Slurm has no such node)")
        selected = [n for n in all_nodes if n.name in wanted]
    state, detail = breaker_state(cfg, all_nodes, now)
    from slurm_hooks.cli import held_report

    held = held_report.held_rows(selected, cfg.general.state_dir)
    if held and state != "unknown":
        from slurm_hooks.cli.breaker import TRIPPED

        state = TRIPPED  # held marks in Slurm latch the breaker fleet-wide
    summary = fleet.summarize(
        selected, now, breaker=state, breaker_detail=detail, jobs=_jobs_left(client, selected)
    )
    if as_json:
        doc = summary.to_dict()
        doc["held"] = held
        doc["generated_at"] = now.isoformat()
        click.echo(json.dumps(doc, indent=2))
    else:
        color = use_color()
        for line in fleet.render(summary):
            click.echo(styled(line.text, line.style, color))
        for text in held_report.render(held):
            click.echo(text)
    attention = summary.needs_attention or bool(held)
    click.get_current_context().exit(EXIT_UNHEALTHY if attention else EXIT_OK)


def _jobs_left(client: SlurmClient, nodes: list[NodeState]) -> dict[str, list[str]]:
    """The jobs Slurm still runs on each out-of-service node that is busy
    (draining, completing): what a repair waits for.  One job list for all
    of them, none when no such node; a list that fails reads as ``?``."""
    from slurm_hooks.slurm.jobs_index import jobs_by_node

    busy = [n.name for n in nodes if fleet.is_out_of_service(n) and n.busy]
    return {
        name: sorted({j.job_id for j in jobs}, key=_job_order)
        for name, jobs in jobs_by_node(client, busy).items()
    }


def _job_order(job_id: str) -> tuple[int, str]:
    """Numeric ids in number order (``99`` before ``812``), others after."""
    head = job_id.split("_")[0].split("+")[0]
    return (int(head), job_id) if head.isdigit() else (1 << 62, job_id)
