"""deploy/rbac.yaml grants exactly what the bridge's Kubernetes calls need,
derived from the calls themselves: the executors run against the API
stand-in, which records method and path, and each call is mapped to the
(apiGroup, resource, verb) that RBAC checks.  Before: lending's
``configmaps get`` and ``pods delete`` (on_drain_timeout = "force") were
missing, and ``machines get``, ``nodereplacements get`` were granted although
nothing calls them.  ``nodes watch`` came back with the node cache of the
bridge at fleet size (k8s/cache.py).

Not driven here (they need Slurm in the loop): the pass's node LIST
(service.py) and lending's force delete.  Those two are the same KubeClient
calls on the same paths (nodes_path(), pods_path(ns, name)) and are issued
below through the client directly, so the mapping still covers them."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlsplit

import yaml
from k8s_helpers import pod
from slurm_hooks_lab.k8s_standin import StandinServer, _route

from slurm_hooks.bridge import _exec
from slurm_hooks.bridge.lend_exec import Lender
from slurm_hooks.bridge.replace import ClusterApiReplacer, CrdReplacer
from slurm_hooks.bridge.settings import BridgeConfig, LendingConfig
from slurm_hooks.k8s.client import KubeClient, nodes_path, pods_path
from slurm_hooks.k8s.lease import LeaderElector
from tests.test_k8s_manifests import DEPLOY

VERB = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def rbac_of(method: str, path_qs: str) -> tuple[str, str, str]:
    parts = urlsplit(path_qs)
    res, _ns, name, sub = _route(parts.path)
    watching = "watch=true" in parts.query.split("&") or "watch=1" in parts.query.split("&")
    verb = VERB.get(method) or ("watch" if watching else "get" if name else "list")
    return res.group, res.plural + (f"/{sub}" if sub else ""), verb


def granted() -> set[tuple[str, str, str]]:
    out = set()
    for doc in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()):
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        for rule in doc["rules"]:
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    out |= {(g, r, v) for v in rule["verbs"]}
    return out


def _step(**kw):  # type: ignore[no-untyped-def]
    from types import SimpleNamespace

    return SimpleNamespace(**kw)


def test_rbac_grants_exactly_the_calls_the_bridge_makes() -> None:
    with StandinServer() as api:
        api.add("nodes", {"metadata": {"name": "n1", "labels": {}}, "spec": {}})
        api.add("pods", pod("llm-1", "inference", "n1", labels={"app": "llm"}))
        api.add("configmaps", {"metadata": {"name": "demand", "namespace": "inference"},
                               "data": {"nodes": "1"}})  # fmt: skip
        api.add("machines", {"metadata": {"name": "m1", "namespace": "default"}},
                group="cluster.x-k8s.io")  # fmt: skip
        api.add("machines", {"metadata": {"name": "m2", "namespace": "default"}},
                group="cluster.x-k8s.io")  # fmt: skip
        kube = KubeClient(api.url, retries=0, backoff=0.01)
        cfg = BridgeConfig(
            leader_election=True,
            lending=LendingConfig(enabled=True, pod_selector="app=llm", pod_namespace="inference",
                                  demand_configmap="inference/demand"),
        )  # fmt: skip
        # The pass: one node LIST; pods on a node; a patch that meets a 409 (re-read).
        listed = kube.list(nodes_path())
        nodes = {n["metadata"]["name"]: n for n in listed["items"]}
        # The node cache at fleet size (k8s/cache.py): changes since the LIST.
        list(kube.watch(nodes_path(), listed["metadata"]["resourceVersion"], timeout_seconds=1))
        api.fail_next(1, 409, method="PATCH", path_prefix="/api/v1/nodes")
        _exec.patch_node(kube, nodes, "n1", lambda n: {"spec": {"unschedulable": True}})
        lender = Lender(None, kube, cfg)  # type: ignore[arg-type]  # reads need no Slurm
        lender.read_demand()  # the ConfigMap and the pending pods
        pods = lender._workload_pods("n1") or kube.list(pods_path())["items"]
        _exec.evict_pods(kube, pods)
        api.add("pods", pod("llm-2", "inference", "n1", labels={"app": "llm"}))
        kube.delete(pods_path("inference", "llm-2"))  # on_drain_timeout = "force"
        # Replacement, every mode.
        step = _step(node="n1", slurm_node="n1", incident="inc1", code="GPU_LOST",
                     reason="r", machine="m1", machine_namespace="default")  # fmt: skip
        ClusterApiReplacer(kube, cfg).request(step)
        ClusterApiReplacer(kube, BridgeConfig(capi_mode="delete")).request(
            _step(**{**vars(step), "machine": "m2"})
        )
        CrdReplacer(kube, cfg).request(step)
        # Leader election: create, then renew (get + update).
        t = datetime.now(UTC)
        le = LeaderElector(kube, cfg.namespace, cfg.lease_name, "pod-a", clock=lambda: t)
        assert le.try_acquire() and le.try_acquire()
        calls = {rbac_of(m, p) for m, p in api.requests}
    assert calls == granted(), (sorted(calls - granted()), sorted(granted() - calls))
