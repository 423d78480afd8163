"""Lab start-up time and the cost of one node listing, by node count.

    .venv/bin/python bench/bench_lab.py [--sizes 4,16,32,64] [--reps 20]

For each size: start a lab in a temp dir, time "nothing running -> all nodes
idle", time one ``list_nodes()`` through the cli backend (``scontrol -o show
node`` and the JSON source), then ``down()``.  Prints figures and the ratio
against the 4-node run in the same process; asserts nothing.  A size that
fails to start is reported and the larger ones are skipped.  Needs root and
Debian's slurm packages.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time

from slurm_hooks_lab.lab import Lab, missing_prerequisites

from slurm_hooks.core.errors import LabError


def median_ms(fn, reps: int) -> float:  # type: ignore[no-untyped-def]
    fn()  # warm: first call pays for page cache and plugin loading
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,16,32,64")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    problems = missing_prerequisites()
    if problems:
        print("bench_lab: cannot run:", "; ".join(problems), file=sys.stderr)
        return 2
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for n in sizes:
        base = tempfile.mkdtemp(prefix=f"slurm-hooks-bench-{n}-")
        lab = Lab(base, n, timeout=120)
        try:
            up_s = lab.up()
        except LabError as exc:
            print(f"{n:>4} nodes: did not start: {str(exc).splitlines()[0]}")
            lab.down()
            shutil.rmtree(base, ignore_errors=True)
            break
        try:
            text = lab.client()
            js = lab.client(node_source="json")
            assert len(text.list_nodes()) == n
            t_text = median_ms(text.list_nodes, args.reps)
            t_json = median_ms(js.list_nodes, args.reps)
            t_one = median_ms(lambda c=text: c.get_node("n1"), args.reps)
        finally:
            t0 = time.monotonic()
            lab.down()
            down_s = time.monotonic() - t0
            shutil.rmtree(base, ignore_errors=True)
        rows.append((n, up_s, t_text, t_json, t_one, down_s))
    if not rows:
        return 1
    base_row = rows[0]
    print(
        f"\n{'nodes':>5} {'up s':>6} {'list ms':>8} {'x':>5} {'json ms':>8} {'x':>5}"
        f" {'1 node ms':>9} {'down s':>7}"
    )
    for n, up_s, t_text, t_json, t_one, down_s in rows:
        print(
            f"{n:>5} {up_s:>6.2f} {t_text:>8.1f} {t_text / base_row[2]:>5.2f}"
            f" {t_json:>8.1f} {t_json / base_row[3]:>5.2f} {t_one:>9.1f} {down_s:>7.2f}"
        )
    print(f"\n(list = scontrol -o show node; json = sinfo --json; median of {args.reps})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
