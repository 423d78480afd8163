"""What one hook run costs slurmctld, by path and case, on a real lab.

    .venv/bin/python bench/bench_fault_cost.py [--nodes 16,256] [--records 4096,16384]

For each lab size starts a lab with our hooks installed, puts a PATH shim in
front of the Slurm commands (it logs every scontrol/squeue/scancel/sinfo/
sdiag call and the bytes it printed), and runs each path once per case on a
node of its own:

* ``healthcheck``: the installed HealthCheckProgram shim, in the node's
  slurmd namespace, as slurmd runs it;
* ``epilog``: the installed Epilog shim for a job id that has ended;
* ``prolog``: the installed Prolog shim for a job id slurmd would be
  starting (CPU-only: the warm XID check runs, no burn-in); on a fault it
  drains and then tries to requeue that job (gone: ``JobGone``, exit 1);
* ``watch``: ``python -m slurm_hooks.agent.watch --once`` (after a first pass
  that sets its cursor);

cases: ``healthy``; ``faulty`` (XID 79 just written: the path drains);
``persistent`` (the same fault, node already drained by us: the next run).
Prints Slurm commands, whole node-table reads (``REQUEST_NODE_INFO``),
single-node reads (``REQUEST_NODE_INFO_SINGLE``), other slurmctld RPCs by
type (``sdiag`` deltas, the bench's own ``sdiag`` taken out), the bytes the
commands printed (what the hook reads) and ``tbl_bytes``: whole-table reads
times one table as scontrol prints it (what slurmctld packs and sends: a
``scontrol show node NAME`` on 22.05 receives the table and prints one
line), then growth per node between the sizes.

``--jobs N``: before measuring, fills the job table with N held pending
jobs (``sbatch --hold --uid=``, users root, sltest, sltest2 and slurm in
turn; 200-character names and comments, as long user text costs a site),
and starts ``--node-jobs K`` running jobs on each faulty node, so that a
faulty path evacuates K jobs from a table of N + 5K.  ``job_tbl`` counts
whole job-table reads (``REQUEST_JOB_INFO``), ``job_single`` single-job
reads; ``jt_bytes`` is job-table reads times one table as ``scontrol show
job`` prints it.  Then it measures the signal step alone on one node's K
jobs: one ``scancel --signal`` per job (what the evacuation sent before
issue #31), one for all of them without ``--ctld``, and
``CliClient.signal_jobs`` with ``slurm_signal = "scancel"`` (one
``scancel --ctld`` for all of them, which from Slurm 24.05 is one
``REQUEST_KILL_JOBS`` and no table read) and with the default ``auto``
(what the hooks send through ``SlurmDoor.signal_many``: the same scancel
from 24.05; below it libslurm's ``slurm_kill_job2``, one ``REQUEST_KILL_JOB``
per job and no table read).

``--records N``: a lab of ``--record-base`` real nodes plus N node records
with no slurmd (``Lab(extra_records=N)``: DOWN, in a partition of their
own), so a table read costs what it costs at a site of that size while only
a few slurmd run.  Goals: faulty paths one node-table read (the breaker's rank;
the node decides on its own single-node read) and at most one job-table
read whatever the node runs; persistent and healthy zero calls.  Asserts nothing.  Needs root.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from slurm_hooks_lab.hooks import install
from slurm_hooks_lab.lab import Lab, missing_prerequisites

from slurm_hooks.core.errors import LabError
from slurm_hooks.detect.probes.commands import DEFAULT_PATH, run
from slurm_hooks.slurm.base import SignalTarget

_RPC = re.compile(r"^\s+(REQUEST_\w+|MESSAGE_\w+)\s+\(\s*\d+\)\s+count:(\d+)", re.MULTILINE)
COMMANDS = ("scontrol", "squeue", "scancel", "sinfo", "sdiag", "sacct")
SHIM = """#!/bin/sh
# bench_fault_cost: log the call and the size of what it printed
out=$(mktemp)
{real} "$@" >"$out"
rc=$?
printf '%s\\t%s\\t%s\\n' {name} "$(wc -c <"$out")" "$*" >>{log}
cat "$out"
rm -f "$out"
exit $rc
"""


def make_shims(where: Path, log: Path) -> Path:
    bin_dir = where / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in COMMANDS:
        real = shutil.which(name, path=DEFAULT_PATH)
        if real is None:
            continue
        path = bin_dir / name
        path.write_text(SHIM.format(real=real, name=name, log=log))
        path.chmod(0o755)
    return bin_dir


#: Submitters of the filler jobs (root may submit for any user: ``--uid``).
USERS = ("root", "sltest", "sltest2", "slurm")
LONG = "x" * 180


def fill_job_table(lab: Lab, count: int, *, workers: int = 8) -> float:
    """``count`` held pending jobs with long names and comments, several
    users; returns the seconds it took."""
    from concurrent.futures import ThreadPoolExecutor

    env = lab.env()
    t0 = time.monotonic()

    def submit(i: int) -> None:
        user = USERS[i % len(USERS)]
        argv = [
            "sbatch", "--hold", "--parsable", f"--uid={user}", "-p", "debug", "-o", "/dev/null",
            f"--job-name=filler-{i:05d}-{LONG}", f"--comment=bench filler {i} {LONG}",
            "--chdir=/tmp", "--wrap", "sleep 600",
        ]  # fmt: skip
        run(argv, timeout=120, check=True, env=env)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(submit, range(count)))
    return time.monotonic() - t0


def start_node_jobs(lab: Lab, node: str, count: int) -> list[str]:
    """``count`` running one-CPU jobs on ``node`` (as sltest); their ids."""
    env = lab.env()
    ids = []
    for i in range(count):
        argv = ["sbatch", "--parsable", "--uid=sltest", "-p", "debug", "-w", node, "-n", "1",
                "-o", "/dev/null", "--chdir=/tmp", f"--job-name=work-{node}-{i}-{LONG}",
                f"--comment=running {LONG}", "--wrap", "sleep 3600"]  # fmt: skip
        ids.append(run(argv, timeout=60, check=True, env=env).stdout.strip().split(";")[0])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        jobs = {j.job_id: j.state for j in lab.client().list_jobs(["RUNNING"])}
        if all(j in jobs for j in ids):
            return ids
        time.sleep(0.5)
    raise LabError(f"jobs on {node} did not start: {ids}")


WINCH = str(int(signal.SIGWINCH))


def signal_step(lab: Lab, ids: list[str]) -> dict[str, dict]:
    """The evacuation's signal step on one node's jobs, three ways (SIGWINCH,
    28 on Linux: scancel knows no name for it, and the batch shell ignores
    it; CONT would meet slurmctld's "transitional state" for a job
    signalled with it a moment before, and scancel 22.05 then waits 5 s
    and asks again): one ``scancel``
    per job (before issue #31), one ``scancel`` for all without ``--ctld``
    (before it went to slurmctld in one request), ``signal_jobs`` with
    ``slurm_signal = "scancel"`` (``scancel --ctld``) and with the default
    ``auto`` (what ``SlurmDoor.signal_many`` sends from the hooks: below
    24.05 libslurm's ``slurm_kill_job2`` per job, no table read)."""
    client = lab.client()
    out = {}
    before = rpc_counts(lab)
    for jid in ids:
        client.raw("scancel", f"--signal={WINCH}", "--batch", jid)
    out["one scancel per job"] = _rpc_delta(lab, before)
    before = rpc_counts(lab)
    client.raw("scancel", f"--signal={WINCH}", "--batch", *ids)
    out["one scancel, no --ctld"] = _rpc_delta(lab, before)
    before = rpc_counts(lab)
    client.signal_jobs(ids, WINCH, SignalTarget.BATCH)
    out["signal_jobs via scancel (scancel --ctld)"] = _rpc_delta(lab, before)
    before = rpc_counts(lab)
    lab.client(signal_via="auto").signal_jobs(ids, WINCH, SignalTarget.BATCH)
    out["signal_jobs via auto (the default: libslurm below 24.05)"] = _rpc_delta(lab, before)
    return out


def _rpc_delta(lab: Lab, before: Counter[str]) -> dict:
    rpcs = rpc_counts(lab) - before
    rpcs["REQUEST_STATS_INFO"] -= 1
    return dict(+rpcs)


def rpc_counts(lab: Lab) -> Counter[str]:
    text = lab.client().raw("sdiag")
    return Counter({m.group(1): int(m.group(2)) for m in _RPC.finditer(text)})


def measure(lab: Lab, log: Path, act) -> dict:  # type: ignore[no-untyped-def]
    log.write_text("")
    before = rpc_counts(lab)
    act()
    time.sleep(0.3)  # a grace worker's first poll, if one was started
    after = rpc_counts(lab)
    rpcs = after - before
    rpcs["REQUEST_STATS_INFO"] -= 1  # our own sdiag
    rpcs = +rpcs
    cmds = [line.split("\t") for line in log.read_text().splitlines() if line]
    return {
        "commands": len(cmds),
        "bytes": sum(int(c[1]) for c in cmds),
        "node_info": rpcs.get("REQUEST_NODE_INFO", 0),
        "node_single": rpcs.get("REQUEST_NODE_INFO_SINGLE", 0),
        "job_tbl": rpcs.get("REQUEST_JOB_INFO", 0),
        "job_single": rpcs.get("REQUEST_JOB_INFO_SINGLE", 0),
        "rpcs": dict(rpcs),
        "argv": [f"{c[0]} {c[2]}" for c in cmds],
    }


def one_size(
    n: int,
    verbose: bool,
    *,
    records: int = 0,
    policy: dict | None = None,
    jobs: int = 0,
    node_jobs: int = 0,
) -> dict[tuple[str, str], dict]:
    base = Path(tempfile.mkdtemp(prefix=f"slurm-hooks-cost-{n}-{records}-"))
    base.chmod(0o755)  # munged must reach its socket under it
    log = base / "calls.log"
    # MaxJobCount: Slurm's default (10,000) would refuse the filler jobs.
    extra = f"MaxJobCount={max(10000, 2 * (jobs + 6 * node_jobs))}\n" if jobs else ""
    cpus = max(2, node_jobs + 1)
    if cpus > 2:
        # More one-CPU jobs per node than this host has cores: slurmd takes
        # slurm.conf's CPUs instead of refusing to register.
        extra += "SlurmdParameters=config_overrides\n"
    lab = Lab(str(base / "lab"), n, timeout=600, extra_records=records, extra_conf=extra,
              cpus=cpus)  # fmt: skip
    rows: dict[tuple[str, str], dict] = {}
    try:
        up = lab.up()
        major, minor, micro = lab.client().version()
        version = f"{major}.{minor:02d}.{micro}"
        print(f"lab: Slurm {version}, {n} nodes (+{records} records) up in {up:.1f}s", flush=True)
        # What one whole-table read carries, as scontrol prints it: a read of
        # ``scontrol show node NAME`` (22.05) or ``squeue -w`` receives the
        # table too but prints (almost) nothing of it.
        table = len(lab.client().raw("scontrol", "-o", "show", "node").encode())
        print(f"one node-table read: {table} bytes ({table / (n + records):.0f} B/node)")
        # The bench runs the shims itself: slurm.conf needs no hook lines, and
        # a reconfigure of a slurmctld with 16,384 records outlasts the lab's wait.
        hooks = install(
            lab, grace_s=300, epilog=True, prolog=True, policy=policy, reconfigure=False
        )
        job_table = 0
        if jobs:
            took = fill_job_table(lab, jobs)
            print(f"job table: {jobs} held jobs submitted in {took:.0f}s", flush=True)
        bin_dir = make_shims(base, log)
        path_env = f"{bin_dir}:{DEFAULT_PATH}"
        names = lab.node_names
        # One node per (path, fault) pair: no reset between measurements.
        nodes = {"healthcheck": names[1], "epilog": names[2], "prolog": names[5],
                 "watch": names[3]}  # fmt: skip
        healthy = names[4]

        def runner(path: str, node: str):  # type: ignore[no-untyped-def]
            if path == "healthcheck":
                shim = str(hooks.shims["healthcheck"])
                return lambda: lab.run_on_node(node, [shim], env={"PATH": path_env}, timeout=300)
            if path in ("epilog", "prolog"):
                shim = str(hooks.shims[path])
                env = {"PATH": path_env, "SLURM_JOB_ID": "999999", "SLURM_JOB_USER": "root"}
                return lambda: lab.run_on_node(node, [shim], env=env, timeout=300)
            env = dict(hooks.watcher_env(node), PATH=path_env)
            argv = hooks.watch_argv(node, "--once")
            return lambda: run(argv, timeout=300, check=False, env=env, cwd="/")

        running: dict[str, list[str]] = {}
        if node_jobs:
            for node in [*nodes.values(), healthy]:
                running[node] = start_node_jobs(lab, node, node_jobs)
        if jobs or node_jobs:
            job_table = len(lab.client().raw("scontrol", "-o", "show", "job").encode())
            print(f"one job-table read: {job_table} bytes", flush=True)
        if running:
            for way, rpcs in signal_step(lab, running[healthy]).items():
                print(f"signal step, {node_jobs} jobs, {way}: job-table reads "
                      f"{rpcs.get('REQUEST_JOB_INFO', 0)}, RPCs {rpcs}", flush=True)  # fmt: skip
        for node in [healthy, nodes["watch"]]:  # the watchers' first pass: their cursor
            runner("watch", node)()
        for path in ("healthcheck", "epilog", "prolog", "watch"):
            rows[(path, "healthy")] = measure(lab, log, runner(path, healthy))
        for path, node in nodes.items():
            hooks.inject_xid(node, 79, gpu=0)
            rows[(path, "faulty")] = measure(lab, log, runner(path, node))
            rows[(path, "persistent")] = measure(lab, log, runner(path, node))
            drained = lab.client().get_node(node).drained
            rows[(path, "faulty")]["drained"] = drained
        for r in rows.values():
            r["table_bytes"] = r["node_info"] * table
            r["job_table_bytes"] = r["job_tbl"] * job_table
        hooks.close(reconfigure=False)
    finally:
        lab.down()
        shutil.rmtree(base, ignore_errors=True)
    if verbose:
        for (path, case), r in rows.items():
            print(f"  {path}/{case}: " + "; ".join(r["argv"]))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="16,256", help="lab sizes (real nodes); '' for none")
    ap.add_argument("--records", default="", help="node-record counts, e.g. 4096,16384")
    ap.add_argument("--record-base", type=int, default=16, help="real nodes beside the records")
    ap.add_argument("--jobs", type=int, default=0, help="held pending jobs in the job table")
    ap.add_argument("--node-jobs", type=int, default=0, help="running jobs per faulty node")
    ap.add_argument(
        "--breaker-off", action="store_true",
        help="breaker share 1, no node cap: every claim ranks within the cap",
    )  # fmt: skip
    ap.add_argument("-v", "--verbose", action="store_true", help="print every command line")
    args = ap.parse_args()
    problems = missing_prerequisites()
    if problems:
        print("bench_fault_cost: cannot run:", "; ".join(problems), file=sys.stderr)
        return 2
    runs = [(int(s), 0) for s in args.nodes.split(",") if s]
    runs += [(args.record_base, int(s)) for s in args.records.split(",") if s]
    policy = {"breaker_max_share": 1.0, "breaker_max_nodes": 10**6} if args.breaker_off else None
    results: dict[int, dict] = {}
    failed = 0
    for n, records in runs:
        try:
            results[n + records] = one_size(
                n, args.verbose, records=records, policy=policy, jobs=args.jobs,
                node_jobs=args.node_jobs,
            )  # fmt: skip
        except LabError as exc:
            print(f"lab of {n} nodes (+{records} records) did not start: {exc}", file=sys.stderr)
            failed += 1
            continue
        print_table({n + records: results[n + records]})
    sizes = sorted(results)
    print("\nall sizes:")
    print_table(results)
    print_goals(results)
    for lo, hi in zip(sizes, sizes[1:], strict=False):
        print(f"\nbytes received per extra node ({lo} -> {hi} nodes):")
        for key, r in results[hi].items():
            if key not in results[lo]:
                continue
            d = (r["bytes"] - results[lo][key]["bytes"]) / (hi - lo)
            t = (r["table_bytes"] - results[lo][key]["table_bytes"]) / (hi - lo)
            print(f"  {key[0]:<11} {key[1]:<10} printed {d:8.1f} B/node, tables {t:8.1f} B/node")
    return 1 if failed else 0


def print_goals(results: dict[int, dict]) -> None:
    """Each faulty and persistent path's figures next to their goals."""
    print("\ngoals (per path and case):")
    for n, rows in results.items():
        for (path, case), r in rows.items():
            if case == "healthy":
                continue
            if case == "faulty":
                checks = [
                    ("node-table reads", r["node_info"], 1),
                    ("job-table reads", r["job_tbl"], 1),
                ]
            else:
                checks = [("Slurm commands", r["commands"], 0)]
            for what, value, goal in checks:
                verdict = "met" if value <= goal else "MISSED"
                print(f"  {n:>5} {path:<11} {case:<10} {what:<16} {value:>3} (goal <= {goal}: "
                      f"{verdict}); {r['bytes']} bytes printed, "
                      f"{r.get('table_bytes', 0) + r.get('job_table_bytes', 0)} bytes in tables")  # fmt: skip


def print_table(results: dict[int, dict]) -> None:
    print(
        f"\n{'nodes':>5} {'path':<11} {'case':<10} {'cmds':>4} {'tables':>6} {'single':>6} "
        f"{'job_tbl':>7} {'job_1':>5} {'bytes':>9} {'tbl_bytes':>9} {'jt_bytes':>10}  other RPCs"
    )
    for n, rows in results.items():
        for (path, case), r in rows.items():
            other = ", ".join(
                f"{k.removeprefix('REQUEST_')}={v}"
                for k, v in sorted(r["rpcs"].items(), key=lambda kv: -kv[1])
                if k
                not in (
                    "REQUEST_NODE_INFO",
                    "REQUEST_NODE_INFO_SINGLE",
                    "REQUEST_JOB_INFO",
                    "REQUEST_JOB_INFO_SINGLE",
                )  # fmt: skip
            )
            flag = "" if r.get("drained", True) else "  (NOT drained)"
            print(
                f"{n:>5} {path:<11} {case:<10} {r['commands']:>4} {r['node_info']:>6} "
                f"{r['node_single']:>6} {r['job_tbl']:>7} {r['job_single']:>5} {r['bytes']:>9} "
                f"{r.get('table_bytes', 0):>9} {r.get('job_table_bytes', 0):>10}  "
                f"{other}{flag}"
            )


if __name__ == "__main__":
    raise SystemExit(main())
