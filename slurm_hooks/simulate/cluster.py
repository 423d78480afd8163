"""The simulated Slurm: an in-memory ``SlurmClient`` on simulated time.

slurm-hooks writes to it only through the real ``SlurmDoor`` (the
ownership rule and requeue-exactly-once live there, not here); the other
actors of a cluster (a person with ``scontrol``, NHC, slurmctld marking a
silent node DOWN) write straight to it, as they do to a real Slurm.  Every
write is logged with its writer, so a test can check who changed what.

It also keeps the figures the report needs: the node-seconds spent out of
service (drained or down for a fault, not a SPARE hold) integrated over
simulated time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from slurm_hooks.core.errors import SlurmError
from slurm_hooks.core.model import JobInfo, NodeState
from slurm_hooks.core.reason import try_parse_reason
from slurm_hooks.slurm.base import SignalTarget

PARTITION = "gpu"
#: The writer name of slurm-hooks' writes (through the door).
US = "slurm-hooks"


class NodeMissing(SlurmError):
    """No such node in the simulated cluster."""


@dataclass(frozen=True)
class Write:
    t: float
    op: str
    target: str
    by: str
    value: str | None = None


@dataclass
class SimJob:
    job_id: str
    nodes: list[str]
    state: str = "running"
    restart_count: int = 0


class SimSlurm:
    """Nodes and jobs; the ``SlurmClient`` protocol for the door."""

    def __init__(self, names: Sequence[str], epoch: datetime, clock: Callable[[], float]) -> None:
        self.epoch = epoch
        self.clock = clock
        self.nodes: dict[str, NodeState] = {
            n: NodeState(n, "idle", partitions=(PARTITION,)) for n in names
        }
        self.jobs: dict[str, SimJob] = {}
        self.writes: list[Write] = []
        #: Who writes now (the door's calls are ours; the other actors set it).
        self.actor = US
        #: Called with the job id when a job is requeued (the replay schedules it).
        self.on_requeue: Callable[[str], None] = lambda job_id: None
        self.requeues: dict[str, int] = {}
        #: Reason stamps to use for the next write on a node (a history
        #: replay: Slurm's order of claims, as the audit log reveals it).
        self.stamps: dict[str, datetime] = {}
        self.out_node_s = 0.0
        self._out = 0
        self._out_since = 0.0

    # -- bookkeeping ------------------------------------------------------------------

    def now(self) -> datetime:
        """slurmctld's clock as it stamps reasons: whole seconds."""
        return (self.epoch + timedelta(seconds=self.clock())).replace(microsecond=0)

    def _set(self, node: NodeState) -> None:
        old = self.nodes[node.name]
        self.nodes[node.name] = node
        delta = int(self.out_of_service(node)) - int(self.out_of_service(old))
        if delta:
            t = self.clock()
            self.out_node_s += self._out * (t - self._out_since)
            self._out += delta
            self._out_since = t

    @staticmethod
    def out_of_service(node: NodeState) -> bool:
        """Out for a fault: drained or down, and not one of our SPARE holds."""
        if not (node.drained or node.down):
            return False
        ours = try_parse_reason(node.reason)
        return ours is None or ours.is_fault

    @property
    def out_count(self) -> int:
        return self._out

    def finish(self) -> None:
        t = self.clock()
        self.out_node_s += self._out * (t - self._out_since)
        self._out_since = t

    def _log(self, op: str, target: str, value: str | None = None) -> None:
        self.writes.append(Write(self.clock(), op, target, self.actor, value))

    def as_actor(self, actor: str) -> _Actor:
        return _Actor(self, actor)

    # -- SlurmClient: reads -----------------------------------------------------------

    def list_nodes(self, names: Sequence[str] | str | None = None) -> list[NodeState]:
        if names is None:
            return list(self.nodes.values())
        wanted = [names] if isinstance(names, str) else list(names)
        return [self.nodes[n] for n in wanted if n in self.nodes]

    def get_node(self, name: str) -> NodeState:
        try:
            return self.nodes[name]
        except KeyError:
            raise NodeMissing(f"no node {name}") from None

    def jobs_on_node(self, name: str) -> list[JobInfo]:
        return [
            self._info(j) for j in self.jobs.values() if name in j.nodes and j.state == "running"
        ]

    def list_jobs(self, states: Sequence[str] | None = None) -> list[JobInfo]:
        return [self._info(j) for j in self.jobs.values() if not states or j.state in states]

    def get_job(self, job_id: str) -> JobInfo:
        return self._info(self.jobs[job_id])

    def _info(self, j: SimJob) -> JobInfo:
        return JobInfo(j.job_id, "trainer", j.state, ",".join(j.nodes), j.nodes[0] if j.nodes
                       else None, True, restart_count=j.restart_count, num_nodes=len(j.nodes))  # fmt: skip

    def show_config(self) -> dict[str, str]:
        return {}

    # -- SlurmClient: writes ----------------------------------------------------------

    def drain(self, name: str, reason: str) -> None:
        n = self.get_node(name)
        self._log("drain", name, reason)
        stamp = self.stamps.pop(name, None) or self.now()
        self._set(replace(n, flags=n.flags | {"DRAIN"}, reason=reason, reason_time=stamp,
                          reason_user=self.actor))  # fmt: skip

    def down(self, name: str, reason: str) -> None:
        n = self.get_node(name)
        self._log("down", name, reason)
        self._set(replace(n, state="down", reason=reason, reason_time=self.now(),
                          reason_user=self.actor))  # fmt: skip

    def resume(self, name: str) -> None:
        n = self.get_node(name)
        self._log("resume", name)
        # Which nodes run jobs is the replay's to know (SimJob.nodes); the
        # policy and the door read reasons and flags, not allocated/idle.
        self._set(replace(n, state="idle", flags=n.flags - {"DRAIN"}, reason=None))

    def update_reason(self, name: str, reason: str) -> None:
        n = self.get_node(name)
        self._log("update_reason", name, reason)
        self._set(replace(n, reason=reason, reason_time=self.now(), reason_user=self.actor))

    def signal_job(self, job_id: str, signal: str, target: SignalTarget) -> None:
        self._log("signal", job_id, f"{signal}->{target}")

    def requeue(self, job_id: str) -> None:
        j = self.jobs[job_id]
        self._log("requeue", job_id)
        j.restart_count += 1
        j.state = "pending"
        self.requeues[job_id] = self.requeues.get(job_id, 0) + 1
        self.on_requeue(job_id)

    def cancel(self, job_id: str) -> None:
        self._log("cancel", job_id)
        self.jobs[job_id].state = "cancelled"

    def set_node_comment(self, name: str, comment: str) -> None:
        n = self.get_node(name)
        self._log("comment", name, comment)
        self.nodes[name] = replace(n, comment=comment or None)

    def set_job_comment(self, job_id: str, comment: str, *, admin: bool = False) -> None:
        self._log("comment", job_id, comment)


class _Actor:
    """``with cluster.as_actor("person"):`` writes in someone else's name."""

    def __init__(self, cluster: SimSlurm, actor: str) -> None:
        self.cluster, self.actor, self.before = cluster, actor, US

    def __enter__(self) -> SimSlurm:
        self.before, self.cluster.actor = self.cluster.actor, self.actor
        return self.cluster

    def __exit__(self, *exc: object) -> None:
        self.cluster.actor = self.before


__all__ = ["PARTITION", "US", "NodeMissing", "SimJob", "SimSlurm", "Write"]
