"""``slurm-hooks history``: incidents and their timelines from the audit log."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from slurm_hooks.cli import history_report as hist
from slurm_hooks.cli._common import config_option, exits_on_error, load_config
from slurm_hooks.cli._width import wide_option


def audit_path(cfg: Any) -> Path:
    """``[policy] audit_log``, else ``<general.state_dir>/audit.jsonl``."""
    try:
        from slurm_hooks.decide.config import PolicyConfig

        configured = cfg.section("policy", PolicyConfig).audit_log
    except ImportError:
        configured = ""
    return Path(configured or Path(cfg.general.state_dir) / "audit.jsonl")


@click.command("history")
@click.argument("node", required=False)
@click.option(
    "--since",
    metavar="WHEN",
    help="Only incidents active since WHEN: a duration back from now (2h, 3d, 1h30m) "
    "or an ISO time (2024-05-01T10:00, ...Z for UTC).",
)
@click.option("--incident", "incident_id", metavar="ID", help="Only this incident.")
@click.option("--open", "only_open", is_flag=True, help="Only incidents not resumed yet.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@wide_option
@click.option(
    "--audit-log",
    type=click.Path(dir_okay=False),
    help="Audit log to read (default: from the config).",
)
@config_option
@exits_on_error
def command(
    node: str | None,
    since: str | None,
    incident_id: str | None,
    only_open: bool,
    as_json: bool,
    wide: bool,
    audit_log: str | None,
    config_path: str | None,
) -> None:
    """Incident timelines: detected, drained, signalled, requeued,
    replacement requested, resumed, with durations.

    Acceptance runs are shown in the incident they closed (or failed to),
    and those outside any incident on their own.  Reads the audit log every
    slurm-hooks process appends to.  Exit status:
    0 shown (even when there is nothing to show), 2 the log cannot be read
    or an option is invalid.

    \b
    Examples:
      slurm-hooks history --since 2h
      slurm-hooks history gpu017 --since 2024-05-01 --json
      slurm-hooks history --open --wide
    """
    now = datetime.now(UTC)
    since_t = hist.parse_since(since, now) if since else None
    path = Path(audit_log) if audit_log else audit_path(load_config(config_path))
    events, skipped = hist.read_records(path)
    history = hist.select(hist.build_incidents(events, skipped), node=node, since=since_t)
    incidents = [
        i
        for i in history.incidents
        if (incident_id is None or i.incident == incident_id)
        and (not only_open or i.resolved is None)
    ]
    runs = () if incident_id or only_open else hist.acceptance_runs(history)
    if as_json:
        doc = {
            "audit_log": str(path),
            "since": since_t.isoformat() if since_t else None,
            "skipped_lines": history.skipped,
            "incidents": [i.to_dict(now) for i in incidents],
            "acceptance_runs": [e.to_dict() for e in runs],
        }
        click.echo(json.dumps(doc, indent=2))
        return
    shown = hist.History(tuple(incidents), runs, history.skipped)
    for line in hist.iter_lines(shown, now, wide=wide):
        click.echo(line)
    if not incidents and not runs:
        click.echo(
            "no incidents" + (f" for {node}" if node else "") + (" in range" if since else "")
        )
    if history.skipped:
        click.echo(f"({history.skipped} unreadable line(s) in {path} skipped)", err=True)
