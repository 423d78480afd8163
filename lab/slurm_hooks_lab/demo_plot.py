"""One picture of an incident: node states, job states, the loss curve and
every remediation event on one time axis.

The demo records what happened (from Slurm, from slurm-hooks' own log and
from the training job's metrics file) and hands it here as a ``Timeline``;
this module only draws.  The picture answers the questions people ask after
an incident: how long was the node bad before we noticed, how long did the
job wait, and did training lose anything (the loss-vs-step panel shows the
curve after the resume continuing from the checkpoint, not from scratch).

Input, as a dict (JSON) or the dataclasses below; all times are seconds since
the start of the timeline (``t0``, Unix seconds, is kept only to convert
records that carry absolute times, such as the training metrics)::

    {
      "title": "XID 79 on n2: drained, requeued, resumed",
      "t0": 1795949552.7,
      "end": 95.0,                                    # optional: right edge
      "events": [{"t": 12.0, "label": "XID 79 injected on n2", "kind": "fault"}, ...],
      "nodes":  [{"lane": "n2", "state": "allocated", "start": 0, "end": 12.3}, ...],
      "jobs":   [{"lane": "job 7", "state": "running", "start": 1.2, "end": 30.0}, ...],
      "loss":   [{"step": 1, "loss": 1.13, "t": 1.5, "restart": 0}, ...],
      "marks":  [{"step": 40, "t": 14.1, "label": "checkpoint (signal)"}, ...]
    }

Event kinds choose the colour: fault, detect, action, recover, info.  Any
state name is accepted; the usual Slurm ones have fixed colours.  Needs
matplotlib (the ``demo`` extra), imported only when drawing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_hooks.core.errors import TimelineError

EVENT_KINDS = ("fault", "detect", "action", "recover", "info")

EVENT_COLOURS = {
    "fault": "#d62728",
    "detect": "#ff7f0e",
    "action": "#6a3d9a",
    "recover": "#2ca02c",
    "info": "#555555",
}

STATE_COLOURS = {
    # nodes
    "idle": "#d9d9d9",
    "allocated": "#74c476",
    "mixed": "#a1d99b",
    "draining": "#fd8d3c",
    "drained": "#e6550d",
    "down": "#a50f15",
    "resumed": "#6baed6",
    "cordoned": "#9e9ac8",
    "replacing": "#bcbddc",
    # jobs
    "running": "#31a354",
    "signalled": "#fdd0a2",
    "completing": "#fdae6b",
    "requeued": "#9467bd",
    "pending": "#bdbdbd",
    "completed": "#3182bd",
    "failed": "#de2d26",
    "cancelled": "#636363",
}
_FALLBACK_COLOURS = ("#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
_RESTART_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")


@dataclass(frozen=True)
class Event:
    """A moment worth a vertical line: XID injected, node drained, job requeued."""

    t: float
    label: str
    kind: str = "action"


@dataclass(frozen=True)
class Span:
    """One state of one lane (a node or a job) from ``start`` to ``end``;
    ``end`` None means until the end of the timeline."""

    lane: str
    state: str
    start: float
    end: float | None = None


@dataclass(frozen=True)
class LossPoint:
    step: int
    loss: float
    t: float
    restart: int = 0


@dataclass(frozen=True)
class StepMark:
    """A checkpoint or a resume, at a training step and a time."""

    step: int
    t: float
    label: str


@dataclass(frozen=True)
class Timeline:
    events: tuple[Event, ...] = ()
    nodes: tuple[Span, ...] = ()
    jobs: tuple[Span, ...] = ()
    loss: tuple[LossPoint, ...] = ()
    marks: tuple[StepMark, ...] = ()
    title: str = "incident timeline"
    t0: float = 0.0
    end: float | None = field(default=None)

    def right_edge(self) -> float:
        """``end`` if given, else the last time anything happened."""
        if self.end is not None:
            return self.end
        times = [e.t for e in self.events] + [p.t for p in self.loss] + [m.t for m in self.marks]
        for s in (*self.nodes, *self.jobs):
            times.append(s.start if s.end is None else s.end)
        return max(times, default=1.0)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Timeline:
        """Build and validate; a bad entry raises TimelineError naming it."""
        if not isinstance(data, Mapping):
            raise TimelineError(f"a timeline is a mapping, not {type(data).__name__}")
        unknown = set(data) - {"title", "t0", "end", "events", "nodes", "jobs", "loss", "marks"}
        if unknown:
            raise TimelineError(f"unknown timeline keys: {', '.join(sorted(unknown))}")
        tl = cls(
            events=tuple(_build(Event, data, "events")),
            nodes=tuple(_build(Span, data, "nodes")),
            jobs=tuple(_build(Span, data, "jobs")),
            loss=tuple(_build(LossPoint, data, "loss")),
            marks=tuple(_build(StepMark, data, "marks")),
            title=str(data.get("title", cls.title)),
            t0=_number(data.get("t0", 0.0), "t0"),
            end=None if data.get("end") is None else _number(data["end"], "end"),
        )
        tl.validate()
        return tl

    def validate(self) -> None:
        for i, e in enumerate(self.events):
            if e.kind not in EVENT_KINDS:
                raise TimelineError(f"events[{i}].kind: {e.kind!r} is not one of {EVENT_KINDS}")
        for key, spans in (("nodes", self.nodes), ("jobs", self.jobs)):
            for i, s in enumerate(spans):
                if s.end is not None and s.end < s.start:
                    raise TimelineError(f"{key}[{i}]: end {s.end} is before start {s.start}")
        for i, p in enumerate(self.loss):
            if not math.isfinite(p.loss):
                raise TimelineError(f"loss[{i}].loss: {p.loss} is not finite")
        if self.end is not None and self.end <= 0:
            raise TimelineError(f"end: {self.end} must be positive")


_FIELD_TYPES: dict[type, dict[str, tuple[type, bool]]] = {
    # field: (type, required)
    Event: {"t": (float, True), "label": (str, True), "kind": (str, False)},
    Span: {
        "lane": (str, True),
        "state": (str, True),
        "start": (float, True),
        "end": (float, False),
    },
    LossPoint: {
        "step": (int, True),
        "loss": (float, True),
        "t": (float, True),
        "restart": (int, False),
    },
    StepMark: {"step": (int, True), "t": (float, True), "label": (str, True)},
}


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TimelineError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _build(cls: type, data: Mapping[str, Any], key: str) -> Iterable[Any]:
    entries = data.get(key, ())
    if not isinstance(entries, Sequence) or isinstance(entries, str):
        raise TimelineError(f"{key}: expected a list")
    fields = _FIELD_TYPES[cls]
    for i, entry in enumerate(entries):
        where = f"{key}[{i}]"
        if isinstance(entry, cls):
            yield entry
            continue
        if not isinstance(entry, Mapping):
            raise TimelineError(f"{where}: expected a mapping, got {entry!r}")
        extra = set(entry) - set(fields)
        if extra:
            raise TimelineError(f"{where}: unknown fields {', '.join(sorted(extra))}")
        kwargs: dict[str, Any] = {}
        for name, (typ, required) in fields.items():
            if name not in entry or entry[name] is None:
                if required:
                    raise TimelineError(f"{where}.{name}: missing")
                continue
            value = entry[name]
            if typ is float:
                value = _number(value, f"{where}.{name}")
            elif typ is int:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TimelineError(f"{where}.{name}: expected an integer, got {value!r}")
            elif not isinstance(value, str) or not value:
                raise TimelineError(f"{where}.{name}: expected a non-empty string, got {value!r}")
            kwargs[name] = value
        yield cls(**kwargs)


def loss_from_metrics(
    records: Iterable[Mapping[str, Any]], t0: float, *, rank: int = 0
) -> tuple[list[LossPoint], list[StepMark]]:
    """Loss points and checkpoint/resume marks from the example training job's
    metrics lines (lab/slurm_hooks_lab/train), with times made relative to ``t0``.

    A step logged twice (work redone after a crash between checkpoints) keeps
    both points: the picture should show the repeated work, not hide it."""
    points: list[LossPoint] = []
    marks: list[StepMark] = []
    for r in records:
        if r.get("rank", 0) != rank:
            continue
        t = float(r["time"]) - t0
        event = r.get("event")
        if event == "step":
            points.append(LossPoint(int(r["step"]), float(r["loss"]), t, int(r.get("restart", 0))))
        elif event == "checkpoint" and not r.get("existing"):
            marks.append(StepMark(int(r["step"]), t, f"checkpoint ({r.get('reason', '?')})"))
        elif event == "resume":
            marks.append(StepMark(int(r["step"]), t, f"resume (restart {r.get('restart', '?')})"))
    return points, marks


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """JSON lines; a line that does not parse (a write cut short by SIGKILL) is skipped."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


# --------------------------------------------------------------------------
# Drawing


def _colour(state: str, assigned: dict[str, str]) -> str:
    key = state.lower()
    if key in STATE_COLOURS:
        return STATE_COLOURS[key]
    if key not in assigned:
        assigned[key] = _FALLBACK_COLOURS[len(assigned) % len(_FALLBACK_COLOURS)]
    return assigned[key]


def _lanes(spans: Sequence[Span]) -> list[str]:
    seen: dict[str, None] = {}
    for s in spans:
        seen.setdefault(s.lane, None)
    return list(seen)


def _draw_lanes(ax: Any, spans: Sequence[Span], right: float, title: str, fallback: dict) -> None:
    lanes = _lanes(spans)
    min_label_width = right * 0.055
    for row, lane in enumerate(reversed(lanes)):
        for s in (s for s in spans if s.lane == lane):
            end = right if s.end is None else s.end
            width = max(end - s.start, right * 0.002)
            colour = _colour(s.state, fallback)
            ax.broken_barh(
                [(s.start, width)],
                (row - 0.38, 0.76),
                facecolors=colour,
                edgecolors="white",
                linewidth=0.8,
            )
            if width >= min_label_width:
                ax.text(
                    s.start + width / 2,
                    row,
                    s.state,
                    ha="center",
                    va="center",
                    fontsize=8.5,
                    clip_on=True,
                )
    ax.set_yticks(range(len(lanes)), list(reversed(lanes)), fontsize=9)
    ax.set_ylim(-0.6, max(len(lanes), 1) - 0.4)
    ax.set_ylabel(title, fontsize=10)
    ax.tick_params(axis="y", length=0)
    for spine in ("top", "right", "left"):
        ax.spines[spine].set_visible(False)


def _event_rows(times: Sequence[float], min_gap: float, rows: int = 4) -> list[int]:
    """Stagger event numbers that would overlap: the lowest row whose last
    number is at least ``min_gap`` away, else the row used longest ago."""
    last = [-math.inf] * rows
    out = []
    for t in times:
        row = next((r for r in range(rows) if t - last[r] >= min_gap), None)
        if row is None:
            row = min(range(rows), key=lambda r: last[r])
        last[row] = t
        out.append(row)
    return out


def render(timeline: Timeline, path: str | Path, *, dpi: int = 110) -> Path:
    """Write the timeline as a PNG; returns the path.  Uses matplotlib's Agg
    canvas directly, so it neither needs a display nor touches pyplot's
    global backend."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError as e:
        raise ImportError(
            "the timeline picture needs matplotlib: pip install 'slurm-hooks[demo]'"
        ) from e

    timeline.validate()
    right = timeline.right_edge()
    events = sorted(timeline.events, key=lambda e: e.t)
    node_lanes, job_lanes = _lanes(timeline.nodes), _lanes(timeline.jobs)
    heights = [0.5 + 0.42 * max(len(node_lanes), 1), 0.5 + 0.42 * max(len(job_lanes), 1), 2.4, 2.6]
    rows = _event_rows([e.t for e in events], min_gap=right * 0.022)
    headroom = 0.75 + 0.22 * (max(rows, default=0) + 1)  # inches: title + stacked event numbers
    total = sum(heights) + headroom + 0.6
    fig = Figure(figsize=(16.5, total), dpi=dpi)  # the event list needs ~60 columns
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(
        len(heights),
        1,
        height_ratios=heights,
        hspace=0.5,
        left=0.07,
        right=0.70,
        top=1 - headroom / total,
        bottom=0.6 / total,
    )
    ax_nodes = fig.add_subplot(grid[0])
    ax_jobs = fig.add_subplot(grid[1], sharex=ax_nodes)
    ax_time = fig.add_subplot(grid[2], sharex=ax_nodes)
    ax_step = fig.add_subplot(grid[3])
    fig.suptitle(timeline.title, x=0.07, ha="left", fontsize=14, fontweight="bold")

    fallback: dict[str, str] = {}
    _draw_lanes(ax_nodes, timeline.nodes, right, "nodes", fallback)
    _draw_lanes(ax_jobs, timeline.jobs, right, "job", fallback)
    ax_nodes.set_xlim(0, right * 1.01)
    ax_nodes.tick_params(labelbottom=False)
    ax_jobs.tick_params(labelbottom=False)

    # Loss against time: the gap is the time the job was not running.
    restarts = sorted({p.restart for p in timeline.loss})
    for r in restarts:
        pts = [p for p in timeline.loss if p.restart == r]
        colour = _RESTART_COLOURS[r % len(_RESTART_COLOURS)]
        ax_time.plot(
            [p.t for p in pts],
            [p.loss for p in pts],
            ".-",
            ms=2.5,
            lw=0.8,
            color=colour,
            label=f"restart {r}",
        )
        ax_step.plot(
            [p.step for p in pts],
            [p.loss for p in pts],
            ".-",
            ms=2.5,
            lw=0.8,
            color=colour,
            label=f"run {r + 1} (SLURM_RESTART_COUNT={r})",
        )
    ax_time.set_ylabel("loss (rank 0)", fontsize=10)
    ax_time.set_xlabel("seconds since start", fontsize=10)
    ax_step.set_xlabel("training step", fontsize=10)
    ax_step.set_ylabel("loss (rank 0)", fontsize=10)
    ax_step.set_title(
        "loss by step: after the resume the curve continues from the checkpoint",
        fontsize=10,
        loc="left",
    )

    # Checkpoints and resumes, on both loss panels.
    loss_at = {(p.step, p.restart): p.loss for p in timeline.loss}
    by_step: dict[int, float] = {}
    for p in timeline.loss:
        by_step.setdefault(p.step, p.loss)
    ylo, yhi = ax_step.get_ylim() if timeline.loss else (0.0, 1.0)
    for m in timeline.marks:
        is_resume = m.label.startswith("resume")
        colour = "#2ca02c" if is_resume else "#444444"
        ax_time.axvline(
            m.t,
            color=colour,
            lw=0.9,
            ls="-" if is_resume else ":",
            alpha=0.9 if is_resume else 0.45,
        )
        y = by_step.get(m.step, loss_at.get((m.step, 0), yhi))
        if is_resume:
            ax_step.axvline(m.step, color=colour, lw=1.2)
            ax_step.annotate(
                f"{m.label}\nfrom step {m.step}",
                (m.step, y),
                xytext=(12, 28),
                textcoords="offset points",
                fontsize=8.5,
                color=colour,
                arrowprops={"arrowstyle": "->", "color": colour},
            )
        else:
            ax_step.plot([m.step], [y], marker="v", ms=7, color=colour, ls="none")
    handles, labels = ax_step.get_legend_handles_labels()
    if timeline.marks:
        handles.append(Line2D([], [], marker="v", ls="none", color="#444444", ms=7))
        labels.append("checkpoint written")
    if handles:
        ax_step.legend(handles, labels, fontsize=8.5, loc="upper right")
    for ax in (ax_time, ax_step):
        ax.grid(alpha=0.25)
        for spine in ("top", "right"):
            ax.spines[spine].set_visible(False)

    # Events: numbered vertical lines across the time panels, listed on the right.
    for n, (e, row) in enumerate(zip(events, rows, strict=True), start=1):
        colour = EVENT_COLOURS[e.kind]
        for ax in (ax_nodes, ax_jobs, ax_time):
            ax.axvline(e.t, color=colour, lw=1.0, ls="--", alpha=0.75)
        ax_nodes.annotate(
            str(n),
            (e.t, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(0, 4 + 15 * row),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
            color="white",
            fontweight="bold",
            bbox={"boxstyle": "circle,pad=0.25", "fc": colour, "ec": "none"},
            annotation_clip=False,
        )
    lines = [
        (f"{n:>2}  {e.t:7.1f} s  {e.label}", EVENT_COLOURS[e.kind])
        for n, e in enumerate(events, start=1)
    ]
    top = grid[0].get_position(fig).y1
    fig.text(0.725, top + 0.005, "events", fontsize=11, fontweight="bold", va="bottom")
    step = min(0.028, (top - 0.06) / max(len(lines), 1))
    for i, (text, colour) in enumerate(lines):
        fig.text(
            0.725,
            top - 0.01 - i * step,
            text,
            fontsize=9,
            va="top",
            family="monospace",
            color=colour,
        )
    y = kinds_top = top - 0.02 - len(lines) * step - 0.02
    for kind in EVENT_KINDS:
        if any(e.kind == kind for e in events):
            fig.text(0.725, y, f"--  {kind}", fontsize=8.5, color=EVENT_COLOURS[kind], va="top")
            y -= 0.02
    # States, for the bars too short to carry their name.
    states = list(dict.fromkeys(s.state for s in (*timeline.nodes, *timeline.jobs)))
    if states:
        patches = [Patch(facecolor=_colour(st, fallback), label=st) for st in states]
        fig.legend(
            handles=patches,
            loc="upper left",
            bbox_to_anchor=(0.82, kinds_top + 0.012),
            fontsize=8.5,
            title="states",
            title_fontsize=9,
            frameon=False,
        )

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m slurm_hooks_lab.demo_plot TIMELINE.json OUT.png [--metrics FILE]``:
    draw a timeline saved as JSON; ``--metrics`` adds the loss curve and the
    checkpoint/resume marks from the example job's metrics file (times made
    relative to the timeline's ``t0``)."""
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m slurm_hooks_lab.demo_plot", description=main.__doc__
    )
    ap.add_argument("timeline", type=Path)
    ap.add_argument("output", type=Path)
    ap.add_argument("--metrics", type=Path, help="metrics.rank0.jsonl of the training job")
    args = ap.parse_args(argv)
    try:
        data = json.loads(args.timeline.read_text(encoding="utf-8"))
        timeline = Timeline.from_dict(data)
        if args.metrics:
            points, marks = loss_from_metrics(read_metrics(args.metrics), timeline.t0)
            timeline = Timeline(
                timeline.events,
                timeline.nodes,
                timeline.jobs,
                (*timeline.loss, *points),
                (*timeline.marks, *marks),
                timeline.title,
                timeline.t0,
                timeline.end,
            )
    except (OSError, ValueError) as e:
        ap.exit(2, f"error: {e}\n")
    print(render(timeline, args.output))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
