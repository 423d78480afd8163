"""``slurm-hooks resume NODE``: return a node we drained to service.

Only a node whose reason is ours, and only after acceptance passed since the
fault (``--force-acceptance-skip`` for the human who knows better).  An
admin's, NHC's, the operator's or Slurm's reason is refused.
"""

from __future__ import annotations

import click

from slurm_hooks.cli._common import EXIT_OK, EXIT_UNHEALTHY, config_option, exits_on_error


@click.command("resume")
@click.argument("node")
@click.option("--force-acceptance-skip", is_flag=True,
              help="Resume without a recorded acceptance pass (still only our reasons).")  # fmt: skip
@config_option
@exits_on_error
def command(node: str, force_acceptance_skip: bool, config_path: str | None) -> None:
    """Resume NODE if slurm-hooks drained it and it passed acceptance."""
    import getpass

    from slurm_hooks.act.engine import Engine
    from slurm_hooks.cli._common import load_config
    from slurm_hooks.core.errors import ForeignReasonError
    from slurm_hooks.decide import DecisionKind

    cfg = load_config(config_path)
    engine = Engine.from_config(cfg, spawn=None, actor=f"cli:{getpass.getuser()}")
    d = engine.try_resume(node, human=True, skip_acceptance=force_acceptance_skip)
    if d.kind is DecisionKind.FOREIGN_REASON:
        raise ForeignReasonError(f"{node}: {d.explanation}")
    if d.kind is DecisionKind.RESUME and not d.observe_only:
        click.echo(f"{node}: resumed ({d.explanation})")
        raise SystemExit(EXIT_OK)
    if d.kind is DecisionKind.IGNORE:
        click.echo(f"{node}: {d.explanation}")
        raise SystemExit(EXIT_OK)
    click.echo(f"{node}: not resumed: {d.explanation}", err=True)
    raise SystemExit(EXIT_UNHEALTHY)
