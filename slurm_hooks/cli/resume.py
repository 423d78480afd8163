"""``slurm-hooks resume NODE``: return a node we drained to service.

Only a node whose reason is ours, and only after acceptance passed since the
fault (``--force-acceptance-skip`` for the human who knows better).  An
admin's, NHC's, the operator's or Slurm's reason is refused.
"""

from __future__ import annotations

import click

from slurm_hooks.cli._common import EXIT_OK, EXIT_UNHEALTHY, config_option, exits_on_error


@click.command("resume")
@click.argument("nodes", metavar="HOSTLIST")
@click.option("--force-acceptance-skip", is_flag=True,
              help="Resume without a recorded acceptance pass (still only our reasons).")  # fmt: skip
@config_option
@exits_on_error
def command(nodes: str, force_acceptance_skip: bool, config_path: str | None) -> None:
    """Resume each node of HOSTLIST (``gpu017``, ``'gpu[001-004]'``) if
    slurm-hooks drained it and it passed acceptance.  Exit 0: all resumed (or
    already in service); 1: one was not; 2: an unknown node (nothing done),
    a foreign reason, or could not run.

    \b
    Examples:
      slurm-hooks resume gpu017
      slurm-hooks resume 'gpu[001-004,017]'
    """
    from slurm_hooks.core import hostlist
    from slurm_hooks.core.errors import NodeNotFound

    names = hostlist.expand(nodes)
    if not names:
        raise NodeNotFound(nodes, f"no node in {nodes!r}")
    if len(names) > 1:  # one unknown name: nothing is resumed (one node: Slurm says so)
        from slurm_hooks.cli._common import load_config, slurm_client

        known = {n.name for n in slurm_client(load_config(config_path)).list_nodes()}
        if unknown := set(names) - known:
            folded = hostlist.fold(unknown)
            raise NodeNotFound(folded, f"unknown node(s): {folded} (nothing resumed)")
    rc = EXIT_OK
    for node in names:
        rc = max(rc, _resume_one(node, force_acceptance_skip, config_path))
    raise SystemExit(rc)


def _resume_one(node: str, force_acceptance_skip: bool, config_path: str | None) -> int:
    """Resume one node; the exit code it asks for."""
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
        return EXIT_OK
    if d.kind is DecisionKind.IGNORE:
        click.echo(f"{node}: {d.explanation}")
        return EXIT_OK
    click.echo(f"{node}: not resumed: {d.explanation}", err=True)
    return EXIT_UNHEALTHY
