"""The report: a terminal table, one JSON object, an optional picture.

JSON: ``{"trace": ..., "params": ..., "baselines": {name: figures}}`` with
``ettr`` among each baseline's figures; a sweep adds ``"sweep": [{"value":
v, "baselines": {...}}, ...]``.  The picture (ETTR so far and nodes out of
service over time, one line per baseline) needs matplotlib, which is the
lab's and the tests' dependency, not the product's: without it the picture
is skipped with a note.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from slurm_hooks.simulate.figures import Figures
from slurm_hooks.simulate.params import SimParams
from slurm_hooks.simulate.trace import Trace

#: (label, key, format) of the table's rows.
ROWS = (
    ("ETTR", "ettr", "{:.2%}"),
    ("node-hours out of service", "node_hours_out", "{:,.0f}"),
    ("job interruptions", "interruptions", "{:,}"),
    ("  of which checkpointed on signal", "checkpointed_on_signal", "{:,}"),
    ("jobs requeued", "requeues", "{:,}"),
    ("GPU-hours lost", "lost_gpu_hours", "{:,.0f}"),
    ("drains", "drains", "{:,}"),
    ("false drains", "false_drains", "{:,}"),
    ("breaker: nodes held / trips", ("breaker_held", "breaker_trips"), "{:,} / {:,}"),
    ("replacement requests", "replacements", "{:,}"),
    ("spares resumed / max in use", ("spares_resumed", "max_spares_in_use"), "{:,} / {:,}"),
    ("foreign reasons left alone", "foreign_refusals", "{:,}"),
)


def document(trace: Trace, params: SimParams, results: Mapping[str, Figures], *,
             seed: int | None, timeline: bool = False) -> dict[str, Any]:  # fmt: skip
    return {
        "trace": {
            "name": trace.name,
            "source": trace.source,
            "faults": len(trace.faults),
            "seed": seed,
            **dict(trace.meta),
        },  # fmt: skip
        "params": dataclasses.asdict(params),
        "baselines": {k: v.to_dict(timeline=timeline) for k, v in results.items()},
    }


def table(results: Mapping[str, Figures]) -> Iterator[str]:
    names = list(results)
    cells = [[label] + [_cell(results[n], key, fmt) for n in names] for label, key, fmt in ROWS]
    widths = [max(len(r[i]) for r in [["", *names], *cells]) for i in range(len(names) + 1)]
    yield "  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in
                    enumerate(zip(["", *names], widths, strict=True)))  # fmt: skip
    for row in cells:
        yield "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                        enumerate(zip(row, widths, strict=True)))  # fmt: skip


def _cell(f: Figures, key: str | tuple[str, ...], fmt: str) -> str:
    keys = key if isinstance(key, tuple) else (key,)
    return fmt.format(*(getattr(f, k) for k in keys))


def sweep_lines(name: str, rows: Sequence[tuple[str, Mapping[str, Figures]]]) -> Iterator[str]:
    """ETTR and node-hours out per value of the swept knob, per baseline."""
    baselines = list(rows[0][1]) if rows else []
    head = [name] + [f"{b} ETTR" for b in baselines] + [f"{b} node-h out" for b in baselines]
    yield "  ".join(head)
    for value, res in rows:
        cells = [value.ljust(len(name))]
        cells += [f"{res[b].ettr:.2%}".rjust(len(b) + 5) for b in baselines]
        cells += [f"{res[b].node_hours_out:,.0f}".rjust(len(b) + 11) for b in baselines]
        yield "  ".join(cells)


def plot(results: Mapping[str, Figures], path: str, title: str) -> str | None:
    """Draw the picture; None when drawn, else why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'slurm-hooks[demo]'): no picture"
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for name, f in results.items():
        days = [h / 24 for h, _, _, _ in f.timeline]
        top.plot(days, [e * 100 for _, e, _, _ in f.timeline], label=f"{name} ({f.ettr:.1%})")
        bottom.plot(days, [o for _, _, o, _ in f.timeline], label=name)
    top.set_ylabel("ETTR so far (%)")
    top.legend(loc="lower left")
    top.set_title(title)
    bottom.set_ylabel("nodes out of service")
    bottom.set_xlabel("days")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


__all__ = ["ROWS", "document", "plot", "sweep_lines", "table"]
