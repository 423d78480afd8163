"""``slurm-hooks check``: run a phase's health checks on this node now."""

from __future__ import annotations

import json
import sys

import click

from slurm_hooks.cli._common import config_option
from slurm_hooks.cli._width import wide_option
from slurm_hooks.core.errors import SlurmHooksError
from slurm_hooks.core.model import Phase, Status

_MARK = {Status.OK: "ok", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.UNKNOWN: "UNKNOWN"}


def _table(result: object, verbose: bool, wide: bool = False) -> str:
    from slurm_hooks.cli._width import fill, table
    from slurm_hooks.detect.runner import RunResult

    assert isinstance(result, RunResult)
    lines = [
        fill(
            f"node {result.node}  phase {result.phase}  profile {result.profile}  "
            f"status {result.status}  ({result.seconds * 1000:.0f} ms)",
            wide=wide,
            subsequent="  ",
        )
    ]
    rows = [("STATUS", "CHECK", "CODE", "COMPONENT", "ACTION", "MESSAGE")]
    for f in result.findings:
        if f.status == Status.OK and not verbose:
            continue
        rows.append(
            (_MARK[f.status], f.check, f.code, f.component.short(), str(f.action), f.message)
        )
    if len(rows) == 1:
        done = f"all {len(result.outcomes)} checks ok: {', '.join(result.durations)}"
        lines.append(fill(done, wide=wide, subsequent="  "))
        return "\n".join(lines)
    lines.extend(table(rows, wide=wide))
    return "\n".join(lines)


@click.command("check")
@click.option(
    "--phase",
    type=click.Choice([str(p) for p in Phase]),
    default=str(Phase.HEALTHCHECK),
    show_default=True,
    help="Which phase's checks to run.",
)
@click.option(
    "--only",
    "only",
    multiple=True,
    metavar="NAME",
    help="Run only these checks (repeat, or comma-separate), whatever their phase.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@config_option
@click.option("--profile", help="Use this profile instead of matching the node name.")
@click.option("--node", help="Node name to match profiles against (default: this node).")
@click.option("--state-dir", help="State directory (default: [general] state_dir).")
@click.option("--list", "list_checks", is_flag=True, help="List the registered checks and exit.")
@click.option("-a", "--all", "show_all", is_flag=True, help="Show OK findings in the table too.")
@wide_option
def command(
    phase: str,
    only: tuple[str, ...],
    as_json: bool,
    config_path: str | None,
    profile: str | None,
    node: str | None,
    state_dir: str | None,
    list_checks: bool,
    show_all: bool,
    wide: bool,
) -> None:
    """Run the health checks of a phase on this node and print the findings.

    Exit status: 0 healthy (no FAIL), 1 unhealthy (any FAIL), 2 could not
    run (bad config, unknown profile or check, or every check UNKNOWN).

    \b
    Examples:
      slurm-hooks check
      slurm-hooks check --phase epilog --only ecc,gpu_lost --json
      slurm-hooks check --config fake-gpus.toml --profile h100-sxm5-80gb  # nvml = "lab:fake"
    """
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.detect.checks.registry import CHECKS
    from slurm_hooks.detect.runner import run_phase

    if list_checks:
        for spec in CHECKS.values():
            phases = ",".join(p for p in Phase if p in spec.phases)
            click.echo(f"{spec.name:<14} {phases:<44} {spec.summary}")
        return
    ctx = click.get_current_context()
    try:
        cfg = config_mod.load(config_path, validate=False)
        _validate_ours(cfg)
        from slurm_hooks.cli._readonly import scratch_state

        # Read-only: the hooks' cursors and caches are read, never advanced.
        with scratch_state(state_dir or cfg.general.state_dir) as scratch:
            result = run_phase(
                phase,
                cfg=cfg,
                node=node,
                profile=profile,
                only=list(only) or None,
                state_dir=scratch,
            )
    except SlurmHooksError as exc:
        click.echo(f"slurm-hooks: error: {exc}", err=True)
        ctx.exit(exc.exit_code)
        return
    if as_json:
        json.dump(result.to_dict(), sys.stdout, indent=2)
        click.echo()
    else:
        click.echo(_table(result, show_all, wide))
    ctx.exit(result.exit_code)


def _validate_ours(cfg: object) -> None:
    """Deep-validate the sections this command reads (each check's own keys
    too), so a typo is an exit-2 error naming file and key, not a per-check
    UNKNOWN."""
    from slurm_hooks.detect.checks.settings import load_checks_config

    load_checks_config(cfg, deep=True)
