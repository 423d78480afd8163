"""``slurm-hooks burnin parse FILE``: judge a gpu_burn output an admin has in hand.

Exit codes: 0 healthy, 1 unhealthy (a WARN or FAIL finding), 2 could not
judge (nothing ran, unreadable file, unknown profile).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import click

from slurm_hooks.cli._common import EXIT_ERROR, EXIT_OK, EXIT_UNHEALTHY, exits_on_error
from slurm_hooks.core.errors import ConfigError
from slurm_hooks.core.model import Finding, Status


def resolve_profile(
    name: str | None, config_path: str | None, *, gpu_count: int | None = None
) -> dict[str, Any]:
    """A profile by name: the config's ``[profiles.NAME]``, else a shipped
    example; no name: an empty profile (only floors given as options apply).
    ``gpu_count`` (``--gpus``) overrides the profile's."""
    profile = _named_profile(name, config_path) if name else {}
    if gpu_count is not None:
        profile["gpu_count"] = gpu_count
    return profile


def _named_profile(name: str, config_path: str | None) -> dict[str, Any]:
    from slurm_hooks.core.config import load
    from slurm_hooks.detect.profiles import builtin_names, load_builtin, load_profiles

    cfg = load(config_path, validate=False)
    prof = load_profiles(cfg).get(name)
    if prof is None and name in builtin_names():
        prof = load_builtin(name)
    if prof is None:
        known = ", ".join(sorted({p.name for p in load_profiles(cfg)} | set(builtin_names())))
        raise ConfigError(f"no profile {name!r} (known: {known})")
    return {k: prof[k] for k in prof}


def exit_code(findings: Sequence[Finding]) -> int:
    if any(f.status in (Status.FAIL, Status.WARN) for f in findings):
        return EXIT_UNHEALTHY
    if any(f.status is Status.UNKNOWN for f in findings):
        return EXIT_ERROR
    return EXIT_OK


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace", newline="") as fh:
            return fh.read()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc}", path=path) from exc


def echo_json(figures: dict[str, Any], findings: Sequence[Finding]) -> None:
    """The parsed run's figures with the findings, as one JSON document."""
    click.echo(json.dumps({**figures, "findings": [f.to_dict() for f in findings]}, indent=2))


@dataclass(frozen=True)
class ParseRequest:
    """What every ``<engine> parse`` command (``burnin``, ``nccl``) is asked:
    the captured FILE, JSON or text out, and the profile to judge against with
    the two overrides of it."""

    file: str
    as_json: bool
    profile_name: str | None
    config_path: str | None
    floor: float | None
    gpus: int | None

    def profile(self) -> dict[str, Any]:
        return resolve_profile(self.profile_name, self.config_path, gpu_count=self.gpus)

    def text(self) -> str:
        return read_text(self.file)


def parse_options(*, floor_help: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """One option stack for the ``<engine> parse`` commands, so they cannot
    drift; the command receives them as one ``ParseRequest`` (its first
    argument), its own options after it."""

    stack = (
        click.argument("file", type=click.Path(dir_okay=False)),
        click.option("--json", "as_json", is_flag=True, help="Print figures and findings as JSON."),
        click.option("--profile", "profile_name", help="Judge against this profile's floors."),
        click.option("-c", "--config", "config_path", help="Config file with [profiles]."),
        click.option("--floor", type=float, help=floor_help),
        click.option("--gpus", type=int, help="Expected GPU count (overrides the profile)."),
    )
    names = [f.name for f in fields(ParseRequest)]

    def apply(fn: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(fn)
        def command(**kwargs: Any) -> None:
            request = ParseRequest(**{name: kwargs.pop(name) for name in names})
            fn(request, **kwargs)

        # Applied last to first, as stacked decorators are: the help lists them in order.
        for decorate in reversed(stack):
            command = decorate(command)
        return command

    return apply


def echo_report(errors: Sequence[str], findings: Sequence[Finding]) -> None:
    """The text report's tail, the same for every engine."""
    for e in errors:
        click.echo(f"  error: {e}")
    for f in findings:
        click.echo(f"{f.status.value:7s} {f.code:18s} {f.component.short():6s} {f.message}")


@click.group(name="burnin")
def command() -> None:
    """GPU burn-in results (gpu_burn output).

    \b
    Example:
      gpu_burn 60 > burn.log 2>&1; slurm-hooks burnin parse burn.log
    """


@command.command("parse")
@parse_options(floor_help="FP32 TFLOP/s floor per GPU (overrides the profile).")
@exits_on_error
def parse_cmd(request: ParseRequest) -> None:
    """Parse and judge a captured gpu_burn output FILE (stdout+stderr).

    \b
    Example:
      gpu_burn 60 > burn.log 2>&1; slurm-hooks burnin parse burn.log --profile h100-sxm5-80gb
    """
    from slurm_hooks.detect.engines.burnin.gpu_burn import parse_gpu_burn
    from slurm_hooks.detect.engines.burnin.judge import judge_burnin, thresholds_from

    settings = {"tflops_floor": request.floor} if request.floor is not None else {}
    run = parse_gpu_burn(request.text())
    findings = judge_burnin(run, thresholds_from(request.profile(), settings))
    if request.as_json:
        echo_json(run.to_dict(), findings)
    else:
        click.echo(f"gpu_burn: {len(run.gpus)} GPUs, completed={run.completed}")
        for g in run.gpus:
            tf = "-" if g.tflops is None else f"{g.tflops:.1f}"
            click.echo(
                f"  gpu{g.index}: {g.verdict or '?':6s} errors={g.errors} tflops={tf}"
                f" max_temp={g.max_temp_c if g.max_temp_c is not None else '-'}"
                + (" DIED" if g.died else "")
            )
        echo_report(run.errors, findings)
    raise SystemExit(exit_code(findings))
