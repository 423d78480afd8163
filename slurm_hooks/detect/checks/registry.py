"""Every check by name, with the phases it may run in, imported only when run.

The registry is data: ``name -> "module:Class"`` plus phases, so a hook
that runs three checks imports three modules and nothing else.  Checks
written elsewhere (``xid``, ``burnin``, ``nccl``) are listed here too; a
module that is not installed yet raises :class:`CheckNotInstalled`, which
the runner reports as UNKNOWN "check not installed" while the other checks
still run.

A check can also say, as data (``skip_when``), for which profiles it does
not apply ("profile expects no GPUs").  The runner reads that before
importing the module, so a CPU node's health check imports none of the
NVML checks; the checks themselves skip through the same data
(:meth:`CheckSpec.not_applicable`), so the two cannot disagree.
"""

from __future__ import annotations

import sys
from typing import Any

from slurm_hooks.core.errors import CheckNotInstalled
from slurm_hooks.core.model import Phase
from slurm_hooks.core.record import record

H, P, E, A, W = Phase.HEALTHCHECK, Phase.PROLOG, Phase.EPILOG, Phase.ACCEPTANCE, Phase.WATCH

#: (profile key, value, reason): the check does not apply when the profile's
#: ``key`` is ``value``.  The common one for NVML checks:
NO_GPUS = ("gpu_count", 0, "profile expects no GPUs")


def not_applicable(rules: tuple[tuple[str, Any, str], ...], profile: Any) -> str | None:
    """The reason of the first rule the profile meets, else None.  A bool
    value matches only that bool (``fabric_manager = false``, not None); a
    number matches equal numbers that are not bools."""
    for key, value, reason in rules:
        actual = getattr(profile, key, None)
        if isinstance(value, bool):
            if actual is value:
                return reason
        elif not isinstance(actual, bool) and actual is not None and actual == value:
            return reason
    return None


@record
class CheckSpec:
    """One check as the runner knows it before importing it: where it lives,
    when it runs and when it does not apply (so a skipped check costs no import)."""

    name: str
    #: "package.module:Class", imported on first use.
    target: str
    phases: frozenset[Phase]
    summary: str
    #: Seconds one run may take unless ``[checks.<name>] timeout_s`` says otherwise.
    timeout_s: float | None = None
    #: Uses NVML (skipped without loading it on nodes whose profile has no GPU).
    gpu: bool = False
    #: Profiles this check does not apply to, in order: (key, value, reason).
    skip_when: tuple[tuple[str, Any, str], ...] = ()
    #: Runs only when the config has this section (``site``: ``[[site_checks]]``),
    #: so a node without one never imports the check.
    needs_section: str | None = None

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    def not_applicable(self, profile: Any) -> str | None:
        """Why this check does not apply to a node with ``profile`` (a
        :class:`~slurm_hooks.detect.profiles.Profile`), None when it may."""
        return not_applicable(self.skip_when, profile)


_M = "slurm_hooks.detect.checks"


def _spec(name: str, cls: str, phases: set[Phase], summary: str, **kw: object) -> CheckSpec:
    """A check's spec; ``cls`` is its class in ``slurm_hooks.detect.checks.<name>``
    (the module is named for the check) unless it says ``module:Class``."""
    if kw.get("gpu") and "skip_when" not in kw:
        kw["skip_when"] = (NO_GPUS,)
    target = cls if ":" in cls else f"{_M}.{name}:{cls}"
    return CheckSpec(name, target, frozenset(phases), summary, **kw)  # type: ignore[arg-type]


def _engine_spec(
    name: str, cls: str, phases: set[Phase], summary: str, *, timeout_s: float
) -> CheckSpec:
    """An engine-driven check (burn-in, NCCL, DCGM): it needs GPUs but has no
    ``skip_when``; it decides for itself (``_engine_check.not_applicable``, a
    Skipped finding), so the runner imports it and reports its skip."""
    return _spec(name, cls, phases, summary, timeout_s=timeout_s, gpu=True, skip_when=())


#: In run order: cheap node-level facts first, so a lost GPU is reported
#: before the checks that can no longer look at it.
CHECKS: dict[str, CheckSpec] = {
    s.name: s
    for s in (
        _spec(
            "gpu_count",
            "GpuCountCheck",
            {H, P, E, A, W},
            "GPU count and model vs profile; NVML starts",
            gpu=True,
        ),
        _spec(
            "gpu_lost",
            "GpuLostCheck",
            {H, P, E, A, W},
            "GPUs NVML reports lost (XID 79) or needing reset",
            gpu=True,
        ),
        _spec("ecc", "EccCheck", {H, P, E, A, W}, "volatile uncorrectable ECC errors", gpu=True),
        _spec(
            "retired_pages",
            "RetiredPagesCheck",
            {H, P, E, A, W},
            "retired pages pending a reset (pre-Ampere)",
            gpu=True,
        ),
        _spec(
            "row_remap",
            "RowRemapCheck",
            {H, P, E, A, W},
            "row remapping pending or failed (Ampere+)",
            gpu=True,
        ),
        _spec(
            "fabric",
            "FabricCheck",
            {H, P, A},
            "NVSwitch fabric manager state (Hopper+)",
            gpu=True,
            skip_when=(("fabric_manager", False, "profile expects no fabric manager"), NO_GPUS),
        ),
        _spec(
            "nvlink",
            "NvlinkCheck",
            {H, E, A},
            "NVLink links down or error counters rising",
            gpu=True,
            skip_when=(("nvlinks_per_gpu", 0, "profile expects no NVLink"), NO_GPUS),
        ),
        _spec("pcie", "PcieCheck", {H, A}, "PCIe link width/generation below max", gpu=True),
        _spec(
            "throttle",
            "ThrottleCheck",
            {H, A, W},
            "hardware clock slowdown reasons active",
            gpu=True,
        ),
        _spec("gpu_temp", "GpuTempCheck", {H, A, W}, "GPU temperature vs thresholds", gpu=True),
        _spec(
            "gpu_memory",
            "GpuMemoryCheck",
            {H, A},
            "GPU memory held with no process on the GPU",
            gpu=True,
        ),
        _spec("driver", "DriverCheck", {H, A}, "driver version vs profile", gpu=True),
        _spec(
            "persistence",
            "PersistenceCheck",
            {H, A},
            "persistence mode on",
            gpu=True,
            skip_when=(
                ("persistence_mode", False, "profile does not require persistence mode"),
                NO_GPUS,
            ),
        ),
        _spec("ib", "IbCheck", {H, A}, "InfiniBand/RoCE ports active at expected rate"),
        _spec("memory", "MemoryCheck", {H, A}, "installed RAM vs profile"),
        _spec(
            "mounts",
            "MountsCheck",
            {H, P, E, A},
            "required mounts present and writable",
            timeout_s=15.0,
        ),
        _spec("scratch", "ScratchCheck", {H, P, E, A}, "free space on scratch"),
        _spec(
            "site",
            "slurm_hooks.detect.site.check:SiteChecks",
            {H, P, E, A},
            "the site's own checks, as data ([[site_checks]]; NHC's families)",
            timeout_s=25.0,
            needs_section="site_checks",
        ),
        _spec("xid", "XidCheck", {H, P, E, W}, "XID events in the kernel log"),
        _engine_spec(
            "burnin", "BurninCheck", {P, A}, "short GPU burn-in vs TFLOP/s floor", timeout_s=120.0
        ),
        _engine_spec(
            "nccl", "NcclCheck", {P, A}, "NCCL all-reduce bus bandwidth vs floor", timeout_s=120.0
        ),
        _engine_spec(
            "dcgm",
            "DcgmCheck",
            {A},
            "DCGM diagnostics (dcgmi diag), where installed",
            timeout_s=900.0,
        ),
    )
}


def get(name: str) -> CheckSpec:
    try:
        return CHECKS[name]
    except KeyError:
        raise KeyError(f"unknown check {name!r} (known: {', '.join(CHECKS)})") from None


def for_phase(phase: Phase | str) -> list[CheckSpec]:
    """Registered checks that may run in ``phase``, in run order."""
    ph = Phase(phase)
    return [s for s in CHECKS.values() if ph in s.phases]


def load_class(spec: CheckSpec) -> type:
    module_name, _, attr = spec.target.partition(":")
    try:
        # The import statement's path, not importlib.import_module's: the
        # same import, but one that ``python -X importtime`` reports, so the
        # hook's import guard (tests/test_import_guard.py) sees every check.
        __import__(module_name)
        module = sys.modules[module_name]
    except ModuleNotFoundError as exc:
        # Only "this check's own module is missing" means not installed; a
        # missing dependency inside an installed check is a real error.
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise CheckNotInstalled(f"check {spec.name!r} not installed ({module_name})") from exc
        raise
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise CheckNotInstalled(f"check {spec.name!r}: {module_name} has no {attr}") from exc


def load(name: str) -> object:
    """An instance of the named check (a :class:`~.base.Check`)."""
    return load_class(get(name))()
