"""The API stand-in reproduces the server's semantics we rely on."""

from __future__ import annotations

import pytest
from slurm_hooks_lab.k8s_standin import ApiError, StandinServer, json_patch, merge_patch

from slurm_hooks.core.errors import ConflictError, KubernetesError
from slurm_hooks.k8s import client as C
from slurm_hooks.k8s.client import KubeClient
from slurm_hooks.k8s.selectors import label_selector_matches, selector_object_matches


@pytest.fixture
def api():
    with StandinServer() as server:
        yield server


@pytest.fixture
def kc(api):
    return KubeClient(api.url, retries=0)


@pytest.mark.parametrize(
    "selector,labels,expected",
    [
        ("a=b", {"a": "b"}, True),
        ("a==b", {"a": "c"}, False),
        ("a!=b", {}, True),
        ("a", {"a": ""}, True),
        ("!a", {"a": "x"}, False),
        ("a in (x, y),b", {"a": "y", "b": "1"}, True),
        ("a in (x,y)", {}, False),
        ("a notin (x,y)", {}, True),
        ("a notin (x,y)", {"a": "x"}, False),
        ("app.kubernetes.io/name=slurmd", {"app.kubernetes.io/name": "slurmd"}, True),
    ],
)
def test_label_selectors(selector, labels, expected):
    assert label_selector_matches(selector, labels) is expected


def test_selector_objects():
    sel = {
        "matchLabels": {"app": "x"},
        "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}],
    }
    assert selector_object_matches(sel, {"app": "x", "tier": "web"})
    assert not selector_object_matches(sel, {"app": "x", "tier": "db"})
    assert selector_object_matches({}, {"anything": "1"})


def test_merge_patch_rfc7386():
    # RFC 7386 appendix A examples
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": ["b"]}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}
    assert merge_patch([1, 2], {"a": "b", "c": None}) == {"a": "b"}


def test_json_patch_rfc6902():
    doc = {"foo": ["bar", "baz"], "x": {"y": 1}}
    out = json_patch(
        doc,
        [
            {"op": "add", "path": "/foo/1", "value": "qux"},
            {"op": "remove", "path": "/x/y"},
            {"op": "add", "path": "/foo/-", "value": "end"},
            {"op": "copy", "from": "/foo/0", "path": "/first"},
            {"op": "move", "from": "/first", "path": "/moved"},
            {"op": "test", "path": "/moved", "value": "bar"},
            {"op": "replace", "path": "/x", "value": {"z": 2}},
        ],
    )
    assert out == {"foo": ["bar", "qux", "baz", "end"], "x": {"z": 2}, "moved": "bar"}
    assert doc == {"foo": ["bar", "baz"], "x": {"y": 1}}  # input untouched
    with pytest.raises(ApiError) as exc:
        json_patch(doc, [{"op": "test", "path": "/x/y", "value": 2}])
    assert exc.value.code == 422
    with pytest.raises(ApiError):
        json_patch(doc, [{"op": "remove", "path": "/nope"}])


def test_resource_version_bumps_on_every_write(api, kc):
    api.add("nodes", {"metadata": {"name": "n1"}})
    rv1 = int(kc.get(C.nodes_path("n1"))["metadata"]["resourceVersion"])
    rv2 = int(
        kc.patch(C.nodes_path("n1"), {"metadata": {"labels": {"a": "1"}}})["metadata"][
            "resourceVersion"
        ]
    )
    rv3 = int(
        kc.patch(C.nodes_path("n1"), [{"op": "add", "path": "/spec", "value": {}}], "json")[
            "metadata"
        ]["resourceVersion"]
    )
    assert rv1 < rv2 < rv3


def test_json_patch_test_op_guards_a_write(api, kc):
    api.add(
        "nodes",
        {"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}},
    )
    with pytest.raises(KubernetesError) as exc:
        kc.patch(
            C.nodes_path("n1"),
            [
                {"op": "test", "path": "/spec/taints/0/key", "value": "b"},
                {"op": "remove", "path": "/spec/taints/0"},
            ],
            "json",
        )
    assert exc.value.status == 422
    assert kc.get(C.nodes_path("n1"))["spec"]["taints"]


def test_strategic_merge(api, kc):
    api.add(
        "nodes",
        {
            "metadata": {"name": "n1"},
            "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "DiskPressure", "status": "False"},
                ]
            },
        },
    )
    out = kc.patch(
        C.nodes_path("n1"),
        {
            "spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        },
        "strategic",
    )
    # taints are an atomic list: replaced; conditions merge on type
    assert out["spec"]["taints"] == [{"key": "b", "effect": "NoSchedule"}]
    assert out["status"]["conditions"] == [
        {"type": "Ready", "status": "False"},
        {"type": "DiskPressure", "status": "False"},
    ]


def test_strategic_merge_unsupported_for_custom_resources(api, kc):
    api.add("machines", {"metadata": {"name": "m1", "namespace": "capi"}, "spec": {}})
    with pytest.raises(KubernetesError) as exc:
        kc.patch(
            C.machine_path("capi", "m1"), {"metadata": {"annotations": {"a": "b"}}}, "strategic"
        )
    assert exc.value.status == 415
    assert kc.patch(C.machine_path("capi", "m1"), {"metadata": {"annotations": {"a": "b"}}})[
        "metadata"
    ]["annotations"]


def test_put_conflict_and_create_conflict(api, kc):
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l"},
        "spec": {},
    }
    created = kc.create(C.lease_path("ns"), lease)
    with pytest.raises(ConflictError) as exc:
        kc.create(C.lease_path("ns"), lease)
    assert exc.value.reason == "AlreadyExists"
    kc.replace(C.lease_path("ns", "l"), created)
    with pytest.raises(ConflictError) as exc:
        kc.replace(C.lease_path("ns", "l"), created)
    assert exc.value.reason == "Conflict"


def test_delete_and_unknown_paths(api, kc):
    api.add("machines", {"metadata": {"name": "m1", "namespace": "capi"}})
    kc.delete(C.machine_path("capi", "m1"))
    with pytest.raises(KubernetesError) as exc:
        kc.delete(C.machine_path("capi", "m1"))
    assert exc.value.status == 404
    with pytest.raises(KubernetesError) as exc:
        kc.get("/apis/nothing.io/v1/things")
    assert exc.value.status == 404


def test_pods_field_selector(api, kc):
    for name, node in (("a", "n1"), ("b", "n2"), ("c", "n1")):
        api.add(
            "pods", {"metadata": {"name": name, "namespace": "default"}, "spec": {"nodeName": node}}
        )
    items = kc.list(C.pods_path(), field_selector="spec.nodeName=n1")["items"]
    assert sorted(p["metadata"]["name"] for p in items) == ["a", "c"]
    assert kc.list(C.pods_path("other"))["items"] == []


OWNER = [
    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1", "controller": True}
]


def _pods(api, n, labels, ns="default"):
    for i in range(n):
        api.add(
            "pods",
            {
                "metadata": {
                    "name": f"p{i}",
                    "namespace": ns,
                    "labels": labels,
                    "ownerReferences": OWNER,
                },
                "spec": {"nodeName": "n1"},
                "status": {"phase": "Running"},
            },
        )


EVICT = {"apiVersion": "policy/v1", "kind": "Eviction"}


@pytest.mark.parametrize(
    "spec,pods,allowed",
    [
        ({"minAvailable": 2}, 3, 1),
        ({"minAvailable": 3}, 3, 0),
        ({"minAvailable": "50%"}, 3, 1),  # ceil(1.5) = 2 must stay
        ({"maxUnavailable": 1}, 3, 1),
        ({"maxUnavailable": 0}, 3, 0),
        ({"maxUnavailable": "34%"}, 3, 2),  # rounded up as well: ceil(1.02) = 2 may go
    ],
)
def test_pdb_disruptions_allowed_and_eviction(api, kc, spec, pods, allowed):
    _pods(api, pods, {"app": "x"})
    api.add(
        "poddisruptionbudgets",
        {
            "metadata": {"name": "b", "namespace": "default"},
            "spec": {**spec, "selector": {"matchLabels": {"app": "x"}}},
        },
    )
    status = kc.get(C.pdb_path("default", "b"))["status"]
    assert status["disruptionsAllowed"] == allowed and status["expectedPods"] == pods
    evicted = 0
    for i in range(pods):
        try:
            kc.create(C.eviction_path("default", f"p{i}"), {**EVICT, "metadata": {"name": f"p{i}"}})
            evicted += 1
        except KubernetesError as exc:
            assert exc.status == 429 and exc.reason == "TooManyRequests"
    assert evicted == allowed


def test_eviction_of_missing_pod_is_404(api, kc):
    with pytest.raises(KubernetesError) as exc:
        kc.create(C.eviction_path("default", "ghost"), EVICT)
    assert exc.value.status == 404
