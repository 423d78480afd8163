"""Paginated LIST (limit/continue) in the client and the API stand-in, and
the bridge's one job list per pass (issue 16 item 3/5)."""

from __future__ import annotations

import pytest
from slurm_hooks_lab.k8s_standin import StandinServer

from slurm_hooks.core.errors import KubernetesError, SlurmUnavailable
from slurm_hooks.core.model import JobInfo
from slurm_hooks.k8s.client import KubeClient, nodes_path
from slurm_hooks.slurm.jobs_index import jobs_by_node


@pytest.fixture
def api():
    with StandinServer() as server:
        for i in (5, 1, 7, 3, 2, 6, 4):
            labels = {"pool": "gpu" if i % 2 else "cpu"}
            server.add("nodes", {"metadata": {"name": f"n{i}", "labels": labels}, "spec": {}})
        yield server


def names(doc):
    return [n["metadata"]["name"] for n in doc["items"]]


def test_paged_list_returns_every_item_once_in_pages(api):
    kube = KubeClient(api.url, retries=0)
    doc = kube.list(nodes_path(), limit=3)
    assert names(doc) == [f"n{i}" for i in range(1, 8)]
    assert kube.calls["LIST"] == 3  # 3 + 3 + 1
    assert "continue" not in doc["metadata"] and doc["metadata"]["resourceVersion"]


def test_paged_list_with_a_label_selector(api):
    kube = KubeClient(api.url, retries=0)
    assert names(kube.list(nodes_path(), label_selector="pool=gpu", limit=2)) == [
        "n1",
        "n3",
        "n5",
        "n7",
    ]


def test_standin_page_carries_continue_and_remaining_count(api):
    kube = KubeClient(api.url, retries=0)
    page = kube.request("GET", nodes_path(), params={"limit": "2"})
    assert names(page) == ["n1", "n2"] and page["metadata"]["remainingItemCount"] == 5
    token = page["metadata"]["continue"]
    nxt = kube.request("GET", nodes_path(), params={"limit": "2", "continue": token})
    assert names(nxt) == ["n3", "n4"]


def test_expired_continue_token_is_410_and_the_client_lists_again(api):
    kube = KubeClient(api.url, retries=0)
    with pytest.raises(KubernetesError) as err:
        kube.request("GET", nodes_path(), params={"limit": "2", "continue": "not-a-token"})
    assert err.value.status == 410
    real = kube.request
    spoiled = {"n": 0}

    def spoil_first_token(method, path, *, params=None, **kw):
        if params and params.get("continue") and not spoiled["n"]:
            spoiled["n"] += 1
            params = dict(params, **{"continue": "expired"})
        return real(method, path, params=params, **kw)

    kube.request = spoil_first_token  # type: ignore[method-assign]
    doc = kube.list(nodes_path(), limit=3)
    assert spoiled["n"] == 1 and names(doc) == [f"n{i}" for i in range(1, 8)]


class Jobs:
    def __init__(self, jobs, fail=False):
        self.jobs, self.fail, self.lists = jobs, fail, 0

    def list_jobs(self, states=None):
        self.lists += 1
        if self.fail:
            raise SlurmUnavailable("controller down")
        return [j for j in self.jobs if states is None or j.state in states]


def test_jobs_by_node_one_list_for_all_incidents():
    slurm = Jobs(
        [
            JobInfo("1", "a", "RUNNING", "gpu[01-03]"),
            JobInfo("2", "b", "COMPLETING", "gpu05"),
            JobInfo("3", "c", "PENDING", ""),
            JobInfo("4", "d", "RUNNING", "gpu09"),
        ]
    )
    out = jobs_by_node(slurm, ["gpu02", "gpu05", "gpu07"])  # type: ignore[arg-type]
    assert slurm.lists == 1
    assert [j.job_id for j in out["gpu02"]] == ["1"]
    assert [j.job_id for j in out["gpu05"]] == ["2"]
    assert out["gpu07"] == []
    assert jobs_by_node(slurm, []) == {} and slurm.lists == 1  # type: ignore[arg-type]


def test_jobs_by_node_failure_leaves_every_node_busy():
    slurm = Jobs([], fail=True)
    out = jobs_by_node(slurm, ["n1", "n2"])  # type: ignore[arg-type]
    assert set(out) == {"n1", "n2"} and all(v and v[0].state == "UNKNOWN" for v in out.values())
