"""What the engine-driven checks (burnin, nccl, dcgm) share: their settings
less the runner's keys, the engine "auto" picks, the request handed to a
plug-in engine, GPU selection for a command, and the findings for a run they
chose not to start (no GPUs to drive, MIG).

An engine that is not built in (``engine = "lab:fake"``) is found by name in
the ``slurm_hooks.engines`` entry-point group (``detect.engines.registry``)
and told what the run was configured with: the check's ``scenario`` (relative
to the config file) and the scenario of the run's NVML session (``[checks]
nvml_scenario``, ``services["nvml"]``, built by ``runner.setup``).  Nothing
here reads the environment: a fake is used only when the config names it."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from collections.abc import Callable
from typing import Any, TypeVar

from slurm_hooks.core.config import from_mapping
from slurm_hooks.core.model import Finding, Status
from slurm_hooks.detect.checks.base import COMMON_SETTINGS, CheckContext, ok
from slurm_hooks.detect.engines.burnin.budget import Skipped
from slurm_hooks.detect.probes import commands

log = logging.getLogger(__name__)

T = TypeVar("T")
Runner = Callable[..., commands.CommandResult]

#: Keys the runner puts into a check's settings besides COMMON_SETTINGS.
RUNNER_KEYS = frozenset({"deadline"})


def load_settings(cls: type[T], ctx: CheckContext, check: str) -> T:
    """``[checks.<check>]`` as ``cls``; errors name ``checks.<check>.<key>``."""
    data = {k: v for k, v in ctx.settings.items() if k not in COMMON_SETTINGS | RUNNER_KEYS}
    return from_mapping(cls, data, path=ctx.config_path, prefix=f"checks.{check}")


def validate_engine(engine: str, builtins: tuple[str, ...], *, key: str) -> None:
    """Validate an ``engine`` setting: one of ``builtins``, else a plug-in
    looked up now (so a typo fails at validation, naming ``key``).  The
    registry is imported only for a plug-in's name: a node with built-in
    engines never scans the entry points."""
    if not engine:
        raise ValueError(f"engine must be one of {', '.join(builtins)} or a plug-in's name")
    if engine not in builtins:
        from slurm_hooks.detect.engines.registry import check_name

        check_name(engine, builtins, key=key)


def choose_engine(engine: str, binary: str, binary_engine: str) -> str | None:
    """The engine to run: ``engine`` as configured; for "auto" the reference
    tool (``binary``, found on the hooks' PATH or given as a path) as
    ``binary_engine``, else torch when importable, else None.  "auto" never
    picks a fake."""
    if engine != "auto":
        return engine
    if shutil.which(binary, path=commands.command_env()["PATH"]):
        return binary_engine
    if importlib.util.find_spec("torch") is not None:
        return "torch"
    return None


def not_applicable(ctx: CheckContext) -> Skipped | None:
    """Skipped where an engine has no whole GPU to drive, else None: a
    profile that expects no GPUs, or a node with MIG enabled on a GPU.

    A MIG GPU is not a device the engines can use whole: CUDA shows them
    its instances, each a fraction of the GPU, with no NVLink or CUDA IPC
    between them (NVIDIA's MIG guide; RAPIDS' MIG notes), and Slurm's GPU
    indices there count the instances; so a burn-in or all-reduce would
    judge a slice, or another job's, against a whole GPU's figures and
    drain a healthy node.  ``dcgmi diag`` on MIG was not measured here
    (no GPU) and is left out with them.  MIG mode is root's to set (NVML,
    read here); the NVML checks still watch such GPUs.  Where
    NVML cannot start, nothing is concluded here: the NVML checks report
    that, and the engine runs as it would."""
    if ctx.profile.get("gpu_count") == 0:
        return Skipped("not applicable: profile expects no GPUs")
    from slurm_hooks.detect.checks.gpubase import nvml_session

    try:
        mig = nvml_session(ctx).mig_enabled()
    except Exception as exc:  # noqa: BLE001 - NVML's own checks report a failed start
        log.debug("MIG mode not read: %s", exc)
        return None
    if mig:
        shown = ",".join(map(str, mig))
        return Skipped(
            f"not applicable: MIG enabled on GPU {shown}; whole-GPU engines do not run "
            "on a MIG node (the NVML checks still watch its GPUs)"
        )
    return None


def pick_engine(
    ctx: CheckContext, engine: str, binary: str, binary_engine: str, what: str
) -> str | Skipped:
    """The engine a check runs (:func:`choose_engine`), or Skipped where the
    profile expects no GPUs.  Raises RuntimeError when "auto" finds neither
    ``binary`` nor torch: a node configured to run ``what`` cannot, which is
    the check's error, not a pass."""
    skipped = not_applicable(ctx)
    if skipped is not None:
        return skipped
    chosen = choose_engine(engine, binary, binary_engine)
    if chosen is None:
        raise RuntimeError(f"no {what} engine: neither {binary!r} nor torch is installed")
    return chosen


def session_scenario(ctx: CheckContext | None) -> str | None:
    """The fake-NVML scenario the run's NVML session was built with
    (``[checks] nvml_scenario``, already resolved against the config's
    directory by ``runner.setup``); None for real NVML or no session."""
    if ctx is None:
        return None
    session = ctx.services.get("nvml")
    if session is None:
        return None
    value = getattr(session, "scenario", None)
    if isinstance(value, str | os.PathLike) and os.fspath(value):
        return os.fspath(value)
    return None


def _resolve(path: str | None, config_path: str | None) -> str | None:
    if path and config_path and not os.path.isabs(path):
        return os.path.join(os.path.dirname(config_path), path)
    return path or None


def plugin_request(
    ctx: CheckContext | None,
    scenario: str | None,
    gpu_count: int,
    devices: tuple[int, ...] | None = None,
) -> Any:
    """The :class:`~slurm_hooks.detect.engines.registry.EngineRequest` for a
    plug-in engine: ``scenario`` (the check's setting) resolved against the
    config file, the run's NVML scenario, ``gpu_count`` and the GPUs it may
    touch (``devices``: the job's on a shared node; None for all)."""
    from slurm_hooks.detect.engines.registry import EngineRequest

    return EngineRequest(
        scenario=_resolve(scenario, ctx.config_path if ctx is not None else None),
        nvml_scenario=session_scenario(ctx),
        gpu_count=gpu_count,
        devices=tuple(devices) if devices else None,
    )


def plugin_engine(
    ctx: CheckContext,
    check: str,
    engine: str,
    scenario: str | None,
    gpu_count: int,
    devices: tuple[int, ...] | None = None,
) -> tuple[Any, Any]:
    """The plug-in engine named ``engine`` (errors name
    ``checks.<check>.engine``) and the request to hand it
    (:func:`plugin_request`)."""
    from slurm_hooks.detect.engines.registry import backend

    request = plugin_request(ctx, scenario, gpu_count, devices)
    return backend(engine, key=f"checks.{check}.engine", path=ctx.config_path), request


def on_devices(run_cmd: Runner, devices: tuple[int, ...] | None) -> Runner:
    """``run_cmd`` with CUDA numbering GPUs in PCI bus order, and limited to
    ``devices`` through CUDA_VISIBLE_DEVICES (all GPUs when none are named).

    The indices are NVML's and nvidia-smi's, PCI bus order (the prolog
    renames Slurm's ``SLURM_JOB_GPUS`` into them: ``slurm/gpu_order.py``).  CUDA's own default
    puts the fastest GPU first and leaves the rest in an order it does not
    promise, so gpu_burn's "GPU 3" could be another GPU than NVML's 3: the
    drain would name it, and the repair would reset it."""
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if devices:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, devices))

    def _run(argv: list[str], **kw: Any) -> commands.CommandResult:
        return run_cmd(argv, env=env, **kw)

    return _run


def skipped_findings(check: str, skipped: Skipped) -> list[Finding]:
    """Not applicable is OK; skipped for want of time is UNKNOWN (the node
    was not judged)."""
    if skipped.reason.startswith("not applicable"):
        return [ok(check, skipped.reason)]
    return [
        Finding(check=check, status=Status.UNKNOWN, code="CHECK_SKIPPED", message=skipped.reason)
    ]
