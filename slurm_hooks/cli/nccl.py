"""``slurm-hooks nccl parse FILE``: judge an nccl-tests output an admin has in hand.

Exit codes: 0 healthy, 1 unhealthy (a WARN or FAIL finding), 2 could not
judge (empty output, unreadable file, unknown profile).
"""

from __future__ import annotations

import click

from slurm_hooks.cli._common import exits_on_error
from slurm_hooks.cli.burnin import (
    ParseRequest,
    echo_json,
    echo_report,
    exit_code,
    parse_options,
)


@click.group(name="nccl")
def command() -> None:
    """NCCL all-reduce bandwidth results (nccl-tests output).

    \b
    Example:
      slurm-hooks nccl parse allreduce.log --profile h100-sxm5-80gb
    """


@command.command("parse")
@parse_options(floor_help="Bus bandwidth floor in GB/s (overrides the profile).")
@click.option(
    "--large-min-bytes",
    type=int,
    default=256 * 1024 * 1024,
    show_default=True,
    help="Rows at or above this size are judged for bandwidth.",
)
@exits_on_error
def parse_cmd(request: ParseRequest, large_min_bytes: int) -> None:
    """Parse and judge a captured all_reduce_perf output FILE.

    \b
    Example:
      all_reduce_perf -b 32M -e 8G -g 8 > ar.log 2>&1
      slurm-hooks nccl parse ar.log --profile h100-sxm5-80gb --json
    """
    from slurm_hooks.detect.engines.nccl.judge import judge_nccl, thresholds_from
    from slurm_hooks.detect.engines.nccl.parser import parse_nccl_tests

    settings: dict[str, object] = {"large_min_bytes": large_min_bytes}
    if request.floor is not None:
        settings["busbw_floor_gbps"] = request.floor
    run = parse_nccl_tests(request.text())
    findings = judge_nccl(run, thresholds_from(request.profile(), settings))
    if request.as_json:
        echo_json(run.to_dict(large_min_bytes), findings)
    else:
        large = run.large_busbw(large_min_bytes)
        click.echo(
            f"all_reduce: {run.nranks or '?'} ranks, {len(run.rows)} sizes, completed={run.completed},"
            f" avg busbw={run.avg_busbw if run.avg_busbw is not None else '-'} GB/s,"
            f" large busbw={'-' if large is None else f'{large:.1f}'} GB/s, wrong={run.wrong}"
        )
        echo_report(run.errors, findings)
    raise SystemExit(exit_code(findings))
