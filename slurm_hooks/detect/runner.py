"""Run one phase's checks with per-check timeouts and a total budget.

Each check runs gather-then-judge in its own daemon thread, joined with a
timeout: a check that hangs (a dead NFS server, a wedged driver call) is
reported UNKNOWN and left behind, and the next check starts.  The deadline
is checked before each check; checks that would start past it are UNKNOWN
"skipped: budget".  A check that raises is UNKNOWN, never a crash of the
run.  Nothing here imports click or requests: this is the hook path.

Typical use (a hook, the CLI, the watcher)::

    result = run_phase("healthcheck")                 # config, node, profile from defaults
    result = run_phase(Phase.PROLOG, cfg=cfg, node="gpu017", only=["ecc", "gpu_lost"])
    result.status, result.exit_code, result.findings, result.durations
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from slurm_hooks.core.config import Config
from slurm_hooks.core.errors import CheckNotInstalled, ConfigError, SlurmHooksError
from slurm_hooks.core.model import Component, Finding, Phase, Status
from slurm_hooks.core.record import field, record, replace
from slurm_hooks.detect.checks.base import CheckContext, ok
from slurm_hooks.detect.checks.registry import CHECKS, load
from slurm_hooks.detect.checks.settings import ChecksConfig, load_checks_config
from slurm_hooks.detect.fold import fold_lost_gpus
from slurm_hooks.detect.outcome import (  # noqa: F401 (re-exported: importable from here too)
    CheckOutcome,
    worst,
)
from slurm_hooks.detect.profiles import (
    Profile,
    Profiles,
    load_hostlist_cache,
    load_profiles,
    save_hostlist_cache,
)

log = logging.getLogger(__name__)

EXIT_OK, EXIT_UNHEALTHY, EXIT_ERROR = 0, 1, 2
#: Checks that read the kernel-log cursor the watcher and the hooks share:
#: each runs, with the engine call on what it found, only under the node's
#: detect lock (``store.state.DETECT_LOCK``); every other check runs outside it.
LOCKED_CHECKS = frozenset({"xid"})


@record
class RunResult:
    """One phase's run on one node: every check's outcome, and the time taken
    against the budget."""

    phase: Phase
    node: str
    profile: str
    outcomes: tuple[CheckOutcome, ...] = ()
    seconds: float = 0.0
    budget_s: float = 0.0

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for o in self.outcomes for f in o.findings)

    @property
    def durations(self) -> dict[str, float]:
        return {o.name: o.seconds for o in self.outcomes}

    @property
    def status(self) -> Status:
        """The worst finding: FAIL > WARN > UNKNOWN > OK."""
        return worst(f.status for f in self.findings)

    @property
    def problems(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.status != Status.OK)

    @property
    def exit_code(self) -> int:
        """0 healthy, 1 any FAIL, 2 nothing could run (every check UNKNOWN)."""
        if any(f.status == Status.FAIL for f in self.findings):
            return EXIT_UNHEALTHY
        if self.outcomes and all(o.status == Status.UNKNOWN for o in self.outcomes):
            return EXIT_ERROR
        return EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "phase": str(self.phase),
            "node": self.node,
            "profile": self.profile,
            "status": str(self.status),
            "seconds": round(self.seconds, 4),
            "budget_s": self.budget_s,
            "durations": {k: round(v, 4) for k, v in self.durations.items()},
            "findings": [f.to_dict() for f in self.findings],
        }


@record
class Deadline:
    """The phase's end, passed to checks as service ``deadline`` so that a
    long step (burn-in, NCCL) can decline to start when it cannot finish."""

    at: float
    clock: Callable[[], float] = time.monotonic

    def remaining(self) -> float:
        return self.at - self.clock()


def _unknown(name: str, code: str, message: str, **values: Any) -> Finding:
    return Finding(
        check=name,
        status=Status.UNKNOWN,
        code=code,
        message=message,
        component=Component("node"),
        values=values,
    )


def run_one(check: Any, ctx: CheckContext, timeout: float) -> tuple[list[Finding], bool]:
    """gather + judge in a daemon thread; returns (findings, finished)."""
    name = getattr(check, "name", type(check).__name__)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            data = check.gather(ctx)
            box["findings"] = list(check.judge(data, ctx))
        except BaseException as exc:  # noqa: BLE001 - reported as UNKNOWN
            box["error"] = exc

    t = threading.Thread(target=target, name=f"check-{name}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        log.warning("check timed out check=%s timeout=%.1f", name, timeout)
        return [
            _unknown(name, "CHECK_TIMEOUT", f"could not run: timed out after {timeout:g}s")
        ], False
    if "error" in box:
        exc = box["error"]
        if isinstance(exc, ConfigError):
            return [_unknown(name, "CONFIG_ERROR", f"could not run: bad settings: {exc}")], True
        if isinstance(exc, SlurmHooksError):
            return [_unknown(name, "CHECK_UNKNOWN", f"could not run: {exc}")], True
        if _is_nvml_error(exc):
            from slurm_hooks.detect.probes.nvml import error_name

            return [
                _unknown(
                    name,
                    "CHECK_UNKNOWN",
                    f"could not run: NVML {error_name(exc)}: {exc}",
                    nvml_error=error_name(exc),
                )
            ], True
        log.error("check crashed check=%s", name, exc_info=exc)
        return [_unknown(name, "CHECK_ERROR", f"could not run: {type(exc).__name__}: {exc}")], True
    findings = box.get("findings") or []
    bad = [f for f in findings if not isinstance(f, Finding)]
    if bad:
        return [
            _unknown(name, "CHECK_ERROR", f"could not run: judge returned {type(bad[0]).__name__}")
        ], True
    if not findings:
        findings = [Finding(check=name, status=Status.OK, code="OK", message="ok")]
    return findings, True


def _is_nvml_error(exc: BaseException) -> bool:
    from slurm_hooks.detect.probes.nvml import is_nvml_error

    return is_nvml_error(exc)


def run_checks(
    names: Sequence[str],
    context_for: Callable[[str], CheckContext],
    *,
    phase: Phase,
    budget_s: float,
    timeout_for: Callable[[str], float],
    loader: Callable[[str], Any] = load,
    clock: Callable[[], float] = time.monotonic,
    not_applicable: Callable[[str], str | None] | None = None,
) -> tuple[tuple[CheckOutcome, ...], bool]:
    """Run ``names`` in order within ``budget_s``.  Returns the outcomes and
    whether every check finished (False if one was left running).

    ``not_applicable(name)``, when given, says why a check does not apply
    to this node (the registry's ``skip_when`` against the profile): such a
    check is reported OK "not applicable: <why>", exactly as it would report
    itself, without importing it or starting a thread."""
    start = clock()
    deadline = start + budget_s
    outcomes: list[CheckOutcome] = []
    all_finished = True
    for name in names:
        t0 = clock()
        remaining = deadline - t0
        if remaining <= 0:
            outcomes.append(
                CheckOutcome(
                    name,
                    (
                        _unknown(
                            name,
                            "CHECK_BUDGET",
                            f"skipped: budget ({budget_s:g}s for {phase}) spent",
                        ),
                    ),
                    0.0,
                )
            )
            continue
        reason = not_applicable(name) if not_applicable is not None else None
        if reason:
            log.debug("check not applicable check=%s: %s", name, reason)
            outcomes.append(CheckOutcome(name, (ok(name, f"not applicable: {reason}"),), 0.0))
            continue
        try:
            check = loader(name)
        except CheckNotInstalled as exc:
            log.info("check not installed check=%s: %s", name, exc)
            findings = [_unknown(name, "CHECK_NOT_INSTALLED", f"check not installed: {exc}")]
            outcomes.append(CheckOutcome(name, tuple(findings), clock() - t0))
            continue
        except Exception as exc:  # noqa: BLE001 - a broken check module is UNKNOWN
            log.error("check failed to load check=%s", name, exc_info=exc)
            findings = [
                _unknown(name, "CHECK_ERROR", f"could not load: {type(exc).__name__}: {exc}")
            ]
            outcomes.append(CheckOutcome(name, tuple(findings), clock() - t0))
            continue
        timeout = min(timeout_for(name), remaining)
        findings, finished = run_one(check, context_for(name), timeout)
        all_finished &= finished
        seconds = clock() - t0
        log.debug("check done check=%s seconds=%.4f", name, seconds)
        outcomes.append(CheckOutcome(name, tuple(findings), seconds))
    return tuple(outcomes), all_finished


def plan(
    phase: Phase | str,
    checks: ChecksConfig,
    only: Sequence[str] | None = None,
    sections: Iterable[str] | None = None,
) -> list[str]:
    """Which checks run: ``only`` (in registry order, even if disabled or
    not usually run in this phase: asking by name is explicit), else every
    enabled check whose phases include ``phase`` and whose config section
    (``needs_section``) is among ``sections`` (None: not filtered)."""
    ph = Phase(phase)
    if only:
        wanted = {n.strip() for item in only for n in item.split(",") if n.strip()}
        unknown = sorted(wanted - set(CHECKS))
        if unknown:
            raise ConfigError(f"unknown check {unknown[0]!r} (known: {', '.join(CHECKS)})")
        return [n for n in CHECKS if n in wanted]
    have = None if sections is None else set(sections)
    return [
        n
        for n in CHECKS
        if checks.enabled(n)
        and ph in checks.phases(n)
        and (have is None or CHECKS[n].needs_section in (None, *have))
    ]


def _not_applicable(name: str, profile: Profile, no_gpu: str | None = None) -> str | None:
    spec = CHECKS.get(name)
    if spec is None:
        return None
    return spec.not_applicable(profile) or (no_gpu if spec.gpu else None)


#: ``probes.nvml.DEFAULT_BACKEND`` (the real library), named here so that a
#: node without GPUs never imports the NVML probe module.
REAL_NVML = "pynvml"
#: Why the GPU checks do not apply on a node whose profile leaves
#: ``gpu_count`` unset and whose PCI bus has no NVIDIA device.
NO_NVIDIA_DEVICE = "no NVIDIA device on the PCI bus and the profile sets no gpu_count"


def no_gpu_reason(
    profile: Profile,
    backend: str,
    pci_devices: str | None = None,
    driver_paths: tuple[str, ...] | None = None,
) -> str | None:
    """Why this node has no GPU to check, or None when it may have one.

    A profile with ``gpu_count = 0`` says so itself (the registry's
    ``skip_when``).  One that leaves it unset is asked of the hardware,
    without NVML: with the real NVML backend and no NVIDIA device in
    ``/proc/bus/pci/devices``, the GPU checks do not apply, so a CPU node
    neither loads the NVML library nor reports "NVML not found" UNKNOWN on
    every run.  A named (fake) backend stands in for the hardware: it is
    asked as before.  A loaded NVIDIA driver always counts as a GPU that
    may be there: a container's or sandbox's PCI list can leave it out, and
    a GPU node whose checks are skipped would be trusted for ever."""
    from slurm_hooks.detect.probes import pci

    if profile.gpu_count == 0:
        return "profile expects no GPUs"
    if profile.gpu_count is not None or backend != REAL_NVML:
        return None
    present = pci.vendor_present(pci.NVIDIA_VENDOR, pci_devices or pci.PROC_PCI_DEVICES)
    if present is not False:
        return None
    if pci.driver_present(driver_paths or pci.NVIDIA_DRIVER_PATHS):
        return None
    return NO_NVIDIA_DEVICE


def node_name() -> str:
    """The Slurm node name: ``$SLURMD_NODENAME`` in hooks, else the short host
    name (``uname -n``, what ``socket.gethostname()`` returns, without
    importing socket on the hook path)."""
    return os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]


@record
class RunSetup:
    """Everything a run needs, resolved once from the config."""

    cfg: Config
    checks: ChecksConfig
    profiles: Profiles
    profile: Profile
    node: str
    state_dir: str
    services: Mapping[str, Any] = field(default_factory=dict)
    #: Services this setup created (and so may close).
    owned: frozenset[str] = frozenset()
    #: Why this node has no GPU to check (see :func:`no_gpu_reason`); then
    #: no NVML session is built and the GPU checks are "not applicable".
    no_gpu: str | None = None

    def close(self) -> None:
        """Shut down what this setup opened (``nvmlShutdown``).  Only call it
        when no check thread can still be using it."""
        session = self.services.get("nvml") if "nvml" in self.owned else None
        if session is not None:
            session.close()

    def context(self, phase: Phase | str, check: str | None = None) -> CheckContext:
        """The CheckContext for ``check`` (its settings table) in ``phase``."""
        return CheckContext(
            node=self.node,
            phase=Phase(phase),
            profile=self.profile,
            settings=self.checks.table(check) if check else {},
            state_dir=self.state_dir,
            services=self.services,
            config_path=self.cfg.path,
        )


def setup(
    cfg: Config | None = None,
    *,
    node: str | None = None,
    profile: str | None = None,
    services: Mapping[str, Any] | None = None,
    state_dir: str | None = None,
) -> RunSetup:
    """Load config (``config.load()`` when None), pick the node's profile and
    build the shared services (one lazy NVML session, the sysfs root).
    Raises ConfigError naming file and key when the config is invalid."""
    from slurm_hooks.core import config as config_mod

    if cfg is None:
        cfg = config_mod.load(validate=False)
    checks_cfg = load_checks_config(cfg)
    general = cfg.section("general", config_mod.GeneralConfig)
    state_dir = state_dir or general.state_dir
    # Hostlist answers remembered by earlier runs: no ClusterShell import
    # while the config and the node stay the same.
    load_hostlist_cache(state_dir)
    # Plug-in names (a fake NVML, an engine) resolved by earlier runs: no
    # entry-point scan while the installed distributions stay the same.
    from slurm_hooks.core import plugins

    plugins.remember_in(state_dir)
    profiles = load_profiles(cfg)
    node = node or node_name()
    chosen = profiles.select(node, profile)
    save_hostlist_cache(state_dir)
    svc: dict[str, Any] = {"sysfs_root": checks_cfg.sysfs_root, "config": cfg}
    svc.update(services or {})
    owned = set()
    no_gpu = None if "nvml" in svc else no_gpu_reason(chosen, checks_cfg.nvml)
    if "nvml" not in svc and no_gpu is None:
        # Only a node that may have GPUs imports the NVML probe module (and
        # loads the library on the first GPU check).
        owned.add("nvml")
        from slurm_hooks.detect.probes.nvml import NvmlSession

        scenario = checks_cfg.nvml_scenario
        if scenario and cfg.path and not os.path.isabs(scenario):
            scenario = os.path.join(os.path.dirname(cfg.path), scenario)
        svc["nvml"] = NvmlSession(backend=checks_cfg.nvml, scenario=scenario)
    return RunSetup(
        cfg=cfg,
        checks=checks_cfg,
        profiles=profiles,
        profile=chosen,
        node=node,
        state_dir=state_dir,
        services=svc,
        owned=frozenset(owned),
        no_gpu=no_gpu,
    )


def run_phase(
    phase: Phase | str,
    *,
    cfg: Config | None = None,
    node: str | None = None,
    profile: str | None = None,
    only: Sequence[str] | None = None,
    services: Mapping[str, Any] | None = None,
    state_dir: str | None = None,
    budget_s: float | None = None,
    run_setup: RunSetup | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> RunResult:
    """Run ``phase``'s checks on this node and return every finding.

    Raises ConfigError (exit 2) only for problems found before any check
    runs: an invalid config, an unknown profile or check name.  Everything
    after that is a finding.
    """
    ph = Phase(phase)
    t0 = clock()
    rs = run_setup or setup(cfg, node=node, profile=profile, services=services, state_dir=state_dir)
    names = plan(ph, rs.checks, only, sections=rs.cfg.data)
    budget = budget_s if budget_s is not None else rs.checks.budget(ph)
    log.info(
        "run phase=%s node=%s profile=%s checks=%s", ph, rs.node, rs.profile.name, ",".join(names)
    )
    base_ctx = rs.context(ph)
    base_ctx = replace(
        base_ctx, services={**base_ctx.services, "deadline": Deadline(clock() + budget, clock)}
    )
    outcomes, finished = run_checks(
        names,
        lambda name: replace(base_ctx, settings=rs.checks.table(name)),
        phase=ph,
        budget_s=budget,
        timeout_for=rs.checks.timeout,
        clock=clock,
        not_applicable=lambda name: _not_applicable(name, rs.profile, rs.no_gpu),
    )
    # One finding per root cause: the other checks' "could not run on gpuN"
    # for a GPU gpu_lost reported is folded into that finding.
    outcomes = fold_lost_gpus(outcomes)
    if finished and run_setup is None:
        # A check left running may still be inside NVML: then let process exit clean up.
        rs.close()
    return RunResult(
        phase=ph,
        node=rs.node,
        profile=rs.profile.name,
        outcomes=outcomes,
        seconds=clock() - t0,
        budget_s=budget,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m slurm_hooks.detect.runner [PHASE] [--only a,b] [--profile P]``:
    a click-free entry that prints the result as JSON (for benchmarks and
    hook debugging; the ``slurm-hooks check`` CLI is the friendly one)."""
    import json

    args = list(sys.argv[1:] if argv is None else argv)
    phase, only, profile = Phase.HEALTHCHECK, None, None
    while args:
        a = args.pop(0)
        if a == "--only" and args:
            only = [args.pop(0)]
        elif a == "--profile" and args:
            profile = args.pop(0)
        elif not a.startswith("-"):
            phase = Phase(a)
        else:
            print(
                "usage: python -m slurm_hooks.detect.runner [PHASE] [--only A,B] [--profile P]",
                file=sys.stderr,
            )
            return EXIT_ERROR
    try:
        result = run_phase(phase, only=only, profile=profile)
    except SlurmHooksError as exc:
        print(f"slurm-hooks: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    json.dump(result.to_dict(), sys.stdout)
    sys.stdout.write("\n")
    return result.exit_code


def one_shot(fn: Callable[[], int]) -> int:
    """Run ``fn``, the only job of a process that exits right after it (a
    hook, ``python -m slurm_hooks.detect.runner``), and return its exit status.

    Such a process builds modules, configs and results that all live until
    exit, so cyclic garbage collection only re-scans them: it is off while
    ``fn`` runs, and what exists afterwards is frozen so that the
    interpreter's last collection at exit skips it too (together ~10 % of
    a health check's instructions).  Never use it in a process that goes on
    (the watcher, the CLI, tests): collection stays off.  Exit itself is
    unchanged: atexit handlers run, logging flushes, files written with
    ``with`` were closed; like any object alive at exit, garbage left in a
    cycle is not finalised (Python never promised that)."""
    gc.disable()
    code = fn()
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(one_shot(main))
