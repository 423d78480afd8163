"""Watches (issue 16 item 5): the stand-in streams changes after a
resourceVersion as the API server does, the client reads them, the bridge's
Node list is kept by LIST-then-watch on a large fleet, and one incident's
evicted and replacement annotations go in one PATCH."""

from __future__ import annotations

import pytest
from slurm_hooks_lab.k8s_standin import RESOURCES, StandinServer
from test_bridge import CFG, K, MemorySlurm, add_pods, bridge, ours

from slurm_hooks.bridge import plan as P
from slurm_hooks.bridge.views import NODE_VIEW, node_view
from slurm_hooks.core.errors import KubernetesError
from slurm_hooks.k8s.cache import WatchedList
from slurm_hooks.k8s.client import KubeClient, nodes_path

NODES = next(r for r in RESOURCES if r.plural == "nodes")
MERGE = "application/merge-patch+json"


@pytest.fixture
def api():
    with StandinServer() as server:
        for i in range(1, 5):
            pool = "gpu" if i % 2 else "cpu"
            server.add("nodes", {"metadata": {"name": f"n{i}", "labels": {"pool": pool}}})
        yield server


def _patch(api, name, body):
    return api.store.patch(NODES, "", name, MERGE, body)


def test_watch_streams_changes_after_a_version_then_a_bookmark(api):
    kube = KubeClient(api.url, retries=0)
    rv = kube.list(nodes_path())["metadata"]["resourceVersion"]
    _patch(api, "n1", {"spec": {"unschedulable": True}})
    api.add("nodes", {"metadata": {"name": "n9", "labels": {}}})
    api.store.delete(NODES, "", "n2")
    events = list(kube.watch(nodes_path(), rv, timeout_seconds=1))
    kinds = [(k, o["metadata"].get("name")) for k, o in events]
    assert kinds == [("MODIFIED", "n1"), ("ADDED", "n9"), ("DELETED", "n2"), ("BOOKMARK", None)]
    assert events[0][1]["spec"]["unschedulable"] is True
    # the bookmark says how far the stream got: watching from there is quiet
    last = events[-1][1]["metadata"]["resourceVersion"]
    assert last == str(api.store.rv)
    assert [k for k, _ in kube.watch(nodes_path(), last, timeout_seconds=1)] == ["BOOKMARK"]
    assert kube.calls["WATCH"] == 2


def test_watch_selector_sees_objects_leave_and_enter_it(api):
    kube = KubeClient(api.url, retries=0)
    doc = kube.list(nodes_path(), label_selector="pool=gpu")
    assert sorted(n["metadata"]["name"] for n in doc["items"]) == ["n1", "n3"]
    _patch(api, "n1", {"metadata": {"labels": {"pool": "cpu"}}})  # leaves
    _patch(api, "n2", {"metadata": {"labels": {"pool": "gpu"}}})  # enters
    _patch(api, "n4", {"metadata": {"labels": {"x": "y"}}})  # never matched: not shown
    events = list(
        kube.watch(
            nodes_path(),
            doc["metadata"]["resourceVersion"],
            label_selector="pool=gpu",
            timeout_seconds=1,
        )
    )
    assert [(k, o["metadata"].get("name")) for k, o in events[:-1]] == [
        ("DELETED", "n1"),
        ("ADDED", "n2"),
    ]


def test_watch_delivers_a_change_made_while_it_waits(api):
    kube = KubeClient(api.url, retries=0)
    rv = str(api.store.rv)
    stream = kube.watch(nodes_path(), rv, timeout_seconds=2)
    import threading

    threading.Timer(0.3, _patch, (api, "n3", {"spec": {"unschedulable": True}})).start()
    events = [(k, o["metadata"].get("name")) for k, o in stream]
    assert events == [("MODIFIED", "n3"), ("BOOKMARK", None)]


def test_too_old_version_is_a_410_error_event(api):
    kube = KubeClient(api.url, retries=0)
    rv = str(api.store.rv)
    for i in range(5):
        _patch(api, "n1", {"metadata": {"labels": {"i": str(i)}}})
    api.store.set_history(2)
    with pytest.raises(KubernetesError) as err:
        list(kube.watch(nodes_path(), rv, timeout_seconds=1))
    assert err.value.status == 410 and err.value.reason == "Expired"


def test_watch_item_view_cuts_objects_like_the_list(api):
    kube = KubeClient(api.url, retries=0)
    rv = str(api.store.rv)
    _patch(
        api,
        "n1",
        {
            "metadata": {"managedFields": [{"manager": "kubelet"}]},
            "status": {"images": [{"names": ["x"]}], "conditions": [{"type": "Ready"}]},
        },
    )
    ((kind, obj), _) = list(kube.watch(nodes_path(), rv, item_view=NODE_VIEW))
    assert kind == "MODIFIED"
    assert obj == node_view(api.get("nodes", "n1"))
    assert "managedFields" not in obj["metadata"]


def test_watched_list_lists_once_then_applies_changes(api):
    kube = KubeClient(api.url, retries=0)
    wl = WatchedList(kube, nodes_path(), page=2, item_view=NODE_VIEW)
    assert sorted(n for _, n in wl.refresh()) == ["n1", "n2", "n3", "n4"]
    assert (kube.calls["LIST"], wl.lists) == (2, 1)  # two pages
    _patch(api, "n1", {"spec": {"unschedulable": True}})
    api.store.delete(NODES, "", "n4")
    items = wl.refresh()
    assert sorted(n for _, n in items) == ["n1", "n2", "n3"]
    assert items[("", "n1")]["spec"]["unschedulable"] is True
    assert (kube.calls["LIST"], kube.calls["WATCH"]) == (2, 1)
    # nothing changed: one watch, nothing listed
    wl.refresh()
    assert (kube.calls["LIST"], kube.calls["WATCH"]) == (2, 2)


def test_watched_list_lists_again_after_410(api):
    kube = KubeClient(api.url, retries=0)
    wl = WatchedList(kube, nodes_path(), page=500, item_view=NODE_VIEW)
    wl.refresh()
    for i in range(5):
        _patch(api, "n2", {"metadata": {"labels": {"i": str(i)}}})
    api.store.set_history(1)
    items = wl.refresh()
    assert items[("", "n2")]["metadata"]["labels"]["i"] == "4"
    assert (wl.lists, wl.watches, kube.calls["LIST"]) == (2, 1, 2)
    # and the version moved on: the next refresh is a watch again
    wl.refresh()
    assert (wl.lists, wl.watches) == (2, 2)


# -- the bridge with the Node watch ------------------------------------------------

WATCH_CFG = CFG.__class__(**{**CFG.__dict__, "node_watch_min_nodes": 1})


def test_bridge_watches_nodes_between_passes_and_sees_a_foreign_cordon(api):
    slurm = MemorySlurm(["n1", "n2", "n3", "n4"])
    b = bridge(api, slurm, cfg=WATCH_CFG)
    assert b.reconcile_once().api_calls == {"LIST": 1}
    quiet = b.reconcile_once()
    assert quiet.results == () and dict(quiet.api_calls) == {"WATCH": 1}
    # An admin cordons n2 between passes; then Slurm drains it with our reason.
    _patch(api, "n2", {"spec": {"unschedulable": True}})
    slurm.drain("n2", ours("0000beef"))
    r = b.reconcile_once()
    assert [type(x.step).__name__ for x in r.results][0] == "Cordon"
    assert K.cordoned not in api.get("nodes", "n2")["metadata"]["annotations"]
    slurm.resume("n2")
    (res,) = b.reconcile_once().results
    assert isinstance(res.step, P.Uncordon) and res.step.uncordon is False
    node = api.get("nodes", "n2")
    assert node["spec"]["unschedulable"] is True  # still the admin's cordon
    assert "LIST" not in b.reconcile_once().api_calls


def test_bridge_below_the_threshold_lists_every_pass(api):
    slurm = MemorySlurm(["n1", "n2"])
    b = bridge(api, slurm)  # 4 nodes < node_watch_min_nodes
    b.reconcile_once()
    assert dict(b.reconcile_once().api_calls) == {"LIST": 1}


def test_evicted_and_replacement_annotations_go_in_one_patch_and_replace_once(api):
    slurm = MemorySlurm(["n1", "n2", "n3", "n4"])
    add_pods(api, "n1")
    b = bridge(api, slurm, cfg=WATCH_CFG)
    slurm.drain("n1", ours())
    r = b.reconcile_once()
    assert [type(x.step).__name__ for x in r.results] == ["Cordon", "Evict", "RequestReplacement"]
    assert all(x.outcome == "done" for x in r.results)
    # cordon PATCH + one PATCH with both annotations; one replacement POST
    assert r.api_calls["PATCH"] == 2
    ann = api.get("nodes", "n1")["metadata"]["annotations"]
    assert ann[K.evicted] == ann[K.replacement] == "7f3a2c1b"
    assert len(api.items("nodereplacements")) == 1
    again = b.reconcile_once()
    assert again.results == () and "POST" not in again.api_calls
    assert len(api.items("nodereplacements")) == 1


def test_failed_replacement_still_records_the_eviction(api):
    slurm = MemorySlurm(["n1", "n2"])
    add_pods(api, "n1")
    slurm.drain("n1", ours())
    b = bridge(api, slurm)
    api.fail_next(1, 500, method="POST", path_prefix="/apis/slurm-hooks.io")
    r = b.reconcile_once()
    outcomes = {type(x.step).__name__: x.outcome for x in r.results}
    assert outcomes == {"Cordon": "done", "Evict": "done", "RequestReplacement": "failed"}
    ann = api.get("nodes", "n1")["metadata"]["annotations"]
    assert ann[K.evicted] == "7f3a2c1b" and K.replacement not in ann
    # next pass: only the replacement, once
    r = b.reconcile_once()
    assert [type(x.step).__name__ for x in r.results] == ["RequestReplacement"]
    assert len(api.items("nodereplacements")) == 1


def test_list_view_falls_back_to_the_plain_view_for_an_odd_item(api):
    api.add("nodes", {"metadata": {"name": "odd", "labels": {"rank": 1}}, "spec": {}})
    kube = KubeClient(api.url, retries=0)
    items = kube.list(nodes_path(), limit=2, item_view=NODE_VIEW)["items"]
    odd = next(n for n in items if n["metadata"]["name"] == "odd")
    assert odd == node_view(api.get("nodes", "odd"))
    assert len(items) == 5


def test_decoded_views_name_exactly_the_viewed_fields():
    from slurm_hooks.bridge import views as V

    node = V.NodeItem.__annotations__
    assert set(V._NodeMeta.__annotations__) == set(V.NODE_METADATA)
    assert set(V._NodeSpec.__annotations__) == set(V.NODE_SPEC)
    assert set(node) == {"metadata", "spec", "status"}
    assert set(V._PodMeta.__annotations__) == set(V.POD_METADATA)
    assert set(V._PodSpec.__annotations__) == set(V.POD_SPEC)


def test_watched_list_without_the_watch_verb_lists_every_time(api):
    kube = KubeClient(api.url, retries=0)
    wl = WatchedList(kube, nodes_path(), item_view=NODE_VIEW)
    wl.refresh()
    api.fail_next(1, 403, method="GET", path_prefix="/api/v1/nodes")
    _patch(api, "n3", {"spec": {"unschedulable": True}})
    assert wl.refresh()[("", "n3")]["spec"]["unschedulable"] is True
    assert wl.watch_refused and (wl.lists, wl.watches) == (2, 1)
    wl.refresh()
    assert (wl.lists, wl.watches) == (3, 1)


def test_watch_from_version_zero_starts_with_every_object(api):
    kube = KubeClient(api.url, retries=0)
    events = list(kube.watch(nodes_path(), "0", label_selector="pool=cpu", timeout_seconds=1))
    assert [(k, o["metadata"].get("name")) for k, o in events[:-1]] == [
        ("ADDED", "n2"),
        ("ADDED", "n4"),
    ]
    assert events[-1][0] == "BOOKMARK"


def test_namespaced_watch_sees_only_its_namespace_and_evictions_as_deleted(api):
    from k8s_helpers import pod

    kube = KubeClient(api.url, retries=0)
    rv = str(api.store.rv)
    api.add("pods", pod("a", "team1", "n1"))
    api.add("pods", pod("b", "team2", "n1"))
    kube.create(
        "/api/v1/namespaces/team1/pods/a/eviction",
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a"}},
    )
    events = list(kube.watch("/api/v1/namespaces/team1/pods", rv, timeout_seconds=1))
    assert [(k, o["metadata"].get("name")) for k, o in events[:-1]] == [
        ("ADDED", "a"),
        ("DELETED", "a"),
    ]
