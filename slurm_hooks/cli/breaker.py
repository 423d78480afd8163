"""``slurm-hooks breaker status|reset``: the fleet's automation fuse."""

from __future__ import annotations

import json
from typing import TypedDict

import click

from slurm_hooks.cli._common import EXIT_OK, EXIT_UNHEALTHY, config_option, exits_on_error

#: The breaker's two states, the same word in every command (status, breaker
#: status, policy explain): armed (drains allowed, possibly up to the limit)
#: or tripped (latched: drains stop until ``breaker reset``).  Exit code 1
#: means tripped, everywhere.
ARMED, TRIPPED = "armed", "tripped"


class _PartitionRow(TypedDict):
    """One partition in ``breaker status`` (also its ``--json`` shape)."""

    partition: str
    state: str
    tripped: bool
    tripped_at: str | None
    tripped_by: str | None
    drained_in_window: int
    limit: int
    size: int
    nodes: list[str]


@click.group("breaker")
def command() -> None:
    """Show or re-arm the circuit breaker that caps automatic drains
    (``armed`` or ``tripped``).

    \b
    Examples:
      slurm-hooks breaker status
      slurm-hooks breaker reset --partition gpu
    """


@command.command("status")
@click.option("--json", "as_json", is_flag=True)
@config_option
@exits_on_error
def status(as_json: bool, config_path: str | None) -> None:
    """Latched trips and, per partition, drains by slurm-hooks in the window
    against the limit.  Exit 1 when tripped.

    \b
    Examples:
      slurm-hooks breaker status
      slurm-hooks breaker status --json | jq '.partitions[] | select(.tripped)'
    """
    from datetime import UTC, datetime

    from slurm_hooks.act.engine import Engine
    from slurm_hooks.cli._common import load_config
    from slurm_hooks.decide.breaker import partition_usage

    engine = Engine.from_config(load_config(config_path), spawn=None)
    trips = engine.latch.read()
    nodes = engine.slurm.list_nodes()
    now = datetime.now(UTC)
    parts = sorted({p for n in nodes for p in n.partitions} or {"*"})
    rows: list[_PartitionRow] = []
    for part in parts:
        counted, size, limit, names = partition_usage(nodes, part, engine.policy, now)
        trip = trips.get(part)
        rows.append(
            {
                "partition": part,
                "state": TRIPPED if trip is not None else ARMED,
                "tripped": trip is not None,
                "tripped_at": trip.at.isoformat() if trip else None,
                "tripped_by": trip.node if trip else None,
                "drained_in_window": counted,
                "limit": limit,
                "size": size,
                "nodes": list(names),
            }
        )
    if as_json:
        click.echo(json.dumps({"latch": str(engine.latch.path), "partitions": rows}, indent=2))
    else:
        click.echo(f"latch: {engine.latch.path}")
        for r in rows:
            state = TRIPPED if r["tripped"] else ARMED
            extra = f" since {r['tripped_at']} (by {r['tripped_by']})" if r["tripped"] else ""
            if not r["tripped"] and r["size"] and r["drained_in_window"] >= r["limit"]:
                extra = " (at the limit: the next drain trips it)"
            click.echo(
                f"{r['partition']}: {state}{extra}; {r['drained_in_window']}/{r['limit']} "
                f"drained by slurm-hooks in the window ({r['size']} nodes)"
            )
    raise SystemExit(EXIT_UNHEALTHY if trips else EXIT_OK)


@command.command("reset")
@click.option("--partition", default=None, help="Re-arm one partition (default: all).")
@config_option
@exits_on_error
def reset(partition: str | None, config_path: str | None) -> None:
    """Re-arm the breaker after a human has looked at the cause.

    \b
    Examples:
      slurm-hooks breaker reset
      slurm-hooks breaker reset --partition gpu
    """
    import getpass

    from slurm_hooks.act.engine import Engine
    from slurm_hooks.cli._common import load_config
    from slurm_hooks.core.held import parse_mark

    engine = Engine.from_config(load_config(config_path))
    gone = engine.breaker_reset(partition, who=f"cli:{getpass.getuser()}")
    nodes = engine.slurm.list_nodes()
    marked = sorted({p for n in nodes if parse_mark(n.comment) for p in (n.partitions or ("*",))})
    gone = sorted(set(gone) | set(marked))
    click.echo(f"re-armed: {', '.join(gone)}" if gone else "breaker was not tripped")
    if partition is not None:
        nodes = [n for n in nodes if partition in n.partitions]
    # Held faults are re-examined at once, through the same claim/confirm:
    # up to the cap drained, the rest held again (and the breaker latched).
    outcomes = engine.retry_held(nodes)
    for node, outcome in sorted(outcomes.items()):
        click.echo(f"  {node}: {outcome}")
    if outcomes:
        drained = sum(1 for o in outcomes.values() if o == "drained")
        click.echo(f"held faults re-examined: {len(outcomes)}, drained {drained}")
