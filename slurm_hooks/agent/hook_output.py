"""What every hook run shares with the prolog's: its log level and its
metrics textfile.

Below both ``hook`` (what the shims exec) and ``prolog`` (the prolog's own
run), so the prolog never imports the module that starts it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slurm_hooks.core.config import Config
    from slurm_hooks.core.model import Finding

log = logging.getLogger("slurm_hooks.agent.hook")  # the hook's own log

#: ``act.metrics.DEFAULT_TEXTFILE_DIR``, named here so that a node without
#: node_exporter's directory never imports the metrics module (a test holds
#: the two equal).
METRICS_DEFAULT_DIR = "/var/lib/prometheus/node-exporter"
#: Environment variable that sets the log level; it wins over ``[general] log_level``.
ENV_LOG_LEVEL = "SLURM_HOOKS_LOG_LEVEL"


def apply_log_level(cfg: Config) -> None:
    """``[general] log_level`` for the rest of the run, unless
    SLURM_HOOKS_LOG_LEVEL chose the level (one run is debugged through the
    environment, whatever the config says).  Raises ConfigError for a level
    that is not a logging level name."""
    if not os.environ.get(ENV_LOG_LEVEL):
        logging.getLogger().setLevel(cfg.general.log_level.upper())


def write_metrics(
    phase: str,
    cfg: Config,
    findings: Sequence[Finding],
    duration_s: float,
    check_durations: Mapping[str, float] | None = None,
) -> str | None:
    """``<[metrics] textfile_dir>/slurm_hooks_<phase>.prom`` for
    node_exporter's textfile collector, replaced atomically; returns its
    path, or None when nothing was written.  Costs one ``stat`` when the
    directory does not exist (node_exporter not installed, the default
    directory absent: no warning) or ``enabled = false``; prometheus_client
    is imported only when the file is written.  A write that fails is
    logged, never fails the hook."""
    raw = cfg.data.get("metrics", {})
    if isinstance(raw, Mapping):
        # Turned off, or the common node without node_exporter (one stat):
        # the metrics module (its dataclasses) is never imported.
        if raw.get("enabled", True) is False:
            return None
        where = raw.get("textfile_dir", METRICS_DEFAULT_DIR)
        if where == METRICS_DEFAULT_DIR and not os.path.isdir(where):
            return None
    from slurm_hooks.act.metrics import DEFAULT_TEXTFILE_DIR, MetricsConfig
    from slurm_hooks.core.errors import ConfigError

    try:
        mc = cfg.section("metrics", MetricsConfig)
    except ConfigError as exc:
        log.warning("metrics textfile not written: bad [metrics]: %s", exc)
        return None
    if not mc.enabled:
        return None
    if not os.path.isdir(mc.textfile_dir):
        if mc.textfile_dir != DEFAULT_TEXTFILE_DIR:
            log.warning("metrics textfile not written: [metrics] textfile_dir %s is not a "
                        "directory", mc.textfile_dir)  # fmt: skip
        return None
    from slurm_hooks.act.metrics import PhaseRun, try_write_textfile

    run = PhaseRun(phase, tuple(findings), time.time(), duration_s, dict(check_durations or {}))
    path = try_write_textfile(mc.textfile_dir, run)
    return str(path) if path is not None else None
