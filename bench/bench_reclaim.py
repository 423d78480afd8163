"""Benchmark: from a Slurm job becoming pending to its start, when it needs
nodes that are lent to Kubernetes inference.

Its own real Slurm lab (4 nodes, a distinct temp dir) and the Kubernetes API
stand-in; the bridge loops in a thread with a short interval.  Each trial:
inference demand makes the bridge lend every node, the inference pods run
there, then a 2-node job is submitted (it pends: every node is drained LEND);
we time submit -> RUNNING, and split it into submit -> first node resumed
(the bridge's reaction) and resumed -> RUNNING (Slurm's scheduler).  The
baseline is the same job on idle, unlent nodes in the same process.

    .venv/bin/python bench/bench_reclaim.py [--trials 3] [--interval 0.2]

Needs root and Debian's Slurm packages (like the lab).  Prints figures only.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from slurm_hooks_lab.k8s_standin import RESOURCES, StandinServer
from slurm_hooks_lab.lab import TEST_USER, Lab, ensure_user

from slurm_hooks.bridge import lending as L
from slurm_hooks.bridge.service import Bridge
from slurm_hooks.bridge.settings import BridgeConfig, LendingConfig
from slurm_hooks.detect.probes.commands import run
from slurm_hooks.k8s.client import KubeClient

PODS = next(r for r in RESOURCES if r.plural == "pods")


def submit(lab: Lab, script: Path, *args: str) -> str:
    res = run(
        ["runuser", "-u", TEST_USER, "--", "sbatch", "--parsable", *args, str(script)],
        timeout=30,
        env=lab.env(),
        cwd=str(script.parent),
    )
    return res.stdout.strip().split(";")[0]


def wait(pred, timeout: float, what: str, interval: float = 0.02):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(what)


def pending_pod(i: int) -> dict:
    return {
        "metadata": {
            "name": f"llm-pending-{i}",
            "namespace": "inference",
            "labels": {"app": "llm"},
        },
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def running_pod(node: str) -> dict:
    return {
        "metadata": {"name": f"llm-{node}", "namespace": "inference", "labels": {"app": "llm"}},
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


def job_start_seconds(
    lab: Lab, script: Path, out: Path, on_resume=None
) -> tuple[float, float | None]:  # type: ignore[no-untyped-def]
    client = lab.client(retries=0, timeout=5)
    t0 = time.monotonic()
    jid = submit(lab, script, "-N", "2", "-o", str(out / "o.%j"))
    resumed_at = None
    while True:
        if on_resume is not None and resumed_at is None and on_resume():
            resumed_at = time.monotonic()
        if client.get_job(jid).state == "RUNNING":
            t1 = time.monotonic()
            break
        if time.monotonic() - t0 > 60:
            raise TimeoutError(f"job {jid} did not start")
        time.sleep(0.02)
    client.cancel(jid)
    return t1 - t0, (resumed_at - t0) if resumed_at is not None else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--interval", type=float, default=0.2, help="bridge loop interval, s")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    ensure_user(TEST_USER)
    base = tempfile.mkdtemp(prefix="slurm-hooks-bench-reclaim-")
    lab = Lab(base, 4)
    lab.up()
    try:
        shared = lab.shared_dir / "bench"
        shared.mkdir(parents=True, exist_ok=True)
        os.chmod(shared, 0o1777)
        script = shared / "train.sh"
        script.write_text("#!/bin/sh\nsleep 30\n")
        script.chmod(0o755)

        baseline = []
        for _ in range(args.trials):
            lab.wait_idle(timeout=30)
            baseline.append(job_start_seconds(lab, script, shared)[0])
        lab.reset()

        lc = LendingConfig(
            enabled=True,
            pod_selector="app=llm",
            pod_namespace="inference",
            idle_seconds=0,
            min_idle_nodes=0,
            max_lent_fraction=1.0,
            max_lend_per_pass=4,
            min_lend_seconds=0,
            min_slurm_seconds=0,
            settle_seconds=0,
        )
        cfg = BridgeConfig(leader_election=False, interval=args.interval, lending=lc)
        results = []
        with StandinServer() as api:
            for name in lab.node_names:
                api.add("nodes", {"metadata": {"name": name, "labels": {}}, "spec": {}})
            bridge = Bridge(
                lab.client(), KubeClient(api.url, retries=1, backoff=0.01), cfg, identity="bench"
            )
            stop = threading.Event()
            loop = threading.Thread(target=bridge.run, args=(stop,), daemon=True)
            loop.start()
            slurm = lab.client(retries=0, timeout=5)
            try:
                for _ in range(args.trials):
                    lab.wait_idle(timeout=30)
                    for i in range(4):
                        api.add("pods", pending_pod(i))
                    wait(
                        lambda: all(L.lend_incident(n) for n in slurm.list_nodes()),
                        30,
                        "all nodes lent",
                    )
                    wait(
                        lambda: all(
                            n["metadata"]
                            .get("annotations", {})
                            .get(L.LendKeys(cfg.annotation_prefix).lent)
                            for n in api.items("nodes")
                        ),
                        30,
                        "all nodes opened",
                    )
                    for p in api.items("pods"):
                        if p["status"]["phase"] == "Pending":
                            api.store.delete(PODS, "inference", p["metadata"]["name"])
                    for name in lab.node_names:
                        api.add("pods", running_pod(name))

                    def any_resumed() -> bool:
                        return any(not n.drained for n in slurm.list_nodes())

                    total, reaction = job_start_seconds(lab, script, shared, any_resumed)
                    results.append((total, reaction))
                    # the remaining lent nodes come back for the next trial
                    wait(lambda: not slurm.list_jobs(), 30, "job gone")
                    for name in lab.node_names:
                        try:
                            api.store.delete(PODS, "inference", f"llm-{name}")
                        except Exception:  # noqa: BLE001 - already evicted
                            pass
                    sub = shared / "fill.sh"
                    sub.write_text("#!/bin/sh\nsleep 1\n")
                    sub.chmod(0o755)
                    jid = submit(lab, sub, "-N", "4", "-o", str(shared / "f.%j"))
                    wait(lambda: not slurm.list_jobs(), 60, f"fill job {jid}")
            finally:
                stop.set()
                loop.join(timeout=10)
        snap = bridge.metrics.lend_events
        print(
            f"reclaim benchmark: 4-node lab, bridge interval {args.interval:g}s, {args.trials} trial(s)"
        )
        print(
            f"  baseline (idle nodes) submit->RUNNING: median {statistics.median(baseline):.2f}s  {[f'{b:.2f}' for b in baseline]}"
        )
        totals = [t for t, _ in results]
        reacts = [r for _, r in results if r is not None]
        print(
            f"  lent nodes          submit->RUNNING: median {statistics.median(totals):.2f}s  {[f'{t:.2f}' for t in totals]}"
        )
        if reacts:
            print(
                f"    submit->first node resumed (bridge): median {statistics.median(reacts):.2f}s"
            )
            print(
                f"    resumed->RUNNING (Slurm scheduler):  median {statistics.median(totals) - statistics.median(reacts):.2f}s"
            )
        print(
            f"  ratio lent/baseline: {statistics.median(totals) / statistics.median(baseline):.2f}x"
        )
        print(
            "  events: "
            + ", ".join(
                f"{s.labels['event']}={int(s.value)}"
                for m in snap.collect()
                for s in m.samples
                if s.name.endswith("_total")
            )
        )
    finally:
        lab.down()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
