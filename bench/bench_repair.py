"""Benchmark: fault -> node back in service through the repair loop, per step, on the lab.

A real 4-node Slurm lab with our hooks (HealthCheckProgram every 2 s,
``[repair] enabled``), a 1-node job on n1, XID 79 written into n1's kernel
log.  Each step's time is read from what Slurm and the audit log show:

    drain       XID line written -> n1 carries our XID79 reason
    requeue     -> the job's restart count moved
    reboot      -> the lab's RebootProgram restarted n1's slurmd
    acceptance  -> acceptance passed on n1 (fake burn-in/NCCL engines)
    resume      -> n1 in service, no reason

Prints figures only (the lab's fake engines make acceptance take seconds; a
real burn-in + NCCL + dcgmi diag takes minutes: ``[acceptance] budget_s``).

    .venv/bin/python bench/bench_repair.py [--runs 1] [--grace 1]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from slurm_hooks_lab import reboot as lab_reboot
from slurm_hooks_lab.hooks import install
from slurm_hooks_lab.lab import Lab

from slurm_hooks.core.reason import try_parse_reason

JOB = "#!/bin/bash\nfor i in $(seq 1 900); do sleep 0.2; done\n"


def _submit(lab: Lab, script: Path) -> str:
    from slurm_hooks.detect.probes.commands import run

    res = run(
        ["sbatch", "--parsable", "--requeue", "-N1", "-w", "n1", "-o", "/dev/null", str(script)],
        timeout=30, env={**os.environ, **lab.env()},
    )  # fmt: skip
    return res.stdout.strip().split(";")[0]


def one_run(lab: Lab, hooks, work: Path, grace: float) -> dict[str, float]:  # type: ignore[no-untyped-def]
    client = lab.client()
    script = work / "job.sh"
    script.write_text(JOB)
    script.chmod(0o755)
    job = _submit(lab, script)
    lab.wait_job(job, lambda j: j.state == "RUNNING", timeout=30)
    before = lab_reboot.reboots(lab.base_dir, "n1")
    t0 = time.monotonic()
    hooks.inject_xid("n1", 79, gpu=0)
    marks: dict[str, float] = {}

    def mark(name: str, pred, timeout: float) -> None:  # type: ignore[no-untyped-def]
        lab.wait_for(pred, timeout, interval=0.05, what=name)
        marks[name] = time.monotonic() - t0

    def code() -> str | None:
        r = try_parse_reason(client.get_node("n1").reason)
        return r.code if r else None

    def accepted() -> bool:
        return any(
            e.get("action") == "acceptance" and e.get("outcome") == "passed"
            for e in hooks.audit("n1")
        )

    def back() -> bool:
        n = client.get_node("n1")
        return n.reason is None and not n.drained and not n.down

    mark("drain", lambda: code() == "XID79", 30)
    mark("requeue", lambda: client.get_job(job).restart_count >= 1, 30 + grace)
    mark("reboot", lambda: lab_reboot.reboots(lab.base_dir, "n1") > before, 60)
    mark("acceptance", accepted, 90)
    mark("resume", back, 30)
    from slurm_hooks.detect.probes.commands import run

    run(["scancel", job], timeout=10, env={**os.environ, **lab.env()}, check=False)
    return marks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--grace", type=float, default=1.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-repair-") as tmp:
        os.chmod(tmp, 0o755)  # munged and the job user must reach the lab
        lab = Lab(Path(tmp) / "lab", 4)
        lab.up()
        try:
            results = []
            for _ in range(args.runs):
                hooks = install(
                    lab, grace_s=args.grace, healthcheck_interval=2,
                    repair={"enabled": True, "max_concurrent_reboots": 1},
                )  # fmt: skip
                try:
                    results.append(one_run(lab, hooks, Path(tmp), args.grace))
                finally:
                    hooks.close(reconfigure=False)
                    lab.reset()
                    hooks.reset_state()
        finally:
            lab.down()
    for r in results:
        prev = 0.0
        print("step        at (s)   step (s)")
        for name, at in r.items():
            print(f"{name:<11} {at:7.2f}   {at - prev:7.2f}")
            prev = at
    print(json.dumps({"runs": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
