"""``slurm-hooks simulate``: replay a failure trace through the real policy."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import click

from slurm_hooks.cli._common import exits_on_error
from slurm_hooks.core.errors import ConfigError


@click.command("simulate")
@click.option("--trace", "trace_name", default="llama3", show_default=True, metavar="NAME|FILE",
              help="A published profile (llama3, rsc1, rsc2) or a site's audit log / "
              "'slurm-hooks history --json' file (replays its decisions).")  # fmt: skip
@click.option("--history", "extra_history", multiple=True, type=click.Path(dir_okay=False),
              help="More audit logs or history documents to replay with --trace FILE.")  # fmt: skip
@click.option("--nodes", type=click.IntRange(2, 1_000_000), default=None,
              help="Simulated nodes of 8 GPUs (default 2048; a history: its nodes).")  # fmt: skip
@click.option("--days", type=click.FloatRange(0.01, 3650), default=None,
              help="Simulated days (default 54).")  # fmt: skip
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the generated trace.")
@click.option("--set", "settings", multiple=True, metavar="NAME=VALUE",
              help="Set a parameter (spares, jobs, checkpoint_s, restart_s, response_s, "
              "breaker_cap, hang_s, ...: docs/simulate.md).")  # fmt: skip
@click.option("--sweep", metavar="NAME=V1,V2,...",
              help="Replay once per value of one parameter, e.g. spares=0,8,32.")  # fmt: skip
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False, exists=True),
              help="The site's config ([policy], [repair], [progress]); default: the "
              "product's defaults with [repair] enabled and resume_spares.")  # fmt: skip
@click.option("--catalogue", type=click.Path(dir_okay=False, exists=True),
              help="An XID catalogue JSON to judge with instead of the packaged one.")  # fmt: skip
@click.option("--scope", "scope", is_flag=True,
              help='Compare [policy] evacuate = "node" and "gpu" on nodes shared by small '
              "jobs (--set: mix, mean_job_h, checkpoint_s, ...: docs/simulate.md).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.option("--plot", type=click.Path(dir_okay=False), help="Write the picture (PNG) here.")
@exits_on_error
def command(trace_name: str, extra_history: tuple[str, ...], nodes: int | None,
            days: float | None, seed: int, settings: tuple[str, ...], sweep: str | None,
            config_path: str | None, catalogue: str | None, scope: bool, as_json: bool,
            plot: str | None) -> None:  # fmt: skip
    """Replay a failure trace over simulated nodes and training jobs through
    slurm-hooks' own judges, decide(), breaker, repair ladder and spare
    pick, beside two baselines (no automation; periodic health checks), and
    report the training time kept (ETTR), nodes out of service, requeues,
    false drains, breaker trips and replacements.

    \b
    Examples:
      slurm-hooks simulate --trace llama3 --nodes 2048 --days 54 --seed 1
      slurm-hooks simulate --sweep spares=0,8,32 --json
      slurm-hooks simulate --trace /var/lib/slurm-hooks/audit.jsonl --config site.toml
      slurm-hooks simulate --scope --set checkpoint_s=0 --set mix=1:0.5,8:0.5
    """
    if scope:
        _scope(trace_name, nodes, days, seed, settings, as_json)
        return
    from slurm_hooks.decide import PolicyConfig
    from slurm_hooks.decide.repair import RepairConfig
    from slurm_hooks.detect.xid.catalogue import load_catalogue

    policy, repair, hang_s = PolicyConfig(), RepairConfig(enabled=True, resume_spares=True), None
    if config_path:
        from slurm_hooks.core import config
        from slurm_hooks.detect.progress.settings import ProgressConfig

        cfg = config.load(config_path)
        policy = cfg.section("policy", PolicyConfig)
        repair = cfg.section("repair", RepairConfig)
        hang_s = cfg.section("progress", ProgressConfig).hang_s
    cat = load_catalogue(catalogue) if catalogue else None
    from slurm_hooks.simulate.trace import profiles

    if trace_name not in profiles() or extra_history:
        _history([trace_name, *extra_history], policy, nodes or 0, cat, as_json)
        return
    _fleet(trace_name, nodes, days, seed, settings, sweep, policy, repair, hang_s, cat,
           as_json, plot)  # fmt: skip


def _params(nodes: int | None, days: float | None, settings: tuple[str, ...],
            hang_s: float | None) -> Any:  # fmt: skip
    from slurm_hooks.simulate.params import SimParams

    return _settled(SimParams(hang_s=hang_s), nodes, days, settings)


def _settled(p: Any, nodes: int | None, days: float | None, settings: tuple[str, ...]) -> Any:
    """``p`` (SimParams or ScopeParams) with --nodes, --days and each --set."""
    if nodes is not None:
        p = dataclasses.replace(p, nodes=nodes)
    if days is not None:
        p = dataclasses.replace(p, days=days)
    for item in settings:
        name, eq, value = item.partition("=")
        if not eq:
            raise ConfigError(f"--set wants NAME=VALUE, got {item!r}")
        p = _with(p, name.strip(), value.strip())
    return p


def _with(p: Any, name: str, value: str) -> Any:
    try:
        q = p.with_value(name, value)
        q.validate()
    except ValueError as exc:
        raise ConfigError(f"{name}={value}: {exc}") from exc
    return q


def _fleet(trace_name: str, nodes: int | None, days: float | None, seed: int,
           settings: tuple[str, ...], sweep: str | None, policy: Any, repair: Any,
           hang_s: float | None, cat: Any, as_json: bool, plot: str | None) -> None:  # fmt: skip
    from slurm_hooks.simulate import report
    from slurm_hooks.simulate.replay import run_all
    from slurm_hooks.simulate.trace import generate

    params = _params(nodes, days, settings, hang_s)

    def one(p: Any) -> tuple[Any, dict[str, Any]]:
        pol = policy
        if p.breaker_cap is not None:
            pol = dataclasses.replace(policy, breaker_max_nodes=p.breaker_cap)
        tr = generate(trace_name, nodes=p.nodes, days=p.days, seed=seed,
                      switch_nodes=p.switch_nodes, gpus_per_node=p.gpus_per_node,
                      recur_s=p.recur_s)  # fmt: skip
        return tr, run_all(tr, p, policy=pol, repair=repair, catalogue=cat)

    if sweep:
        name, eq, values = sweep.partition("=")
        if not eq or not values:
            raise ConfigError(f"--sweep wants NAME=V1,V2,..., got {sweep!r}")
        rows = []
        for v in values.split(","):
            tr, res = one(_with(params, name.strip(), v.strip()))
            rows.append((v.strip(), res))
        if as_json:
            doc = report.document(tr, params, rows[-1][1], seed=seed)
            doc["sweep"] = {"name": name.strip(), "rows": [
                {"value": v, "baselines": {k: f.to_dict() for k, f in res.items()}}
                for v, res in rows]}  # fmt: skip
            click.echo(json.dumps(doc, indent=2))
            return
        click.echo(f"trace {trace_name}: {tr.source}; seed {seed}; sweep of {name.strip()}")
        for line in report.sweep_lines(name.strip(), rows):
            click.echo(line)
        return
    tr, res = one(params)
    note = report.plot(res, plot, f"{trace_name}, {params.nodes} nodes, {params.days:g} days, "
                       f"seed {seed}") if plot else None  # fmt: skip
    if as_json:
        doc = report.document(tr, params, res, seed=seed, timeline=bool(plot))
        if note:
            doc["plot"] = note
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"trace {trace_name}: {len(tr.faults)} node faults over {params.nodes} nodes x "
               f"{params.days:g} days (seed {seed}); {tr.source}")  # fmt: skip
    click.echo(f"job: {params.jobs} x {params.job_nodes} nodes, checkpoint every "
               f"{params.checkpoint_s:g} s, restart {params.restart_s:g} s; "
               f"spares {params.spares}")  # fmt: skip
    for line in report.table(res):
        click.echo(line)
    if plot:
        click.echo(note or f"picture: {plot}", err=bool(note))


def _history(paths: list[str], policy: Any, nodes: int, cat: Any, as_json: bool) -> None:
    from slurm_hooks.simulate.history import replay_history
    from slurm_hooks.simulate.trace import read_history

    tr = read_history(paths)
    rows = replay_history(tr, policy, nodes=nodes, catalogue=cat)
    matched = sum(r.match for r in rows)
    if as_json:
        click.echo(json.dumps({"trace": {"name": tr.name, "source": tr.source,
                                         "nodes": list(tr.names)},
                               "decisions": len(rows), "matched": matched,
                               "rows": [r.to_dict() for r in rows]}, indent=2))  # fmt: skip
    else:
        click.echo(f"replayed {len(rows)} decision(s) of {tr.source}: {matched} reproduced")
        for r in rows:
            mark = "=" if r.match else "!"
            click.echo(f"  {mark} +{r.t:9.3f}s {r.node:<12} {r.code or '-':<12} "
                       f"logged {r.logged:<16} replayed {r.replayed}")  # fmt: skip
    if matched != len(rows):
        raise SystemExit(1)


def _scope(trace_name: str, nodes: int | None, days: float | None, seed: int,
           settings: tuple[str, ...], as_json: bool) -> None:  # fmt: skip
    """``--scope``: the same failures under evacuate = "node" and "gpu"."""
    from slurm_hooks.simulate.scope import ScopeParams, compare, iter_rows

    p = _settled(ScopeParams(profile=trace_name), nodes, days, settings)
    try:
        p.validate()
        node, gpu = compare(p, seed)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if as_json:
        doc = {"params": dataclasses.asdict(p), "seed": seed,
               "node": node.to_dict(), "gpu": gpu.to_dict()}  # fmt: skip
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"{p.nodes} nodes of {p.gpus_per_node} GPUs, {p.days:g} days, failures as "
               f"{p.profile}, seed {seed}; {node.gpu_hours:,.0f} GPU-hours in all")  # fmt: skip
    click.echo(f"{'':44} {'node':>10} {'gpu':>10}")
    for label, a, b in iter_rows(node, gpu):
        click.echo(f"{label:44} {a:>10} {b:>10}")
