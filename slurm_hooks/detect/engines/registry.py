"""Burn-in and all-reduce engines that are not built in, by name.

The built-in engines (``gpu_burn``, ``torch`` for burn-in; ``nccl-tests``,
``torch`` for NCCL; ``nccl-tests`` over srun for the multi-node preflight)
are chosen by the checks themselves.  Any other ``engine = "<name>"`` is an
entry point of the ``slurm_hooks.engines`` group, which names a callable
returning an :class:`EngineBackend`; the lab registers ``lab:fake`` there
(gpu_burn and all_reduce_perf output computed from scenario files).  The
group is scanned only when such a name is configured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from slurm_hooks.core.plugins import resolve

if TYPE_CHECKING:
    from slurm_hooks.detect.engines.burnin.model import BurninRun
    from slurm_hooks.detect.engines.nccl.model import NcclRun

PLUGIN_GROUP = "slurm_hooks.engines"


@dataclass(frozen=True)
class EngineRequest:
    """What a plug-in engine is told about the run it stands in for."""

    #: The check's ``scenario`` setting, resolved against the config file's
    #: directory (what a scenario-driven engine reads); None when unset.
    scenario: str | None = None
    #: The scenario of the run's NVML session (``[checks] nvml_scenario``),
    #: so a fake engine sees the same GPUs as the fake NVML; None otherwise.
    nvml_scenario: str | None = None
    #: GPUs to exercise (the profile's gpu_count, the devices, or NVML's count).
    gpu_count: int = 8
    #: The node's GPUs the engine may touch (Slurm's indices: the
    #: ``/dev/nvidiaN`` minors, PCI bus order), e.g. the job's GPUs in a
    #: prolog on a shared node; None: every GPU.  On a shared node the other
    #: GPUs are other jobs': an engine runs on these only (as the built-in
    #: ones do through ``CUDA_VISIBLE_DEVICES``) and reports each GPU by
    #: this index.  The check drops any other GPU it reports.
    devices: tuple[int, ...] | None = None


class MultiNodeEngine(Protocol):
    """The preflight's engine: one all-reduce across ``nodes``
    (returns a ``slurm_hooks.agent.preflight.Measurement``)."""

    def measure(self, nodes: Sequence[str]) -> Any: ...


class EngineBackend(Protocol):
    """What a plug-in engine provides; each returns the model the built-in
    engines' parsers return, so the same judges run on it."""

    def burnin(self, req: EngineRequest, duration_s: int) -> BurninRun: ...

    def all_reduce(self, req: EngineRequest, min_bytes: int, max_bytes: int) -> NcclRun: ...

    def preflight(
        self, scenario: str, *, gpus_per_node: int, min_bytes: int, max_bytes: int
    ) -> MultiNodeEngine: ...


def backend(
    name: str, *, key: str, path: str | None = None, builtins: Sequence[str] = ()
) -> EngineBackend:
    """The plug-in engine registered as ``name``; ConfigError naming ``key``
    (and listing ``builtins`` beside the plug-ins) when there is none or it
    cannot be loaded."""
    factory = resolve(PLUGIN_GROUP, name, {}, key=key, path=path, also_known=builtins)
    result: EngineBackend = factory()
    return result


def check_name(name: str, builtins: Sequence[str], *, key: str, path: str | None = None) -> None:
    """Validate ``engine = name``: built-in names need nothing; any other is
    looked up (scanning the group), so a typo fails at validation."""
    if name not in builtins:
        backend(name, key=key, path=path, builtins=builtins)
