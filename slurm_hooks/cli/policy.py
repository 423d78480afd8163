"""``slurm-hooks policy explain``: what the engine would decide, and why.

Decisions are values, so this runs the very code the hooks run, without
acting.  Offline by default (the node is assumed in service, the breaker
not evaluated); ``--live`` reads the node, the fleet, the breaker latch and
the node's local history the way the engine would.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import click

from slurm_hooks.cli._common import EXIT_OK, EXIT_UNHEALTHY, config_option, exits_on_error


def _findings_from_file(path: str) -> list[Any]:
    from slurm_hooks.core.errors import ConfigError
    from slurm_hooks.core.model import Action, Component, Finding, Provenance, Status

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read findings: {exc}", path=path) from exc
    rows = data.get("findings", data) if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise ConfigError("expected a list of findings (or {'findings': [...]})", path=path)
    out = []
    for i, row in enumerate(rows):
        try:
            comp = row.get("component") or {"kind": "node"}
            out.append(
                Finding(
                    check=row.get("check", "file"),
                    status=Status(row.get("status", "FAIL")),
                    code=row["code"],
                    message=row.get("message", ""),
                    component=Component(**comp),
                    action=Action(row.get("action", "none")),
                    values=row.get("values") or {},
                    # What `check --json` wrote; a file without it is a root probe's.
                    provenance=tuple(Provenance(p) for p in row["provenance"])
                    if "provenance" in row
                    else (Provenance.ROOT_PROBE,),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"finding {i}: {exc}", path=path) from exc
    return out


def _xid_finding(xid: int, gpu: int) -> Any:
    from slurm_hooks.core.model import Component, Finding
    from slurm_hooks.detect.xid.catalogue import load_catalogue

    cat = load_catalogue()
    bucket = cat.bucket_for(xid)
    info = cat.get(xid)
    name = info.name if info else "unknown XID"
    return Finding(
        "xid",
        bucket.status,
        f"XID{xid}",
        f"Xid {xid}: {name}",
        Component("gpu", index=gpu),
        bucket.action,
        {"bucket": bucket.name},
    )


@click.group("policy")
def command() -> None:
    """Inspect the remediation policy.

    \b
    Example:
      slurm-hooks policy explain --xid 79 --gpu 3
    """


@command.command("explain")
@click.option("--findings", "findings_file", type=click.Path(dir_okay=False, exists=True),
              help="JSON file with findings (as `slurm-hooks check --json` writes them).")  # fmt: skip
@click.option("--xid", type=int, help="Explain what one XID on a GPU would cause.")
@click.option("--gpu", type=int, default=0, show_default=True, help="GPU index for --xid.")
@click.option("--node", default=None, help="Node name (default: this host).")
@click.option("--live", is_flag=True, help="Read the node, fleet, breaker and history.")
@click.option("--json", "as_json", is_flag=True, help="Print decisions as JSON.")
@config_option
@exits_on_error
def explain(
    findings_file: str | None,
    xid: int | None,
    gpu: int,
    node: str | None,
    live: bool,
    as_json: bool,
    config_path: str | None,
) -> None:
    """Print the decisions for some findings and why.  Exit 1 when one of them
    would take the node out of service, or the breaker is tripped (the drain
    is refused: a human must look).

    \b
    Examples:
      slurm-hooks policy explain --xid 79 --gpu 3
      slurm-hooks policy explain --xid 79 --node gpu017 --live
      slurm-hooks check --json > f.json; slurm-hooks policy explain --findings f.json
    """
    from datetime import UTC, datetime

    from slurm_hooks.cli._common import load_config
    from slurm_hooks.decide import PolicyConfig, decide

    if (findings_file is None) == (xid is None):
        raise click.UsageError("give exactly one of --findings FILE or --xid N")
    findings = _findings_from_file(findings_file) if findings_file else [_xid_finding(xid, gpu)]  # type: ignore[arg-type]
    name = node or socket.gethostname().split(".")[0]
    cfg = load_config(config_path)
    if live:
        from slurm_hooks.act.engine import Engine

        decisions = Engine.from_config(cfg, spawn=None).evaluate(name, findings)
    else:
        policy = cfg.section("policy", PolicyConfig)
        decisions = decide(findings, None, None, None, policy, datetime.now(UTC), node=name,
                           observe_only=cfg.general.observe_only)  # fmt: skip
    from slurm_hooks.decide import DecisionKind

    if as_json:
        click.echo(json.dumps([d.to_dict() for d in decisions], indent=2))
    else:
        if not decisions:
            click.echo(f"{name}: nothing to do (no problem findings)")
        for d in decisions:
            tag = " (observe-only: would not act)" if d.observe_only else ""
            click.echo(f"{name}: {str(d.kind).upper()} {d.code}{tag}")
            click.echo(f"  why: {d.explanation}")
            for f in d.findings:
                trust = "user-side only" if f.user_side else "trusted"
                click.echo(
                    f"  evidence: {f.code} from {', '.join(map(str, f.provenance))} ({trust})"
                )
            if d.reason is not None:
                from slurm_hooks.core.reason import format_reason

                click.echo(f"  reason: {format_reason(d.reason)}")
            if d.evacuate:
                click.echo("  jobs: signal, wait the grace period, requeue (or cancel)")
            if d.kind is DecisionKind.REQUEUE_JOB:
                click.echo(f"  jobs: requeue job {d.facts.get('job')} only (it opted in)")
            elif d.kind is DecisionKind.REPORT_JOB:
                click.echo("  jobs: none touched; the job's owner and the admins are told")
            for key, value in sorted(d.facts.items()):
                click.echo(f"  {key}: {value}")
        if not live:
            click.echo(
                "(offline: node assumed in service, breaker not checked; --live to ask Slurm)"
            )
    unhealthy = any(d.kind.drains or d.kind is DecisionKind.BREAKER_TRIPPED for d in decisions)
    raise SystemExit(EXIT_UNHEALTHY if unhealthy else EXIT_OK)
