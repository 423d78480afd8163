"""The bridge at fleet size keeps only what it reads, and lists pods once per
pass: the cut-down Node/Pod views, and one pod LIST for many evictions."""

from __future__ import annotations

from k8s_helpers import controller, pod, slurmd_pod
from slurm_hooks_lab.k8s_standin import StandinServer
from test_bridge import CFG, K, MemorySlurm, bridge, ours

from slurm_hooks.bridge import plan as P
from slurm_hooks.bridge.views import node_view, pod_view

FULL_NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "n1",
        "uid": "u1",
        "resourceVersion": "42",
        "labels": {"pool": "gpu"},
        "annotations": {K.incident: "abc"},
        "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
    },
    "spec": {
        "unschedulable": True,
        "taints": [{"key": "k", "effect": "NoSchedule"}],
        "providerID": "aws:///i-1",
        "podCIDR": "10.0.0.0/24",
    },
    "status": {
        "images": [{"names": ["x" * 100], "sizeBytes": 1}] * 50,
        "conditions": [
            {"type": "MemoryPressure", "status": "False", "message": "m" * 200},
            {"type": "Ready", "status": "True", "message": "kubelet is posting ready status"},
        ],
    },
}


def test_node_view_keeps_every_field_the_bridge_reads_and_drops_the_rest():
    v = node_view(FULL_NODE)
    assert v == {
        "metadata": {
            "name": "n1",
            "uid": "u1",
            "resourceVersion": "42",
            "labels": {"pool": "gpu"},
            "annotations": {K.incident: "abc"},
        },
        "spec": {
            "unschedulable": True,
            "taints": [{"key": "k", "effect": "NoSchedule"}],
            "providerID": "aws:///i-1",
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    # The planner's readers give the same answers on the view as on the object.
    assert P.node_name(v) == P.node_name(FULL_NODE)
    assert P.node_annotations(v) == P.node_annotations(FULL_NODE)
    assert P.is_unschedulable(v) and P.is_unschedulable(FULL_NODE)
    assert node_view({"metadata": {"name": "bare"}}) == {"metadata": {"name": "bare"}, "spec": {}}


def test_pod_view_keeps_what_eviction_decides_on():
    rs = controller("DaemonSet", "dcgm", "ds1")
    full = pod("dcgm-n1", "kube-system", "n1", owners=rs)
    full["status"] = {"phase": "Running", "containerStatuses": [{"name": "c"}]}
    v = pod_view(full)
    assert v["status"] == {"phase": "Running"}
    assert v["spec"]["nodeName"] == "n1"
    assert v["metadata"]["ownerReferences"] == full["metadata"]["ownerReferences"]
    assert P.pods_to_evict([v], keep_slurmd=False, cfg=CFG) == []  # still a DaemonSet pod


def _fleet(n: int) -> StandinServer:
    server = StandinServer()
    for i in range(1, n + 1):
        server.add("nodes", {"metadata": {"name": f"n{i}", "labels": {}}, "spec": {}})
    return server


def _pods(server: StandinServer, node: str) -> None:
    rs = controller("ReplicaSet", "web", "rs1")
    server.add("pods", pod(f"web-{node}", "default", node, labels={"app": "web"}, owners=rs))
    server.add("pods", slurmd_pod(node))


def test_many_evictions_one_pod_list_and_only_their_pods_go():
    with _fleet(6) as api:
        for n in ("n1", "n2", "n3", "n5"):
            _pods(api, n)
        slurm = MemorySlurm([f"n{i}" for i in range(1, 7)])
        for n, inc in (("n1", "00000001"), ("n2", "00000002"), ("n3", "00000003")):
            slurm.drain(n, ours(inc))
        b = bridge(api, slurm)
        lists: list[str] = []
        b.kube.on_call = lambda verb, path, status, took: (
            lists.append(path) if verb == "LIST" else None
        )
        r = b.reconcile_once()
        assert sorted(type(x.step).__name__ for x in r.outcomes("done")).count("Evict") == 3
        assert sum(1 for p in lists if "/pods" in p) == 1
        left = sorted(p["metadata"]["name"] for p in api.items("pods"))
        # n5 is healthy: its pods stay; the drained nodes' pods are evicted.
        assert [p for p in left if p.endswith("n5")] == ["slurmd-n5", "web-n5"]
        assert not [p for p in left if p.endswith(("n1", "n2", "n3"))]
        # Every cordon came before the pod LIST (no pod can land in between).
        kinds = [type(x.step).__name__ for x in r.results]
        assert kinds[:3] == ["Cordon"] * 3


def test_one_eviction_lists_only_that_nodes_pods():
    with _fleet(3) as api:
        _pods(api, "n1")
        _pods(api, "n2")
        slurm = MemorySlurm(["n1", "n2", "n3"])
        slurm.drain("n1", ours())
        b = bridge(api, slurm)
        lists: list[str] = []
        b.kube.on_call = lambda verb, path, status, took: (
            lists.append(path) if verb == "LIST" else None
        )
        b.reconcile_once()
        assert sum(1 for p in lists if "/pods" in p) == 1
        left = sorted(p["metadata"]["name"] for p in api.items("pods"))
        assert left == ["slurmd-n2", "web-n2"]
