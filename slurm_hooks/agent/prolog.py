"""The prolog's budget manager: a cached pass, a budgeted full run, our own drain.

The prolog runs before every job on every node, so on a node that passed
recently it must cost well under a second.  A full run (burn-in, NCCL and
the fast GPU checks: ``runner.run_phase("prolog")``) happens only when the
node's last pass is stale; otherwise only the warm checks run (``xid``: new
kernel-log lines since the last scan).

The warm ``xid`` scan advances the kernel-log cursor the watcher and the
other hooks share, so it runs, with the engine call on what it found, under
the node's detect lock (``state.DETECT_LOCK``), waited for at most
``detect_lock_wait_s``.  When the lock stays busy the watcher is scanning
and acting: the prolog skips the XID part this time and says so.  The lock
is never held across the burn-in or NCCL (the watcher would wait for them),
and the full run does not scan the kernel log again.

A pass is cached in ``<state_dir>/prolog/pass.json`` (atomic JSON) and is
good for ``validity_s`` unless any of these happened since:

* new XID events: the warm ``xid`` check found some now, or the XID history
  file changed (someone else's scan - the health check, the watcher - saw
  new events and moved the cursor past them);
* a fault was recorded for this node in the state store by any phase (the
  engine records every non-trivial decision);
* the node rebooted (another ``boot_id``), or the job asks for GPUs the
  cached pass did not test.

(The cache and the facts it is judged against: ``prolog_cache.py``.)

CPU-only jobs skip the GPU work.  The job's GPUs come from the prolog's
environment: slurmd puts ``SLURM_JOB_GPUS`` (and ``CUDA_VISIBLE_DEVICES``,
``GPU_DEVICE_ORDINAL``) there when GPUs are GRES (see docs/prolog.md for
what 22.05 measured).  Without GRES the environment cannot tell, and
``[prolog] gres_gpus = false`` says so: every job is then a GPU job on a node
whose profile has GPUs.

When a check fails, the engine drains the node with OUR reason, then the
prolog requeues the job itself (``scontrol requeue`` while the prolog still
runs; with ``PrologFlags=DeferBatch``, which install asks for, slurmctld
sends the batch script only after the prologs ended, by then to no node:
docs/prolog.md) and exits 0, so the job
is requeued without a hold whatever SchedulerParameters say.  Where the
requeue is refused (``--no-requeue``) it exits 1 and Slurm handles the job;
the node is already drained, so Slurm keeps our reason instead of writing
"Prolog error" (both measured on Slurm 22.05: docs/prolog.md).  When the
policy declines the drain (breaker tripped, observe-only), the prolog exits
0: a non-zero exit would make Slurm drain the node behind the breaker's back.

Nothing here imports click or requests; the engine is built only when there
is something to act on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from slurm_hooks.agent.prolog_cache import (  # noqa: F401 (re-exported: importable from here too)
    BOOT_ID_PATH,
    CACHE_FILE,
    CachedPass,
    NodeFacts,
    PassCache,
    cache_verdict,
    last_fault_at,
    last_slow_at,
    read_boot_id,
    still_good,
    widened,
    xid_mark,
)
from slurm_hooks.agent.prolog_gpus import GpuUse, in_nvml_order, job_gpus, parse_devices
from slurm_hooks.core.config import Config, GeneralConfig
from slurm_hooks.core.errors import StateError
from slurm_hooks.core.model import Finding, Status
from slurm_hooks.core.record import record

log = logging.getLogger(__name__)
Clock = Callable[[], float]


@record
class PrologConfig:
    """``[prolog]``.  Times are seconds."""

    #: How long a full pass stays good (no new XID, no fault in between).
    validity_s: float = 1800.0
    #: The whole prolog: cache check, full run and the drain.  The default
    #: fits the default prolog burn-in (5 s + start-up) and NCCL sweep
    #: (expected_s = 15) on an 8-GPU node with margin (docs/prolog.md).
    budget_s: float = 60.0
    #: Seconds kept back from the checks for the drain (a few scontrol calls).
    engine_reserve_s: float = 5.0
    #: Skip the GPU work for jobs that were allocated no GPUs.
    gpu_jobs_only: bool = True
    #: GPUs are GRES on this cluster, so a job without SLURM_JOB_GPUS has none.
    #: Set false where GPUs are not GRES: every job is then a GPU job on a node
    #: whose profile has GPUs (profile gpu_count = 0 still means CPU-only).
    gres_gpus: bool = True
    #: Slurm shares GPUs between jobs here (gres/shard, gres/mps): a GPU job's
    #: prolog asks Slurm what it asked for and does no GPU work for a share
    #: (its environment names the shared GPU as if whole: prolog_sharing.py).
    gpu_sharing: bool = False
    #: Checks run on every prolog, cached or not (cheap, no GPU).
    warm_checks: tuple[str, ...] = ("xid",)
    #: After our drain, requeue the job ourselves and exit 0 (no hold, our
    #: reason kept).  False: exit 1 and let Slurm requeue it (held unless
    #: SchedulerParameters has nohold_on_prolog_fail).
    requeue_on_fail: bool = True
    #: Seconds to wait for the node's detect lock (the watcher holds it while
    #: it scans and acts) before skipping this prolog's XID scan.
    detect_lock_wait_s: float = 2.0

    def validate(self) -> None:
        if self.validity_s < 0:
            raise ValueError("validity_s must be >= 0 (0: never cache)")
        if self.budget_s <= 0:
            raise ValueError("budget_s must be > 0")
        if not 0 <= self.engine_reserve_s < self.budget_s:
            raise ValueError("engine_reserve_s must be >= 0 and below budget_s")
        if self.detect_lock_wait_s < 0:
            raise ValueError("detect_lock_wait_s must be >= 0")


# -- the budget ----------------------------------------------------------------------


class Budget:
    """The prolog's total time, asked before each step."""

    def __init__(self, total_s: float, clock: Clock = time.monotonic):
        self.total_s = total_s
        self.clock = clock
        self.start = clock()

    def spent(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return self.total_s - self.spent()

    def allows(self, needed_s: float) -> bool:
        return self.left() >= needed_s


# -- the run ---------------------------------------------------------------------------------


@record
class PrologOutcome:
    """What one prolog did.  ``verdict`` is one of cached, passed, failed,
    incomplete (budget or a check that could not run: the job runs), cpu_only."""

    node: str
    job_id: str | None
    verdict: str
    why: str
    exit_code: int = 0
    findings: tuple[Finding, ...] = ()
    drained: bool = False
    seconds: float = 0.0
    steps: tuple[tuple[str, float], ...] = ()
    gpu: GpuUse | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "job_id": self.job_id,
            "verdict": self.verdict,
            "why": self.why,
            "exit_code": self.exit_code,
            "drained": self.drained,
            "seconds": round(self.seconds, 4),
            "steps": {k: round(v, 4) for k, v in self.steps},
            "findings": [f.to_dict() for f in self.findings if f.status is not Status.OK],
        }


def _claim_progress_dir(cfg: Config, env: Mapping[str, str], job_id: str | None) -> None:
    """The job's progress directory, if another user made it first under
    the id this job got, moved aside before the job writes there
    (detect/progress/claim.py).  Never costs the job its start."""
    uid = env.get("SLURM_JOB_UID", "")
    if not job_id or not uid.isdigit():
        return
    from slurm_hooks.detect.progress.claim import claim_job_dir, progress_dir

    base = progress_dir(cfg.data.get("progress"))
    if base is not None:
        claim_job_dir(base, job_id, int(uid))


def _is_new_xid(findings: Sequence[Finding]) -> bool:
    return any(f.check == "xid" and (f.status is not Status.OK or f.code != "OK") for f in findings)


def _with_devices(cfg: Config, devices: tuple[int, ...]) -> Config:
    """The config with the GPU checks restricted to the job's GPUs: on a
    shared node the other GPUs belong to other jobs."""
    data = {k: v for k, v in cfg.data.items()}
    checks = dict(data.get("checks", {}))
    for name in ("burnin", "nccl"):
        table = dict(checks.get(name, {}))
        table["devices"] = list(devices)
        checks[name] = table
    data["checks"] = checks
    return Config(path=cfg.path, data=data)


EngineFactory = Callable[[Config], Any]


def _default_engine(cfg: Config) -> Any:
    from slurm_hooks.act.engine import Engine

    return Engine.from_config(cfg, actor="slurm-hooks/prolog")


def _drained_by_us(engine: Any, node: str) -> bool:
    from slurm_hooks.core.reason import is_ours

    try:
        state = engine.slurm.get_node(node)
    except Exception as exc:  # noqa: BLE001 - cannot tell: do not fail the job
        log.error("prolog: cannot read node %s after acting: %s", node, exc)
        return False
    return bool((state.drained or state.down) and is_ours(state.reason))


def run_prolog(
    env: Mapping[str, str] | None = None,
    cfg: Config | None = None,
    *,
    node: str | None = None,
    clock: Clock = time.monotonic,
    wall: Clock = time.time,
    run_phase: Callable[..., Any] | None = None,
    engine_factory: EngineFactory = _default_engine,
    services: Mapping[str, Any] | None = None,
    boot_id: Callable[[], str | None] = read_boot_id,
) -> PrologOutcome:
    """One prolog: cache check, maybe a full run, maybe a drain.  Raises
    ConfigError for an invalid config (before any check runs)."""
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.detect import runner

    env = os.environ if env is None else env
    cfg = cfg if cfg is not None else config_mod.load(validate=False)
    pc = cfg.section("prolog", PrologConfig)
    general = cfg.section("general", GeneralConfig)
    budget = Budget(pc.budget_s, clock)
    steps: list[tuple[str, float]] = []
    run = run_phase or runner.run_phase
    node = node or runner.node_name()
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    state_dir = general.state_dir
    cache = PassCache(Path(state_dir) / CACHE_FILE)

    def step(name: str, t0: float) -> None:
        steps.append((name, clock() - t0))

    def done(verdict: str, why: str, **kw: Any) -> PrologOutcome:
        out = PrologOutcome(
            node, job_id, verdict, why, seconds=budget.spent(), steps=tuple(steps), **kw
        )
        log.info(
            "prolog node=%s job=%s verdict=%s exit=%d seconds=%.3f why=%s",
            node, job_id, verdict, out.exit_code, out.seconds, why,
        )  # fmt: skip
        return out

    t0 = clock()
    _claim_progress_dir(cfg, env, job_id)
    rs = runner.setup(cfg, node=node, services=services)
    gpu = job_gpus(env, pc, rs.profile.gpu_count)
    if gpu.devices:
        from slurm_hooks.slurm.gpu_order import gpu_order

        gpu = in_nvml_order(gpu, gpu_order(node))
    if gpu.gpus and pc.gpu_sharing and job_id:
        from slurm_hooks.agent.prolog_sharing import shared_gpus_reason

        why_shared = shared_gpus_reason(cfg, job_id)
        gpu = GpuUse(False, None, why_shared) if why_shared else gpu
    step("setup", t0)

    # 1. The warm checks: every prolog, cached or not; scan and act under the
    #    node's detect lock (shared kernel-log cursor), or not at all.
    t0 = clock()
    mark_before = xid_mark(state_dir)
    warm_findings: tuple[Finding, ...] = ()
    engine = None
    lock = (
        _detect_lock(state_dir, pc.detect_lock_wait_s)
        if pc.warm_checks
        else contextlib.nullcontext(False)
    )
    from slurm_hooks.detect.xid.commit import deferred

    # The XID cursor and history are committed only once the engine acted on
    # what the scan found (as the hooks and the watcher do): a stalled
    # slurmctld, a crash or a kill leaves the events for the next run.
    with lock as locked, deferred() as pending:
        if locked and pc.warm_checks:
            warm = run(
                "prolog", run_setup=rs, only=list(pc.warm_checks), budget_s=budget.left(),
                clock=clock,
            )  # fmt: skip
            warm_findings = tuple(warm.findings)
        step("warm", t0)
        if any(f.is_problem for f in warm_findings):
            cache.invalidate("warm checks found a problem")
            engine = _act(
                engine_factory, cfg, node, warm_findings, steps, clock, acted=pending.commit
            )
        else:
            pending.commit()
    new_xid = _is_new_xid(warm_findings) or xid_mark(state_dir) != mark_before
    if any(f.is_problem for f in warm_findings):
        if engine is not None:
            code = _after_drain(engine, node, pc, env, job_id, steps, clock)
            return done("failed", _summary(warm_findings), exit_code=code, drained=True,
                        findings=warm_findings, gpu=gpu)  # fmt: skip
    if not gpu.gpus:
        return done("cpu_only", gpu.why, findings=warm_findings, gpu=gpu)

    # 2. The cache.
    t0 = clock()
    facts = NodeFacts(
        node=node,
        now=wall(),
        boot_id=boot_id(),
        xid_mark=xid_mark(state_dir),
        last_fault_at=last_fault_at(state_dir, node),
        last_slow_at=last_slow_at(cfg, state_dir, node, wall()),
    )
    entry = cache.read()
    fresh, why = cache_verdict(entry, facts, gpu.devices, pc.validity_s)
    if fresh and new_xid:
        fresh, why = False, "new XID events in the kernel log"
    step("cache", t0)
    if fresh:
        return done("cached", why, findings=warm_findings, gpu=gpu)
    kept = still_good(entry, facts, pc.validity_s) if not new_xid else None
    if entry is not None and kept is None:
        cache.invalidate(why)

    # 3. The full run, within what is left.
    t0 = clock()
    left = budget.left() - pc.engine_reserve_s
    if left <= 0:
        return done("incomplete", f"no budget left for the full run ({why})",
                    findings=warm_findings, gpu=gpu)  # fmt: skip
    full_setup = rs
    if gpu.devices is not None:
        full_setup = runner.setup(_with_devices(cfg, gpu.devices), node=node, services=services)
    # The warm checks just ran; the kernel log is scanned only under the lock.
    skip = {*pc.warm_checks, *runner.LOCKED_CHECKS}
    if gpu.devices is not None and len(gpu.devices) < 2:
        skip.add("nccl")  # one GPU has no peer to all-reduce with
    planned = runner.plan("prolog", full_setup.checks, sections=full_setup.cfg.data)
    only = [n for n in planned if n not in skip]
    if only:
        result = run("prolog", run_setup=full_setup, only=only, budget_s=left, clock=clock)
        full_findings, full_seconds = tuple(result.findings), result.seconds
    else:
        full_findings, full_seconds = (), 0.0
    findings = warm_findings + full_findings
    step("full", t0)
    failed = any(f.status is Status.FAIL for f in full_findings)
    problems = [f for f in full_findings if f.is_problem]
    if (failed or problems) and kept is not None:
        cache.invalidate("the full run on this job's GPUs found problems")
    if failed or problems:
        engine = _act(engine_factory, cfg, node, full_findings, steps, clock)
        if engine is not None:
            code = _after_drain(engine, node, pc, env, job_id, steps, clock)
            return done("failed", _summary(findings), exit_code=code, drained=True,
                        findings=findings, gpu=gpu)  # fmt: skip
        if failed:
            return done("failed", _summary(findings) + " (not drained: policy declined)",
                        findings=findings, gpu=gpu)  # fmt: skip
    unknown = [f for f in findings if f.status is Status.UNKNOWN]
    if unknown:
        names = sorted({f.check for f in unknown})
        return done("incomplete", f"not cached: could not run {', '.join(names)}",
                    findings=findings, gpu=gpu)  # fmt: skip
    t0 = clock()
    passed = widened(
        kept,
        CachedPass(
            node=node,
            passed_at=wall(),
            devices=gpu.devices,
            boot_id=facts.boot_id,
            xid_mark=xid_mark(state_dir),
            job_id=job_id,
            seconds=full_seconds,
        ),
    )
    try:
        cache.write(passed)
    except OSError as exc:
        log.error("prolog: cannot cache the pass: %s", exc)
    step("cache_write", t0)
    return done("passed", f"full run passed in {full_seconds:.1f}s", findings=findings, gpu=gpu)


@contextlib.contextmanager
def _detect_lock(state_dir: str, wait_s: float) -> Iterator[bool]:
    """The node's detect lock, waited for ``wait_s``: yields True while held,
    False (after logging why) when the watcher kept it."""
    from slurm_hooks.store.state import DETECT_LOCK, StateStore

    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(StateStore(state_dir).lock(DETECT_LOCK, timeout=wait_s))
            held = True
        except (StateError, OSError) as exc:
            log.warning(
                "prolog: detect lock busy for %.1fs (the watcher is scanning and acting): "
                "XID scan skipped this time (%s)", wait_s, exc,
            )  # fmt: skip
            held = False
        yield held


def _summary(findings: Sequence[Finding]) -> str:
    bad = [f for f in findings if f.status is Status.FAIL] or [f for f in findings if f.is_problem]
    return "; ".join(f"{f.code} {f.component.short()}: {f.message}" for f in bad[:3])


def _act(
    factory: EngineFactory,
    cfg: Config,
    node: str,
    findings: Sequence[Finding],
    steps: list[tuple[str, float]],
    clock: Clock,
    *,
    acted: Callable[[], None] | None = None,
) -> Any | None:
    """Hand the findings to the engine; the engine when the node now carries
    our drain (from this decision or an earlier one), else None.
    ``acted`` is called once the engine acted without error (the prolog
    commits its XID cursor there)."""
    from slurm_hooks.core.errors import SlurmHooksError

    t0 = clock()
    engine = None
    try:
        engine = factory(cfg)
        decisions = engine.handle(node, findings)
        if acted is not None:
            acted()
        for d in decisions:
            log.info("decision node=%s kind=%s code=%s why=%s", node, d.kind, d.code,
                     d.explanation)  # fmt: skip
        drains = any(d.kind.drains and not d.observe_only for d in decisions)
        if not (drains and _drained_by_us(engine, node)):
            engine = None
    except SlurmHooksError as exc:
        log.error("prolog: remediation failed: %s", exc)
        engine = None
    steps.append(("act", clock() - t0))
    return engine


def _after_drain(
    engine: Any,
    node: str,
    pc: PrologConfig,
    env: Mapping[str, str],
    job_id: str | None,
    steps: list[tuple[str, float]],
    clock: Clock,
) -> int:
    """The node carries our drain: get the job off it.  0 when we requeued
    it (or it already was), EXIT_REJECT (the shim exits 1) to let Slurm's
    prolog-failure path do it."""
    from slurm_hooks.act import evacuate
    from slurm_hooks.core.errors import SlurmError
    from slurm_hooks.core.exits import EXIT_REJECT
    from slurm_hooks.slurm.door import Requeue

    if not pc.requeue_on_fail or not job_id:
        return EXIT_REJECT
    t0 = clock()
    try:
        try:
            restarts = int(env.get("SLURM_JOB_RESTART_COUNT") or 0)
        except ValueError:
            restarts = 0
        # Exactly once, by the door's one rule: a restart count past the one
        # slurmd handed us means the job was requeued already.
        done = evacuate.requeue_before_start(
            engine.context, node, job_id, restarts, actor="slurm-hooks/prolog"
        )
        if done is Requeue.ALREADY:
            log.info("prolog: job %s already requeued", job_id)
        return 0
    except SlurmError as exc:
        log.warning("prolog: cannot requeue job %s (%s): exit 1, Slurm requeues or fails it",
                    job_id, exc)  # fmt: skip
        return EXIT_REJECT
    finally:
        steps.append(("requeue", clock() - t0))


def hook_main(t0: float | None = None) -> int:
    """What ``python3 -m slurm_hooks hook prolog`` runs (logging set up by
    the caller).  0: the job may start (also when we requeued it ourselves);
    EXIT_REJECT: we drained the node and Slurm must not start the job here."""
    from slurm_hooks.agent.hook_output import apply_log_level
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.core.errors import SlurmHooksError

    try:
        cfg = config_mod.load(validate=False)
        apply_log_level(cfg)
        outcome = run_prolog(cfg=cfg)
        from slurm_hooks.agent.hook_output import write_metrics

        write_metrics("prolog", cfg, outcome.findings, outcome.seconds)
    except SlurmHooksError as exc:
        # Our own trouble must not cost the job or the node: no drain, exit 0.
        log.error("hook prolog could not run: %s", exc)
        return 0
    return outcome.exit_code


__all__ = [
    "Budget",
    "CachedPass",
    "GpuUse",
    "NodeFacts",
    "PassCache",
    "PrologConfig",
    "PrologOutcome",
    "cache_verdict",
    "job_gpus",
    "parse_devices",
    "run_prolog",
]
