"""``slurm-hooks xid``: scan kernel logs for XIDs, explain an XID."""

from __future__ import annotations

import json
import sys
import tempfile
from datetime import UTC, datetime
from typing import Any

import click

from slurm_hooks.cli._width import wide_option
from slurm_hooks.core.errors import ConfigError, KernelLogError, StateError
from slurm_hooks.core.exits import EXIT_ERROR, EXIT_OK, EXIT_UNHEALTHY
from slurm_hooks.core.model import Status


def _when(wall: float | None, mono: float | None) -> str:
    if wall is not None:
        return datetime.fromtimestamp(wall, UTC).isoformat(timespec="seconds")
    if mono is not None:
        return f"+{mono:.6f}s"
    return "-"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def command() -> None:
    """NVIDIA XID and NVSwitch SXID events: scan logs, explain codes.

    \b
    Examples:
      dmesg | slurm-hooks xid scan -
      slurm-hooks xid scan /var/log/kern.log --json
      slurm-hooks xid scan --since-cursor /var/lib/slurm-hooks   # only what is new
      slurm-hooks xid explain 79
    """


@command.command("scan")
@click.argument("file", required=False, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per event.")
@click.option(
    "--since-cursor",
    "state",
    type=click.Path(file_okay=False),
    help="State dir: read only what is new since its cursor (the hooks' cursor is never advanced).",
)
@click.option(
    "--year",
    type=int,
    default=None,
    help="Year for syslog timestamps, which carry none (default: this year).",
)
@wide_option
def scan_cmd(
    file: str | None, as_json: bool, state: str | None, year: int | None, wide: bool
) -> None:
    """Print the XID/SXID events in FILE ('-' for stdin; default: /dev/kmsg or the journal).

    Identical events are folded into one line with a count.  Exit status: 0 no
    drain-worthy event, 1 drain-worthy events found, 2 error.

    \b
    Examples:
      dmesg -T | slurm-hooks xid scan -
      journalctl -k -o json | slurm-hooks xid scan - --json
      slurm-hooks xid scan /var/log/syslog --since-cursor /tmp/xid-state
    """
    from slurm_hooks.detect.xid.history import load_history
    from slurm_hooks.detect.xid.rules import evaluate
    from slurm_hooks.detect.xid.scan import scan_path, scan_stream
    from slurm_hooks.detect.xid.settings import XidSettings
    from slurm_hooks.detect.xid.source import FileSource, scan_new

    settings = XidSettings()
    ctx = click.get_current_context()
    history: list[Any] = []
    try:
        if file == "-":
            if state:
                raise click.UsageError("--since-cursor needs a file or the kernel log, not stdin")
            result = scan_stream(sys.stdin.buffer, name="<stdin>", year=year)
        elif file and not state:
            result = scan_path(file, year=year)
        else:
            if file:
                source: Any = FileSource(file)
            else:
                from slurm_hooks.detect.checks.xid import make_source

                source = make_source(settings)
            if state:
                # Read-only: from the hooks' cursor, which is never advanced
                # (only the hooks and the watcher do that).
                history = load_history(state)
                result = scan_new(source, state, year=year, save=False)
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    result = scan_new(source, tmp, year=year, save=False)
        now = datetime.now(UTC).timestamp()
        findings = evaluate(result.aggregates, now=now, history=history, settings=settings)
    except (KernelLogError, StateError, ConfigError, OSError) as exc:
        click.echo(f"slurm-hooks: error: {exc}", err=True)
        ctx.exit(EXIT_ERROR)
        return

    verdict = {(f.code, f.component.pci): f for f in findings}
    rows: list[tuple[str, ...]] = []
    for agg in result.aggregates:
        f = verdict.get((agg.code, agg.pci or agg.raw_pci))
        if as_json:
            record = agg.to_dict()
            record["action"] = str(f.action) if f else None
            record["status"] = str(f.status) if f else None
            record["gpu"] = f.component.index if f else None
            click.echo(json.dumps(record, sort_keys=True))
        else:
            who = f"pid={agg.pid if agg.pid is not None else '-'} name={agg.name or '-'}"
            where = agg.pci or agg.raw_pci or "-"
            if agg.switch:
                where = f"{agg.switch}@{where}"
            tail = f"  => {f.status} {f.action}" if f else ""
            first = _when(agg.first_wall, agg.first_monotonic)
            if wide:
                click.echo(
                    f"{agg.code:<9} {where:<14} {who:<28} count={agg.count:<6} "
                    f"first={first}  {agg.message}{tail}"
                )
            else:
                verdict_s = f"{f.status} {f.action}" if f else "-"
                rows.append(
                    (agg.code, where, str(agg.count), first, verdict_s, f"{who}: {agg.message}")
                )
    if rows:
        from slurm_hooks.cli._width import table

        header = ("CODE", "WHERE", "COUNT", "FIRST", "VERDICT", "")
        for line in table([header, *rows], indent="    "):
            click.echo(line)
    from slurm_hooks.cli._width import fill

    stats = result.stats
    if stats.skipped or stats.lost or stats.decode_errors or result.reset:
        line = (
            f"# {stats.lines} lines, {stats.events} events, skipped {stats.malformed} malformed and "
            f"{stats.oversized} oversized, {stats.decode_errors} undecodable, {stats.lost} lost"
            + (f", cursor reset: {result.reset}" if result.reset else "")
        )
        click.echo(fill(line, wide=wide, subsequent="#   "), err=True)
    if not as_json:
        for f in findings:
            if f.status is Status.FAIL:
                line = f"# {f.status} {f.code} {f.component.short()}: {f.action} - {f.message}"
                click.echo(fill(line, wide=wide, subsequent="#   "), err=True)
    ctx.exit(EXIT_UNHEALTHY if any(f.status is Status.FAIL for f in findings) else EXIT_OK)


@command.command("explain")
@click.argument("number", type=int)
@click.option("--sxid", is_flag=True, help="NUMBER is an NVSwitch SXid.")
@wide_option
def explain_cmd(number: int, sxid: bool, wide: bool) -> None:
    """What XID NUMBER means, and what slurm-hooks does about it.

    \b
    Examples:
      slurm-hooks xid explain 79
      slurm-hooks xid explain 13
      slurm-hooks xid explain --sxid 12028
    """
    from slurm_hooks.cli.xid_explain import field, human_does, repair_settings, we_do
    from slurm_hooks.detect.xid.catalogue import load_catalogue

    repair, observe = repair_settings()

    def out(label: str, text: str) -> None:
        click.echo(field(label, text, wide=wide))

    cat = load_catalogue()
    if sxid:
        info_s = cat.sxid(number)
        click.echo(f"SXid {number}: {info_s.name if info_s else 'not in the catalogue'}")
        if info_s:
            click.echo(
                f"  severity:    {info_s.severity} (source: {info_s.source}, confidence: {info_s.confidence})"
            )
        for sev, name in sorted(cat.sxid_defaults.items()):
            b = cat.bucket(name)
            click.echo(f"  when {sev:<8} -> {b.status} {b.action} ({name})")
        return
    info = cat.get(number)
    bucket = cat.bucket_for(number)
    if info is None:
        click.echo(f"XID {number}: not in the catalogue.")
        out(
            "slurm-hooks does",
            f"{bucket.status}: " + we_do(bucket, f"XID{number}", repair, observe_only=observe),
        )
        out("a human must", human_does(bucket))
        return
    click.echo(f"XID {info.xid}: {info.name} ({info.mnemonic})")
    click.echo(field("", info.description, wide=wide))
    out("applies to", ", ".join(info.applies_to) or "none of A100/H100/B100/GB200")
    out("NVIDIA recommends", f"{info.immediate or '(none given)'} ({bucket.meaning})")
    out("investigatory", info.investigatory or "(none given)")
    if info.xid154:
        out("XID 154 follows", "yes (its recovery action wins)")
    out("source", f"{info.source} (confidence: {info.confidence})")
    if info.note:
        out("note", info.note)
    out(
        "slurm-hooks does",
        f"{bucket.status}: " + we_do(bucket, f"XID{number}", repair, observe_only=observe),
    )
    out("a human must", human_does(bucket))
    notes = _RULE_NOTES.get(number) or _RULE_NOTES.get(bucket.rule or "")
    if notes:
        out("rule", notes)


_RULE_NOTES: dict[Any, str] = {
    13: "application fault (WARN, restart_app) unless repeated on the same GPU: "
    "3 distinct incidents within 24 h (configurable) -> FAIL, drain.",
    31: "application fault (WARN, restart_app) unless repeated on the same GPU: "
    "3 distinct incidents within 24 h (configurable) -> FAIL, drain.",
    "xid48": "alone -> FAIL, reset_gpu; with XID 63/64 on the same GPU -> FAIL, drain (drain and reset).",
    "xid45": "with another XID on the same GPU -> ignored (follow that one); alone -> WARN, restart_app.",
    "nvlink74": "register bits decoded: hardware classes -> drain; sympathetic with other errors -> ignore; "
    "ECC threshold only -> WARN; ignorable bits -> OK.",
    "nvlink5": "Fatal -> reset_gpu; Nonfatal -> ignore (RLW_REMAP/RLW_SRC_TRACK: restart_app); XID 154 overrides.",
    "xid154": "the stated recovery action (GPU Reset / Node Reboot / Drain P2P / Drain and Reset) "
    "overrides the actions of the other XIDs on that GPU.",
}
