"""Benchmark: bridge reconcile passes over a 10,000-node fleet, 1% drained.

Kubernetes side: the API stand-in, over real HTTP, in a child process (so the
CPU time printed is the bridge's own, not the stand-in's).  Slurm side: an
in-process SlurmClient returning NodeStates (benchmark only; the tests use
the real Slurm lab).

Pass 1 starts cold (the first Node LIST) and handles 1% new incidents
(cordon, evict, request replacement); pass 2 has no changes (one watch of
the Node changes since pass 1, no LIST, at or above ``node_watch_min_nodes``);
pass 3 sees 10 nodes resumed; pass 5 is an incident pass of a running bridge
(another 1% drained); pass 6 measures the Python heap.  Goals: a pass under
1 s CPU and 300 MB; calls proportional to changes, not to fleet size.
``--list-every-pass`` turns the Node watch off (the LIST-per-pass baseline).
Prints figures only.

    .venv/bin/python bench/bench_bridge.py [--nodes 10000] [--drained 0.01] [--list-every-pass]
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import multiprocessing as mp
import os
import resource
import time
import tracemalloc

from slurm_hooks.bridge.service import Bridge
from slurm_hooks.bridge.settings import BridgeConfig
from slurm_hooks.core.model import NodeState
from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.k8s.client import KubeClient


def node_name(i: int) -> str:
    return f"gpu{i:05d}"


def serve(n: int, port_q: mp.Queue, stop: mp.Event) -> None:  # type: ignore[type-arg]
    from slurm_hooks_lab.k8s_standin import StandinServer

    server = StandinServer()
    for i in range(n):
        name = node_name(i)
        server.add(
            "nodes",
            {
                "metadata": {
                    "name": name,
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "node.kubernetes.io/instance-type": "p5.48xlarge",
                        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                    },
                    "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                },
                "spec": {"podCIDR": f"10.{i // 256 % 256}.{i % 256}.0/24"},
                "status": {
                    "capacity": {"cpu": "192", "memory": "2097152Ki", "nvidia.com/gpu": "8"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                    "nodeInfo": {
                        "kubeletVersion": "v1.30.2",
                        "containerRuntimeVersion": "containerd://1.7.18",
                    },
                },
            },
        )
    server.start()
    port_q.put(server.url)
    stop.wait()
    server.stop()


class FleetSlurm:
    """In-process SlurmClient (benchmark only)."""

    def __init__(self, n: int, drained: int) -> None:
        self.nodes = {node_name(i): NodeState(node_name(i), "idle") for i in range(n)}
        self.job_lists = 0
        step = max(n // max(drained, 1), 1)
        for k, i in enumerate(range(0, n, step)):
            if k >= drained:
                break
            reason = format_reason(
                DrainReason("XID79", f"{i:08x}", "GPU has fallen off the bus", "gpu3")
            )
            self.nodes[node_name(i)] = NodeState(
                node_name(i), "idle", frozenset({"DRAIN"}), reason=reason
            )

    def list_nodes(self, names=None):  # type: ignore[no-untyped-def]
        return list(self.nodes.values())

    def jobs_on_node(self, name):  # type: ignore[no-untyped-def]
        self.job_lists += 1
        return []

    def list_jobs(self, states=None):  # type: ignore[no-untyped-def]
        self.job_lists += 1
        return []

    def resume(self, name: str) -> None:
        self.nodes[name] = NodeState(name, "idle")

    def drain_more(self, count: int, offset: int) -> None:
        """``count`` more drained nodes, between the first ones."""
        names = [s for s, st in self.nodes.items() if not st.drained]
        step = max(len(names) // max(count, 1), 1)
        for k, name in enumerate(names[offset::step][:count]):
            reason = format_reason(
                DrainReason("XID79", f"{k + 0x10000000:08x}", "GPU has fallen off the bus", "gpu3")
            )
            self.nodes[name] = NodeState(name, "idle", frozenset({"DRAIN"}), reason=reason)


def one_pass(
    bridge: Bridge, label: str, trace: bool = False, profile: str = ""
) -> tuple[float, float]:
    """CPU time without tracemalloc (it slows Python down ~2x); ``trace``
    measures the peak of Python allocations instead; ``profile`` (a file
    name) writes a cProfile of the pass there, timed in process CPU time
    (the goal is CPU: a wall-clock profile is dominated by the wait for
    the stand-in's answers)."""
    if trace:
        tracemalloc.start()
    prof = cProfile.Profile(time.process_time) if profile else None
    slurm = bridge.slurm
    lists0 = getattr(slurm, "job_lists", 0)
    t0 = os.times()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if prof is not None:
        prof.enable()
    result = bridge.reconcile_once()
    if prof is not None:
        prof.disable()
        prof.dump_stats(profile)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    t1 = os.times()
    user, system = t1.user - t0.user, t1.system - t0.system
    job_lists = getattr(slurm, "job_lists", 0) - lists0
    peak = 0
    if trace:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    calls = dict(sorted(result.api_calls.items()))
    steps: dict[str, int] = {}
    for r in result.results:
        steps[type(r.step).__name__] = steps.get(type(r.step).__name__, 0) + 1
    print(
        f"{label:34} cpu {cpu:6.3f} s (user {user:.3f} sys {system:.3f})  wall {wall:6.3f} s"
        + (f"  peak(py) {peak / 2**20:5.1f} MiB" if trace else "")
        + "  "
        f"api calls {sum(calls.values()):4d} {calls}  slurm job lists {job_lists}  steps {steps}"
    )
    return cpu, peak / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--drained", type=float, default=0.01)
    ap.add_argument(
        "--profile", default="", help="write cProfile stats of passes 1 and 2 to PREFIX.N"
    )
    ap.add_argument(
        "--list-every-pass", action="store_true", help="no Node watch: a paged LIST every pass"
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    n, drained = args.nodes, int(args.nodes * args.drained)
    ctx = mp.get_context("fork")
    port_q, stop = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=serve, args=(n, port_q, stop), daemon=True)
    t0 = time.perf_counter()
    proc.start()
    url = port_q.get(timeout=300)
    print(
        f"stand-in with {n} nodes ready in {time.perf_counter() - t0:.1f} s at {url}; {drained} drained"
    )
    try:
        slurm = FleetSlurm(n, drained)
        cfg = BridgeConfig(
            replacement="crd",
            max_concurrent_replacements=drained,
            max_cordoned_fraction=0.05,
            leader_election=False,
            node_watch_min_nodes=0 if args.list_every_pass else BridgeConfig.node_watch_min_nodes,
        )
        bridge = Bridge(slurm, KubeClient(url, timeout=60), cfg)  # type: ignore[arg-type]
        prof = args.profile
        cold, _ = one_pass(
            bridge, f"pass 1: {drained} new incidents (cold)", profile=prof and f"{prof}.1"
        )
        quiet, _ = one_pass(bridge, "pass 2: no changes", profile=prof and f"{prof}.2")
        for name in [s for s, st in slurm.nodes.items() if st.drained][:10]:
            slurm.resume(name)
        one_pass(bridge, "pass 3: 10 resumed")
        one_pass(bridge, "pass 4: no changes")
        slurm.drain_more(drained, 7)
        warm, _ = one_pass(bridge, f"pass 5: {drained} new incidents (warm)")
        _, heap = one_pass(bridge, "pass 6: no changes, tracemalloc on", trace=True)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        mode = "LIST every pass" if args.list_every_pass else "LIST once, then watches"
        print(
            f"summary {n} nodes ({mode}): incident pass cpu {cold:.3f} s cold, {warm:.3f} s warm;"
            f" quiet pass cpu {quiet:.3f} s; max RSS {rss:.0f} MiB; heap peak {heap:.1f} MiB"
            " (goals: < 1 s CPU, < 300 MB)"
        )
    finally:
        stop.set()
        proc.join(10)


if __name__ == "__main__":
    main()
