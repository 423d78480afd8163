"""Lending on the real Slurm lab (cli backend) with the Kubernetes API
stand-in: real LEND drains, a real pending 2-node job as the test user, real
resumes, evictions through the stand-in's Eviction API and its PDBs."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from k8s_helpers import controller, pod, slurmd_pod
from prometheus_client import generate_latest
from slurm_hooks_lab.k8s_standin import RESOURCES, StandinServer

from slurm_hooks.bridge import lending as L
from slurm_hooks.bridge.service import Bridge
from slurm_hooks.bridge.settings import BridgeConfig, LendingConfig
from slurm_hooks.core.reason import DrainReason, format_reason, try_parse_reason
from slurm_hooks.k8s.client import KubeClient
from slurm_hooks.store.audit import AuditLog

pytestmark = pytest.mark.slurm

LC = LendingConfig(
    enabled=True,
    pod_selector="app=llm",
    pod_namespace="inference",
    idle_seconds=0,
    min_idle_nodes=0,
    max_lent_fraction=1.0,
    max_lend_per_pass=4,
    min_lend_seconds=60,
    min_slurm_seconds=600,
    settle_seconds=30,
)
CFG = BridgeConfig(leader_election=False, interval=1, max_cordoned_fraction=0.5, lending=LC)
K = L.LendKeys(CFG.annotation_prefix)


def resource(plural: str):
    return next(r for r in RESOURCES if r.plural == plural)


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def pending_pod(name: str, gpus: int = 8) -> dict:
    return {
        "metadata": {"name": name, "namespace": "inference", "labels": {"app": "llm"}},
        "spec": {
            "containers": [{"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def running_pod(name: str, node: str, priority: int = 0) -> dict:
    labels = {"app": "llm", "pod": name}
    rs = controller("ReplicaSet", "llm", "rs")
    return pod(name, "inference", node, labels=labels, owners=rs, priority=priority)


@pytest.fixture
def world(fresh_lab, tmp_path):
    with StandinServer() as api:
        for name in fresh_lab.node_names:
            api.add("nodes", {"metadata": {"name": name, "labels": {}}, "spec": {}})
            api.add("pods", slurmd_pod(name))
        clock = Clock()
        audit = AuditLog(tmp_path / "audit.jsonl", actor="bridge", clock=clock)
        bridge = Bridge(
            fresh_lab.client(),
            KubeClient(api.url, retries=1, backoff=0.01),
            CFG,
            identity="t",
            clock=clock,
            audit=audit,
        )
        try:
            yield fresh_lab, api, bridge, clock, audit
        finally:
            fresh_lab.reset()  # leave the shared lab as we found it


def lent_slurm(lab) -> list[str]:
    return sorted(n.name for n in lab.client().list_nodes() if L.lend_incident(n))


def labelled(api) -> list[str]:
    return sorted(
        n["metadata"]["name"]
        for n in api.items("nodes")
        if (n["metadata"].get("labels") or {}).get(LC.lent_label) == "true"
    )


def moves(result) -> list[str]:
    return sorted(result.lending.moves()) if result.lending else []


def schedule(api, lent: list[str], extra_on: str) -> None:
    """What the scheduler would do: the pending pods run on the lent nodes."""
    for p in api.items("pods"):
        if p["status"]["phase"] == "Pending":
            api.store.delete(resource("pods"), "inference", p["metadata"]["name"])
    for name in lent:
        api.add("pods", running_pod(f"llm-{name}", name))
    api.add("pods", running_pod(f"llm-{extra_on}-b", extra_on, priority=1000))


def test_a_tenants_pod_labelled_as_inference_takes_no_node_from_slurm(world):
    """Labels are the pod's creator's to choose: a tenant's pending pod in a
    namespace of theirs, labelled like the inference pods, pulls no idle node
    out of Slurm; the same pod in ``pod_namespace`` does."""
    lab, api, bridge, clock, audit = world
    bridge.reconcile_once()  # bookkeeping: idle-since
    forged = pending_pod("grab-0")
    forged["metadata"]["namespace"] = "tenant"
    api.add("pods", forged)
    clock.advance(5)
    r = bridge.reconcile_once()
    assert moves(r) == [] and lent_slurm(lab) == [] and labelled(api) == []
    assert not any(n.drained for n in lab.client().list_nodes())

    api.add("pods", pending_pod("llm-0"))  # the same ask where the site runs inference
    clock.advance(5)
    r = bridge.reconcile_once()
    (node,) = lent_slurm(lab)
    assert moves(r) == [f"Lend {node}"]


def test_lend_on_demand_then_reclaim_exactly_two_for_a_pending_job(world, job_dir, sbatch):
    lab, api, bridge, clock, audit = world
    names = lab.node_names

    r = bridge.reconcile_once()  # no demand yet: bookkeeping only
    assert moves(r) == [] and lent_slurm(lab) == []
    n1 = api.get("nodes", names[0])
    assert K.idle_since in n1["metadata"]["annotations"]
    assert n1["spec"]["taints"][0]["key"] == LC.reserve_taint_key

    for i in range(4):
        api.add("pods", pending_pod(f"llm-pending-{i}"))
    clock.advance(5)
    r = bridge.reconcile_once()
    assert moves(r) == [f"Lend {n}" for n in names]
    assert lent_slurm(lab) == names and labelled(api) == names
    reason = lab.client().get_node(names[0]).reason
    assert try_parse_reason(reason).code == "LEND" and "lent to kubernetes inference" in reason
    assert not api.get("nodes", names[0])["spec"].get("taints")

    schedule(api, names, extra_on=names[0])
    # a PDB protects the pod on names[1]: its eviction answers 429 for now
    api.add(
        "poddisruptionbudgets",
        {
            "metadata": {"name": "llm-one", "namespace": "inference"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"pod": f"llm-{names[1]}"}}},
        },
    )
    clock.advance(30)
    assert moves(bridge.reconcile_once()) == []  # no Slurm work: everything stays lent

    script = job_dir / "train.sh"
    script.write_text("#!/bin/sh\nsleep 60\n")
    job_id = sbatch(script, "-N", "2", "-o", str(job_dir / "out.%j"))
    job = lab.client().get_job(job_id)
    assert job.state == "PENDING"

    clock.advance(60)  # past min_lend_seconds
    r = bridge.reconcile_once()
    # fewest / lowest-priority pods first: names[1..3] carry one pod each,
    # names[0] two (one of high priority); names[1] is held by its PDB.
    reclaims = [x for x in r.lending.results if isinstance(x.step, L.Reclaim)]
    assert sorted(x.step.slurm_node for x in reclaims) == [names[1], names[2]]
    by_node = {x.step.slurm_node: x.outcome for x in reclaims}
    assert by_node == {names[1]: "partial", names[2]: "done"}
    assert lent_slurm(lab) == [names[0], names[1], names[3]]
    assert api.get("nodes", names[1])["spec"]["unschedulable"] is True
    assert labelled(api) == [names[0], names[3]]

    clock.advance(10)
    r = bridge.reconcile_once()  # still blocked; and no third node is taken
    assert [x.outcome for x in r.lending.results if isinstance(x.step, L.Reclaim)] == ["partial"]
    assert lent_slurm(lab) == [names[0], names[1], names[3]]

    api.store.delete(resource("poddisruptionbudgets"), "inference", "llm-one")
    clock.advance(10)
    r = bridge.reconcile_once()
    assert moves(r) == [f"Reclaim {names[1]}"]
    lab.wait_job(job_id, lambda j: j.state == "RUNNING", timeout=30)
    job = lab.client().get_job(job_id)
    assert sorted(lab.client().list_nodes(job.nodes), key=lambda n: n.name)[0].name in names
    assert lent_slurm(lab) == [names[0], names[3]]
    pods = {p["metadata"]["name"] for p in api.items("pods")}
    assert f"llm-{names[1]}" not in pods and f"llm-{names[2]}" not in pods
    assert f"llm-{names[0]}" in pods and f"slurmd-{names[1]}" in pods  # slurmd stays
    back = api.get("nodes", names[2])
    assert (
        back["spec"]["unschedulable"] is True and K.reclaimed_at in back["metadata"]["annotations"]
    )

    text = generate_latest(bridge.metrics.registry).decode()
    assert 'slurm_hooks_lending_events_total{event="lent"} 4.0' in text
    assert 'slurm_hooks_lending_events_total{event="returned"} 2.0' in text
    hours = bridge.metrics.gpu_hours_lent._value.get()
    assert hours > 0  # 4 nodes x 8 GPUs x the clock's minutes
    actions = [e["action"] for e in audit.entries()]
    assert actions.count("lend.lent") == 4 and actions.count("lend.returned") == 2


def test_fault_on_a_lent_node_goes_to_replacement_not_back_to_slurm(world):
    lab, api, bridge, clock, audit = world
    bridge = Bridge(
        bridge.slurm,
        bridge.kube,
        dataclasses.replace(CFG, replacement="crd"),
        identity="t",
        clock=clock,
        audit=audit,
    )
    api.add("pods", pending_pod("llm-0"))
    r = bridge.reconcile_once()
    (node,) = lent_slurm(lab)
    assert moves(r) == [f"Lend {node}"]
    api.store.delete(resource("pods"), "inference", "llm-0")  # scheduled:
    api.add("pods", running_pod(f"llm-{node}", node))

    # the hooks find an XID on the lent node: the fault reason replaces LEND
    # ... and the policy marks it for replacement (``repl=requested``): the
    # bridge's default ``replace_on = "policy"`` asks for none without it.
    fault = format_reason(
        DrainReason(
            "XID79", "dead0079", "GPU has fallen off the bus", "gpu3", {"repl": "requested"}
        )
    )
    lab.client().update_reason(node, fault)
    clock.advance(5)
    r = bridge.reconcile_once()
    assert {type(x.step).__name__ for x in r.results} >= {"Cordon", "Evict", "RequestReplacement"}
    (withdraw,) = [x for x in r.lending.results if isinstance(x.step, L.Reclaim)]
    assert withdraw.step.resume is False and withdraw.outcome == "done"
    state = lab.client().get_node(node)
    assert state.drained and state.reason == fault  # never resumed by lending
    (cr,) = api.items("nodereplacements")
    assert cr["spec"]["incident"] == "dead0079"
    k = api.get("nodes", node)
    assert labelled(api) == [] and k["spec"]["unschedulable"] is True
    assert K.lent not in k["metadata"]["annotations"]
    assert f"llm-{node}" not in {p["metadata"]["name"] for p in api.items("pods")}
    assert moves(bridge.reconcile_once()) == []  # settled: nothing more from lending


def test_dry_run_changes_nothing(world):
    lab, api, bridge, clock, audit = world
    dry = Bridge(
        bridge.slurm,
        bridge.kube,
        dataclasses.replace(CFG, lending=dataclasses.replace(LC, dry_run=True)),
        identity="t",
        clock=clock,
    )
    api.add("pods", pending_pod("llm-0"))
    r = dry.reconcile_once()
    assert [x.outcome for x in r.lending.results] == ["dry-run"]
    assert lent_slurm(lab) == [] and labelled(api) == []
