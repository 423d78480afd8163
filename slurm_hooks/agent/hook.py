"""``python3 -m slurm_hooks hook healthcheck|epilog|prolog``: what the shims exec.

Runs the phase's checks (runner.run_phase, with its own budget) and feeds the
findings to the remediation engine.  No click, no requests on this path.

Slurm's limits shape it:

* HealthCheckProgram is killed after 60 s: the checks get their budget, the
  engine gets what is left (at least ENGINE_MIN_S, else it does not start and
  the next run acts), and the grace wait runs in the detached worker.
* A non-zero epilog makes Slurm drain the node with "Epilog error", a reason
  that is not ours and that would hide ours: the epilog exits 0 after acting
  (the drain it needs, it wrote itself).  The health check's exit status is
  only logged by slurmd ("error: health_check failed" when non-zero): it is 1
  when the node is unhealthy and our drain does not hold it yet, 0 once it
  does (``already_handled``), so a drained node is not logged every interval.
* An open incident with work left (a grace worker that died) is rolled
  forward on the next run, healthy or not.
* The node's detect lock (shared with the watcher) is held only around the
  kernel-log scan and acting, never across the other checks
  (:func:`_run_and_act`), which a user's processes can slow.
* The prolog runs before every job: its cache, budget and requeue live in
  ``slurm_hooks.agent.prolog`` (exit 0: the job may start or was requeued by us;
  1: the node failed, Slurm handles the job).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from slurm_hooks.agent.hook_output import (  # noqa: F401 (re-exported: importable from here too)
    ENV_LOG_LEVEL,
    METRICS_DEFAULT_DIR,
    apply_log_level,
    write_metrics,
)
from slurm_hooks.core.exits import EXIT_REJECT  # noqa: F401 (re-exported: importable from here too)

if TYPE_CHECKING:
    from slurm_hooks.core.config import Config
    from slurm_hooks.core.model import Finding
    from slurm_hooks.decide.decision import Decision
    from slurm_hooks.store.state import StateStore

log = logging.getLogger("slurm_hooks.agent.hook")

#: Seconds Slurm gives a HealthCheckProgram (hard-coded in slurmd).
HEALTHCHECK_LIMIT_S = 60.0
#: Do not start acting with less than this left: a drain plus a few job
#: signals are a handful of scontrol/scancel calls.
ENGINE_MIN_S = 8.0
PHASES = ("healthcheck", "epilog", "prolog")
#: Seconds to wait for the watcher to finish acting before giving up this run.
DETECT_LOCK_WAIT_S = 15.0
#: ``hook PHASE --dry-run``: load and validate, act on nothing (``install``'s test).
DRY_RUN = "--dry-run"


def main(argv: Sequence[str]) -> int:
    t0 = time.monotonic()
    dry = len(argv) == 2 and argv[1] == DRY_RUN
    if not (len(argv) == 1 or dry) or argv[0] not in PHASES:
        print(f"usage: python3 -m slurm_hooks hook {{{'|'.join(PHASES)}}} [{DRY_RUN}]",
              file=sys.stderr)  # fmt: skip
        return 2
    phase = argv[0]
    if dry:
        return dry_run(phase)
    # Set up before the config is read, so that a config error is logged;
    # [general] log_level applies once it is (apply_log_level).
    logging.basicConfig(
        level=(os.environ.get(ENV_LOG_LEVEL) or "INFO").upper(),
        stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s slurm-hooks[{phase}] %(name)s %(message)s",
    )
    try:
        return _main(phase, t0)
    except Exception:  # noqa: BLE001 - a hook must fail open, with the traceback logged
        log.exception("hook %s crashed", phase)
        return 0 if phase in ("prolog", "epilog") else 2


def dry_run(phase: str) -> int:
    """``hook PHASE --dry-run``: what ``slurm-hooks install`` runs through
    the installed shim, so that a shim that would fail open on every node
    (an interpreter without slurm_hooks, a config that does not validate, a
    check that cannot be loaded) is found at install time, not by an
    unprotected fleet.  Loads and validates the config, resolves the
    phase's checks; reads no hardware, asks no Slurm, acts on nothing.
    Exit 0 (ready) or 2 (with the error on stderr)."""
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.core.errors import SlurmHooksError
    from slurm_hooks.detect.checks.registry import CHECKS, load_class
    from slurm_hooks.detect.checks.settings import load_checks_config
    from slurm_hooks.detect.runner import plan

    try:
        cfg = config_mod.load(validate=True)
        names = plan(phase, load_checks_config(cfg, deep=True))
        for name in names:
            load_class(CHECKS[name])
    except (SlurmHooksError, ImportError, ValueError) as exc:
        print(f"slurm-hooks hook {phase} {DRY_RUN}: not ready: {exc}", file=sys.stderr)
        return 2
    where = cfg.path or "defaults (no config file)"
    print(f"slurm-hooks hook {phase} {DRY_RUN}: ready: config {where}; "
          f"checks: {', '.join(names) or 'none'}")  # fmt: skip
    return 0


def _main(phase: str, t0: float) -> int:
    if phase == "prolog":
        from slurm_hooks.agent.prolog import hook_main

        return hook_main(t0)
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.core.errors import SlurmHooksError
    from slurm_hooks.detect.runner import node_name
    from slurm_hooks.store.state import StateStore

    try:
        cfg = config_mod.load(validate=False)
        apply_log_level(cfg)
        node = node_name()
        return _run_and_act(phase, cfg, StateStore(cfg.general.state_dir), node, t0)
    except SlurmHooksError as exc:
        log.error("hook %s could not run: %s", phase, exc)
        return 0 if phase == "epilog" else 2


@contextlib.contextmanager
def detect_lock_or_degrade(store: StateStore, name: str, timeout: float) -> Iterator[None]:
    """The detect lock; when the state dir itself is broken (full,
    read-only, gone) the run goes on without it, loudly: a drain must never
    wait on local storage, and the drain is idempotent (read before write).
    A lock that another process holds past ``timeout`` still stops the run
    (LockTimeout): that process is acting on the same events."""
    from slurm_hooks.core.errors import StateError
    from slurm_hooks.store.state import LockTimeout

    try:
        cm = store.lock(name, timeout=timeout)
        cm.__enter__()
    except LockTimeout:
        raise
    except StateError as exc:
        log.error("STATE DIR BROKEN: %s; detecting and acting without the %s lock", exc, name)
        from slurm_hooks.act.metrics import count_state_failure

        count_state_failure("lock")
        yield
        return
    try:
        yield
    finally:
        cm.__exit__(None, None, None)


def _run_and_act(phase: str, cfg: Config, store: StateStore, node: str, t0: float) -> int:
    """The phase's checks in two parts, each acted on as it ends.

    1. The kernel log (``xid``), scanned and acted on under the node's
       detect lock, first: the watcher, the health check and the epilog
       share one kernel-log cursor, so scan-then-act runs under one lock and
       no XID is handled (or counted towards a repeat rule) twice.  An open
       incident with work left is rolled forward here too.
    2. Every other check, outside the lock, then acted on under it when one
       found something.  Some of them read what users can slow (``site``
       reads every process's ``/proc`` files, ``mounts`` and ``scratch``
       stat file systems): while they run, the watcher's XID scan does not
       wait behind them, and neither does this run's own XID part nor its
       share of the phase budget."""
    from slurm_hooks.core.model import Status
    from slurm_hooks.detect.runner import LOCKED_CHECKS, plan, run_phase, setup
    from slurm_hooks.detect.xid.commit import deferred
    from slurm_hooks.store.state import DETECT_LOCK

    rs = setup(cfg, node=node)
    names = plan(phase, rs.checks, sections=rs.cfg.data)
    locked = [n for n in names if n in LOCKED_CHECKS]
    rest = [n for n in names if n not in LOCKED_CHECKS]
    budget = rs.checks.budget(phase)
    checks_t0 = time.monotonic()
    findings: list[Finding] = []
    durations: dict[str, float] = {}
    acting = _Acting(phase, cfg, node, t0)

    def run(only: list[str], budget_s: float) -> list[Finding]:
        result = run_phase(phase, run_setup=rs, only=only, budget_s=budget_s)
        findings.extend(result.findings)
        durations.update(result.durations)
        return list(result.findings)

    with detect_lock_or_degrade(store, DETECT_LOCK, DETECT_LOCK_WAIT_S), deferred() as pending:
        # The XID cursor and history are committed only once the findings are
        # acted on (journalled): a stalled slurmctld, a crash or a kill here
        # leaves the events to be read and acted on by the next run.
        found = run(locked, budget) if locked else []
        data = store.read_node(node)
        if all(f.status is Status.OK for f in found) and not _work_left(store, data):
            pending.commit()
        elif acting.act(found):
            pending.commit()
    if rest:
        found = run(rest, max(0.0, budget - (time.monotonic() - checks_t0)))
        if any(f.status is not Status.OK for f in found):
            with detect_lock_or_degrade(store, DETECT_LOCK, DETECT_LOCK_WAIT_S):
                acting.act(found)
    if findings and all(f.status is Status.OK for f in findings) and _users_drain(store, data):
        with detect_lock_or_degrade(store, DETECT_LOCK, DETECT_LOCK_WAIT_S):
            acting.resume_cleared()
    write_metrics(phase, cfg, findings, time.monotonic() - t0, durations)
    if phase == "epilog":
        return 0
    unhealthy = any(f.is_problem for f in findings)
    return 1 if unhealthy and not acting.held else 0


class _Acting:
    """The engine, built on the first call only (the common run on a healthy
    node never imports it), and whether every problem it was handed is one
    our drain already holds (:func:`already_handled`)."""

    def __init__(self, phase: str, cfg: Config, node: str, t0: float) -> None:
        self.phase, self.cfg, self.node, self.t0 = phase, cfg, node, t0
        self.engine: Any = None
        self.held = True

    def act(self, findings: Sequence[Finding]) -> bool:
        """Hand ``findings`` to the engine; True once it acted (journalled)."""
        from slurm_hooks.core.errors import SlurmHooksError

        unhealthy = any(f.is_problem for f in findings)
        remaining = HEALTHCHECK_LIMIT_S - (time.monotonic() - self.t0)
        if self.phase == "healthcheck" and remaining < ENGINE_MIN_S:
            log.warning("hook %s: %.1fs left, not acting this run (events kept for the next)",
                        self.phase, remaining)  # fmt: skip
            self.held = self.held and not unhealthy
            return False
        try:
            decisions = self._engine().handle(self.node, findings)
        except SlurmHooksError as exc:
            log.error("hook %s: remediation failed (events kept for the next run): %s",
                      self.phase, exc)  # fmt: skip
            self.held = self.held and not unhealthy
            return False
        for d in decisions:
            self._log(d)
        self.held = self.held and (not unhealthy or already_handled(decisions))
        return True

    def resume_cleared(self) -> None:
        """Every check passed on a node we drained for what its users cause:
        resume it through the policy (act/resume.py), which says no if it
        was held for anything else since."""
        from slurm_hooks.core.errors import SlurmHooksError

        try:
            self._log(self._engine().try_resume(self.node, cleared=True))
        except SlurmHooksError as exc:
            log.error("hook %s: resume after the cleared drain failed: %s", self.phase, exc)

    def _engine(self) -> Any:
        if self.engine is None:
            from slurm_hooks.act.engine import Engine

            self.engine = Engine.from_config(self.cfg, actor=f"slurm-hooks/{self.phase}")
        return self.engine

    def _log(self, d: Decision) -> None:
        log.info("decision node=%s kind=%s code=%s why=%s", self.node, d.kind, d.code,
                 d.explanation)  # fmt: skip


def already_handled(decisions: Sequence[Decision]) -> bool:
    """Whether every problem of this run is one our drain already holds
    (ALREADY_HANDLED: Slurm shows our reason for it, or a repeat absorbed
    under our open incident).  The health check then exits 0: slurmd logs
    "error: health_check failed" for every non-zero exit (slurmd.c
    ``run_script_health_check``) and reads nothing else from it, so a
    drained node would log that line every interval although the drain
    reason already says what is wrong.  The run that finds the fault and
    drains still exits 1 (one line in slurmd's log per incident), and so
    does any run where a problem is not held by our drain (observe-only,
    breaker tripped, a foreign reason, a warning left in service)."""
    from slurm_hooks.decide.decision import DecisionKind

    problems = [d for d in decisions if any(f.is_problem for f in d.findings)]
    return bool(problems) and all(d.kind is DecisionKind.ALREADY_HANDLED for d in problems)


def _users_drain(store: StateStore, data: Mapping[str, Any]) -> bool:
    """The node's open incident (``data``: its state file) is our drain for
    what its users can cause (a full scratch: ``core/user_caused.py``): a
    run where every check passes is its acceptance
    (``Engine.try_resume(cleared=True)``)."""
    incident = data.get("open_incident")
    if incident is None:
        return False
    from slurm_hooks.core.user_caused import USERS_CAUSE
    from slurm_hooks.store.state import CLEARED_ASKED

    if data.get(CLEARED_ASKED) == incident:
        return False  # asked once already: the policy said no (act/resume.py)

    doc = store.read_incident(incident)
    return doc is not None and doc.get("code") in USERS_CAUSE and doc.get("status") != "closed"


def _work_left(store: StateStore, data: Mapping[str, Any]) -> bool:
    """An incident of this node (``data``: its state file) whose jobs are not
    settled yet.  A node that stays drained after its jobs were requeued
    (waiting for acceptance, or resumed by an admin elsewhere) has nothing
    for a hook to roll forward."""
    if data.get("held"):
        return True  # a fault the breaker held (act/held.py): alerts go on, no Slurm call
    incident = data.get("open_incident")
    if incident is None:
        return False
    from slurm_hooks.store.state import incident_pending

    doc = store.read_incident(incident)
    return doc is None or incident_pending(doc)
