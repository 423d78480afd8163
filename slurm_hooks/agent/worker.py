"""The detached grace worker: ``python -m slurm_hooks.agent.worker <incident-file>``.

A hook cannot wait out a job's checkpoint grace (slurmd kills a
HealthCheckProgram at 60 s and an epilog holds the node), so the engine
starts this in its own session and returns.  It sleeps until the incident's
deadline, then requeues (or cancels) the jobs through the same engine code.
If it dies, the journal still says what is left and ``resume_pending()``
(or the next hook run on the node) finishes the work: exactly once, because
the engine asks Slurm for the job's restart count before requeueing.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the worker imports the engine lazily, after its env is set
    from slurm_hooks.act.engine import Engine

log = logging.getLogger("slurm_hooks.agent.worker")


def build_engine(incident_file: Path, doc: dict[str, Any]) -> Engine:
    from slurm_hooks.act.engine import Engine
    from slurm_hooks.act.notify import build_notifier
    from slurm_hooks.act.notify.config import NotifyConfig
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.decide.config import PolicyConfig
    from slurm_hooks.slurm import factory
    from slurm_hooks.store.audit import AuditLog
    from slurm_hooks.store.state import StateStore

    for key, value in (doc.get("worker_env") or {}).items():
        os.environ[key] = str(value)
    # Only the sections the worker reads are validated: a typo in, say, the
    # bridge's table must not stop a signalled job from being requeued.
    cfg = config_mod.load(validate=False)
    general = cfg.general
    policy = cfg.section("policy", PolicyConfig)
    # The cli and pyslurm backends run Slurm's commands: point them at the
    # cluster the hook ran against (SLURM_CONF comes with the worker_env).
    opts: dict[str, Any] = {}
    if general.slurm_backend in ("cli", "pyslurm") and os.environ.get("SLURM_CONF"):
        opts["slurm_conf"] = os.environ["SLURM_CONF"]
    slurm = factory.client_from_config(cfg, **opts)
    state = StateStore(incident_file.parent.parent)
    audit = AuditLog(
        doc.get("audit_log") or state.root / "audit.jsonl",
        actor="slurm-hooks/worker", shared_dir=general.audit_dir or None,
    )  # fmt: skip
    notifier = build_notifier(cfg.section("notify", NotifyConfig), slurm)
    from slurm_hooks.decide.repair import RepairConfig

    return Engine(
        slurm, policy, state, audit, notifier, spawn=None, actor="slurm-hooks/worker",
        observe_only=general.observe_only, repair=cfg.section("repair", RepairConfig),
    )  # fmt: skip


def acceptance_here(node: str) -> tuple[bool, str]:
    """Acceptance on this node for the repair loop (burn-in, NCCL, the
    health checks, dcgmi where present), judged like ``slurm-hooks
    acceptance --run-local``; the repair records the verdict."""
    from slurm_hooks.agent.acceptance import AcceptanceConfig, judge_acceptance
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.detect import runner

    cfg = config_mod.load(validate=False)
    ac = cfg.section("acceptance", AcceptanceConfig)
    result = runner.run_phase("acceptance", cfg=cfg, node=node, budget_s=ac.budget_s)
    return judge_acceptance(tuple(result.findings), ac.require, allow_warn=ac.allow_warn)


def repair(engine: Engine, incident: str) -> str | None:
    """Carry the incident's repair on (act/repair.py) with this node's NVML
    (for the GPU's serial and the reset) and boot id."""
    from slurm_hooks.act import repair as repair_mod
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.detect.xid.source import read_boot_id

    if not repair_mod.due(engine.state.read_incident(incident), engine.repair):
        return None
    from slurm_hooks.act import gpu_scope

    if gpu_scope.waiting(engine.context, incident):
        return None  # spared jobs still on the node: the run after the last one repairs
    nvml = None
    try:
        from slurm_hooks.detect.checks.settings import ChecksConfig
        from slurm_hooks.detect.probes.nvml import load_nvml

        checks = config_mod.load(validate=False).section("checks", ChecksConfig)
        nvml = load_nvml(checks.nvml, checks.nvml_scenario or None)
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no NVML: nvidia-smi resets, serial unknown
        log.warning("NVML not available for the repair: %s", exc)
        nvml = None
    return repair_mod.advance(
        engine.context, incident, accept=acceptance_here, nvml=nvml, boot_id=read_boot_id()
    )


#: Seconds before the first look at the incident's jobs during the grace.
POLL_S = 1.0
#: Each further look waits this much longer than the one before ...
POLL_GROWTH = 1.5
#: ... up to this: a job that checkpoints and exits early is requeued within
#: ``POLL_MAX_S`` of its end, and a 120 s grace costs 16 looks (one
#: ``scontrol show job`` per job each), not 120.
POLL_MAX_S = 10.0


def poll_delays(grace_s: float) -> Iterator[float]:
    """The sleeps between looks during a grace of ``grace_s`` seconds: 1 s
    first (most jobs that checkpoint on the signal exit within seconds),
    growing by half each time up to ``POLL_MAX_S``; they add up to
    ``grace_s``, so the last look falls on the deadline."""
    delay, left = POLL_S, grace_s
    while left > 0:
        step = min(delay, left)
        yield step
        left -= step
        delay = min(delay * POLL_GROWTH, POLL_MAX_S)


def run(incident_file: Path) -> int:
    from slurm_hooks.store.state import parse_time, read_json

    doc = read_json(incident_file)
    if not isinstance(doc, dict):
        log.error("no incident journal at %s", incident_file)
        return 2
    engine = build_engine(incident_file, doc)
    outcomes = []
    if doc.get("deadline"):
        deadline = parse_time(doc["deadline"])
        log.info("incident %s: grace until %s", doc["incident"], doc["deadline"])
        # Poll rather than sleep: a job that checkpointed and exited on the
        # signal is requeued soon instead of after the whole grace; with
        # backoff (``poll_delays``), so a long grace costs few job reads.
        for delay in poll_delays((deadline - datetime.now(UTC)).total_seconds()):
            time.sleep(max(0.0, min(delay, (deadline - datetime.now(UTC)).total_seconds())))
            outcomes += engine.finish_incident(doc["incident"], early=True)
            current = read_json(incident_file)
            if isinstance(current, dict) and current.get("jobs_done"):
                break
    outcomes += engine.finish_incident(doc["incident"])
    for o in outcomes:
        log.info("incident %s job %s: %s (%s)", doc["incident"], o.job_id, o.outcome, o.detail)
    reached = repair(engine, doc["incident"])
    if reached:
        log.info("incident %s: repair %s", doc["incident"], reached)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s worker[%(process)d] %(message)s"
    )
    if len(args) != 1:
        print("usage: python -m slurm_hooks.agent.worker <incident-file>", file=sys.stderr)
        return 2
    try:
        return run(Path(args[0]))
    except Exception:  # noqa: BLE001 - a worker must log why it died; the journal keeps the rest
        log.exception("grace worker failed for %s", args[0])
        return 2


if __name__ == "__main__":
    sys.exit(main())
