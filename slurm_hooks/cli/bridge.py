"""``slurm-hooks bridge``: mirror Slurm drains into Kubernetes."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

import click

log = logging.getLogger(__name__)


@click.group("bridge")
def command() -> None:
    """Mirror Slurm drain reasons into Kubernetes: cordon, taint, evict,
    request a replacement, uncordon on resume.  Slurm stays the source of truth.

    \b
    Examples:
      slurm-hooks bridge run --once --dry-run --kubeconfig ~/.kube/config
      slurm-hooks lab k8s-standin --port 8001   # a local API to try it on (slurm-hooks[lab])
    """


@command.command("run")
@click.option("--once", is_flag=True, help="One reconcile pass, then exit.")
@click.option("--dry-run", is_flag=True, help="Plan and log; change nothing.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="Config file.")
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, exists=True),
    help="Kubeconfig (default: the pod's service account).",
)
@click.option("--context", help="Kubeconfig context (default: current-context).")
@click.option("--metrics-port", type=int, help="Serve Prometheus /metrics on this port.")
def run_cmd(
    once: bool,
    dry_run: bool,
    config_file: str | None,
    kubeconfig: str | None,
    context: str | None,
    metrics_port: int | None,
) -> None:
    """Reconcile in a loop (or once).

    \b
    Examples:
      slurm-hooks bridge run --once --dry-run --kubeconfig ~/.kube/config
      slurm-hooks bridge run --config /etc/slurm-hooks/config.toml --metrics-port 9402
    """
    import dataclasses

    from slurm_hooks.bridge.metrics import BridgeMetrics, serve
    from slurm_hooks.bridge.service import Bridge
    from slurm_hooks.bridge.settings import BridgeConfig
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.core.errors import ConfigError
    from slurm_hooks.k8s.client import KubeClient
    from slurm_hooks.slurm import factory

    conf = config_mod.load(config_file)
    cfg = conf.section("bridge", BridgeConfig)
    general = conf.general
    try:
        cfg.validate(
            slurm_backend=general.slurm_backend,
            general_rest=bool(general.slurm_rest_url or general.slurm_rest_socket),
        )
    except ValueError as exc:
        raise ConfigError(str(exc), path=conf.path, key="bridge.slurm_rest_url") from exc
    if dry_run:
        cfg = dataclasses.replace(cfg, dry_run=True)
    if metrics_port is not None:
        cfg = dataclasses.replace(cfg, metrics_port=metrics_port)
    metrics = BridgeMetrics()
    kw: dict[str, Any] = {
        "timeout": cfg.api_timeout,
        "retries": cfg.api_retries,
        "on_call": metrics.on_api_call,
    }
    if kubeconfig:
        kube = KubeClient.from_kubeconfig(kubeconfig, context, **kw)
    else:
        kube = KubeClient.in_cluster(**kw)
    slurm = factory.client_from_config(conf, general=cfg.slurm_general(general))
    if cfg.metrics_port:
        serve(metrics, cfg.metrics_port)
        log.info("metrics on :%d/metrics", cfg.metrics_port)
    audit = None
    if cfg.lending.enabled:
        from pathlib import Path

        from slurm_hooks.store.audit import AuditLog

        audit = AuditLog(
            Path(general.state_dir) / "audit.jsonl",
            actor="slurm-hooks/bridge", shared_dir=general.audit_dir or None,
        )  # fmt: skip
    bridge = Bridge(slurm, kube, cfg, metrics=metrics, audit=audit)
    if once:
        result = bridge.reconcile_once()
        for r in result.results:
            click.echo(f"{r.outcome:8} {type(r.step).__name__:18} {r.step.node:20} {r.detail}")
        for d in result.plan.deferred if result.plan else ():
            click.echo(f"deferred {d.slurm_node:20} {d.why}")
        if result.lending is not None:
            from slurm_hooks.bridge.lending import Track

            for lr in result.lending.results:
                if not isinstance(lr.step, Track):
                    name = type(lr.step).__name__
                    click.echo(f"{lr.outcome:8} {name:18} {lr.step.node:20} {lr.detail}")
            for note in result.lending.plan.notes:
                click.echo(f"lending  {note.node or '-':20} {note.why}")
        if result.error:
            raise click.ClickException(result.error)
        return
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    bridge.run(stop)
