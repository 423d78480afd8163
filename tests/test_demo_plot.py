"""The incident timeline picture (slurm_hooks_lab.demo_plot)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_hooks_lab import demo_plot
from slurm_hooks_lab.demo_plot import Event, LossPoint, Span, StepMark, Timeline

from slurm_hooks.core.errors import TimelineError

TRAIN = Path(__file__).resolve().parents[1] / "lab" / "slurm_hooks_lab" / "train" / "train.py"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    return env | extra


def sample(nodes: int = 4) -> dict:
    """An XID 79 incident shaped like the lab demo's: n2 fails under job 7,
    which is checkpointed, requeued onto n3 and resumes."""
    names = [f"n{i}" for i in range(1, nodes + 1)]
    spans = [
        {"lane": "n1", "state": "allocated", "start": 0, "end": 30},
        {"lane": "n2", "state": "allocated", "start": 0, "end": 20},
        {"lane": "n2", "state": "draining", "start": 20, "end": 32},
        {"lane": "n2", "state": "drained", "start": 32, "end": 70},
        {"lane": "n2", "state": "resumed", "start": 70},
        {"lane": "n3", "state": "idle", "start": 0, "end": 44},
        {"lane": "n3", "state": "allocated", "start": 44},
    ] + [{"lane": n, "state": "idle", "start": 0} for n in names[3:]]
    loss = [{"step": s, "loss": 1.0 / s, "t": 0.5 * s, "restart": 0} for s in range(1, 51)]
    loss += [{"step": s, "loss": 1.0 / s, "t": 20 + 0.5 * s, "restart": 1} for s in range(51, 121)]
    return {
        "title": "XID 79 on n2",
        "t0": 1_700_000_000.0,
        "events": [
            {"t": 19.0, "label": "XID 79 injected", "kind": "fault"},
            {"t": 19.5, "label": "detected", "kind": "detect"},
            {"t": 20.0, "label": "drained", "kind": "action"},
            {"t": 20.1, "label": "signalled", "kind": "action"},
            {"t": 20.3, "label": "checkpoint", "kind": "info"},
            {"t": 21.0, "label": "cordoned", "kind": "action"},
            {"t": 21.2, "label": "replacement requested", "kind": "action"},
            {"t": 30.0, "label": "requeued"},
            {"t": 44.0, "label": "running again", "kind": "recover"},
            {"t": 70.0, "label": "n2 resumed", "kind": "recover"},
        ],
        "nodes": spans,
        "jobs": [
            {"lane": "job 7", "state": "running", "start": 0, "end": 30},
            {"lane": "job 7", "state": "requeued", "start": 30, "end": 32},
            {"lane": "job 7", "state": "pending", "start": 32, "end": 44},
            {"lane": "job 7", "state": "running", "start": 44, "end": 80},
        ],
        "loss": loss,
        "marks": [
            {"step": 50, "t": 20.3, "label": "checkpoint (signal)"},
            {"step": 50, "t": 45.0, "label": "resume (restart 1)"},
        ],
        "end": 80,
    }


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def pixels_near(path: Path, hex_colour: str, tol: float = 0.02) -> int:
    from matplotlib.colors import to_rgb
    from matplotlib.image import imread

    image = imread(path)[..., :3]
    target = to_rgb(hex_colour)
    close = abs(image - target).max(axis=-1) <= tol
    return int(close.sum())


def test_renders_a_png_with_the_states_drawn(tmp_path):
    out = demo_plot.render(Timeline.from_dict(sample()), tmp_path / "incident.png")
    width, height = png_size(out)
    assert out.stat().st_size > 40_000
    assert width >= 1200 and height >= 700
    # The drained bar and the running bars are really there.
    assert pixels_near(out, demo_plot.STATE_COLOURS["drained"]) > 2_000
    assert pixels_near(out, demo_plot.STATE_COLOURS["running"]) > 2_000


def test_a_state_that_never_happened_is_not_painted(tmp_path):
    data = sample()
    data["nodes"] = [s for s in data["nodes"] if s["state"] != "drained"]
    out = demo_plot.render(Timeline.from_dict(data), tmp_path / "no-drain.png")
    assert pixels_near(out, demo_plot.STATE_COLOURS["drained"]) < 50


def test_more_node_lanes_make_a_taller_picture(tmp_path):
    _, h4 = png_size(demo_plot.render(Timeline.from_dict(sample(4)), tmp_path / "4.png"))
    _, h12 = png_size(demo_plot.render(Timeline.from_dict(sample(12)), tmp_path / "12.png"))
    assert h12 > h4


def test_empty_timeline_still_renders(tmp_path):
    width, height = png_size(demo_plot.render(Timeline(), tmp_path / "empty.png"))
    assert width > 0 and height > 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["events"].append({"t": 1, "label": "x", "kind": "oops"}), "events[10].kind"),
        (lambda d: d["events"].append({"label": "no time"}), "events[10].t: missing"),
        (
            lambda d: d["nodes"].append({"lane": "n9", "state": "idle", "start": 5, "end": 1}),
            "before start",
        ),
        (lambda d: d["loss"].append({"step": "7", "loss": 1.0, "t": 1}), "loss[120].step"),
        (lambda d: d["loss"].append({"step": 7, "loss": float("nan"), "t": 1}), "not finite"),
        (lambda d: d["jobs"].append({"lane": "j", "state": "", "start": 0}), "jobs[4].state"),
        (
            lambda d: d["marks"].append({"step": 1, "t": 1, "label": "x", "colour": "red"}),
            "unknown fields colour",
        ),
        (lambda d: d.update(nodes="n1"), "nodes: expected a list"),
        (lambda d: d.update(colour="red"), "unknown timeline keys: colour"),
        (lambda d: d.update(end=True), "end: expected a number"),
    ],
)
def test_malformed_timelines_are_rejected_with_the_entry_named(change, message):
    data = sample()
    change(data)
    with pytest.raises(TimelineError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Timeline.from_dict(data)


def test_from_dict_builds_the_dataclasses():
    tl = Timeline.from_dict(sample())
    assert tl.events[7] == Event(30.0, "requeued", "action")
    assert tl.nodes[4] == Span("n2", "resumed", 70.0, None)
    assert tl.loss[0] == LossPoint(1, 1.0, 0.5, 0)
    assert tl.marks[1] == StepMark(50, 45.0, "resume (restart 1)")
    assert tl.right_edge() == 80.0
    assert Timeline.from_dict({"events": [{"t": 3, "label": "x"}]}).right_edge() == 3.0


def test_event_numbers_are_staggered_only_when_they_would_overlap():
    assert demo_plot._event_rows([0, 10, 20], min_gap=1) == [0, 0, 0]
    assert demo_plot._event_rows([0, 0.1, 0.2, 5], min_gap=1) == [0, 1, 2, 0]
    # All rows busy: reuse the row whose number is oldest.
    assert demo_plot._event_rows([0, 0.1, 0.2, 0.3, 0.4], min_gap=1, rows=4) == [0, 1, 2, 3, 0]


def test_loss_and_marks_from_the_example_jobs_metrics(tmp_path):
    """The real training job's metrics, through a SIGTERM-free restart."""
    ckpt = tmp_path / "ckpt"
    base = [
        sys.executable,
        str(TRAIN),
        "--backend",
        "numpy",
        "--ckpt-dir",
        str(ckpt),
        "--step-seconds",
        "0",
        "--ckpt-every",
        "5",
    ]
    subprocess.run(
        [*base, "--max-steps", "10"], check=True, timeout=60, env=_env(SLURM_RESTART_COUNT="0")
    )
    subprocess.run(
        [*base, "--max-steps", "20"], check=True, timeout=60, env=_env(SLURM_RESTART_COUNT="1")
    )
    metrics_path = ckpt / "metrics.rank0.jsonl"
    with metrics_path.open("a") as f:
        f.write('{"event": "step", "ti')  # a line cut short by SIGKILL
    records = demo_plot.read_metrics(metrics_path)
    t0 = records[0]["time"]
    points, marks = demo_plot.loss_from_metrics(records, t0)
    assert [p.step for p in points] == list(range(1, 21))
    assert {p.restart for p in points if p.step <= 10} == {0}
    assert {p.restart for p in points if p.step > 10} == {1}
    assert all(p.t >= 0 for p in points)
    assert [(m.step, m.label) for m in marks] == [
        (5, "checkpoint (periodic)"),
        (10, "checkpoint (periodic)"),
        (10, "resume (restart 1)"),
        (15, "checkpoint (periodic)"),
        (20, "checkpoint (periodic)"),
    ]
    assert demo_plot.loss_from_metrics(records, t0, rank=1) == ([], [])


def test_command_line_draws_timeline_plus_metrics(tmp_path):
    data = sample()
    data.pop("loss")
    data.pop("marks")
    (tmp_path / "tl.json").write_text(json.dumps(data))
    metrics = tmp_path / "m.jsonl"
    t0 = data["t0"]
    metrics.write_text(
        "\n".join(
            json.dumps(
                {"event": "step", "time": t0 + s, "rank": 0, "restart": 0, "step": s, "loss": 1 / s}
            )
            for s in range(1, 30)
        )
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurm_hooks_lab.demo_plot",
            str(tmp_path / "tl.json"),
            str(tmp_path / "out.png"),
            "--metrics",
            str(metrics),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert png_size(tmp_path / "out.png")[0] > 0

    (tmp_path / "bad.json").write_text(json.dumps({"events": [{"t": "soon", "label": "x"}]}))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurm_hooks_lab.demo_plot",
            str(tmp_path / "bad.json"),
            str(tmp_path / "bad.png"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "events[0].t" in proc.stderr
    assert not (tmp_path / "bad.png").exists()
