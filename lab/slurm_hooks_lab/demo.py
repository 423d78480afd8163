"""``slurm-hooks demo``: the self-healing loop end to end on one machine, measured.

A real Slurm lab (munged, slurmctld, one slurmd per node) with our hooks and a
watcher on every node, fake GPUs behind the NVML interface, the bridge
against the loopback Kubernetes API stand-in, and a spare node drained with
our SPARE code.  A 2-node training job (lab/slurm_hooks_lab/train) is submitted with
``sbatch`` as an unprivileged user; once it has written a few checkpoints,
XID 79 is injected on one of its nodes (a kernel-log line and a lost GPU in
that node's NVML scenario).  Then the demo only *watches*, from the outside:

* Slurm (``scontrol``/``sinfo``/``squeue``): drain, requeue, running again,
  the spare and the faulty node back in service;
* the stand-in's objects: cordon, taint, evictions, the NodeReplacement;
* the audit logs the hooks write: detection, signal, requeue, acceptance;
* the job's own files: the signal it received, the checkpoint it wrote, the
  step it resumed from and every step after.

A step that is not seen before its deadline is missing and fails the
verdict: the demo never reports what it did not observe.  The only things
it does itself are what the outside world does in production: the fault,
and, when the replacement is requested, the provisioner's part (new
hardware: the fault cleared; acceptance run on the node; the result handed
to the engine, which resumes the node only with our reason and only after
the pass).

The pure half (``StepSpec``, ``check_training``, ``compute_durations``,
``judge``, ``Report``, ``summary_table``) is what the unit tests feed with
recorded values; ``Demo`` is the orchestration.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: Where the example job lives in a source checkout.
EXAMPLES = Path(__file__).resolve().parent / "train"
#: The fault the demo injects.
XID = 79
GPU = 0
DEFAULT_GRACE = 120.0
DEFAULT_NODES = 5


# =============================================================================
# The pure half: steps, durations, goals, the report.
# =============================================================================


@dataclass(frozen=True)
class StepSpec:
    """A step the demo must observe after the fault.

    Its deadline is ``timeout_s`` (plus the grace period when
    ``plus_grace``) after the step named ``after`` was observed; a step
    whose anchor was never seen has no deadline of its own (the anchor's
    deadline fails the run first)."""

    key: str
    title: str
    #: demo_plot event kind: fault, detect, action, recover, info.
    kind: str
    after: str = "fault"
    timeout_s: float = 20.0
    plus_grace: bool = False
    required: bool = True

    def deadline(self, times: Mapping[str, float], grace: float) -> float | None:
        anchor = times.get(self.after)
        if anchor is None:
            return None
        return anchor + self.timeout_s + (grace if self.plus_grace else 0.0)


STEPS: tuple[StepSpec, ...] = (
    StepSpec("detected", "detected", "detect", timeout_s=15),
    StepSpec("drained", "drained", "action", after="detected", timeout_s=10),
    StepSpec("signalled", "job signalled", "action", after="drained", timeout_s=15),
    StepSpec("checkpoint", "checkpoint written", "info", after="signalled", timeout_s=20),
    StepSpec("cordoned", "cordoned", "action", after="drained", timeout_s=15),
    StepSpec(
        "pods_evicted", "pods evicted", "action", after="cordoned", timeout_s=15, required=False
    ),
    StepSpec("spare_resumed", "spare resumed", "recover", after="drained", timeout_s=15),
    StepSpec("requeued", "requeued", "action", after="signalled", timeout_s=30, plus_grace=True),
    StepSpec("running_again", "running again", "recover", after="requeued", timeout_s=45),
    StepSpec("resumed", "resumed from checkpoint", "recover", after="running_again", timeout_s=30),
    StepSpec("training_continues", "training continues", "recover", after="resumed", timeout_s=30),
    StepSpec(
        "replacement_requested", "replacement requested", "action", after="requeued", timeout_s=45
    ),  # fmt: skip
    StepSpec(
        "accepted", "replacement accepted", "recover", after="replacement_requested", timeout_s=90
    ),  # fmt: skip
    StepSpec("node_resumed", "replacement resumed", "recover", after="accepted", timeout_s=30),
    StepSpec("uncordoned", "uncordoned", "recover", after="node_resumed", timeout_s=30),
)
STEP_BY_KEY = {s.key: s for s in STEPS}


@dataclass(frozen=True)
class StepRecord:
    """One observed step: ``t`` is Unix seconds (the best time the sources
    give: an audit entry's own time stamp where there is one, else the
    moment the demo saw it), ``seen`` when the demo saw it."""

    key: str
    title: str
    t: float
    detail: str
    source: str
    seen: float | None = None


@dataclass(frozen=True)
class DurationSpec:
    key: str
    title: str
    start: str
    end: str


#: Time points beyond the steps: ``fault`` (injection) and
#: ``last_step_before_fault`` (the job's last step logged before it).
DURATIONS: tuple[DurationSpec, ...] = (
    DurationSpec("fault_to_detect", "fault -> detected", "fault", "detected"),
    DurationSpec("detect_to_drain", "detected -> drained", "detected", "drained"),
    DurationSpec("drain_to_signal", "drained -> job signalled", "drained", "signalled"),
    DurationSpec("signal_to_checkpoint", "signal -> checkpoint written", "signalled", "checkpoint"),
    DurationSpec("grace", "grace (signal -> requeue)", "signalled", "requeued"),
    DurationSpec("requeue_to_running", "requeue -> running again", "requeued", "running_again"),
    DurationSpec("signal_to_running", "signal -> running again", "signalled", "running_again"),
    DurationSpec(
        "training_downtime",
        "training downtime (last step before fault -> first after resume)",
        "last_step_before_fault",
        "training_continues",
    ),  # fmt: skip
    DurationSpec("fault_to_cordon", "fault -> cordoned", "fault", "cordoned"),
    DurationSpec("fault_to_spare", "fault -> spare resumed", "fault", "spare_resumed"),
    DurationSpec(
        "fault_to_replacement", "fault -> replacement requested", "fault", "replacement_requested"
    ),  # fmt: skip
    DurationSpec(
        "replacement_to_resumed",
        "replacement requested -> accepted and resumed",
        "replacement_requested",
        "node_resumed",
    ),  # fmt: skip
    DurationSpec(
        "fault_to_uncordon", "fault -> node back in Kubernetes (uncordoned)", "fault", "uncordoned"
    ),  # fmt: skip
)


def compute_durations(
    times: Mapping[str, float], durations: Sequence[DurationSpec] = DURATIONS
) -> dict[str, float | None]:
    """Seconds between the named time points; None when either is missing."""
    out: dict[str, float | None] = {}
    for d in durations:
        a, b = times.get(d.start), times.get(d.end)
        out[d.key] = None if a is None or b is None else round(b - a, 3)
    return out


@dataclass(frozen=True)
class TrainingCheck:
    """What the job's metrics say about the steps (rank 0, the rank that
    checkpoints: its parameters are the model every rank resumes from)."""

    ok: bool
    detail: str
    steps: int = 0
    last_step_before_fault: int | None = None
    last_step_before_fault_t: float | None = None
    last_step_first_run: int | None = None
    resumed_from: int | None = None
    resume_t: float | None = None
    first_step_after_resume: int | None = None
    first_step_after_resume_t: float | None = None
    checkpoints: tuple[int, ...] = ()
    lost: tuple[int, ...] = ()
    repeated: tuple[int, ...] = ()
    #: Steps logged more than once (any rank) whose parameter digests differ:
    #: a resume that was not exact.
    digest_mismatches: tuple[int, ...] = ()
    #: Steps a rank that does not checkpoint ran twice (it ran ahead of
    #: rank 0's last checkpoint before the requeue): wasted seconds, not lost state.
    other_rank_repeats: int = 0


def check_training(
    records: Sequence[Mapping[str, Any]],
    fault_t: float,
    *,
    other_ranks: Sequence[Sequence[Mapping[str, Any]]] = (),
) -> TrainingCheck:
    """Judge the rank-0 metrics lines of the example job: every step from 1
    to the last one exactly once, a resume after the fault from the step
    the first run ended at, and the same parameter digest wherever a step
    was logged twice."""
    steps = [r for r in records if r.get("event") == "step"]
    if not steps:
        return TrainingCheck(False, "no training steps in the metrics")
    numbers = [int(r["step"]) for r in steps]
    seen: dict[int, int] = {}
    for n in numbers:
        seen[n] = seen.get(n, 0) + 1
    top = max(numbers)
    lost = tuple(n for n in range(1, top + 1) if n not in seen)
    repeated = tuple(sorted(n for n, c in seen.items() if c > 1))
    before = [r for r in steps if float(r["time"]) <= fault_t]
    first_run = [r for r in steps if int(r.get("restart", 0)) == 0]
    resumes = [r for r in records if r.get("event") == "resume" and int(r.get("restart", 0)) >= 1]
    after = [r for r in steps if int(r.get("restart", 0)) >= 1]
    checkpoints = tuple(
        int(r["step"]) for r in records if r.get("event") == "checkpoint" and not r.get("existing")
    )
    digests: dict[int, set[str]] = {}
    for rs in (records, *other_ranks):
        for r in rs:
            if r.get("event") == "step" and r.get("digest"):
                digests.setdefault(int(r["step"]), set()).add(str(r["digest"]))
    mismatches = tuple(sorted(n for n, ds in digests.items() if len(ds) > 1))
    other_repeats = 0
    for rs in other_ranks:
        counts: dict[int, int] = {}
        for r in rs:
            if r.get("event") == "step":
                counts[int(r["step"])] = counts.get(int(r["step"]), 0) + 1
        other_repeats += sum(c - 1 for c in counts.values() if c > 1)
    check = TrainingCheck(
        ok=False,
        detail="",
        steps=len(seen),
        last_step_before_fault=int(before[-1]["step"]) if before else None,
        last_step_before_fault_t=float(before[-1]["time"]) if before else None,
        last_step_first_run=int(first_run[-1]["step"]) if first_run else None,
        resumed_from=int(resumes[0]["step"]) if resumes else None,
        resume_t=float(resumes[0]["time"]) if resumes else None,
        first_step_after_resume=int(after[0]["step"]) if after else None,
        first_step_after_resume_t=float(after[0]["time"]) if after else None,
        checkpoints=checkpoints,
        lost=lost,
        repeated=repeated,
        digest_mismatches=mismatches,
        other_rank_repeats=other_repeats,
    )
    problems = []
    if not resumes:
        problems.append("the job never resumed from a checkpoint")
    elif check.resumed_from != check.last_step_first_run:
        problems.append(
            f"resumed from step {check.resumed_from}, but the first run ended at step "
            f"{check.last_step_first_run}"
        )
    if not after:
        problems.append("no step after the resume")
    elif check.resumed_from is not None and check.first_step_after_resume != check.resumed_from + 1:
        problems.append(
            f"first step after the resume is {check.first_step_after_resume}, "
            f"expected {check.resumed_from + 1}"
        )
    if lost:
        problems.append(f"lost steps: {_ranges(lost)}")
    if repeated:
        problems.append(f"repeated steps: {_ranges(repeated)}")
    if mismatches:
        problems.append(f"parameter digests differ at steps {_ranges(mismatches)}")
    if problems:
        return _replace(check, ok=False, detail="; ".join(problems))
    return _replace(
        check,
        ok=True,
        detail=(
            f"steps 1-{top} each exactly once; resumed from step {check.resumed_from} "
            f"(the first run's last step), continued at {check.first_step_after_resume}"
        ),
    )


def _replace(check: TrainingCheck, **changes: Any) -> TrainingCheck:
    from dataclasses import replace

    return replace(check, **changes)


def _ranges(numbers: Iterable[int]) -> str:
    """``1-3,7`` for display."""
    out: list[str] = []
    nums = sorted(set(numbers))
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(out)


@dataclass(frozen=True)
class Goal:
    key: str
    text: str
    ok: bool
    value: float | None = None
    limit: float | None = None
    detail: str = ""


#: detection -> drain must stay under this (seconds).
DETECT_TO_DRAIN_LIMIT = 0.5
#: The job runs again within the grace period plus this (seconds, from the signal).
RUNNING_AGAIN_SLACK = 15.0
#: Training downtime stays under the grace plus this (180 s with the default 120 s grace).
DOWNTIME_SLACK = 60.0


def all_steps_goal(missing: Sequence[str], step_by_key: Mapping[str, StepSpec]) -> Goal:
    """Every required step of the scenario observed."""
    required_missing = [k for k in missing if step_by_key.get(k) and step_by_key[k].required]
    return Goal(
        "all_steps",
        "every step observed",
        not required_missing,
        detail=("missing: " + ", ".join(required_missing)) if required_missing else "",
    )


def judge(
    times: Mapping[str, float],
    training: TrainingCheck,
    grace: float,
    *,
    missing: Sequence[str] = (),
) -> tuple[Goal, ...]:
    """The demo's goals, each with its measured value."""
    d = compute_durations(times)

    def under(key: str, text: str, value: float | None, limit: float, strict: bool) -> Goal:
        if value is None:
            return Goal(key, text, False, None, limit, "not measured")
        ok = value < limit if strict else value <= limit
        return Goal(key, text, ok, value, limit)

    goals = [
        all_steps_goal(missing, STEP_BY_KEY),
        under(
            "detect_to_drain",
            f"detection -> drain < {DETECT_TO_DRAIN_LIMIT:g} s",
            d["detect_to_drain"],
            DETECT_TO_DRAIN_LIMIT,
            True,
        ),  # fmt: skip
        under(
            "running_again",
            f"job running again within grace + {RUNNING_AGAIN_SLACK:g} s of the signal",
            d["signal_to_running"],
            grace + RUNNING_AGAIN_SLACK,
            False,
        ),  # fmt: skip
        under(
            "downtime",
            f"training downtime < grace + {DOWNTIME_SLACK:g} s",
            d["training_downtime"],
            grace + DOWNTIME_SLACK,
            True,
        ),  # fmt: skip
        Goal(
            "replacement",
            "replacement accepted and resumed inside the run",
            "node_resumed" in times and "accepted" in times,
        ),
        Goal("steps", "no lost or repeated steps", training.ok, detail=training.detail),
    ]
    return tuple(goals)


@dataclass(frozen=True)
class Scenario:
    """One kind of demo: what it must observe, what it measures, how it is
    judged.  ``classic`` (this module) replaces the node through a
    provisioner; ``slinky`` (demo_slinky) moves its slurmd pod to a spare
    machine.  ``judge(times, training, grace, missing, leftovers)``."""

    name: str
    steps: tuple[StepSpec, ...]
    durations: tuple[DurationSpec, ...]
    judge: Callable[..., tuple[Goal, ...]]
    #: Summary / picture heading: what ``spare`` names.
    spare_label: str = "spare"

    @property
    def step_by_key(self) -> dict[str, StepSpec]:
        return {s.key: s for s in self.steps}


def _judge_classic(
    times: Mapping[str, float],
    training: TrainingCheck,
    grace: float,
    *,
    missing: Sequence[str] = (),
    leftovers: Sequence[str] = (),
) -> tuple[Goal, ...]:
    return judge(times, training, grace, missing=missing)


CLASSIC = Scenario("classic", STEPS, DURATIONS, _judge_classic)


def scenario_for(name: str) -> Scenario:
    """``classic`` or ``slinky``."""
    if name == "slinky":
        from slurm_hooks_lab.demo_slinky import SLINKY

        return SLINKY
    if name != "classic":
        raise ValueError(f"unknown demo scenario {name!r}")
    return CLASSIC


@dataclass(frozen=True)
class Report:
    """Everything the demo measured.  ``to_dict`` is the ``--json`` file."""

    grace_s: float
    node: str
    job: str
    spare: str
    steps: tuple[StepRecord, ...]
    times: Mapping[str, float]
    durations: Mapping[str, float | None]
    goals: tuple[Goal, ...]
    training: TrainingCheck
    missing: tuple[str, ...] = ()
    error: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    #: ``classic`` or ``slinky`` (``scenario_for``).
    scenario: str = "classic"

    @property
    def passed(self) -> bool:
        return self.error is None and all(g.ok for g in self.goals)

    @property
    def behaved(self) -> bool:
        """Every goal without a time limit met and every timed goal measured:
        what a test asserts.  The timed goals (detection -> drain, running
        again, downtime) are the benchmark's to judge (bench/bench_demo.py),
        not a test's: a loaded CI machine is not a fault of the loop."""
        return self.error is None and all(
            (g.value is not None) if g.limit is not None else g.ok for g in self.goals
        )

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "fail"

    def to_dict(self) -> dict[str, Any]:
        fault = self.times.get("fault")
        steps = []
        for s in self.steps:
            steps.append(
                {
                    "key": s.key,
                    "title": s.title,
                    "observed": True,
                    "time": _iso(s.t),
                    "t": round(s.t, 3),
                    "elapsed_s": round(s.t - fault, 3) if fault is not None else None,
                    "seen_elapsed_s": (
                        round(s.seen - fault, 3) if fault is not None and s.seen else None
                    ),
                    "detail": s.detail,
                    "source": s.source,
                }
            )
        sc = scenario_for(self.scenario)
        by_key = sc.step_by_key
        for key in self.missing:
            spec = by_key.get(key)
            steps.append(
                {"key": key, "title": spec.title if spec else key, "observed": False,
                 "required": bool(spec and spec.required)}
            )  # fmt: skip
        titles = {d.key: d.title for d in sc.durations}
        return {
            "verdict": self.verdict,
            "scenario": self.scenario,
            "error": self.error,
            "grace_s": self.grace_s,
            "node": self.node,
            "job": self.job,
            "spare": self.spare,
            "fault_at": _iso(fault) if fault is not None else None,
            "steps": steps,
            "times": {k: round(v, 3) for k, v in self.times.items()},
            "durations": {k: {"title": titles[k], "seconds": v} for k, v in self.durations.items()},
            "goals": [asdict(g) for g in self.goals],
            "training": {
                **asdict(self.training),
                "lost": list(self.training.lost),
                "repeated": list(self.training.repeated),
                "checkpoints": list(self.training.checkpoints),
                "digest_mismatches": list(self.training.digest_mismatches),
            },
            "settings": dict(self.settings),
            "files": dict(self.files),
        }


def build_report(
    *,
    grace: float,
    node: str,
    job: str,
    spare: str,
    steps: Sequence[StepRecord],
    fault_t: float,
    missing: Sequence[str],
    training: TrainingCheck,
    error: str | None = None,
    settings: Mapping[str, Any] | None = None,
    files: Mapping[str, str] | None = None,
    scenario: str = "classic",
    leftovers: Sequence[str] = (),
) -> Report:
    """``leftovers``: what the run left behind that it should not have
    (the slinky scenario's end-state check; each entry fails its goal)."""
    sc = scenario_for(scenario)
    times: dict[str, float] = {"fault": fault_t}
    if training.last_step_before_fault_t is not None:
        times["last_step_before_fault"] = training.last_step_before_fault_t
    for s in steps:
        times.setdefault(s.key, s.t)
    return Report(
        grace_s=grace,
        node=node,
        job=job,
        spare=spare,
        steps=tuple(sorted(steps, key=lambda s: s.t)),
        times=times,
        durations=compute_durations(times, sc.durations),
        goals=sc.judge(times, training, grace, missing=missing, leftovers=leftovers),
        training=training,
        missing=tuple(missing),
        error=error,
        settings=dict(settings or {}),
        files=dict(files or {}),
        scenario=sc.name,
    )


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="milliseconds")


def _fmt_s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f} s"


def summary_table(report: Report) -> str:
    """The table printed at the end: durations, goals, verdict."""
    sc = scenario_for(report.scenario)
    lines = [
        f"Summary: XID {XID} on {report.node} under job {report.job} "
        f"(grace {report.grace_s:g} s, {sc.spare_label} {report.spare})",
        "",
        f"  {'duration':<64} {'seconds':>10}",
        f"  {'-' * 64} {'-' * 10}",
    ]
    for d in sc.durations:
        lines.append(f"  {d.title:<64} {_fmt_s(report.durations.get(d.key)):>10}")
    lines += ["", f"  {'goal':<64} {'measured':>10}  result", f"  {'-' * 64} {'-' * 10}  ------"]
    for g in report.goals:
        lines.append(f"  {g.text:<64} {_fmt_s(g.value):>10}  {'ok' if g.ok else 'FAIL'}")
        if g.detail and (not g.ok or g.key == "steps"):
            lines.append(f"      {g.detail}")
    if report.training.other_rank_repeats:
        lines.append(
            f"      (rank 1 ran {report.training.other_rank_repeats} step(s) past rank 0's "
            "last checkpoint before the requeue and ran them again, identically)"
        )
    if report.error:
        lines += ["", f"  error: {report.error}"]
    lines += ["", f"verdict: {report.verdict.upper()}"]
    return "\n".join(lines)


def step_line(elapsed: float, title: str, detail: str) -> str:
    """One live line: ``[+  12.34 s] drained            sinfo -R: ...``."""
    return f"[{elapsed:+9.2f} s] {title:<24} {detail}"


# -- the timeline picture ------------------------------------------------------


@dataclass
class StateLog:
    """State changes per lane (node or job) as the demo polled them."""

    changes: dict[str, list[tuple[float, str]]] = field(default_factory=dict)

    def note(self, lane: str, t: float, state: str) -> None:
        entries = self.changes.setdefault(lane, [])
        if not entries or entries[-1][1] != state:
            entries.append((t, state))

    def spans(self, t0: float, end: float) -> list[Any]:
        from slurm_hooks_lab.demo_plot import Span

        out = []
        for lane, entries in self.changes.items():
            for i, (t, state) in enumerate(entries):
                stop = entries[i + 1][0] if i + 1 < len(entries) else end
                start = max(t - t0, 0.0)
                out.append(Span(lane, state, start, max(stop - t0, start)))
        return out


def build_timeline(
    report: Report,
    nodes: StateLog,
    jobs: StateLog,
    metrics: Sequence[Mapping[str, Any]],
    *,
    t0: float,
    end: float,
    events: Sequence[tuple[float, str, str]] = (),
) -> Any:
    """The demo_plot Timeline of a run (times relative to ``t0``)."""
    from slurm_hooks_lab.demo_plot import Event, Timeline, loss_from_metrics

    evs = [Event(t - t0, label[:40], kind) for t, label, kind in events]
    by_key = scenario_for(report.scenario).step_by_key
    for s in report.steps:
        spec = by_key.get(s.key)
        label = s.title
        if s.key == "resumed" and report.training.resumed_from is not None:
            label = f"resumed from step {report.training.resumed_from}"
        elif s.key in ("drained", "running_again") and s.detail:
            label = f"{s.title}: {s.detail.removeprefix('sinfo -R: ')}"[:40]
        evs.append(Event(s.t - t0, label, spec.kind if spec else "info"))
    loss, marks = loss_from_metrics(metrics, t0)
    return Timeline(
        events=tuple(sorted(evs, key=lambda e: e.t)),
        nodes=tuple(nodes.spans(t0, end)),
        jobs=tuple(jobs.spans(t0, end)),
        loss=tuple(loss),
        marks=tuple(marks),
        title=f"slurm-hooks demo{' --slinky' if report.scenario == 'slinky' else ''}: "
        f"XID {XID} on {report.node}, job {report.job} "
        f"(grace {report.grace_s:g} s) - verdict {report.verdict.upper()}",
        t0=t0,
        end=max(end - t0, 1.0),
    )


# =============================================================================
# The orchestration.
# =============================================================================


@dataclass(frozen=True)
class DemoOptions:
    """``slurm-hooks demo``'s knobs.  Times are seconds."""

    grace: float = DEFAULT_GRACE
    #: Lab nodes; the last one is the spare.
    nodes: int = DEFAULT_NODES
    base_dir: Path | None = None
    keep: bool = False
    json_path: Path | None = None
    #: None: next to the JSON file, else under the lab dir.
    plot_path: Path | None = None
    plot: bool = True
    step_seconds: float = 0.3
    ckpt_every: int = 5
    #: Periodic checkpoints the job writes before the fault is injected.
    checkpoints_before_fault: int = 3
    #: Lab settings that bound the requeue path (docs/demo.md).
    cred_expire: int = 5
    kill_wait: int = 5
    healthcheck_interval: int = 30
    prolog: bool | None = None
    bridge_interval: float = 0.5
    poll_interval: float = 0.1
    #: Steps the job must log after the resume before the demo ends.
    steps_after_resume: int = 3
    user: str = "sltest"
    #: Seconds allowed for the job to start and write its first checkpoints.
    start_timeout: float = 120.0
    #: The Slinky scenario (demo_slinky): ``nodes`` Slurm nodes in NodeSet
    #: pods on as many machines, plus ``spare_machines`` empty ones.
    slinky: bool = False
    spare_machines: int = 1


class JsonlTail:
    """New complete JSON lines of a file that another process appends to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        out = []
        for line in lines:
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                out.append(doc)
        return out


def audit_time(entry: Mapping[str, Any]) -> float | None:
    try:
        return datetime.fromisoformat(str(entry["ts"])).timestamp()
    except (KeyError, ValueError):
        return None


def job_python(user: str) -> tuple[str, dict[str, str]]:
    """An interpreter ``user`` can run that imports numpy, and the environment
    it needs: this one when the user can execute it, else the system python3
    with numpy's directory on PYTHONPATH."""
    import numpy

    from slurm_hooks.detect.probes.commands import run

    site = str(Path(numpy.__file__).resolve().parent.parent)
    candidates = [(sys.executable, {})]
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system:
        candidates += [(system, {}), (system, {"PYTHONPATH": site})]
    for python, env in candidates:
        res = run(
            ["runuser", "-u", user, "--", python, "-c", "import numpy"],
            timeout=30,
            check=False,
            env=env,
            cwd="/",
        )
        if res.rc == 0:
            return python, env
    from slurm_hooks.core.errors import LabError

    raise LabError(f"no python that user {user} can run with numpy (tried {sys.executable})")


def seed_standin(api: Any, nodes: Sequence[str]) -> None:
    """Node objects for every Slurm node, with the pods a GPU node of a
    Slurm-on-Kubernetes cluster carries: a DaemonSet pod (stays), an
    inference pod (evicted) and the node's slurmd pod (Slinky's NodeSet;
    kept while Slurm runs jobs there)."""

    def pod(ns: str, name: str, node: str, owner: tuple[str, str], labels: dict[str, str]) -> dict:
        return {
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": labels,
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": owner[0],
                        "name": owner[1],
                        "uid": f"uid-{owner[1]}",
                        "controller": True,
                    }
                ],  # fmt: skip
            },
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
            "status": {"phase": "Running"},
        }

    api.add("namespaces", {"metadata": {"name": "slurm-hooks"}})
    for n in nodes:
        api.add(
            "nodes",
            {
                "metadata": {
                    "name": n,
                    "labels": {
                        "kubernetes.io/hostname": n,
                        "slurm.node": n,
                        "nvidia.com/gpu.present": "true",
                    },
                },  # fmt: skip
                "spec": {},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "capacity": {"nvidia.com/gpu": "4"},
                },
            },
        )
        api.add("pods", pod("gpu-operator", f"nvidia-dcgm-exporter-{n}", n,
                            ("DaemonSet", "nvidia-dcgm-exporter"),
                            {"app": "nvidia-dcgm-exporter"}))  # fmt: skip
        api.add("pods", pod("inference", f"llm-serve-{n}", n, ("ReplicaSet", "llm-serve-6c9f"),
                            {"app": "llm-serve"}))  # fmt: skip
        api.add("pods", pod("slurm", f"slurmd-{n}", n, ("NodeSet", "gpu"),
                            {"app.kubernetes.io/name": "slurmd"}))  # fmt: skip


class Demo:
    """One run.  ``echo`` receives every line meant for people (the CLI
    prints them); nothing here prints."""

    def __init__(self, options: DemoOptions, echo: Callable[[str], None] | None = None) -> None:
        self.o = options
        self.echo = echo or (lambda line: None)
        self.base = Path(options.base_dir or "/tmp/slurm-hooks-demo").absolute()
        self.lab: Any = None
        self.hooks: Any = None
        self.api: Any = None
        self.bridge_stop = threading.Event()
        self.bridge_thread: threading.Thread | None = None
        self.provisioner: threading.Thread | None = None
        self.t_start = time.time()
        self.t_submit: float | None = None
        self.fault_t: float | None = None
        self.job_id = ""
        self.node = ""
        self.spare = ""
        self.records: dict[str, StepRecord] = {}
        self.events: list[tuple[float, str, str]] = []
        self.node_states = StateLog()
        self.job_states = StateLog()
        self.audit: list[dict[str, Any]] = []
        self.metrics: dict[int, list[dict[str, Any]]] = {0: [], 1: []}
        self._audit_tails: list[JsonlTail] = []
        self._metric_tails: dict[int, JsonlTail] = {}
        self._lock = threading.Lock()
        self.ckpt_dir: Path | None = None
        self.provision_error: str | None = None
        self.scenario = scenario_for("slinky" if options.slinky else "classic")
        #: demo_slinky's state (the NodeSet controller, the machines) in that scenario.
        self.slinky: Any = None

    # -- output ------------------------------------------------------------------

    def say(self, text: str) -> None:
        self.echo(text)

    def setup_line(self, text: str) -> None:
        self.say(f"[{time.time() - self.t_start:8.2f} s] {text}")

    def event(self, label: str, kind: str = "action", t: float | None = None) -> None:
        t = time.time() if t is None else t
        with self._lock:
            self.events.append((t, label, kind))
        base = self.fault_t if self.fault_t is not None else self.t_start
        self.say(step_line(t - base, "(demo)", label))

    # -- the run -------------------------------------------------------------------

    def run(self) -> Report:
        """Bring everything up, inject, observe, report; always clean up."""
        report: Report | None = None
        error: str | None = None
        try:
            self._bring_up()
            self._start_job()
            self._inject()
            missing = self._observe()
            report = self._report(missing, None)
        except KeyboardInterrupt:
            error = "interrupted"
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.exception("demo failed")
            report = self._report(self._unseen(), error)
        finally:
            if report is None:
                with contextlib.suppress(Exception):
                    report = self._report(self._unseen(), error or "interrupted")
            if report is not None:
                with contextlib.suppress(Exception):
                    report = self._write_outputs(report)
            self._teardown()
        assert report is not None
        return report

    def _unseen(self) -> list[str]:
        return [s.key for s in self.scenario.steps if s.key not in self.records]

    # -- bringing up ------------------------------------------------------------------

    def _bring_up(self) -> None:
        o = self.o
        if o.slinky and (o.nodes < 2 or o.spare_machines < 1):
            from slurm_hooks.core.errors import LabError

            raise LabError("the Slinky demo needs at least 2 nodes (the job's) and 1 spare machine")
        if not o.slinky and o.nodes < 4:
            from slurm_hooks.core.errors import LabError

            raise LabError(
                "the demo needs at least 4 nodes (2 for the job, 1 to fail over, 1 spare)"
            )
        self._bring_up_lab()
        if o.slinky:
            from slurm_hooks_lab import demo_slinky

            demo_slinky.bring_up(self)
        else:
            self._bring_up_kubernetes()

    def _bring_up_lab(self) -> None:
        """The Slurm lab, our hooks and a watcher on every node."""
        from slurm_hooks_lab.hooks import install
        from slurm_hooks_lab.lab import Lab, ensure_user

        o = self.o
        ensure_user(o.user)
        self.base.mkdir(parents=True, exist_ok=True)
        self.lab = Lab(
            self.base, o.nodes, cred_expire=o.cred_expire, kill_wait=o.kill_wait, extra_conf=""
        )
        seconds = self.lab.up()
        names = self.lab.node_names
        self.setup_line(
            f"lab up: {len(names)} Slurm nodes idle after {seconds:.2f} s in {self.base}"
        )
        self.hooks = install(
            self.lab,
            grace_s=o.grace,
            healthcheck_interval=o.healthcheck_interval,
            epilog=True,
            prolog=o.prolog,
        )
        hooked = ", ".join(f"{k}" for k in self.hooks.shims)
        self.setup_line(
            f"hooks installed ({hooked}); per-node config, kern.log and fake GPUs under "
            f"{self.base / 'nodes'}"
        )
        for n in names:
            self.hooks.start_watcher(n)
        self.setup_line(f"watchers running on {', '.join(names)}")
        self._audit_tails = [JsonlTail(self.hooks.node(n).audit_log) for n in names]

    def _bring_up_kubernetes(self) -> None:
        """The spare Slurm node, the stand-in with a Node per Slurm node, the bridge."""
        from slurm_hooks.bridge.service import Bridge
        from slurm_hooks.bridge.settings import BridgeConfig
        from slurm_hooks.k8s.client import KubeClient
        from slurm_hooks_lab.k8s_standin import StandinServer

        o = self.o
        names = self.lab.node_names
        self.spare = names[-1]
        # The spare: standby capacity, drained with our SPARE code.
        from slurm_hooks.core.reason import DrainReason, format_reason, new_incident_id

        reason = format_reason(
            DrainReason("SPARE", new_incident_id(), "standby capacity (slurm-hooks demo)")
        )
        self.lab.client().drain(self.spare, reason)
        self.setup_line(f"spare {self.spare} drained: {reason}")
        self.api = StandinServer().start()
        seed_standin(self.api, names)
        cfg = BridgeConfig(
            interval=o.bridge_interval,
            replacement="crd",
            # The demo's machines are cattle: the provisioner repairs what it
            # is handed, so every drain goes to it (the default, "policy",
            # waits for the policy's repl=requested after the repair ladder).
            replace_on="drain",
            spare_pool=self.spare,
            leader_election=False,
            max_cordoned_fraction=0.5,
            api_timeout=5.0,
            api_retries=2,
        )
        cfg.validate()
        bridge = Bridge(
            self.lab.client(),
            KubeClient(self.api.url, timeout=5.0, retries=2),
            cfg,
            identity="slurm-hooks-demo",
        )
        self.bridge_thread = threading.Thread(
            target=bridge.run, args=(self.bridge_stop,), name="demo-bridge", daemon=True
        )
        self.bridge_thread.start()
        self.setup_line(
            f"Kubernetes API stand-in at {self.api.url}: {len(names)} nodes, "
            f"{len(self.api.items('pods'))} pods; bridge every {o.bridge_interval:g} s "
            f"(replacement: NodeReplacement on every drain, spare pool: {self.spare})"
        )

    def _start_job(self) -> None:
        from slurm_hooks.detect.probes.commands import run

        o = self.o
        lab = self.lab
        job_dir = lab.shared_dir / "train"
        job_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(job_dir, 0o1777)
        for name in ("train.py", "train.sbatch"):
            shutil.copy2(EXAMPLES / name, job_dir / name)
            os.chmod(job_dir / name, 0o755)
        python, penv = job_python(o.user)
        max_steps = int((o.grace + 300) / max(o.step_seconds, 0.05))
        args = ["--backend", "numpy", "--step-seconds", str(o.step_seconds)]
        args += ["--ckpt-every", str(o.ckpt_every), "--max-steps", str(max_steps)]
        env = {**lab.env(), "PYTHON": python, "TRAIN_PY": str(job_dir / "train.py"), **penv}
        argv = ["runuser", "-u", o.user, "--", "sbatch", "--parsable", f"--chdir={job_dir}"]
        argv += [f"--output={job_dir}/train-%j.out", str(job_dir / "train.sbatch"), *args]
        self.t_submit = time.time()
        res = run(argv, timeout=30, env=env, cwd=str(job_dir))
        self.job_id = res.stdout.strip().split(";")[0]
        self.ckpt_dir = job_dir / "runs" / self.job_id
        self._metric_tails = {
            r: JsonlTail(self.ckpt_dir / f"metrics.rank{r}.jsonl") for r in (0, 1)
        }
        self.setup_line(
            f"sbatch as {o.user}: job {self.job_id} (2 nodes, train.py numpy, "
            f"{o.step_seconds:g} s/step, checkpoint every {o.ckpt_every} steps)"
        )
        job = lab.wait_job(self.job_id, lambda j: j.state == "RUNNING", timeout=o.start_timeout)
        self.setup_line(f"job {self.job_id} running on {job.nodes}")
        self._note_job(job, time.time())

        def enough() -> bool:
            self._read_files()
            now = time.time()
            for n in lab.nodes_state():
                self.node_states.note(n.name, now, _node_label(n))
            if self.slinky is not None:
                from slurm_hooks_lab.demo_slinky import note_machines

                note_machines(self, now)
            ck = [r for r in self.metrics[0] if r.get("event") == "checkpoint"]
            return len(ck) >= o.checkpoints_before_fault

        lab.wait_for(enough, o.start_timeout, interval=0.2, what="the first checkpoints")
        ck = [r["step"] for r in self.metrics[0] if r.get("event") == "checkpoint"]
        self.setup_line(f"checkpoints written at steps {', '.join(map(str, ck))}")

    def _inject(self) -> None:
        from slurm_hooks.core import hostlist

        job = self.lab.client().get_job(self.job_id)
        nodes = hostlist.expand(job.nodes)
        self.node = nodes[-1]
        # The NVML side first (the GPU is gone), then the kernel's line: the
        # order a real XID 79 shows up in.
        t = time.time()
        self.hooks.set_gpu(self.node, GPU, lost=True)
        line = self.hooks.inject_xid(self.node, XID, gpu=GPU)
        self.fault_t = t
        self.say("")
        self.say(f"injected on {self.node}: {line}")
        self.say(f"         and GPU {GPU} lost in {self.hooks.node(self.node).scenario}")
        self.say("")
        with self._lock:
            self.events.append((t, f"XID {XID} injected on {self.node} gpu{GPU}", "fault"))

    # -- observing ------------------------------------------------------------------------

    def _read_files(self) -> None:
        for tail in self._audit_tails:
            self.audit.extend(tail.read())
        for rank, tail in self._metric_tails.items():
            self.metrics[rank].extend(tail.read())

    def _note_job(self, job: Any, now: float) -> None:
        state = (job.state or "?").split()[0].lower()
        if job.restart_count and state == "running":
            state = "running (restart)"
        self.job_states.note(f"job {self.job_id}", now, state)

    def _record(self, key: str, t: float, detail: str, source: str, now: float) -> None:
        spec = self.scenario.step_by_key[key]
        rec = StepRecord(key, spec.title, t, detail, source, now)
        self.records[key] = rec
        assert self.fault_t is not None
        self.say(step_line(t - self.fault_t, spec.title, detail))
        # Under Slinky the NodeSet controller and the bridge replace the
        # node; the request only asks for the faulty machine's repair.
        if key == "replacement_requested" and self.provisioner is None and not self.o.slinky:
            self.provisioner = threading.Thread(
                target=self._provision, name="demo-provisioner", daemon=True
            )
            self.provisioner.start()

    def _audit_find(self, pred: Callable[[Mapping[str, Any]], bool]) -> Mapping[str, Any] | None:
        assert self.fault_t is not None
        for e in self.audit:
            t = audit_time(e)
            if t is not None and t >= self.fault_t - 1.0 and pred(e):
                return e
        return None

    def _observe(self) -> list[str]:
        """Poll every source until every required step was seen (and the job
        logged a few steps after its resume), or a step's deadline passed.
        Returns the steps that were not seen."""
        assert self.fault_t is not None
        client = self.lab.client(retries=1, timeout=5)
        o = self.o
        steps = self.scenario.steps
        by_key = self.scenario.step_by_key
        while True:
            now = time.time()
            self._poll_once(client, now)
            seen_times = {
                "fault": self.fault_t,
                **{k: (r.seen or r.t) for k, r in self.records.items()},
            }
            overdue = [
                s.key
                for s in steps
                if s.required
                and s.key not in self.records
                and (dl := s.deadline(seen_times, o.grace)) is not None
                and now > dl
            ]
            if overdue:
                for key in overdue:
                    spec = by_key[key]
                    self.say(
                        step_line(now - self.fault_t, spec.title, "NOT SEEN before its deadline")
                    )
                return self._unseen()
            if "accepted" not in self.records and self._audit_find(
                lambda e: (
                    e.get("action") == "acceptance"
                    and e.get("node") == self.node
                    and e.get("outcome") == "failed"
                )
            ):
                self.provision_error = self.provision_error or "acceptance failed on the node"
            if self.provision_error and "accepted" not in self.records:
                self.say(step_line(now - self.fault_t, "provisioner", self.provision_error))
                return self._unseen()
            done = all(s.key in self.records for s in steps if s.required)
            after = [
                r for r in self.metrics[0]
                if r.get("event") == "step" and int(r.get("restart", 0)) >= 1
            ]  # fmt: skip
            if done and len(after) >= o.steps_after_resume:
                return self._unseen()
            time.sleep(o.poll_interval)

    def _poll_once(self, client: Any, now: float) -> None:
        from slurm_hooks.core.errors import SlurmError
        from slurm_hooks.core.reason import try_parse_reason

        self._read_files()
        try:
            nodes = {n.name: n for n in client.list_nodes()}
            job = client.get_job(self.job_id)
        except SlurmError as exc:
            log.warning("demo poll: %s", exc)
            return
        for n in nodes.values():
            self.node_states.note(n.name, now, _node_label(n))
        self._note_job(job, now)
        have = self.records
        node = nodes.get(self.node)
        m0 = self.metrics[0]
        fault = self.fault_t
        assert fault is not None

        if "detected" not in have:
            e = self._audit_find(
                lambda e: e.get("action") == "decision" and e.get("node") == self.node
                and e.get("decision") in ("drain", "replace")
            )  # fmt: skip
            if e:
                self._record("detected", audit_time(e) or now,
                             f"{e.get('actor')}: {e.get('code')} {e.get('component') or ''} -> "
                             f"{e.get('decision')} ({e.get('why', '')})", "audit log", now)  # fmt: skip
        if "drained" not in have and "detected" in have and node is not None and node.drained:
            ours = try_parse_reason(node.reason)
            if ours is not None and ours.code != "SPARE":
                e = self._audit_find(
                    lambda e: e.get("action") in ("drain", "replace") and e.get("node") == self.node
                    and not e.get("outcome")
                )  # fmt: skip
                line = self._sinfo_line(client)
                self._record("drained", (audit_time(e) if e else None) or now,
                             f"sinfo -R: {line}", "sinfo -R + audit log", now)  # fmt: skip
        if "signalled" not in have and "drained" in have:
            e = self._audit_find(
                lambda e: e.get("action") == "signal" and e.get("job") == self.job_id
            )
            # USR1 reaches rank 0 through the batch shell's forward, TERM to the
            # steps directly: under load either may be the first it sees at a
            # step boundary, and both make it checkpoint.
            got = next(
                (r for r in m0 if r.get("event") == "signal" and float(r["time"]) >= fault
                 and any("USR1" in s or "TERM" in s for s in r.get("signals", []))),
                None,
            )  # fmt: skip
            if e and got:
                names = "+".join(got.get("signals", []))
                self._record("signalled", audit_time(e) or now,
                             f"{', '.join(e.get('signals') or [])}; rank 0 got {names} at step "
                             f"{got['step']}", "audit log + job metrics", now)  # fmt: skip
        if "checkpoint" not in have and "signalled" in have:
            ck = next(
                (r for r in m0 if r.get("event") == "checkpoint"
                 and r.get("reason") in ("signal", "term")
                 and float(r["time"]) >= fault),
                None,
            )  # fmt: skip
            if ck:
                name = Path(str(ck.get("path", ""))).name
                extra = (
                    "already on disk"
                    if ck.get("existing")
                    else f"{ck.get('seconds', 0) * 1000:.0f} ms"
                )
                self._record("checkpoint", float(ck["time"]),
                             f"step {ck['step']}: {name} ({extra})", "job metrics", now)  # fmt: skip
        if "requeued" not in have and "signalled" in have and job.restart_count >= 1:
            e = self._audit_find(
                lambda e: e.get("action") == "requeue" and e.get("job") == self.job_id
            )
            waited = f", {e['waited_s']:.1f} s after the signal" if e and e.get("waited_s") else ""
            self._record("requeued", (audit_time(e) if e else None) or now,
                         f"job {self.job_id}: restart count {job.restart_count}, "
                         f"{job.state.split()[0]}{waited}", "scontrol + audit log", now)  # fmt: skip
        if self.o.slinky:
            from slurm_hooks_lab import demo_slinky

            demo_slinky.poll(self, client, now, nodes, job)
        else:
            self._poll_classic(now, nodes, job, node)

    def _poll_classic(self, now: float, nodes: Mapping[str, Any], job: Any, node: Any) -> None:
        """The classic scenario's Kubernetes and replacement steps."""
        have = self.records
        k8s_node = self.api.get("nodes", self.node) or {}
        taints = [t for t in (k8s_node.get("spec") or {}).get("taints") or []
                  if t.get("key") == "slurm-hooks.io/fault"]  # fmt: skip
        unsched = bool((k8s_node.get("spec") or {}).get("unschedulable"))
        if "cordoned" not in have and "drained" in have and unsched and taints:
            t0 = taints[0]
            self._record("cordoned", now,
                         f"Node {self.node}: unschedulable, taint {t0['key']}={t0.get('value')}:"
                         f"{t0.get('effect')}", "stand-in Node", now)  # fmt: skip
        if "pods_evicted" not in have and "cordoned" in have:
            pods = [p for p in self.api.items("pods") if p["spec"].get("nodeName") == self.node]
            names = {p["metadata"]["name"] for p in pods}
            if f"llm-serve-{self.node}" not in names:
                self._record("pods_evicted", now,
                             f"inference/llm-serve-{self.node} evicted; kept: {', '.join(sorted(names))}",
                             "stand-in pods", now)  # fmt: skip
        spare = nodes.get(self.spare)
        if "spare_resumed" not in have and "drained" in have and spare and not spare.drained:
            self._record("spare_resumed", now, f"{self.spare}: {_node_label(spare)} (was SPARE)",
                         "scontrol", now)  # fmt: skip
        self._poll_training(now, job, "node_resumed", "the replacement")
        if "replacement_requested" not in have and "drained" in have:
            for obj in self.api.items("nodereplacements"):
                if (obj.get("spec") or {}).get("slurmNode") == self.node:
                    md = obj["metadata"]
                    self._record("replacement_requested", now,
                                 f"NodeReplacement {md.get('namespace')}/{md['name']} "
                                 f"(incident {obj['spec'].get('incident')})", "stand-in", now)  # fmt: skip
                    break
        if "accepted" not in have and "replacement_requested" in have:
            e = self._audit_find(
                lambda e: e.get("action") == "acceptance" and e.get("node") == self.node
                and e.get("outcome") == "passed"
            )  # fmt: skip
            if e:
                self._record("accepted", audit_time(e) or now, f"acceptance passed: {e.get('why', '')}",
                             "audit log", now)  # fmt: skip
        if ("node_resumed" not in have and "accepted" in have and node is not None
                and not node.drained and not node.down):  # fmt: skip
            e = self._audit_find(
                lambda e: e.get("action") == "resume" and e.get("node") == self.node
            )
            if e:
                self._record("node_resumed", audit_time(e) or now,
                             f"{self.node}: {_node_label(node)}; {e.get('why', '')}",
                             "scontrol + audit log", now)  # fmt: skip
        if "uncordoned" not in have and "node_resumed" in have and not unsched and not taints:
            self._record("uncordoned", now, f"Node {self.node}: schedulable, our taint removed",
                         "stand-in Node", now)  # fmt: skip

    def _poll_training(self, now: float, job: Any, back: str, what: str) -> None:
        """Running again, resumed, training continues (both scenarios);
        ``back``: the step after which the faulty node counts as healthy."""
        from slurm_hooks.core import hostlist

        have = self.records
        m0 = self.metrics[0]
        job_nodes = hostlist.expand(job.nodes) if job.nodes and job.nodes != "(null)" else []
        # Healthy nodes: any but the faulty one, which counts again only as
        # its replacement (accepted and resumed before the job landed there).
        healthy = self.node not in job_nodes or back in have
        if ("running_again" not in have and "requeued" in have and job.state == "RUNNING"
                and job.restart_count >= 1 and healthy):  # fmt: skip
            where = f" (incl. {what} {self.node})" if self.node in job_nodes else ""
            self._record("running_again", now, f"job {self.job_id} RUNNING on {job.nodes}{where}",
                         "squeue/scontrol", now)  # fmt: skip
        if "resumed" not in have and "running_again" in have:
            r = next(
                (r for r in m0 if r.get("event") == "resume" and int(r.get("restart", 0)) >= 1),
                None,
            )
            if r:
                self._record("resumed", float(r["time"]),
                             f"from step {r['step']} ({Path(str(r.get('path', ''))).name}) on {r.get('node')}",
                             "job metrics", now)  # fmt: skip
        if "training_continues" not in have and "resumed" in have:
            r = next(
                (r for r in m0 if r.get("event") == "step" and int(r.get("restart", 0)) >= 1), None
            )
            if r:
                self._record("training_continues", float(r["time"]),
                             f"step {r['step']} (loss {float(r['loss']):.4f}) on {r.get('node')}",
                             "job metrics", now)  # fmt: skip

    def _sinfo_line(self, client: Any) -> str:
        try:
            out = client.raw("sinfo", "-R", "-h", "-n", self.node, "-o", "%E|%U|%H|%N")
        except Exception as exc:  # noqa: BLE001 - display only
            return f"(sinfo -R failed: {exc})"
        line = out.strip().splitlines()[0] if out.strip() else ""
        return "  ".join(p.strip() for p in line.split("|"))

    # -- the provisioner ----------------------------------------------------------------

    def _provision(self) -> None:
        """What a provisioner does for a NodeReplacement: new hardware (the
        fault gone from the node's GPUs), acceptance on the node, the
        verdict to the engine, which resumes the node if the reason is
        ours and the pass came after the fault."""
        try:
            nf = self.hooks.node(self.node)
            self.hooks.heal_gpus(self.node)
            self.event(f"provisioner: new hardware for {self.node} (GPU fault cleared)", "info")
            # Acceptance runs on the node (its UTS namespace, its config, its
            # GPUs), as a provisioner runs it on a freshly installed machine.
            res = self.lab.run_on_node(
                self.node,
                [sys.executable, "-m", "slurm_hooks_lab.demo", "acceptance", self.node],
                # The node's config alone names its fake GPUs and engines.
                env={
                    "SLURM_HOOKS_CONFIG": str(nf.config),
                    "SLURM_CONF": str(self.lab.slurm_conf),
                },
                timeout=600,
            )
            try:
                doc = json.loads(res.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                raise RuntimeError(
                    f"acceptance on {self.node} printed no result (rc={res.rc}): "
                    f"{res.stderr.strip()[-300:]}"
                ) from None
            self.event(
                f"provisioner: acceptance on {self.node} "
                f"{'passed' if doc.get('passed') else 'FAILED'} in {doc.get('seconds', 0):.1f} s "
                f"({doc.get('detail')}); engine: {doc.get('decision')}",
                "info",
            )
        except Exception as exc:  # noqa: BLE001 - reported by the observer
            log.exception("provisioner failed")
            self.provision_error = f"provisioner failed: {type(exc).__name__}: {exc}"

    # -- the end ------------------------------------------------------------------------

    def _training(self) -> TrainingCheck:
        if self._metric_tails:
            self._read_files()
        if self.fault_t is None:
            return TrainingCheck(False, "no fault was injected")
        return check_training(self.metrics[0], self.fault_t, other_ranks=[self.metrics[1]])

    def _settings(self) -> dict[str, Any]:
        s: dict[str, Any] = {
            "nodes": self.o.nodes,
            "cred_expire": self.o.cred_expire,
            "kill_wait": self.o.kill_wait,
            "step_seconds": self.o.step_seconds,
            "ckpt_every": self.o.ckpt_every,
            "healthcheck_interval": self.o.healthcheck_interval,
            "bridge_interval": self.o.bridge_interval,
            "scenario": self.scenario.name,
        }
        if self.o.slinky:
            s["spare_machines"] = self.o.spare_machines
        if self.lab is not None:
            s["base_dir"] = str(self.base)
            s["slurm_conf"] = str(self.lab.slurm_conf)
            with contextlib.suppress(Exception):
                s["sched_params"] = list(self.lab.sched_params)
            if self.hooks is not None:
                s["hooks"] = sorted(self.hooks.shims)
        return s

    def _report(self, missing: Sequence[str], error: str | None) -> Report:
        leftovers: list[str] = []
        if self.slinky is not None and self.fault_t is not None:
            from slurm_hooks_lab import demo_slinky

            try:
                leftovers = demo_slinky.leftovers(self)
            except Exception as exc:  # noqa: BLE001 - a check that cannot run fails its goal
                leftovers = [f"end state not readable: {type(exc).__name__}: {exc}"]
        return build_report(
            grace=self.o.grace,
            node=self.node,
            job=self.job_id,
            spare=self.spare,
            steps=list(self.records.values()),
            fault_t=self.fault_t if self.fault_t is not None else time.time(),
            missing=missing,
            training=self._training(),
            error=error,
            settings=self._settings(),
            scenario=self.scenario.name,
            leftovers=leftovers,
        )

    def _write_outputs(self, report: Report) -> Report:
        from dataclasses import replace

        files: dict[str, str] = {}
        o = self.o
        if o.json_path:
            files["json"] = str(o.json_path)
        if o.plot:
            plot = o.plot_path
            if plot is None:
                plot = (
                    o.json_path.with_name(o.json_path.stem + "-timeline.png")
                    if o.json_path
                    else self.base / "demo-timeline.png"
                )
            try:
                from slurm_hooks_lab.demo_plot import render

                end = time.time()
                tl = build_timeline(
                    report, self.node_states, self.job_states, self.metrics[0],
                    t0=self.t_submit or self.t_start, end=end, events=self.events,
                )  # fmt: skip
                render(tl, plot)
                files["plot"] = str(plot)
            except Exception as exc:  # noqa: BLE001 - the picture is a bonus; the report is not
                log.warning("cannot draw the timeline: %s", exc)
                files["plot_error"] = str(exc)
        report = replace(report, files=files)
        if o.json_path:
            from slurm_hooks.store.atomicfile import write_atomic

            write_atomic(o.json_path, json.dumps(report.to_dict(), indent=2) + "\n")
        return report

    def _teardown(self) -> None:
        """Stop what the demo started; the lab too unless ``keep``."""
        self.bridge_stop.set()
        if self.bridge_thread is not None:
            self.bridge_thread.join(10)
        if self.provisioner is not None:
            self.provisioner.join(30)
        if self.slinky is not None:
            with contextlib.suppress(Exception):
                self.slinky.controller.stop()
        if self.hooks is not None:
            with contextlib.suppress(Exception):
                self.hooks.stop_watchers()
        self._stop_grace_workers()
        if self.api is not None:
            with contextlib.suppress(Exception):
                self.api.stop()
        if self.lab is not None and not self.o.keep:
            with contextlib.suppress(Exception):
                self.lab.down()

    def _stop_grace_workers(self) -> None:
        """Grace workers the watchers started for this lab's incidents (they
        sleep out the grace; after a failure or Ctrl-C nothing should)."""
        import signal as _signal

        from slurm_hooks.detect.probes.process import pid_alive
        from slurm_hooks_lab.lab import _cmdline

        if self.hooks is None:
            return
        for name in self.lab.node_names:
            try:
                docs = self.hooks.incidents(name)
            except Exception:  # noqa: BLE001
                continue
            for doc in docs:
                pid = doc.get("worker_pid")
                if pid and pid_alive(int(pid)):
                    cmd = _cmdline(int(pid))
                    if "slurm_hooks.agent.worker" in cmd and str(self.base) in cmd:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(int(pid), _signal.SIGTERM)

    def explore_hint(self) -> str:
        """What ``--keep`` leaves behind, and what it does not: the bridge,
        the Kubernetes stand-in and the watchers lived in the demo process."""
        d = str(self.base)
        node = self.node or "n1"
        lines = [
            f"The Slurm lab is still running in {d} (slurmctld, slurmd, munged, and the",
            "hooks in its slurm.conf). The Kubernetes bridge, the Kubernetes API stand-in",
            "and the watchers ran inside the demo process and stopped with it: the",
            "cluster objects are gone and nothing mirrors drains into Kubernetes now.",
            "Explore what is left:",
            f'  eval "$(slurm-hooks lab env --dir {d})"',
            "  sinfo -R; squeue" + (f"; scontrol show job {self.job_id}" if self.job_id else ""),
            f"  slurm-hooks history --audit-log {d}/nodes/{node}/audit.jsonl",
            f"  tail {d}/nodes/*/audit.jsonl",
        ]
        if self.job_id:
            lines.append(f"  tail {d}/shared/train/runs/{self.job_id}/metrics.rank0.jsonl")
        lines.append(f"Take it down with: slurm-hooks lab down --dir {d}")
        return "\n".join(lines)


def _node_label(n: Any) -> str:
    from slurm_hooks.core.reason import try_parse_reason

    if n.drained:
        ours = try_parse_reason(n.reason)
        if ours is not None and ours.code == "SPARE":
            return "spare"
        return "draining" if n.busy else "drained"
    if n.down:
        return "down"
    return n.state


def run_demo(options: DemoOptions, echo: Callable[[str], None] | None = None) -> Report:
    """Run the demo; returns the report (``report.passed`` for the verdict)."""
    return Demo(options, echo).run()


def acceptance_main(argv: Sequence[str]) -> int:
    """``python -m slurm_hooks_lab.demo acceptance NODE [--no-resume]``: the
    provisioner's acceptance run, on the node, with the node's config from
    ``$SLURM_HOOKS_CONFIG``; prints the result as one JSON line.
    ``--no-resume`` (the Slinky scenario): the verdict is recorded and the
    bridge, which asked for it, resumes the node."""
    from slurm_hooks.agent.acceptance import run_acceptance
    from slurm_hooks.core import config as config_mod

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    cfg = config_mod.load(validate=False)
    result = run_acceptance(argv[0], cfg, resume="--no-resume" not in argv[1:])
    print(json.dumps(result.to_dict()))
    return result.exit_code


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) not in (2, 3) or args[0] != "acceptance" or args[2:] not in ([], ["--no-resume"]):
        print(
            "usage: python -m slurm_hooks_lab.demo acceptance NODE [--no-resume]", file=sys.stderr
        )
        sys.exit(2)
    sys.exit(acceptance_main(args[1:]))
