"""The demo with the default 120 s grace, end to end on the real lab; prints
the summary table (every duration) and the verdict.  About 3 minutes.

    .venv/bin/python bench/bench_demo.py [--grace 120] [--json FILE] [--cred-expire 5] [--slinky]

``--slinky``: the Slinky scenario (slurmd pod moved to a spare machine):
fault -> slurmd running on the spare -> job running again, with every step's
time since the fault.

Needs root (the lab).  Prints figures, asserts nothing: the demo's own
verdict is the pass/fail line, and the exit status (0 pass, 1 fail).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from slurm_hooks_lab.demo import DemoOptions, run_demo, scenario_for, summary_table
from slurm_hooks_lab.lab import slurm_version


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--grace", type=float, default=120.0)
    ap.add_argument("--cred-expire", type=int, default=5)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--quiet", action="store_true", help="no live step lines")
    ap.add_argument("--slinky", action="store_true", help="the Slinky scenario")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="slurm-hooks-bench-demo-"))
    base.chmod(0o755)  # munged (user munge) and the job user must reach the lab
    json_path = args.json or base / "demo-report.json"
    opts = DemoOptions(grace=args.grace, base_dir=base / "lab", json_path=json_path,
                       cred_expire=args.cred_expire, slinky=args.slinky,
                       nodes=2 if args.slinky else 5)  # fmt: skip
    t0 = time.monotonic()
    report = run_demo(opts, echo=None if args.quiet else print)
    wall = time.monotonic() - t0
    print()
    print(summary_table(report))
    print()
    v = slurm_version()  # the installed Slurm's: figures differ by release (requeue_delay)
    print(
        f"bench_demo slurm={v[0]}.{v[1]:02d}.{v[2]} grace={args.grace:g}s "
        f"cred_expire={args.cred_expire}s wall={wall:.1f}s"
        + (" scenario=slinky" if args.slinky else "")
    )
    sc = scenario_for(report.scenario)
    if args.slinky:
        fault = report.times["fault"]
        print("  steps (seconds since the fault):")
        for st in report.steps:
            print(f"    {st.key:<22} {st.t - fault:9.3f}")
        for key in report.missing:
            print(f"    {key:<22} {'-':>9}")
    for d in sc.durations:
        v = report.durations.get(d.key)
        print(f"  {d.key:<24} {'-' if v is None else f'{v:.3f}'}")
    downtime = report.durations.get("training_downtime")
    if downtime is not None and not args.slinky:
        # The floor: what the requeue path costs beyond the grace itself.
        print(f"  downtime beyond grace    {downtime - args.grace:.3f}")
    print(f"report: {json_path}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
