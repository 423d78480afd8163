"""Value types shared by every stage: probes -> findings -> policy -> actions.

Everything here is a frozen dataclass or an enum so that results can be
compared in tests, logged as JSON and passed between stages without anyone
mutating them on the way.  Nothing in this module does I/O.

Slurm's side (``NodeState``, ``JobInfo``, ``ReasonOwner``) lives in
:mod:`slurm_hooks.core.slurm_model` and is importable from here too, loaded
on first use: every hook imports this module, and a healthy one never needs
them (each frozen dataclass costs its importer about half a millisecond).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from slurm_hooks.core.record import asdict, field, record

if TYPE_CHECKING:
    from slurm_hooks.core.slurm_model import JobInfo as JobInfo
    from slurm_hooks.core.slurm_model import NodeState as NodeState
    from slurm_hooks.core.slurm_model import ReasonOwner as ReasonOwner

Value = float | int | str | bool | None


class Status(enum.StrEnum):
    """Outcome of one check.  UNKNOWN means the check could not run: it is
    never treated as healthy and never as a hardware fault on its own."""

    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"

    @property
    def rank(self) -> int:
        return _STATUS_RANK[self]


_STATUS_RANK = {Status.OK: 0, Status.UNKNOWN: 1, Status.WARN: 2, Status.FAIL: 3}


class Phase(enum.StrEnum):
    """When a check runs; each has its own time budget."""

    HEALTHCHECK = "healthcheck"
    PROLOG = "prolog"
    EPILOG = "epilog"
    ACCEPTANCE = "acceptance"
    WATCH = "watch"


class Action(enum.StrEnum):
    """What a finding recommends, in increasing order of severity.  The policy
    makes the final call; this is the check's (or the XID catalogue's) advice."""

    NONE = "none"
    IGNORE = "ignore"
    RESTART_APP = "restart_app"
    RESET_GPU = "reset_gpu"
    DRAIN = "drain"
    REBOOT = "reboot"
    REPLACE = "replace"

    @property
    def rank(self) -> int:
        return list(Action).index(self)


@record
class Component:
    """The part a finding is about.  ``kind`` is one of gpu, nvswitch, nic,
    mount, memory, node; the other fields are filled where known so that a
    drain reason and an alert can name the exact GPU."""

    kind: str
    index: int | None = None
    uuid: str | None = None
    pci: str | None = None
    name: str | None = None

    def short(self) -> str:
        """Compact form used inside drain reasons, e.g. ``gpu3`` or ``ib:mlx5_0/1``."""
        if self.kind == "gpu" and self.index is not None:
            return f"gpu{self.index}"
        if self.kind == "gpu" and self.pci:
            return f"pci:{self.pci}"
        if self.name:
            return f"{self.kind}:{self.name}"
        if self.index is not None:
            return f"{self.kind}{self.index}"
        return self.kind


NODE = Component("node")


class Provenance(enum.StrEnum):
    """Where the evidence of a fault came from: who could have written it.

    The policy (``decide/``) owns the rule built on it (docs/security.md):
    evidence the job's user can write or cause alone acts only on that
    user's own job, never on the node or anyone else's job.  A finding lists
    the sources of the *fault* evidence, not of facts around it (Slurm saying
    where a job runs does not corroborate that the node hung it).
    """

    #: The kernel: kmsg (XID/SXID), /proc of a process Slurm says is the job's.
    KERNEL = "kernel"
    #: NVML / the GPU driver answering (or not) for a GPU.
    NVML = "nvml"
    #: sysfs (PCIe, InfiniBand, memory counters).
    SYSFS = "sysfs"
    #: Slurm's own records (node state, job steps).
    SLURM = "slurm"
    #: A probe slurm-hooks runs as root (burn-in, NCCL test, mounts, DCGM).
    ROOT_PROBE = "root_probe"
    #: A file the job's user wrote (progress records, RAS output, dumps).
    USER_FILE = "user_file"
    #: A process state the job's user can set (stopped, exited, a pid it named).
    USER_PROCESS = "user_process"
    #: The job's environment, name, comment or output.
    JOB_ENV = "job_env"

    @property
    def trusted(self) -> bool:
        return self not in USER_SIDE


USER_SIDE = frozenset({Provenance.USER_FILE, Provenance.USER_PROCESS, Provenance.JOB_ENV})


@record
class Finding:
    """The one result type that crosses from checks to policy.

    ``code`` is stable (``XID79``, ``GPU_LOST``, ``ECC_DBE`` ...): alerts,
    reasons and metrics key on it, so never rename a code once shipped.
    """

    check: str
    status: Status
    code: str
    message: str
    component: Component = NODE
    action: Action = Action.NONE
    values: Mapping[str, Value] = field(default_factory=dict)
    #: Where the fault evidence came from; the checks that read the machine
    #: as root keep the default.  Anything reading user-writable input names
    #: its user-side sources (and any trusted corroboration beside them).
    provenance: tuple[Provenance, ...] = (Provenance.ROOT_PROBE,)

    @property
    def is_problem(self) -> bool:
        return self.status in (Status.WARN, Status.FAIL)

    @property
    def user_side(self) -> bool:
        """True when every source of the evidence is one the job's user
        controls: such a finding alone never blames the node."""
        return bool(self.provenance) and all(not p.trusted for p in self.provenance)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = str(self.status)
        d["action"] = str(self.action)
        d["values"] = dict(self.values)
        d["provenance"] = [str(p) for p in self.provenance]
        d["trusted"] = not self.user_side
        return d


#: Names importable from here that live in slurm_model (see the docstring).
_SLURM_MODEL = frozenset({"NodeState", "JobInfo", "ReasonOwner"})


def __getattr__(name: str) -> Any:
    """``from slurm_hooks.core.model import NodeState`` (PEP 562): loads
    :mod:`slurm_hooks.core.slurm_model` on first use."""
    if name in _SLURM_MODEL:
        from slurm_hooks.core import slurm_model

        return getattr(slurm_model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
