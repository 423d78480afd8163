"""What ``[policy] evacuate = "gpu"`` saves on nodes shared by small jobs,
and what it costs: the same failures replayed under ``"node"`` and ``"gpu"``.

The fleet replay (``replay.py``) prices slurm-hooks for one training job
on whole nodes, where the scope of an evacuation changes nothing.  Here
every node of ``gpus_per_node`` GPUs is kept full by a deep queue of jobs
of 1 to ``gpus_per_node`` GPUs (``mix``), each placed on the lowest free
GPUs, as Slurm's default selection does, running for a drawn time and
checkpointing every ``checkpoint_s``.  The failures are the fleet replay's
(``trace.generate``: a published rate and cause mix), each judged by the
product's own judges (``evidence.findings``) and ``decide()``; the drains'
scope is ``decide/scope.py``'s rule, the engine's.

* ``"node"``: a drain moves every job on the node: each loses the work
  since its last checkpoint and ``restart_s`` to start again, on all of its
  GPUs; the node is repaired (``repair_s``) and takes jobs again.
* ``"gpu"``: a drain for one GPU's fault moves the jobs holding that GPU;
  the others are spared and run to their end under the drain, which takes
  no new job: their free GPUs wait idle, then the repair runs.  A later
  fault there moves the spared jobs it concerns (``struck``).

A failure the judges do not drain for (a user's own XID 13, a hang) is
left out: it moves the same jobs under both.  So is a fault's return after
its repair.  What is counted, in GPU-hours: work lost (redone, and the
restarts), GPUs idle under a drain waiting for spared jobs, GPUs out for
the repair.  The seed is printed with every figure.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import cast

from slurm_hooks.core.bounds import require_at_least, require_positive
from slurm_hooks.decide import PolicyConfig, decide
from slurm_hooks.decide.scope import fault_gpu, gpu_of, spared, struck
from slurm_hooks.simulate import evidence as evmod
from slurm_hooks.simulate.params import with_value
from slurm_hooks.simulate.trace import EPOCH, Fault, evidence_table, generate

#: Where each default comes from.
SOURCES: dict[str, str] = {
    "nodes": "assumption: 256 nodes of shared GPUs",
    "gpus_per_node": "HGX H100: 8 GPUs per server (arXiv:2407.21783, 3.3.1)",
    "days": "the fleet replay's 54 days (Llama 3's snapshot, arXiv:2407.21783, 3.3.4)",
    "profile": "the failure rate and cause mix of Llama 3 (arXiv:2407.21783, Table 5)",
    "mix": "assumption: 40 % of jobs take 1 GPU, 20 % each 2, 4 and 8",
    "mean_job_h": "assumption: jobs run 12 h on average (exponential)",
    "max_job_h": "assumption: a 48 h time limit",
    "checkpoint_s": "the fleet replay's 30 min (assumption)",
    "restart_s": "assumption: 5 min to be scheduled again and load a checkpoint",
    "repair_s": "[repair] reset_timeout_s 120 s and 10 min of acceptance (the fleet replay's)",
}


@dataclass(frozen=True)
class ScopeParams:
    """One comparison's setting (seconds unless named otherwise)."""

    nodes: int = 256
    gpus_per_node: int = 8
    days: float = 54.0
    profile: str = "llama3"
    #: (GPUs, share) of the jobs in the queue.
    mix: tuple[tuple[int, float], ...] = ((1, 0.4), (2, 0.2), (4, 0.2), (8, 0.2))
    mean_job_h: float = 12.0
    max_job_h: float = 48.0
    #: 0: the jobs never checkpoint (a job moved loses all it did).
    checkpoint_s: float = 1800.0
    restart_s: float = 300.0
    repair_s: float = 720.0

    def with_value(self, name: str, raw: str) -> ScopeParams:
        """A copy with one knob set from text (``--set``); ``mix`` as
        ``1:0.4,2:0.2,4:0.2,8:0.2``."""
        if name != "mix":
            return cast(ScopeParams, with_value(self, name, raw))
        try:
            pairs = [item.split(":") for item in raw.split(",")]
            mix = tuple((int(g), float(w)) for g, w in pairs)
        except ValueError:
            raise ValueError(f"mix wants GPUS:SHARE,... (e.g. 1:0.5,8:0.5), got {raw!r}") from None
        return dataclasses.replace(self, mix=mix)

    def validate(self) -> None:
        require_at_least(self, 1, "nodes", "gpus_per_node")
        require_positive(self, "days", "mean_job_h", "max_job_h", "repair_s")
        require_at_least(self, 0, "restart_s", "checkpoint_s")
        if not self.mix or any(g < 1 or g > self.gpus_per_node or w < 0 for g, w in self.mix):
            raise ValueError(f"mix: (GPUs 1..{self.gpus_per_node}, share >= 0) pairs")
        if not any(g == 1 and w > 0 for g, w in self.mix):
            raise ValueError("mix: jobs of 1 GPU must have a share (they fill the last GPU)")


@dataclass
class ScopeFigures:
    """One scope's totals over the fleet (GPU-hours unless named otherwise)."""

    scope: str
    gpu_hours: float = 0.0
    lost_h: float = 0.0
    waiting_h: float = 0.0
    repair_h: float = 0.0
    drains: int = 0
    moved: int = 0
    spared: int = 0

    @property
    def out_h(self) -> float:
        """Lost work and idle GPUs together: what the scope costs."""
        return self.lost_h + self.waiting_h + self.repair_h

    def to_dict(self) -> dict[str, float | int | str]:
        return {**dataclasses.asdict(self), "out_h": round(self.out_h, 1)}


@dataclass
class _Job:
    gpus: frozenset[int]
    start: float
    end: float


@dataclass
class _Node:
    """One node's jobs and whether it takes new ones."""

    jobs: list[_Job] = field(default_factory=list)
    #: Draining for an incident with spared jobs (no new job starts).
    draining: bool = False
    #: The repair ends then (the node is out and empty until).
    repair_until: float = -1.0


JobDraw = Callable[[int], tuple[int, float]]


def job_draws(p: ScopeParams, rng: random.Random) -> JobDraw:
    """A job of at most ``free`` GPUs from the mix (the queue is deep: the
    scheduler backfills what fits), and its run time in seconds."""
    sizes = [g for g, _ in p.mix]
    weights = [w for _, w in p.mix]

    def draw(free: int) -> tuple[int, float]:
        fits = [(g, w) for g, w in zip(sizes, weights, strict=True) if g <= free and w > 0]
        (size,) = rng.choices([g for g, _ in fits], [w for _, w in fits])
        run = min(rng.expovariate(1.0 / (p.mean_job_h * 3600.0)), p.max_job_h * 3600.0)
        return size, max(run, 1.0)

    return draw


class _NodeReplay:
    """One node under one scope; ``figures`` accumulates."""

    def __init__(self, p: ScopeParams, scope: str, draw: JobDraw, fig: ScopeFigures) -> None:
        self.p, self.scope, self.draw, self.fig = p, scope, draw, fig
        self.n = _Node()
        self.t = 0.0

    def run(self, faults: Sequence[tuple[float, list[int | None]]], horizon: float) -> None:
        events = iter(sorted(faults, key=lambda x: x[0]))
        nxt = next(events, None)
        self._fill(0.0)
        while True:
            end = min((j.end for j in self.n.jobs), default=math.inf)
            if self.n.repair_until >= 0:
                end = min(end, self.n.repair_until)
            at_fault = nxt[0] if nxt is not None else math.inf
            t = min(end, at_fault, horizon)
            self._advance(t)
            if t >= horizon:
                break
            if at_fault <= end and nxt is not None:
                self._fault(nxt[1])
                nxt = next(events, None)
            else:
                self._ends()
        self.fig.gpu_hours += self.p.gpus_per_node * horizon / 3600.0

    def _advance(self, t: float) -> None:
        busy = sum(len(j.gpus) for j in self.n.jobs)
        span = (t - self.t) / 3600.0
        if self.n.repair_until >= 0:
            self.fig.repair_h += self.p.gpus_per_node * span
        elif self.n.draining:
            self.fig.waiting_h += (self.p.gpus_per_node - busy) * span
        self.t = t

    def _ends(self) -> None:
        t = self.t
        self.n.jobs = [j for j in self.n.jobs if j.end > t]
        if self.n.repair_until >= 0 and self.n.repair_until <= t:
            self.n.repair_until = -1.0
            self._fill(t)
        elif self.n.draining and not self.n.jobs:
            self._repair()
        elif not self.n.draining and self.n.repair_until < 0:
            self._fill(t)

    def _fill(self, t: float) -> None:
        used = {g for j in self.n.jobs for g in j.gpus}
        free = [g for g in range(self.p.gpus_per_node) if g not in used]
        while free:
            size, run = self.draw(len(free))
            self.n.jobs.append(_Job(frozenset(free[:size]), t, t + run))
            free = free[size:]

    def _move(self, jobs: Sequence[_Job]) -> None:
        for j in jobs:
            ran = self.t - j.start
            since = ran % self.p.checkpoint_s if self.p.checkpoint_s > 0 else ran
            self.fig.lost_h += len(j.gpus) * (since + self.p.restart_s) / 3600.0
            self.fig.moved += 1
        self.n.jobs = [j for j in self.n.jobs if j not in jobs]

    def _repair(self) -> None:
        self.n.draining = False
        self.n.repair_until = self.t + self.p.repair_s

    def _fault(self, gpus: list[int | None]) -> None:
        if self.n.repair_until >= 0 or not gpus:
            return  # out already, or nothing drains
        self.fig.drains += 0 if self.n.draining else 1
        for gpu in gpus:
            g = fault_gpu(self.scope, None if gpu is None else f"gpu{gpu}", self.p.gpus_per_node)
            if self.n.draining:
                self._move([j for j in self.n.jobs if struck(g, sorted(j.gpus))])
                continue
            keep = [j for j in self.n.jobs if spared(g, j.gpus)]
            self._move([j for j in self.n.jobs if j not in keep])
            self.fig.spared += len(keep)
            self.n.draining = bool(keep)
        if not self.n.jobs:
            self._repair()


def replay_node(
    p: ScopeParams,
    scope: str,
    draw: JobDraw,
    faults: Sequence[tuple[float, list[int | None]]],
    horizon: float,
    fig: ScopeFigures | None = None,
) -> ScopeFigures:
    """One node under ``scope`` for ``horizon`` seconds: jobs from ``draw``,
    ``faults`` as (time, the GPU of each drain it makes; None: the node's)."""
    fig = fig if fig is not None else ScopeFigures(scope)
    _NodeReplay(p, scope, draw, fig).run(faults, horizon)
    return fig


def drains(faults: Sequence[Fault]) -> dict[int, list[tuple[float, list[int | None]]]]:
    """Per node, each fault's drains as the product decides them: the
    fault's evidence through the judges, ``decide()`` (no breaker: one
    node's view), each draining decision's GPU (None: the node's)."""
    table = evidence_table()
    policy = PolicyConfig()
    out: dict[int, list[tuple[float, list[int | None]]]] = {}
    for f in faults:
        spec = table.get(f.cause) or {}
        ev = evmod.Evidence.of(spec) if spec else None
        gpus: list[int | None] = []
        if ev is not None and ev.kind in evmod.INVISIBLE:
            gpus = [None]  # the node stops answering: every job is lost either way
        elif ev is not None:
            name = f"n{f.node}"
            now = EPOCH + timedelta(seconds=f.t)
            found, _ = evmod.findings(ev, node=name, gpu=f.gpu, now=now.timestamp())
            for d in decide(found, None, None, None, policy, now, node=name):
                if d.kind.drains and d.evacuate:
                    gpus.append(gpu_of(d.component))
        if gpus:
            out.setdefault(f.node, []).append((f.t, gpus))
    return out


def compare(p: ScopeParams, seed: int) -> tuple[ScopeFigures, ScopeFigures]:
    """The same failures and the same queue under ``"node"`` and ``"gpu"``."""
    p.validate()
    horizon = p.days * 86400.0
    trace = generate(p.profile, nodes=p.nodes, days=p.days, seed=seed,
                     gpus_per_node=p.gpus_per_node)  # fmt: skip
    per_node = drains(trace.faults)
    out = []
    for scope in ("node", "gpu"):
        fig = ScopeFigures(scope)
        for node in range(p.nodes):
            rng = random.Random(f"{seed}/{node}")  # the same queue under both scopes
            replay_node(p, scope, job_draws(p, rng), per_node.get(node, []), horizon, fig)
        out.append(fig)
    return out[0], out[1]


def iter_rows(node: ScopeFigures, gpu: ScopeFigures) -> Iterator[tuple[str, str, str]]:
    """The report's rows: what, under "node", under "gpu"."""
    for label, attr in (("GPU-hours lost (work redone, restarts)", "lost_h"),
                        ("GPU-hours idle under a drain (spared jobs)", "waiting_h"),
                        ("GPU-hours out for the repair", "repair_h"),
                        ("GPU-hours in all", "out_h")):  # fmt: skip
        yield label, f"{getattr(node, attr):,.0f}", f"{getattr(gpu, attr):,.0f}"
    for label, attr in (("drains", "drains"), ("jobs moved", "moved"), ("jobs spared", "spared")):
        yield label, str(getattr(node, attr)), str(getattr(gpu, attr))
