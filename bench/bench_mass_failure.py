"""A correlated failure: how many nodes the breaker lets drain, by fault spacing.

    .venv/bin/python bench/bench_mass_failure.py [--nodes 256] [--faults 64] [--cap 20]
        [--spacings 0,0.05,0.1,0.3] [--paths watch,healthcheck] [--reps 1]

Starts a lab of ``--nodes`` nodes with our hooks installed (each node its
own state dir and latch: no shared file system), then for each path and
spacing writes XID 79 into the kernel log of ``--faults`` nodes, ``spacing``
seconds apart, and lets the path act on them:

* ``watch``: ``python -m slurm_hooks.agent.watch --once`` per node, started as
  the fault is written (what a running watcher does within ~0.1 s);
* ``healthcheck``: the installed HealthCheckProgram shim per node, in the
  node's slurmd namespace, as slurmd runs it.

Prints drained vs cap (goal: drained == cap in every row), held, the time
until every node decided, and slurmctld's RPCs by type from ``sdiag``
(``scontrol reset``-free: deltas of the counters).  Asserts nothing.
Needs root and Debian's slurm packages.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import threading
import time

from slurm_hooks_lab.hooks import install
from slurm_hooks_lab.lab import Lab, missing_prerequisites

from slurm_hooks.core.errors import LabError
from slurm_hooks.core.held import parse_mark
from slurm_hooks.core.ownership import our_reason

_RPC = re.compile(r"^\s+(REQUEST_\w+|MESSAGE_\w+)\s+\(\s*\d+\)\s+count:(\d+)", re.MULTILINE)


def rpc_counts(lab: Lab) -> dict[str, int]:
    text = lab.client().raw("sdiag")
    return {m.group(1): int(m.group(2)) for m in _RPC.finditer(text)}


def one_round(hooks, path: str, nodes: list[str], spacing: float) -> tuple[float, list[str]]:
    lab = hooks.lab
    shim = str(hooks.shims["healthcheck"])
    errors: list[str] = []

    def act(n: str) -> None:
        if path == "watch":
            res = hooks.watch_once(n, timeout=300)
        else:
            res = lab.run_on_node(n, [shim], timeout=300)
        if res.rc not in (0, 1):
            errors.append(f"{n}: rc={res.rc} {res.stderr[-200:]}")

    threads = []
    t0 = time.monotonic()
    for i, n in enumerate(nodes):
        if spacing and i:
            time.sleep(spacing)
        hooks.inject_xid(n, 79, gpu=0)
        t = threading.Thread(target=act, args=(n,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return time.monotonic() - t0, errors


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--faults", type=int, default=64)
    ap.add_argument("--cap", type=int, default=20)
    ap.add_argument("--spacings", default="0,0.05,0.1,0.3")
    ap.add_argument("--paths", default="watch,healthcheck")
    ap.add_argument("--reps", type=int, default=1)
    args = ap.parse_args()
    problems = missing_prerequisites()
    if problems:
        print("bench_mass_failure: cannot run:", "; ".join(problems), file=sys.stderr)
        return 2
    base = tempfile.mkdtemp(prefix=f"slurm-hooks-mass-{args.nodes}-")
    lab = Lab(base, args.nodes, timeout=600)
    rows = []
    try:
        try:
            up = lab.up()
        except LabError as exc:
            print(f"lab of {args.nodes} nodes did not start: {exc}", file=sys.stderr)
            return 1
        print(f"lab: {args.nodes} nodes up in {up:.1f}s")
        policy = {
            "breaker_max_share": 1.0,
            "breaker_max_nodes": args.cap,
            "breaker_min_nodes": 1,
            "breaker_state_file": None,  # each node its own latch
        }
        hooks = install(lab, grace_s=300, policy=policy)
        faulty = lab.node_names[: args.faults]
        try:
            for path in args.paths.split(","):
                for spacing in (float(s) for s in args.spacings.split(",")):
                    for rep in range(args.reps):
                        lab.reset()
                        hooks.reset_state()
                        if path == "watch":  # each watcher's first pass: its cursor
                            for n in faulty:
                                hooks.watch_once(n, timeout=300)
                        else:
                            for n in faulty:
                                lab.run_on_node(n, [str(hooks.shims["healthcheck"])], timeout=300)
                        before = rpc_counts(lab)
                        took, errors = one_round(hooks, path, faulty, spacing)
                        after = rpc_counts(lab)
                        table = lab.client().list_nodes()
                        drained = sum(1 for n in table if n.drained and our_reason(n))
                        held = sum(1 for n in table if parse_mark(n.comment))
                        rpcs = {k: after.get(k, 0) - before.get(k, 0) for k in after}
                        rpcs = {k: v for k, v in rpcs.items() if v}
                        rows.append((path, spacing, rep, drained, held, took, rpcs, errors))
                        print(
                            f"{path:<11} spacing={spacing:<5} rep={rep} drained={drained:>3} "
                            f"cap={args.cap} held={held:>3} decided_in={took:6.2f}s "
                            f"{'OK' if drained == args.cap else 'OVER' if drained > args.cap else 'UNDER'}"
                            f"{' errors=' + str(len(errors)) if errors else ''}",
                            flush=True,
                        )
        finally:
            hooks.close(reconfigure=False)
    finally:
        lab.down()
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"\n{'path':<11} {'spacing':>7} {'drained':>7} {'cap':>4} {'held':>5} {'decided s':>9}  RPCs"
    )
    for path, spacing, _rep, drained, held, took, rpcs, _errors in rows:
        top = ", ".join(f"{k.removeprefix('REQUEST_')}={v}" for k, v in
                        sorted(rpcs.items(), key=lambda kv: -kv[1])[:6])  # fmt: skip
        print(f"{path:<11} {spacing:>7} {drained:>7} {args.cap:>4} {held:>5} {took:>9.2f}  {top}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
