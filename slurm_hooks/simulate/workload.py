"""Healthy training jobs as their progress records show them: the workload
the false-alarm replay (``hang_replay``) feeds the hang and straggler judges.

A healthy job is not a metronome.  It pauses for minutes while it writes a
checkpoint or runs an evaluation, its first step compiles and warms caches,
its data loader stalls, a recompilation stops it again later, ranks run at
slightly different speeds, gradient accumulation makes its steps uneven, and
it is requeued and starts again with a new restart count.  Each knob has a
default and where it comes from (``SOURCES``); a default marked
*assumption* has no published figure behind it and is the range the issue
asked the replay to cover (issue #30) or a round number a site should
replace with its own.

No recorded progress-record traces of real training runs ship with the
project (``tests/data`` has none): every trace here is generated, seeded,
and the seed is printed by whoever reports a figure.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

#: Where each default comes from.
SOURCES: dict[str, str] = {
    "ranks": "ranks one watcher judges: 8 GPUs per HGX node (arXiv:2407.21783, 3.3.1), fewer "
    "for small jobs (assumption: 2, 4 or 8)",
    "step_s": "assumption: 1-20 s per optimizer step (fine-tuning to large pre-training)",
    "step_jitter": "assumption: 10 % step-to-step variation of the whole job",
    "rank_jitter": "assumption: 5 % step-to-step variation of one rank (uneven batches)",
    "rank_spread": "identical GPUs differ by 8 % on average (Sinha et al., SC22, arXiv:2208.11035)",
    "accum_share": "assumption: 30 % of jobs record every micro-batch of a gradient accumulation "
    "of 2 or 4",
    "startup_s": "assumption: 10 s-2 min from the job's start to its first record (imports, "
    "rendezvous)",
    "first_step_s": "assumption: 20 s-15 min first step (torch.compile, dataset warm-up; "
    "issue #30: up to 10+ min)",
    "warmup_steps": "assumption: the next 5-50 steps up to 3x slower (caches, autotuning)",
    "recompile_share": "assumption: 30 % of jobs recompile once in their first 200 steps "
    "(a new shape), 30 s-5 min",
    "checkpoint_every_s": "issue #30: a checkpoint every 30-60 min",
    "checkpoint_s": "issue #30: checkpoint pauses of 2-10 min (synchronous save of a large model)",
    "async_checkpoint_share": "assumption: 30 % of jobs save asynchronously, pausing 5-30 s",
    "eval_share": "assumption: 60 % of jobs evaluate every 1-4 h, for 1-8 min, writing no records",
    "stall_per_h": "assumption: data-loader stalls (Mohan et al., VLDB 2021, arXiv:2007.06775: "
    "common) at 0.5 per job-hour, 15 s mean, 3 min at most",
    "run_h": "assumption: 1-48 h per run of a job (log-uniform)",
    "requeue_share": "assumption: 30 % of runs end in a requeue (preemption, a fault elsewhere)",
    "epilogue_share": "assumption: 30 % of finished jobs go on after their training step ended "
    "(the batch script converts, uploads, evaluates) for 1-20 min",
    "rank0_tail_share": "assumption: 20 % of finished jobs end with rank 0 alone for 1-10 min "
    "(saving or uploading the final model) after the other ranks exited",
}


class Phase(enum.StrEnum):
    """What filled the gap before a record (what a false alarm is put down to)."""

    STARTUP = "start-up"
    FIRST_STEP = "first step"
    WARMUP = "warm-up"
    STEP = "step"
    OPTIMIZER = "optimizer step"
    RECOMPILE = "recompile"
    CHECKPOINT = "checkpoint"
    EVAL = "evaluation"
    DATA_STALL = "data-loader stall"
    FINAL = "final checkpoint"
    EPILOGUE = "after the step"
    RANK0_TAIL = "rank 0 alone"


class Event(NamedTuple):
    """Every rank of the job recorded ``step`` at ``time`` (plus its own
    small offset); ``busy`` per rank.  ``step`` -1: the run ended at
    ``time`` (Slurm ends or requeues the job); ``EXITED``: the ranks in
    ``gone`` exited at ``time`` while the job goes on."""

    time: float
    step: int
    busy: tuple[float, ...]
    phase: Phase
    gone: tuple[int, ...] = ()


#: ``Event.step`` of ranks exiting while the job still runs.
EXITED = -2


@dataclass(frozen=True)
class WorkloadParams:
    """The healthy workload (seconds unless named otherwise; a pair is a
    range drawn uniformly, log-uniformly for ``step_s``, ``first_step_s``
    and ``run_h``; a tuple of more is a choice)."""

    ranks: tuple[int, ...] = (2, 4, 8)
    step_s: tuple[float, float] = (1.0, 20.0)
    step_jitter: float = 0.10
    rank_jitter: float = 0.05
    rank_spread: float = 0.08
    accum_share: float = 0.3
    accum: tuple[int, ...] = (2, 4)
    startup_s: tuple[float, float] = (10.0, 120.0)
    first_step_s: tuple[float, float] = (20.0, 900.0)
    warmup_steps: tuple[int, int] = (5, 50)
    warmup_factor: tuple[float, float] = (1.0, 3.0)
    recompile_share: float = 0.3
    recompile_s: tuple[float, float] = (30.0, 300.0)
    checkpoint_every_s: tuple[float, float] = (1800.0, 3600.0)
    checkpoint_s: tuple[float, float] = (120.0, 600.0)
    async_checkpoint_share: float = 0.3
    async_checkpoint_s: tuple[float, float] = (5.0, 30.0)
    eval_share: float = 0.6
    eval_every_s: tuple[float, float] = (3600.0, 14400.0)
    eval_s: tuple[float, float] = (60.0, 480.0)
    stall_per_h: float = 0.5
    stall_mean_s: float = 15.0
    stall_max_s: float = 180.0
    run_h: tuple[float, float] = (1.0, 48.0)
    requeue_share: float = 0.3
    epilogue_share: float = 0.3
    epilogue_s: tuple[float, float] = (60.0, 1200.0)
    rank0_tail_share: float = 0.2
    rank0_tail_s: tuple[float, float] = (60.0, 600.0)

    def validate(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            values = v if isinstance(v, tuple) else (v,)
            if any(x < 0 for x in values):
                raise ValueError(f"{f.name} must be >= 0")
            if (
                isinstance(v, tuple)
                and len(v) == 2
                and f.name not in ("ranks", "accum")
                and v[0] > v[1]
            ):
                raise ValueError(f"{f.name}: the range's low end is above its high end")
        if not self.ranks or min(self.ranks) < 1 or not self.accum or min(self.accum) < 1:
            raise ValueError("ranks and accum need values >= 1")
        if self.step_s[0] <= 0 or self.run_h[0] <= 0:
            raise ValueError("step_s and run_h must be > 0")


@dataclass(frozen=True)
class JobShape:
    """One job's character, drawn once: every run of the job shares it."""

    ranks: int
    step_s: float
    #: Relative speed of each rank (1.0 the fastest; busy times scale with it).
    speed: tuple[float, ...]
    #: Micro-batches per optimizer step when the job records each (1: it does not).
    accum: int
    checkpoint_every_s: float
    checkpoint_s: float
    eval_every_s: float | None
    eval_s: float


#: Noise values drawn per run (a prime: the strides cycle through all of them).
_POOL = 1009


def _loguniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def draw_job(rng: random.Random, p: WorkloadParams) -> JobShape:
    ranks = rng.choice(p.ranks)
    sync = rng.random() >= p.async_checkpoint_share
    evals = rng.random() < p.eval_share
    return JobShape(
        ranks=ranks,
        step_s=_loguniform(rng, *p.step_s),
        speed=tuple(1.0 + rng.uniform(0.0, p.rank_spread) for _ in range(ranks)),
        accum=rng.choice(p.accum) if rng.random() < p.accum_share else 1,
        checkpoint_every_s=rng.uniform(*p.checkpoint_every_s),
        checkpoint_s=rng.uniform(*(p.checkpoint_s if sync else p.async_checkpoint_s)),
        eval_every_s=rng.uniform(*p.eval_every_s) if evals else None,
        eval_s=rng.uniform(*p.eval_s),
    )


def run_length_s(rng: random.Random, p: WorkloadParams) -> float:
    return 3600.0 * _loguniform(rng, *p.run_h)


def run_events(
    job: JobShape,
    rng: random.Random,
    p: WorkloadParams,
    start: float,
    length_s: float,
    requeued: bool = False,
) -> Iterator[Event]:
    """One run of ``job`` from ``start`` (Slurm starts it) for about
    ``length_s``, as its records show it: step 0 after the start-up, then
    one event per recorded step, in time order; the last event (step -1)
    is the run's end: at once when it is ``requeued``, else after a final
    checkpoint and what the job does after its training (``EXITED``)."""
    t = start + rng.uniform(*p.startup_s)
    n = job.ranks
    zero = (0.0,) * n
    yield Event(t, 0, zero, Phase.STARTUP)
    end = start + length_s
    warm = rng.randint(*p.warmup_steps)
    warm_factor = rng.uniform(*p.warmup_factor)
    recompile_at = rng.randint(2, 200) if rng.random() < p.recompile_share else -1
    next_ckpt = t + job.checkpoint_every_s
    next_eval = t + job.eval_every_s if job.eval_every_s else math.inf
    rate = p.stall_per_h / 3600.0
    next_stall = t + rng.expovariate(rate) if rate > 0 else math.inf
    micro = job.step_s / job.accum
    uniform = rng.uniform
    # Normal noise from a pool drawn once per run: a gauss() per rank per
    # step would cost more than the judges it feeds.
    pool = [max(0.2, 1.0 + p.rank_jitter * rng.gauss(0.0, 1.0)) for _ in range(_POOL)]
    steps = [max(0.2, 1.0 + p.step_jitter * rng.gauss(0.0, 1.0)) for _ in range(_POOL)]
    at = rng.randrange(_POOL)
    speed = job.speed
    step = 0
    while True:
        step += 1
        phase = Phase.STEP
        at = (at + n + 1) % _POOL
        scale = micro * steps[at]
        if step == 1:
            scale, phase = _loguniform(rng, *p.first_step_s), Phase.FIRST_STEP
        elif step <= warm:
            scale, phase = scale * warm_factor, Phase.WARMUP
        noise = pool[at : at + n] if at + n <= _POOL else pool[:n]
        busy = [scale * s * x for s, x in zip(speed, noise, strict=True)]
        # The collective: everyone waits for the slowest rank, then exchanges.
        dt = max(busy) + 0.1 * scale
        if job.accum > 1 and step % job.accum == 0:
            dt += 0.5 * micro * job.accum
            phase = phase if phase is not Phase.STEP else Phase.OPTIMIZER
        # Pauses with no busy time (every rank waits), and the longest of
        # the gap's causes names the gap.
        extra, longest = 0.0, (0.0, phase)
        if step == recompile_at:
            r = uniform(*p.recompile_s)
            extra, longest = extra + r, max(longest, (r, Phase.RECOMPILE))
        if t >= next_stall:
            stall = min(p.stall_max_s, rng.expovariate(1.0 / p.stall_mean_s))
            busy[rng.randrange(n)] += stall  # one rank's loader; the others wait for it
            dt += stall
            longest = max(longest, (stall, Phase.DATA_STALL))
            next_stall = t + rng.expovariate(rate)
        if t >= next_ckpt:
            c = job.checkpoint_s * uniform(0.9, 1.1)
            extra, longest = extra + c, max(longest, (c, Phase.CHECKPOINT))
            next_ckpt = t + c + job.checkpoint_every_s
        elif t >= next_eval:
            e = job.eval_s * uniform(0.9, 1.1)
            extra, longest = extra + e, max(longest, (e, Phase.EVAL))
            next_eval = t + e + (job.eval_every_s or math.inf)
        if longest[0] > 0:
            phase = longest[1]
        if t + dt + extra >= end and step > 1:
            break
        t += dt + extra
        yield Event(t, step, tuple(busy), phase)
    if requeued:
        yield Event(t + dt, -1, zero, Phase.STEP)
        return
    # The last checkpoint after the last step: the job is still RUNNING and
    # writes no record.  Then either the job ends, or the training step ends
    # and the batch script goes on, or rank 0 goes on alone.
    t += job.checkpoint_s * uniform(0.9, 1.1)
    draw = rng.random()
    if draw < p.epilogue_share:
        yield Event(t, EXITED, zero, Phase.FINAL, tuple(range(n)))
        yield Event(t + uniform(*p.epilogue_s), -1, zero, Phase.EPILOGUE)
    elif draw < p.epilogue_share + p.rank0_tail_share:
        yield Event(t, EXITED, zero, Phase.FINAL, tuple(range(1, n)))
        yield Event(t + uniform(*p.rank0_tail_s), -1, zero, Phase.RANK0_TAIL)
    else:
        yield Event(t, -1, zero, Phase.FINAL)
