"""Acceptance: the full burn-in and NCCL check a node must pass before it is resumed.

A node coming back (replaced, rebooted, GPU reset) runs the ``acceptance``
phase (``runner.run_phase("acceptance")``: every GPU check, the longer
burn-in and NCCL sweep, and ``dcgmi diag -r 2`` where DCGM is installed)
with a long budget.  The verdict is recorded in the state store and the
audit log (``Engine.record_acceptance``); a pass then tries the resume
(``Engine.try_resume``, which still insists on our reason and a pass after
the fault).

Where it runs:

* ``run_acceptance`` runs *here*, on the node (``slurm-hooks acceptance
  --run-local``): the only way for a drained node, because Slurm starts no
  new job on a DRAINED node, not even in a MAINT reservation (measured on
  22.05: ``Required node not available (down, drained or reserved)``);
* ``srun_argv``/``reservation_argv`` build the job form for a node that is
  still in service: a ``flags=maint,ignore_jobs`` reservation keeps other
  jobs off while acceptance runs there as a job (``slurm-hooks acceptance
  NODE``).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_hooks.core.bounds import require_at_least, require_positive
from slurm_hooks.core.config import Config
from slurm_hooks.core.model import Finding, Status

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AcceptanceConfig:
    """``[acceptance]``.  Times are seconds."""

    #: The whole acceptance run (burn-in, NCCL sweep, dcgmi diag -r 2).
    budget_s: float = 1800.0
    #: Checks that must have run (UNKNOWN fails acceptance for these).
    require: tuple[str, ...] = ("burnin", "nccl")
    #: A WARN passes (default: a returning node must be clean).
    allow_warn: bool = False
    #: Reservation made for an in-service node (the node name is appended).
    reservation_prefix: str = "slurm-hooks-acceptance"
    #: Minutes the reservation lasts (it is deleted when the run ends).
    reservation_minutes: int = 60
    #: Python the job form runs on the node (``-m slurm_hooks``).
    python: str = sys.executable

    def validate(self) -> None:
        require_positive(self, "budget_s")
        require_at_least(self, 1, "reservation_minutes")


@dataclass(frozen=True)
class AcceptanceResult:
    """One acceptance run and what followed it."""

    node: str
    passed: bool
    detail: str
    findings: tuple[Finding, ...] = ()
    seconds: float = 0.0
    #: The resume decision after a pass ("resume", "log", "ignore" ...), if any.
    decision: str | None = None
    decision_why: str | None = None
    durations: Mapping[str, float] = field(default_factory=dict)
    #: Recent SLOW reports of the node (a straggler: agent/slow_history.py);
    #: reported beside the verdict, which they do not change.
    slow_history: str | None = None

    @property
    def resumed(self) -> bool:
        return self.decision == "resume"

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "passed": self.passed,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
            "resumed": self.resumed,
            "decision": self.decision,
            "decision_why": self.decision_why,
            "durations": {k: round(v, 3) for k, v in self.durations.items()},
            "slow_history": self.slow_history,
            "findings": [f.to_dict() for f in self.findings if f.status is not Status.OK],
        }


def judge_acceptance(
    findings: Sequence[Finding], require: Sequence[str], *, allow_warn: bool = False
) -> tuple[bool, str]:
    """Pass or fail, and why; pure.  Any FAIL fails; a WARN fails unless
    allowed; a required check that could not run (UNKNOWN, or absent) fails."""
    fails = [f for f in findings if f.status is Status.FAIL]
    if fails:
        return False, "failed: " + "; ".join(
            f"{f.code} {f.component.short()}: {f.message}" for f in fails[:3]
        )
    warns = [f for f in findings if f.status is Status.WARN]
    if warns and not allow_warn:
        return False, "warnings: " + "; ".join(
            f"{f.code} {f.component.short()}: {f.message}" for f in warns[:3]
        )
    ran = {f.check for f in findings}
    for name in require:
        if name not in ran:
            return False, f"required check {name} did not run"
        unknown = [f for f in findings if f.check == name and f.status is Status.UNKNOWN]
        if unknown:
            return False, f"required check {name} could not run: {unknown[0].message}"
    skipped = sorted({f.check for f in findings if f.status is Status.UNKNOWN})
    note = f" (could not run: {', '.join(skipped)})" if skipped else ""
    return True, f"passed {len(ran)} checks{note}"


def _default_engine(cfg: Config) -> Any:
    from slurm_hooks.act.engine import Engine

    return Engine.from_config(cfg, actor="slurm-hooks/acceptance", spawn=None)


def run_acceptance(
    node: str,
    cfg: Config | None = None,
    *,
    engine: Any | None = None,
    engine_factory: Callable[[Config], Any] = _default_engine,
    run_phase: Callable[..., Any] | None = None,
    services: Mapping[str, Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
    resume: bool = True,
) -> AcceptanceResult:
    """Run acceptance on this machine for ``node``; record the verdict and,
    on a pass, try the resume.  Raises ConfigError before any check runs
    for an invalid config; Slurm errors during the resume are raised
    after the verdict was recorded."""
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.detect import runner

    cfg = cfg if cfg is not None else config_mod.load(validate=False)
    ac = cfg.section("acceptance", AcceptanceConfig)
    run = run_phase or runner.run_phase
    t0 = clock()
    result = run("acceptance", cfg=cfg, node=node, budget_s=ac.budget_s, services=services)
    findings = tuple(result.findings)
    passed, detail = judge_acceptance(findings, ac.require, allow_warn=ac.allow_warn)
    seconds = clock() - t0
    log.info("acceptance node=%s passed=%s seconds=%.1f detail=%s", node, passed, seconds, detail)
    slow = _slow_history(cfg, node)
    eng = engine if engine is not None else engine_factory(cfg)
    # --no-resume: the verdict is recorded, no path may resume the node.
    decision = eng.record_acceptance(node, passed, detail=detail, resume=resume)
    if passed and resume and decision is None and eng.policy.auto_resume:
        # No incident open in this node's state (drained from elsewhere, e.g.
        # by a multi-node preflight): the resume still checks reason and pass.
        decision = eng.try_resume(node)
    return AcceptanceResult(
        node=node,
        passed=passed,
        detail=detail,
        findings=findings,
        seconds=seconds,
        decision=str(decision.kind) if decision is not None else None,
        decision_why=decision.explanation if decision is not None else None,
        durations=dict(result.durations),
        slow_history=slow,
    )


def _slow_history(cfg: Config, node: str) -> str | None:
    from slurm_hooks.agent import slow_history

    reports = slow_history.recent_slow(
        cfg.general.state_dir, node, now=time.time(), window_s=slow_history.window_s(cfg)
    )
    if not reports:
        return None
    note = slow_history.describe(reports)
    log.warning("acceptance node=%s: %s", node, note)
    return note


# -- the job form (a node still in service) ------------------------------------------------


def reservation_name(ac: AcceptanceConfig, node: str) -> str:
    return f"{ac.reservation_prefix}-{node}"


def reservation_argv(ac: AcceptanceConfig, node: str, name: str | None = None) -> list[str]:
    """``scontrol create reservation`` for ``node`` (``slurm/reservation.py``,
    run by ``SlurmDoor.create_reservation``): MAINT (no accounting as idle),
    IGNORE_JOBS (made even while jobs run; ours waits for them)."""
    from slurm_hooks.slurm.reservation import create_argv

    return create_argv(name or reservation_name(ac, node), node, int(ac.reservation_minutes))


def delete_reservation_argv(name: str) -> list[str]:
    from slurm_hooks.slurm.reservation import delete_argv

    return delete_argv(name)


def srun_argv(
    ac: AcceptanceConfig,
    node: str,
    reservation: str,
    *,
    gpus: int = 0,
    config_path: str | None = None,
) -> list[str]:
    """The job that runs ``acceptance --run-local`` on ``node`` inside the
    reservation (exclusive, one task), given the node's ``gpus`` GPUs where
    they are GRES: ``--exclusive`` alone gives the step none (measured on
    22.05, 24.11 and 26.05: no ``CUDA_VISIBLE_DEVICES`` or ``SLURM_STEP_GPUS`` in it), and
    with ``ConstrainDevices=yes`` the step is then denied every GPU's device
    file, so NVML would see no GPU and acceptance would fail a good node."""
    argv = [
        "srun",
        f"--reservation={reservation}",
        "-w", node, "-N1", "-n1", "--exclusive",
        f"--time={int(ac.reservation_minutes)}",
        "--job-name=slurm-hooks-acceptance",
        # Root's task, started where root's files are: without it, slurmstepd
        # starts it in the caller's directory, or /tmp when the node lacks
        # that, and ``python -m`` imports from there first.
        "--chdir=/",
    ]  # fmt: skip
    if gpus > 0:
        argv.append(f"--gres=gpu:{int(gpus)}")
    argv += [ac.python, "-m", "slurm_hooks", "acceptance", node, "--run-local", "--json"]
    if config_path:
        argv += ["--config", config_path]
    return argv


__all__ = [
    "AcceptanceConfig",
    "AcceptanceResult",
    "judge_acceptance",
    "reservation_argv",
    "run_acceptance",
    "srun_argv",
]
