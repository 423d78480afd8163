"""The bridge under Slinky, on the real Slurm lab: NodeSet pods in the API
stand-in, the lab's NodeSet controller (lab/slurm_hooks_lab/nodeset_controller.py)
mirroring cordons into ``slurm-operator:`` drains and recreating deleted pods
on spare machines with the same slurmd, and the bridge moving a faulty
node's slurmd pod.  Assertions are on what scontrol and the API say."""

from __future__ import annotations

import time

import pytest
from slurm_hooks_lab.k8s_standin import StandinServer
from slurm_hooks_lab.lab import TEST_USER
from slurm_hooks_lab.nodeset_controller import NodeSetController, machine

from slurm_hooks.bridge import slinky_plan as sp
from slurm_hooks.bridge.service import Bridge
from slurm_hooks.bridge.settings import BridgeConfig
from slurm_hooks.bridge.slinky_exec import Verdict
from slurm_hooks.core.ownership import node_ownership
from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.detect.probes.commands import run
from slurm_hooks.k8s.client import KubeClient
from slurm_hooks.slurm.door import SlurmDoor

pytestmark = pytest.mark.slurm

CFG = BridgeConfig(
    node_mapping="slinky",
    replacement="crd",
    max_cordoned_fraction=0.5,
    leader_election=False,
    interval=1,
)
K = sp.SlinkyKeys(CFG.annotation_prefix)
SPARES = ("m5", "m6")


def ours(inc: str) -> str:
    return format_reason(DrainReason("XID79", inc, "GPU has fallen off the bus", "gpu3"))


class Acceptance:
    """The acceptance runner handed to the bridge: records each run."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, str]] = []

    def __call__(self, slurm_node: str, machine_name: str) -> Verdict:
        self.runs.append((slurm_node, machine_name))
        return Verdict(True, "lab acceptance")


@pytest.fixture
def slinky(fresh_lab):
    """Machines m1..m4 carry NodeSet pods gpu-0..3 (Slurm n1..n4); m5, m6 are spares."""
    hosts = fresh_lab.node_names
    with StandinServer() as api:
        for i in range(1, len(hosts) + 3):
            api.add("nodes", machine(f"m{i}"))
        ctl = NodeSetController(api, fresh_lab, hosts)
        ctl.seed([f"m{i}" for i in range(1, len(hosts) + 1)])
        try:
            yield fresh_lab, api, ctl
        finally:
            for h in hosts:
                fresh_lab.start_slurmd(h)
            fresh_lab.reset()


def bridge(lab, api, acceptor, **kw) -> Bridge:
    kube = KubeClient(api.url, retries=1, backoff=0.01)
    return Bridge(lab.client(), kube, CFG, identity="t", acceptor=acceptor, **kw)


def pod_of(api, host):
    pods = [p for p in api.items("pods") if p["spec"].get("hostname") == host]
    assert len(pods) == 1, pods
    return pods[0]


def finished(api, lab, hosts) -> bool:
    for n in api.items("nodes"):
        ann = n["metadata"].get("annotations") or {}
        if ann.get(K.slurm_node) in hosts and ann.get(K.done) != ann.get(K.incident):
            return False
    return all(not lab.client().get_node(h).drained for h in hosts) and all(
        any(
            (n["metadata"].get("annotations") or {}).get(K.slurm_node) == h
            for n in api.items("nodes")
        )
        for h in hosts
    )


def drive(lab, api, ctl, make_bridge, hosts, *, timeout=60.0, restart_operator_at=None, lag=0.0):
    """Alternate operator and bridge passes until the incidents on ``hosts``
    are finished; ``make_bridge()`` may be called again after a kill.
    ``lag``: seconds from an operator pass to the bridge's (two loops that
    do not wait for each other)."""
    b = make_bridge()
    deadline = time.monotonic() + timeout
    passes = 0
    while time.monotonic() < deadline:
        ctl.reconcile_once()
        time.sleep(lag)
        try:
            b.reconcile_once()
        except Killed:
            b = make_bridge()  # the bridge restarted
        passes += 1
        if restart_operator_at == passes:
            ctl = NodeSetController(api, lab, ctl.hostnames)  # the operator restarted
        if finished(api, lab, hosts):
            return ctl
        time.sleep(0.3)
    pods = {p["metadata"]["name"]: p["metadata"].get("annotations") for p in api.items("pods")}
    raise AssertionError(
        f"not finished after {timeout}s: {lab.client().list_nodes()} {ctl.events} {pods}"
    )


class Killed(Exception):
    pass


def assert_clean(lab, api, host, faulty, spare):
    """Back in service on the spare; the faulty machine cordoned for repair;
    no cordon, annotation or operator drain left behind."""
    state = lab.client().get_node(host)
    # a reason left on a node in service claims nothing (24.11 keeps it after a resume)
    assert not state.drained and not state.down and not node_ownership(state).claimed, state
    pod = pod_of(api, host)
    assert pod["spec"]["nodeName"] == spare
    ann = pod["metadata"].get("annotations") or {}
    assert sp.POD_CORDON not in ann and K.incident not in ann
    new = api.get("nodes", spare)
    assert not new["spec"].get("unschedulable") and not new["spec"].get("taints")
    assert not (new["metadata"].get("annotations") or {})
    old = api.get("nodes", faulty)
    assert old["spec"]["unschedulable"] is True
    assert [t["key"] for t in old["spec"]["taints"]] == [CFG.taint_key]
    assert old["metadata"]["annotations"][sp.NODE_CORDON_REASON].startswith("slurm-hooks/1 XID79")
    # The reservation that held the node through the move is gone (Slurm's
    # own words, not our reading of them).
    listed = lab.client().raw("scontrol", "-o", "show", "reservation")
    assert "ReservationName=" not in listed, listed


def test_replacement_moves_the_slurmd_pod_and_leaves_foreign_drains(slinky):
    lab, api, ctl = slinky
    # An unrelated machine cordoned by someone else: the operator drains n4.
    api.store.patch(
        next(r for r in _res() if r.plural == "nodes"),
        "",
        "m4",
        "application/merge-patch+json",
        {"spec": {"unschedulable": True}},
    )
    ctl.reconcile_once()
    n4 = lab.client().get_node("n4")
    assert n4.drained and n4.reason.startswith("slurm-operator: Node (m4) was cordoned")

    SlurmDoor(lab.client()).drain("n2", ours("aa000002"))
    acceptance = Acceptance()
    ctl = drive(lab, api, ctl, lambda: bridge(lab, api, acceptance), ["n2"])

    assert_clean(lab, api, "n2", "m2", "m5")
    assert acceptance.runs == [("n2", "m5")]
    assert api.count("DELETE", "/pods/gpu-1") == 1
    assert len(api.items("nodereplacements")) == 1
    # The operator's own drain on the unrelated node is untouched.
    assert lab.client().get_node("n4").reason == n4.reason
    assert not (api.get("nodes", "m4")["metadata"].get("annotations") or {}).get(K.incident)
    # Stable: more passes of both change nothing (no re-drain by the operator).
    b = bridge(lab, api, acceptance)
    for _ in range(3):
        ctl.reconcile_once()
        res = b.reconcile_once()
        assert not res.results, res.results
    assert_clean(lab, api, "n2", "m2", "m5")


def test_bridge_killed_after_every_write_and_operator_restarted(slinky):
    """A kill after each step and inside each journal write (the side effect
    done, the journal not): the pod is deleted once, acceptance and the
    replacement request happen once, the node comes back once."""
    lab, api, ctl = slinky
    SlurmDoor(lab.client()).drain("n3", ours("bb000003"))
    acceptance = Acceptance()
    killed_in_rmw: set[str] = set()

    def make():
        b = bridge(lab, api, acceptance, after_step=_raise)
        now: list[str] = []
        step_inner, rmw_inner = b._slinky_step, b._rmw

        def step(st, current):
            now[:] = [type(st).__name__]
            return step_inner(st, current)

        def rmw(name, current, make_patch):
            # The journal write after a side effect is lost once per kind.
            label = now[0] if now else ""
            if label in JOURNALLED_AFTER and label not in killed_in_rmw:
                killed_in_rmw.add(label)
                raise Killed(label)
            return rmw_inner(name, current, make_patch)

        b._slinky_step, b._rmw = step, rmw
        return b

    drive(lab, api, ctl, make, ["n3"], timeout=90, restart_operator_at=4)
    assert_clean(lab, api, "n3", "m3", "m5")
    assert api.count("DELETE", "/pods/gpu-2") == 1
    assert len(api.items("nodereplacements")) == 1
    assert {"Reserve", "Reassert", "Accept", "Release"} <= killed_in_rmw
    # The reservation made before the kill was found again, not made twice
    # (a second create is refused as a duplicate: journalled as failed).
    ann = api.get("nodes", "m3")["metadata"]["annotations"]
    assert ann[K.reserved] == "bb000003" and K.reserve_failed not in ann, ann
    # Acceptance re-runs only where its journal write was lost (once here).
    assert acceptance.runs == [("n3", "m5")] * 2


def test_two_faults_at_once_use_both_spares(slinky):
    lab, api, ctl = slinky
    SlurmDoor(lab.client()).drain("n1", ours("cc000001"))
    SlurmDoor(lab.client()).drain("n3", ours("cc000003"))
    acceptance = Acceptance()
    drive(lab, api, ctl, lambda: bridge(lab, api, acceptance), ["n1", "n3"], timeout=90)
    spares = {pod_of(api, h)["spec"]["nodeName"] for h in ("n1", "n3")}
    assert spares == set(SPARES)
    assert_clean(lab, api, "n1", "m1", pod_of(api, "n1")["spec"]["nodeName"])
    assert_clean(lab, api, "n3", "m3", pod_of(api, "n3")["spec"]["nodeName"])
    assert sorted(acceptance.runs) == sorted(
        [
            ("n1", pod_of(api, "n1")["spec"]["nodeName"]),
            ("n3", pod_of(api, "n3")["spec"]["nodeName"]),
        ]
    )


def test_a_waiting_job_does_not_start_on_the_new_machine_before_acceptance(slinky):
    """A user's job that can run only on n2 waits while n2 is held.  When the
    moved pod's slurmd registers, the operator sets the node IDLE (its status
    sync, at the end of a reconcile) and drains it for the pod's mark only in
    its next reconcile: Slurm may start the job in between, on a machine
    nobody has accepted yet.  The job must still be pending when acceptance
    runs, and start on n2 once it is back."""
    lab, api, ctl = slinky
    SlurmDoor(lab.client()).drain("n2", ours("dd000002"))
    res = run(["runuser", "-u", TEST_USER, "--", "sbatch", "--parsable", "-w", "n2", "-N1",
               "--chdir=/tmp", "-o", "/dev/null", "--wrap", "sleep 600"],
              timeout=30, env=lab.env())  # fmt: skip
    job = res.stdout.strip().split(";")[0]
    seen: list[str] = []

    class Watching(Acceptance):
        def __call__(self, slurm_node: str, machine_name: str) -> Verdict:
            seen.append(lab.client().get_job(job).state)
            return super().__call__(slurm_node, machine_name)

    acceptance = Watching()
    try:
        drive(lab, api, ctl, lambda: bridge(lab, api, acceptance), ["n2"], timeout=90, lag=3)
        assert acceptance.runs == [("n2", "m5")]
        assert seen == ["PENDING"], f"job {job} was {seen} at acceptance: {ctl.events}"
        assert_clean(lab, api, "n2", "m2", "m5")
        deadline = time.monotonic() + 30
        while lab.client().get_job(job).state != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.5)
        started = lab.client().get_job(job)
        assert started.state == "RUNNING" and started.nodes == "n2", started
    finally:
        run(["scancel", "--", job], timeout=30, env=lab.env(), check=False)


# -- helpers --------------------------------------------------------------------------

#: Steps whose journal write follows their side effect.
JOURNALLED_AFTER = ("Reserve", "Reassert", "Accept", "Release", "RequestReplacement")


def _res():
    from slurm_hooks_lab.k8s_standin import RESOURCES

    return RESOURCES


def _raise(step):
    raise Killed(f"after {type(step).__name__}")
