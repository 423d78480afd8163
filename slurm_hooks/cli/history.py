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
    help="Read this audit log only (an offline copy; add --slurm for Slurm's reasons).",
)
@click.option(
    "--audit-dir",
    type=click.Path(file_okay=False),
    help="Read this shared audit dir only (default: [general] audit_dir and the local log).",
)
@click.option(
    "--slurm/--no-slurm",
    "use_slurm",
    default=None,
    help="Add incidents from our drain reasons in Slurm (default: yes, unless "
    "--audit-log or --audit-dir is given).",
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
    audit_dir: str | None,
    use_slurm: bool | None,
    config_path: str | None,
) -> None:
    """Incident timelines: detected, drained, signalled, requeued,
    replacement requested, resumed, with durations.

    Acceptance runs are shown in the incident they closed (or failed to),
    and those outside any incident on their own.  Reads, merged by time: this
    host's audit log, every node's log in the shared ``[general] audit_dir``,
    and Slurm's node table (a node drained with our reason is an open
    incident even where no log has it).  Exit status: 0 shown (even when
    there is nothing to show), 2 nothing could be read or an option is
    invalid.

    \b
    Examples:
      slurm-hooks history --since 2h
      slurm-hooks history gpu017 --since 2024-05-01 --json
      slurm-hooks history --open --wide
    """
    now = datetime.now(UTC)
    since_t = hist.parse_since(since, now) if since else None
    offline = bool(audit_log or audit_dir)
    use_slurm = not offline if use_slurm is None else use_slurm
    cfg = load_config(config_path) if use_slurm or not offline else None
    path, shared = sources(cfg, audit_log, audit_dir)
    logs: list[Path] = [path] if path else []
    if shared:
        try:
            logs += hist.shared_bases(shared)
        except hist.HistoryError as exc:  # the mount is away: show what is here
            if audit_dir:
                raise
            click.echo(f"({exc}: shared logs not shown)", err=True)
    events, skipped, files = hist.read_fleet(logs)
    slurm_note = "not asked"
    if use_slurm:
        events, slurm_note = _with_slurm(cfg, events, now)
    if not files and slurm_note != "read":
        where = " or ".join(str(p) for p in (path, shared) if p)
        raise hist.HistoryError(f"no audit log at {where}; Slurm {slurm_note}")
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
            "audit_log": str(path) if path else None,
            "audit_dir": str(shared) if shared else None,
            "audit_files": [str(f) for f in files],
            "slurm": slurm_note,
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
        click.echo(f"({history.skipped} unreadable line(s) skipped)", err=True)
    if not files:
        click.echo("(no audit log here: incidents from Slurm's reasons only)", err=True)
    elif use_slurm and slurm_note != "read":
        click.echo(f"(Slurm {slurm_note}: audit logs only)", err=True)


def sources(
    cfg: Any, audit_log: str | None, audit_dir: str | None
) -> tuple[Path | None, Path | None]:
    """(local log, shared dir) to read: the options given, else the config's."""
    if audit_log or audit_dir:
        return (Path(audit_log) if audit_log else None, Path(audit_dir) if audit_dir else None)
    shared = cfg.general.audit_dir
    return audit_path(cfg), Path(shared) if shared else None


def _with_slurm(cfg: Any, events: list[Any], now: datetime) -> tuple[list[Any], str]:
    """Events plus those rebuilt from our reasons in Slurm's node table (one
    read); Slurm away is a note, not a failure: the logs are still shown."""
    from slurm_hooks.cli._common import slurm_client
    from slurm_hooks.core.errors import SlurmError

    try:
        nodes = slurm_client(cfg).list_nodes()
    except SlurmError as exc:
        return events, f"not reachable ({exc})"
    return hist.merge_slurm(events, hist.slurm_events(nodes, now)), "read"
