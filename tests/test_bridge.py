"""The bridge's executor and loop on the API stand-in, with Slurm replaced by
an in-memory SlurmClient (the real-Slurm variant is test_bridge_lab.py)."""

from __future__ import annotations

import dataclasses
import json
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from k8s_helpers import controller, pod, slurmd_pod
from prometheus_client import generate_latest
from slurm_hooks_lab.k8s_standin import StandinServer

from slurm_hooks.bridge import plan as P
from slurm_hooks.bridge.service import Bridge
from slurm_hooks.bridge.settings import BridgeConfig
from slurm_hooks.core.model import JobInfo, NodeState
from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.k8s.client import KubeClient

CFG = BridgeConfig(replacement="crd", max_cordoned_fraction=0.5, leader_election=False, interval=1)
K = P.Keys(CFG.annotation_prefix)


def ours(inc: str = "7f3a2c1b", code: str = "XID79", *, repl: bool = True) -> str:
    """Our reason; ``repl``: the policy marked it for replacement (``repl=requested``),
    which the bridge needs before it asks for one (``replace_on = "policy"``)."""
    extra = {"repl": "requested"} if repl else {}
    return format_reason(DrainReason(code, inc, "GPU has fallen off the bus", "gpu3", extra))


class MemorySlurm:
    """The SlurmClient calls the bridge makes, in memory."""

    def __init__(self, names):
        self.nodes = {n: NodeState(n, "idle") for n in names}
        self.jobs: dict[str, list[JobInfo]] = {}
        self.resumed: list[str] = []
        self.job_queries = 0

    def drain(self, name, reason, state="idle"):
        self.nodes[name] = NodeState(name, state, frozenset({"DRAIN"}), reason=reason)

    def resume(self, name):
        self.resumed.append(name)
        self.nodes[name] = NodeState(name, "idle")

    def get_node(self, name):
        return self.nodes[name]

    def list_nodes(self, names=None):
        return list(self.nodes.values())

    def jobs_on_node(self, name):
        self.job_queries += 1
        return list(self.jobs.get(name, []))

    def list_jobs(self, states=None):
        self.job_queries += 1
        return [j for jobs in self.jobs.values() for j in jobs]


@pytest.fixture
def api():
    with StandinServer() as server:
        for i in range(1, 5):
            server.add("nodes", {"metadata": {"name": f"n{i}", "labels": {}}, "spec": {}})
        yield server


def bridge(api, slurm, cfg=CFG, **kw) -> Bridge:
    return Bridge(slurm, KubeClient(api.url, retries=1, backoff=0.01), cfg, **kw)


def add_pods(api, node):
    rs = controller("ReplicaSet", "web", "rs1")
    api.add("pods", pod(f"web-{node}", "default", node, labels={"app": "web"}, owners=rs))
    ds = controller("DaemonSet", "dcgm", "ds1")
    api.add("pods", pod(f"dcgm-{node}", "kube-system", node, owners=ds))
    api.add("pods", slurmd_pod(node))


def pod_names(api):
    return sorted(p["metadata"]["name"] for p in api.items("pods"))


def test_drain_cordon_evict_replace_once_then_uncordon(api):
    slurm = MemorySlurm(["n1", "n2", "n3", "n4"])
    add_pods(api, "n1")
    b = bridge(api, slurm)
    assert b.reconcile_once().results == ()

    slurm.drain("n1", ours(), state="mixed")
    slurm.jobs["n1"] = [JobInfo("41", "alice", "RUNNING", "n1")]
    r = b.reconcile_once()
    assert [type(x.step).__name__ for x in r.results] == ["Cordon", "Evict"]
    node = api.get("nodes", "n1")
    assert node["spec"]["unschedulable"] is True
    assert {"key": CFG.taint_key, "value": "XID79", "effect": "NoSchedule"} in node["spec"][
        "taints"
    ]
    ann = node["metadata"]["annotations"]
    assert ann[K.incident] == "7f3a2c1b" and ann[K.reason] == ours() and ann[K.cordoned] == "true"
    # DaemonSet pod stays; slurmd stays while Slurm runs a job there
    assert pod_names(api) == ["dcgm-n1", "slurmd-n1"]
    assert api.items("nodereplacements") == []

    # job ends: slurmd evicted, replacement requested once
    slurm.drain("n1", ours(), state="idle")
    slurm.jobs["n1"] = []
    r = b.reconcile_once()
    assert [type(x.step).__name__ for x in r.results] == ["Evict", "RequestReplacement"]
    assert pod_names(api) == ["dcgm-n1"]
    (cr,) = api.items("nodereplacements")
    assert cr["metadata"]["name"] == "n1-7f3a2c1b" and cr["spec"]["incident"] == "7f3a2c1b"
    assert api.get("nodes", "n1")["metadata"]["annotations"][K.replacement] == "7f3a2c1b"

    # steady state: one LIST, nothing else
    api.reset_requests()
    q = slurm.job_queries
    r = b.reconcile_once()
    assert r.results == () and dict(r.api_calls) == {"LIST": 1} and slurm.job_queries == q

    slurm.resume("n1")
    r = b.reconcile_once()
    assert [type(x.step).__name__ for x in r.results] == ["Uncordon"]
    node = api.get("nodes", "n1")
    assert "unschedulable" not in node["spec"] and not node["spec"].get("taints")
    assert not any(k.startswith("slurm-hooks.io/") for k in node["metadata"].get("annotations", {}))
    text = generate_latest(b.metrics.registry).decode()
    assert 'slurm_hooks_bridge_incidents_total{step="replacement_requested"} 1.0' in text
    assert "slurm_hooks_bridge_drain_to_back_seconds_count 1.0" in text
    assert "slurm_hooks_bridge_cordon_to_replacement_seconds_count 1.0" in text
    assert 'slurm_hooks_bridge_api_calls_total{code="200",verb="PATCH"}' in text


def test_what_users_cause_is_cordoned_but_evicts_no_pod_and_replaces_no_machine(api):
    """A drain for what the node's users can cause (a full scratch): the
    node is cordoned and tainted NoSchedule (even where the taint would be
    NoExecute), but no tenant's pod is evicted and, once idle, no
    replacement is asked for; the resume still uncordons."""
    slurm = MemorySlurm(["n1", "n2", "n3", "n4"])
    add_pods(api, "n1")
    b = bridge(api, slurm, dataclasses.replace(CFG, taint_effect="NoExecute"))
    slurm.drain("n1", ours(code="SCRATCH_FULL"), state="mixed")
    slurm.jobs["n1"] = [JobInfo("41", "alice", "RUNNING", "n1")]
    r = b.reconcile_once()
    assert [type(x.step).__name__ for x in r.results] == ["Cordon"]
    node = api.get("nodes", "n1")
    assert node["spec"]["unschedulable"] is True
    assert {"key": CFG.taint_key, "value": "SCRATCH_FULL", "effect": "NoSchedule"} in node["spec"][
        "taints"
    ]
    slurm.drain("n1", ours(code="SCRATCH_FULL"), state="idle")
    slurm.jobs["n1"] = []
    assert b.reconcile_once().results == ()
    assert pod_names(api) == ["dcgm-n1", "slurmd-n1", "web-n1"]
    assert api.items("nodereplacements") == []
    slurm.resume("n1")
    assert [type(x.step).__name__ for x in b.reconcile_once().results] == ["Uncordon"]


class Boom(Exception):
    pass


def test_a_drain_the_policy_did_not_mark_is_repaired_not_replaced(api):
    """``replace_on = "policy"`` (the default): a first XID 79 is the repair
    ladder's (reset, reboot, acceptance), so the machine is cordoned and
    emptied but not handed to the provider; when the policy marks the same
    incident ``repl=requested`` (the ladder gave up) the replacement is asked
    for, once."""
    slurm = MemorySlurm(["n1", "n2", "n3", "n4"])
    add_pods(api, "n1")
    b = bridge(api, slurm)
    slurm.drain("n1", ours(repl=False), state="idle")
    r = b.reconcile_once()
    assert [type(x.step).__name__ for x in r.results] == ["Cordon", "Evict"]
    assert b.reconcile_once().results == ()
    assert api.items("nodereplacements") == []
    assert K.replacement not in api.get("nodes", "n1")["metadata"]["annotations"]

    slurm.drain("n1", ours(), state="idle")  # the policy escalated: repl=requested
    r = b.reconcile_once()
    assert [type(x.step).__name__ for x in r.results] == ["RequestReplacement"]
    (cr,) = api.items("nodereplacements")
    assert cr["spec"]["incident"] == "7f3a2c1b"
    assert b.reconcile_once().results == ()
    assert len(api.items("nodereplacements")) == 1


def test_a_repaired_drain_is_resumed_without_a_replacement(api):
    slurm = MemorySlurm(["n1", "n2", "n3", "n4"])
    b = bridge(api, slurm)
    slurm.drain("n1", ours(repl=False), state="idle")
    b.reconcile_once()
    slurm.resume("n1")  # the ladder's reset and acceptance passed
    r = b.reconcile_once()
    assert [type(x.step).__name__ for x in r.results] == ["Uncordon"]
    assert api.items("nodereplacements") == []


@pytest.mark.parametrize("kill_after", ["Cordon", "Evict", "RequestReplacement"])
def test_killed_mid_way_and_restarted_duplicates_nothing(api, kill_after):
    slurm = MemorySlurm(["n1", "n2", "n3", "n4"])
    add_pods(api, "n1")
    slurm.drain("n1", ours())

    def kill(step):
        if type(step).__name__ == kill_after:
            raise Boom

    with pytest.raises(Boom):
        bridge(api, slurm, after_step=kill).reconcile_once()
    # a fresh process: no memory of the first
    r = bridge(api, slurm).reconcile_once()
    done = [type(x.step).__name__ for x in r.results]
    assert "Cordon" not in done
    assert len(api.items("nodereplacements")) == 1
    # web and slurmd were each evicted exactly once over both runs; the DaemonSet pod stays
    assert api.count("POST", "/eviction") == 2 and pod_names(api) == ["dcgm-n1"]
    assert bridge(api, slurm).reconcile_once().results == ()


def test_replacement_repeated_after_crash_before_record_is_harmless(api):
    """Killed after creating the NodeReplacement but before the annotation:
    the second create answers 409 AlreadyExists and counts as done."""
    slurm = MemorySlurm(["n1", "n2"])
    slurm.drain("n1", ours())
    b = bridge(api, slurm)
    orig = b._rmw

    def crash_on_record(name, current, make_patch):
        body = make_patch(current[name])
        if K.replacement in body["metadata"].get("annotations", {}):
            raise Boom
        return orig(name, current, make_patch)

    b._rmw = crash_on_record
    with pytest.raises(Boom):
        b.reconcile_once()
    r = bridge(api, slurm).reconcile_once()
    (res,) = [x for x in r.results if isinstance(x.step, P.RequestReplacement)]
    assert res.outcome == "done" and "already exists" in res.detail
    assert len(api.items("nodereplacements")) == 1


def test_conflict_is_resolved_by_reading_again(api):
    slurm = MemorySlurm(["n1", "n2"])
    slurm.drain("n1", ours())

    def meddle(step):
        if isinstance(step, P.Cordon):  # someone else writes the node between our steps
            api.store.patch(
                api_res("nodes"),
                "",
                "n1",
                "application/merge-patch+json",
                {"metadata": {"labels": {"other": "writer"}}},
            )

    r = bridge(api, slurm, after_step=meddle).reconcile_once()
    assert all(x.outcome == "done" for x in r.results)
    node = api.get("nodes", "n1")
    assert node["metadata"]["labels"]["other"] == "writer"
    assert node["metadata"]["annotations"][K.evicted] == "7f3a2c1b"
    assert api.count("GET", "/api/v1/nodes/n1") >= 1


def api_res(plural):
    from slurm_hooks_lab.k8s_standin import RESOURCES

    return next(r for r in RESOURCES if r.plural == plural)


def test_foreign_cordon_is_never_uncordoned(api):
    slurm = MemorySlurm(["n1", "n2"])
    api.store.patch(
        api_res("nodes"),
        "",
        "n1",
        "application/merge-patch+json",
        {"spec": {"unschedulable": True}},
    )
    slurm.drain("n1", "slurm-operator: node cordoned")
    b = bridge(api, slurm)
    assert b.reconcile_once().results == ()
    slurm.drain("n1", ours())
    b.reconcile_once()
    node = api.get("nodes", "n1")
    assert K.cordoned not in node["metadata"]["annotations"]
    slurm.resume("n1")
    (res,) = b.reconcile_once().results
    assert isinstance(res.step, P.Uncordon) and res.step.uncordon is False
    node = api.get("nodes", "n1")
    assert node["spec"]["unschedulable"] is True  # still the other party's cordon
    assert not node["spec"].get("taints")


def test_slinky_operator_echo_keeps_our_cordon(api):
    slurm = MemorySlurm(["n1", "n2"])
    slurm.drain("n1", ours())
    b = bridge(api, slurm, cfg=dataclasses.replace(CFG, replacement="none"))
    b.reconcile_once()
    slurm.drain("n1", "slurm-operator: Node cordoned")  # the operator rewrote the reason
    assert b.reconcile_once().results == ()
    assert api.get("nodes", "n1")["spec"]["unschedulable"] is True


def test_pdb_blocks_eviction_until_allowed(api):
    slurm = MemorySlurm(["n1", "n2"])
    for i, node in enumerate(["n1", "n2"]):
        api.add("pods", pod(f"inf-{i}", "default", node, labels={"app": "inf"}))
    api.add(
        "poddisruptionbudgets",
        {
            "metadata": {"name": "inf", "namespace": "default"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "inf"}}},
        },
    )
    slurm.drain("n1", ours())
    b = bridge(api, slurm)
    r = b.reconcile_once()
    outcomes = {type(x.step).__name__: x.outcome for x in r.results}
    assert outcomes == {"Cordon": "done", "Evict": "partial", "RequestReplacement": "skipped"}
    assert "inf-0" in pod_names(api) and api.items("nodereplacements") == []
    # a third replica appears elsewhere: the budget now allows one disruption
    api.add("pods", pod("inf-2", "default", "n3", labels={"app": "inf"}))
    r = b.reconcile_once()
    assert {type(x.step).__name__: x.outcome for x in r.results} == {
        "Evict": "done",
        "RequestReplacement": "done",
    }
    assert "inf-0" not in pod_names(api)


def test_dry_run_writes_nothing(api):
    slurm = MemorySlurm(["n1", "n2"])
    slurm.drain("n1", ours())
    api.reset_requests()
    r = bridge(
        api, slurm, cfg=dataclasses.replace(CFG, dry_run=True, leader_election=True)
    ).reconcile_once()
    assert {x.outcome for x in r.results} == {"dry-run"} and len(r.results) == 3
    assert api.count("PATCH") == api.count("POST") == api.count("PUT") == 0


def test_two_replicas_one_acts(api):
    slurm = MemorySlurm(["n1", "n2"])
    slurm.drain("n1", ours())
    cfg = dataclasses.replace(CFG, leader_election=True, namespace="slurm-hooks")
    a, b = bridge(api, slurm, cfg, identity="a"), bridge(api, slurm, cfg, identity="b")
    ra, rb = a.reconcile_once(), b.reconcile_once()
    assert ra.leader and not rb.leader and rb.results == ()
    assert len(api.items("nodereplacements")) == 1
    lease = api.get("leases", "slurm-hooks-bridge", "slurm-hooks")
    assert lease["spec"]["holderIdentity"] == "a"


def test_cluster_api_annotates_the_machine(api):
    slurm = MemorySlurm(["n1", "n2", "n3", "n4"])
    api.store.patch(
        api_res("nodes"),
        "",
        "n1",
        "application/merge-patch+json",
        {
            "metadata": {
                "annotations": {
                    P.CAPI_MACHINE_ANNOTATION: "md-0-abc",
                    P.CAPI_NAMESPACE_ANNOTATION: "capi",
                }
            }
        },
    )
    api.add(
        "machines",
        {"metadata": {"name": "md-0-abc", "namespace": "capi"}, "spec": {"clusterName": "c"}},
    )
    slurm.drain("n1", ours())
    bridge(api, slurm, cfg=dataclasses.replace(CFG, replacement="cluster-api")).reconcile_once()
    machine = api.get("machines", "md-0-abc", "capi")
    assert machine["metadata"]["annotations"] == {P.CAPI_REMEDIATE_ANNOTATION: ""}

    slurm.drain("n2", ours("00000002"))
    (res,) = [
        x
        for x in bridge(api, slurm, cfg=dataclasses.replace(CFG, replacement="cluster-api"))
        .reconcile_once()
        .results
        if isinstance(x.step, P.RequestReplacement)
    ]
    assert res.outcome == "failed" and "not managed by Cluster API" in res.detail


class Receiver(BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = self.headers["Idempotency-Key"]
        dup = any(k == key for k, _ in self.seen)
        self.seen.append((key, body))
        self.send_response(409 if dup else 202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


def test_webhook_with_idempotency_key(api):
    Receiver.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/replace"
        cfg = dataclasses.replace(CFG, replacement="webhook", webhook_url=url)
        cfg.validate()
        slurm = MemorySlurm(["n1", "n2"])
        slurm.drain("n1", ours())
        bridge(api, slurm, cfg).reconcile_once()
        ((key, body),) = Receiver.seen
        assert key == "7f3a2c1b" and body["node"] == "n1" and body["code"] == "XID79"
        # replay (as after a crash before the record): the receiver says 409, which is done
        b = bridge(api, slurm, cfg)
        step = P.RequestReplacement("n1", "n1", "7f3a2c1b", "XID79", ours(), None, None)
        assert "already" in b.replacer.request(step)
    finally:
        server.shutdown()


def test_spare_is_resumed_once(api):
    slurm = MemorySlurm(["n1", "n2", "n3", "n4"])
    slurm.drain("n3", ours("5pare003", "SPARE"))
    slurm.drain("n4", ours("5pare004", "SPARE"))
    slurm.drain("n1", ours())
    cfg = dataclasses.replace(CFG, spare_pool="n[3-4]", replacement="none")
    b = bridge(api, slurm, cfg)
    b.reconcile_once()
    b.reconcile_once()
    assert slurm.resumed == ["n3"]
    assert api.get("nodes", "n1")["metadata"]["annotations"][K.spare] == "n3"


def test_spare_that_faulted_meanwhile_is_not_resumed(api):
    """The spare was planned while it held SPARE; by the write it carries a
    fault's drain (ours, another code): the door refuses to lift it."""
    slurm = MemorySlurm(["n1", "n2", "n3"])
    slurm.drain("n3", ours("5pare003", "SPARE"))
    slurm.drain("n1", ours())
    planned = slurm.get_node

    def faulted(name):
        if name == "n3":
            slurm.drain("n3", ours("0c0ffee0", "XID79"))
        return planned(name)

    slurm.get_node = faulted
    cfg = dataclasses.replace(CFG, spare_pool="n3", replacement="none")
    r = bridge(api, slurm, cfg).reconcile_once()
    assert slurm.resumed == []
    assert slurm.nodes["n3"].drained and "XID79" in slurm.nodes["n3"].reason
    assert any(s.outcome == "failed" for s in r.results)


def test_slurm_unreachable_fails_the_pass_not_the_loop(api):
    from slurm_hooks.core.errors import SlurmUnavailable

    class Down(MemorySlurm):
        def list_nodes(self, names=None):
            raise SlurmUnavailable("slurmctld not responding")

    r = bridge(api, Down(["n1"])).reconcile_once()
    assert r.error and "slurmctld" in r.error


def test_cordon_cap_defers(api):
    slurm = MemorySlurm(["n1", "n2", "n3", "n4"])
    for i in (1, 2, 3):
        slurm.drain(f"n{i}", ours(f"0000000{i}"))
    r = bridge(
        api, slurm, cfg=dataclasses.replace(CFG, replacement="none", evict=False)
    ).reconcile_once()
    assert [x.step.node for x in r.results] == ["n1", "n2"]
    assert [d.slurm_node for d in r.plan.deferred] == ["n3"]


def test_rest_backend_without_url_is_refused_naming_the_key(tmp_path):
    """The rest backend needs ``[bridge] slurm_rest_url``: say so at start-up
    instead of the backend's "give exactly one of socket= or url="."""
    from click.testing import CliRunner

    from slurm_hooks.cli import main

    with pytest.raises(ValueError, match="slurm_rest_url is required"):
        BridgeConfig().validate(slurm_backend="rest")
    BridgeConfig(slurm_rest_url="http://127.0.0.1:6820").validate(slurm_backend="rest")
    BridgeConfig().validate(slurm_backend="cli")
    BridgeConfig().validate()  # on load: [general] is another section
    conf = tmp_path / "c.toml"
    conf.write_text('[general]\nslurm_backend = "rest"\n')
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("")
    r = CliRunner().invoke(
        main, ["bridge", "run", "--once", "--config", str(conf), "--kubeconfig", str(kubeconfig)]
    )
    assert r.exit_code != 0
    assert f"{conf}:bridge.slurm_rest_url: slurm_rest_url is required" in r.output
    assert "socket=" not in r.output


def test_leader_that_stalls_past_its_lease_stops_acting(api):
    # A leader stalls mid-pass (a hung call) past leaseDuration; meanwhile a
    # second replica takes the lease over.  The first must check its lease
    # before its next write and stop, not request the replacement as well.
    slurm = MemorySlurm(["n1", "n2"])
    slurm.drain("n1", ours())
    add_pods(api, "n1")
    now = [datetime(2024, 5, 1, 12, 0, tzinfo=UTC)]
    cfg = dataclasses.replace(CFG, leader_election=True, lease_duration=90)
    b = bridge(api, slurm, cfg, identity="b", clock=lambda: now[0])

    def stall(step):
        if isinstance(step, P.Cordon):
            now[0] += timedelta(seconds=200)
            assert b.elector is not None and b.elector.try_acquire()

    a = bridge(api, slurm, cfg, identity="a", clock=lambda: now[0], after_step=stall)
    result = a.reconcile_once()
    assert [type(r.step).__name__ for r in result.outcomes("done")] == ["Cordon"]
    assert api.count("POST", "/eviction") == 0
    assert api.items("nodereplacements") == []
    lease = api.get("leases", "slurm-hooks-bridge", "slurm-hooks")
    assert lease["spec"]["holderIdentity"] == "b"


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ('taint_key = "slurm hooks/fault"', "taint_key"),
        ('taint_key = "Bad_Prefix.io/fault"', "taint_key"),
        ('annotation_prefix = "slurm-hooks.io/x"', "annotation_prefix"),
        (f'node_label = "{"x" * 64}"', "node_label"),
    ],
)
def test_invalid_kubernetes_key_names_are_refused_on_load(table, key):
    """A key Kubernetes refuses would make every patch fail with 422 on every
    pass: refuse it when the config is read, naming the key."""
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.core.errors import ConfigError

    with pytest.raises(ConfigError, match=key):
        config_mod.parse(f"[bridge]\n{table}\n")
    config_mod.parse('[bridge]\ntaint_key = "example.com/fault"\n')  # a valid one loads
