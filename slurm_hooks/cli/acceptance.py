"""``slurm-hooks acceptance NODE``: the checks a node must pass before it is resumed.

Two ways to run, because Slurm starts no job on a DRAINED node, not even
inside a MAINT reservation (measured on 22.05):

* ``--run-local`` on the node itself: the full acceptance phase here; the
  verdict is recorded and, on a pass, the node is resumed if we drained it.
  This is the path for a drained node (run it over ssh/pdsh, or from the
  node's own automation).
* without it, for a node still in service: a ``flags=maint,ignore_jobs``
  reservation keeps other jobs off, and ``srun --reservation`` runs
  ``acceptance --run-local`` there as a job; the reservation is deleted after.
"""

from __future__ import annotations

import json

import click

from slurm_hooks.cli._common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_UNHEALTHY,
    config_option,
    exits_on_error,
)


@click.command("acceptance")
@click.argument("node")
@click.option("--run-local", is_flag=True,
              help="Run the checks here (this machine must be NODE); the path for a drained node.")  # fmt: skip
@click.option("--reservation", metavar="NAME",
              help="Use this existing reservation instead of creating one (not with --run-local).")  # fmt: skip
@click.option("--no-resume", is_flag=True, help="Record the verdict but do not resume the node.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@config_option
@exits_on_error
def command(
    node: str,
    run_local: bool,
    reservation: str | None,
    no_resume: bool,
    as_json: bool,
    config_path: str | None,
) -> None:
    """Run the acceptance checks (full burn-in, NCCL, dcgmi diag -r 2 where
    installed) for NODE; on a pass, resume it if slurm-hooks drained it.

    Exit 0: passed; 1: failed; 2: could not run.

    \b
    Examples:
      slurm-hooks acceptance gpu017 --run-local     # on gpu017 (drained or not)
      pdsh -w gpu017 slurm-hooks acceptance gpu017 --run-local
      slurm-hooks acceptance gpu017                 # in-service node, as a job
      slurm-hooks acceptance gpu017 --reservation maint_gpu017
    """
    from slurm_hooks.core import config

    # Sections are validated as they are read (the hook path does the same).
    cfg = config.load(config_path, validate=False)
    if run_local:
        if reservation:
            raise click.UsageError("--reservation and --run-local do not go together")
        _run_local(node, cfg, resume=not no_resume, as_json=as_json)
    _run_as_job(node, cfg, reservation, as_json=as_json, config_path=config_path)


def _run_local(node: str, cfg: object, *, resume: bool, as_json: bool) -> None:
    from slurm_hooks.agent.acceptance import run_acceptance
    from slurm_hooks.core.errors import SlurmHooksError
    from slurm_hooks.detect.runner import node_name

    here = node_name()
    if here != node:
        raise SlurmHooksError(
            f"acceptance --run-local must run on {node} itself (this is {here}): it tests "
            "the local GPUs"
        )
    result = run_acceptance(node, cfg, resume=resume)  # type: ignore[arg-type]
    if as_json:
        click.echo(json.dumps(result.to_dict()))
    else:
        verdict = "PASSED" if result.passed else "FAILED"
        click.echo(f"{node}: acceptance {verdict} in {result.seconds:.1f}s: {result.detail}")
        if result.slow_history:
            click.echo(f"{node}: note: {result.slow_history} (see 'slurm-hooks history {node}')")
        if result.decision:
            click.echo(f"{node}: resume: {result.decision} ({result.decision_why})")
        elif result.passed and not resume:
            click.echo(f"{node}: not resumed (--no-resume): 'slurm-hooks resume {node}' does it")
    raise SystemExit(result.exit_code)


def _run_as_job(
    node: str, cfg: object, reservation: str | None, *, as_json: bool, config_path: str | None
) -> None:
    from slurm_hooks.agent.acceptance import AcceptanceConfig, reservation_name, srun_argv
    from slurm_hooks.cli._common import slurm_client
    from slurm_hooks.core.errors import SlurmError
    from slurm_hooks.detect.probes.commands import run
    from slurm_hooks.slurm.door import SlurmDoor
    from slurm_hooks.slurm.gres import gpu_count

    ac = cfg.section("acceptance", AcceptanceConfig)  # type: ignore[attr-defined]
    state = slurm_client(cfg).get_node(node)
    if state.drained or state.down:
        click.echo(
            f"slurm-hooks: error: {node} is {state.state}"
            f"{'+DRAIN' if state.drained else ''}: Slurm starts no job there, not even in a "
            f"maintenance reservation. Run 'slurm-hooks acceptance {node} --run-local' on "
            f"{node} itself.",
            err=True,
        )
        raise SystemExit(EXIT_ERROR)
    created = None
    if not reservation:
        reservation = reservation_name(ac, node)
        # The reservation is a write to Slurm: through the door (a SlurmError when refused).
        SlurmDoor.create_reservation(reservation, node, int(ac.reservation_minutes))
        created = reservation
    try:
        argv = srun_argv(ac, node, reservation, gpus=gpu_count(state.gres), config_path=config_path)
        res = run(argv, timeout=ac.reservation_minutes * 60 + 60, check=False)
    finally:
        if created:
            try:
                SlurmDoor.delete_reservation(created)
            except SlurmError as exc:
                click.echo(f"slurm-hooks: warning: reservation {created} left: {exc}", err=True)
    doc = _last_json(res.stdout)
    if doc is None:
        click.echo(
            f"slurm-hooks: error: acceptance job on {node} gave no result (rc={res.rc}): "
            f"{(res.stderr or res.stdout).strip()[-500:]}",
            err=True,
        )
        raise SystemExit(EXIT_ERROR)
    if as_json:
        click.echo(json.dumps(doc))
    else:
        verdict = "PASSED" if doc.get("passed") else "FAILED"
        click.echo(f"{node}: acceptance {verdict} (job in reservation {reservation}): "
                   f"{doc.get('detail')}")  # fmt: skip
        if doc.get("decision"):
            click.echo(f"{node}: resume: {doc['decision']} ({doc.get('decision_why')})")
    raise SystemExit(EXIT_OK if doc.get("passed") else EXIT_UNHEALTHY)


def _last_json(text: str) -> dict | None:
    for line in reversed((text or "").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                return doc
    return None
