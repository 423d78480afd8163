"""The Slurm access layer's one interface.

Three backends implement it: ``cli`` (scontrol/sinfo/squeue/scancel, the
default), ``rest`` (slurmrestd through requests) and ``pyslurm`` (optional,
only when its version matches the running Slurm).  Everything above this
layer (actions, bridge, CLI) talks to ``SlurmClient`` and never to a
subprocess or a socket directly.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from slurm_hooks.core.errors import SlurmError
from slurm_hooks.core.model import JobInfo, NodeState


class SignalTarget(enum.StrEnum):
    """Who receives a signal: the batch script only (``scancel --batch``), or
    the batch script and every step (``scancel --full``), or the steps only."""

    BATCH = "batch"
    FULL = "full"
    STEPS = "steps"


@runtime_checkable
class SlurmClient(Protocol):
    """Operations remediation needs.  Every method is bounded in time and
    raises SlurmUnavailable (after retries) or SlurmError, never hangs."""

    def list_nodes(self, names: Sequence[str] | str | None = None) -> list[NodeState]:
        """Nodes with state, flags, reason, reason user and reason time;
        ``names`` may be a hostlist string."""
        ...

    def get_node(self, name: str) -> NodeState: ...

    def drain(self, name: str, reason: str) -> None:
        """Set DRAIN with ``reason`` (one line, non-empty)."""
        ...

    def resume(self, name: str) -> None: ...

    def down(self, name: str, reason: str) -> None: ...

    def update_reason(self, name: str, reason: str) -> None:
        """Change the reason of a node that is already drained or down."""
        ...

    def jobs_on_node(self, name: str) -> list[JobInfo]:
        """Running, suspended or completing jobs that use ``name``."""
        ...

    def list_jobs(self, states: Sequence[str] | None = None) -> list[JobInfo]: ...

    def get_job(self, job_id: str) -> JobInfo: ...

    def signal_job(self, job_id: str, signal: str, target: SignalTarget) -> None: ...

    def requeue(self, job_id: str) -> None: ...

    def cancel(self, job_id: str) -> None: ...

    def set_job_comment(self, job_id: str, comment: str, *, admin: bool = False) -> None: ...

    def show_config(self) -> dict[str, str]:
        """``scontrol show config`` as a mapping of key to value."""
        ...


@runtime_checkable
class ServerClock(Protocol):
    """A client that can read slurmctld's own clock (cli: ``sdiag``; rest:
    ``/diag``).  The breaker's claim protocol (``act/claim.py``) settles on
    it; a client without it (a test double) is settled without waiting."""

    def server_time(self) -> datetime: ...


@runtime_checkable
class JobsSignal(Protocol):
    """A client that signals many jobs in one request.

    Up to Slurm 23.11 ``scancel --signal`` reads the whole job table before
    it signals (any option besides job ids does: ``has_default_opt`` in
    scancel's opt.c, then ``_load_job_records``), once per invocation:
    signalling a node's jobs one ``scancel`` each reads the table once per
    job, one call for all of them once, however many jobs the node runs.
    From 24.05 ``scancel --ctld`` hands the ids to slurmctld in one request
    (``REQUEST_KILL_JOBS``) and reads no table at all.  Returns
    each job's outcome: None (signalled) or the typed error (JobGone for a
    job that ended).  SlurmUnavailable when nothing could be sent; when the
    controller stops answering part-way, the jobs not reached carry
    SlurmUnavailable as their outcome instead (what went out stays known).
    ``SlurmDoor.signal_many`` is the one caller."""

    def signal_jobs(
        self, job_ids: Sequence[str], signal: str, target: SignalTarget
    ) -> dict[str, SlurmError | None]: ...


@runtime_checkable
class JobSteps(Protocol):
    """A client that lists one job's steps (``slurm/steps.py``): step id ->
    Slurm's state of it; JobGone when the job is no longer known.  The hang
    judge asks it only when a node's ranks of the job are gone."""

    def job_steps(self, job_id: str) -> dict[str, str]: ...


@runtime_checkable
class JobGpus(Protocol):
    """A client that says which GPUs of each node a job was given
    (``slurm/job_gpus.py``): ``(nodes, gres)`` pairs as Slurm prints them,
    empty when it does not say.  Only the GPU-scoped evacuation asks."""

    def job_gpu_detail(self, job_id: str) -> list[tuple[str, str]]: ...


@runtime_checkable
class NodeComments(Protocol):
    """A client that can set a node's ``Comment`` (held faults are marked there)."""

    def set_node_comment(self, name: str, comment: str) -> None: ...


@runtime_checkable
class NodeExtra(Protocol):
    """A client that can set a node's ``Extra`` (the health grade, ``SlurmDoor.set_extra``)."""

    def set_node_extra(self, name: str, extra: str) -> None: ...


@runtime_checkable
class Reservations(Protocol):
    """A client that makes and lists MAINT reservations with its own Slurm
    set-up (``slurm/reservation.py``); the door falls back to ``scontrol``
    in the process's environment for the others."""

    def reservation_names(self) -> set[str]: ...
    def create_reservation(self, name: str, node: str, minutes: int) -> None: ...
    def delete_reservation(self, name: str) -> None: ...


@runtime_checkable
class NodeReboot(Protocol):
    """A client that can ask Slurm to reboot a node (``scontrol reboot ASAP``)."""

    def reboot(self, name: str, reason: str, nextstate: str = "DOWN") -> None: ...
