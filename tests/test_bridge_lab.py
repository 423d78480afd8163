"""The bridge on the real Slurm lab (cli backend) and the Kubernetes API
stand-in: real drains, real jobs, real resumes."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner
from k8s_helpers import controller, pod, slurmd_pod
from slurm_hooks_lab.k8s_standin import StandinServer

from slurm_hooks.bridge import plan as P
from slurm_hooks.bridge.service import Bridge
from slurm_hooks.bridge.settings import BridgeConfig
from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.k8s.client import KubeClient

pytestmark = pytest.mark.slurm

CFG = BridgeConfig(replacement="crd", max_cordoned_fraction=0.5, interval=1, lease_duration=10)
K = P.Keys(CFG.annotation_prefix)


def ours(inc: str, code: str = "XID79", *, repl: bool = True) -> str:
    """Our reason; ``repl``: the policy marked it for replacement, which the
    bridge needs before it asks for one (``replace_on = "policy"``)."""
    extra = {"repl": "requested"} if repl else {}
    return format_reason(DrainReason(code, inc, "GPU has fallen off the bus", "gpu3", extra))


@pytest.fixture
def world(fresh_lab):
    """The lab with one Kubernetes node per Slurm node, each with a web pod,
    a DaemonSet pod and its slurmd pod (as under Slinky)."""
    with StandinServer() as api:
        for name in fresh_lab.node_names:
            api.add(
                "nodes",
                {
                    "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                    "spec": {},
                },
            )
            rs = controller("ReplicaSet", "web", "rs")
            api.add("pods", pod(f"web-{name}", "default", name, owners=rs))
            ds = controller("DaemonSet", "dcgm", "ds")
            api.add("pods", pod(f"dcgm-{name}", "kube-system", name, owners=ds))
            api.add("pods", slurmd_pod(name))
        try:
            yield fresh_lab, api
        finally:
            fresh_lab.reset()  # leave the shared lab as we found it


def make_bridge(lab, api, cfg=CFG, **kw) -> Bridge:
    return Bridge(
        lab.client(), KubeClient(api.url, retries=1, backoff=0.01), cfg, identity="t", **kw
    )


def pods_on(api, node):
    return sorted(p["metadata"]["name"] for p in api.items("pods") if p["spec"]["nodeName"] == node)


def test_drain_job_end_replacement_resume(world, job_dir, sbatch):
    lab, api = world
    node = lab.node_names[-1]
    script = job_dir / "sleep.sh"
    script.write_text("#!/bin/sh\nsleep 60\n")
    job_id = sbatch(script, "-w", node, "-o", str(job_dir / "out.%j"))
    lab.wait_job(job_id, lambda j: j.state == "RUNNING", timeout=30)
    slurm = lab.client()
    slurm.drain(node, ours("0b1dface", repl=False))
    b = make_bridge(lab, api)

    r = b.reconcile_once()
    assert [type(x.step).__name__ for x in r.results] == ["Cordon", "Evict"]
    k = api.get("nodes", node)
    assert (
        k["spec"]["unschedulable"] is True
        and k["metadata"]["annotations"][K.incident] == "0b1dface"
    )
    assert pods_on(api, node) == [f"dcgm-{node}", f"slurmd-{node}"]  # job running: slurmd stays
    assert api.items("nodereplacements") == []

    slurm.cancel(job_id)
    lab.wait_node(node, lambda n: not n.busy, timeout=30)
    r = b.reconcile_once()
    assert [type(x.step).__name__ for x in r.results] == ["Evict"]
    assert pods_on(api, node) == [f"dcgm-{node}"]
    assert api.items("nodereplacements") == []  # the repair ladder's first

    # The policy gives up on repair: Slurm's reason says repl=requested.
    slurm.update_reason(node, ours("0b1dface"))
    r = b.reconcile_once()
    assert [type(x.step).__name__ for x in r.results] == ["RequestReplacement"]
    (cr,) = api.items("nodereplacements")
    assert cr["spec"]["incident"] == "0b1dface" and cr["spec"]["nodeName"] == node

    assert b.reconcile_once().results == ()  # nothing twice
    assert len(api.items("nodereplacements")) == 1

    slurm.resume(node)
    lab.wait_node(node, lambda n: not n.drained, timeout=30)
    r = b.reconcile_once()
    assert [type(x.step).__name__ for x in r.results] == ["Uncordon"]
    k = api.get("nodes", node)
    assert "unschedulable" not in k["spec"] and not k["spec"].get("taints")


class Killed(BaseException):
    """Not an Exception: nothing in the bridge may swallow it."""


@pytest.mark.parametrize("kill_after", [P.Cordon, P.Evict, P.RequestReplacement])
def test_killed_and_restarted_no_duplicates(world, kill_after):
    lab, api = world
    node = lab.node_names[0]
    lab.client().drain(node, ours("cafe0001"))

    def kill(step):
        if isinstance(step, kill_after):
            raise Killed

    with pytest.raises(Killed):
        make_bridge(lab, api, after_step=kill).reconcile_once()
    make_bridge(lab, api).reconcile_once()  # a new process after the crash
    assert make_bridge(lab, api).reconcile_once().results == ()
    assert len(api.items("nodereplacements")) == 1
    assert api.count("POST", "/eviction") == 2  # web and slurmd, once each
    assert pods_on(api, node) == [f"dcgm-{node}"]


def test_foreign_cordon_never_uncordoned(world):
    lab, api = world
    node = lab.node_names[1]
    slurm = lab.client()
    kube = KubeClient(api.url)
    kube.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}})  # an admin's cordon
    slurm.drain(node, "bad fan, ticket 4711")
    b = make_bridge(lab, api, dataclasses.replace(CFG, replacement="none"))
    assert b.reconcile_once().results == ()  # an admin's drain is not ours
    slurm.update_reason(node, ours("f00dbabe"))
    assert [type(x.step).__name__ for x in b.reconcile_once().results] == ["Cordon", "Evict"]
    slurm.resume(node)
    lab.wait_node(node, lambda n: not n.drained, timeout=30)
    (res,) = b.reconcile_once().results
    assert isinstance(res.step, P.Uncordon) and res.step.uncordon is False
    k = api.get("nodes", node)
    assert k["spec"]["unschedulable"] is True  # still the admin's
    assert not k["spec"].get("taints") and K.incident not in k["metadata"]["annotations"]


def test_spare_resumed_through_slurm(world):
    lab, api = world
    bad, spare = lab.node_names[0], lab.node_names[2]
    slurm = lab.client()
    slurm.drain(spare, ours("5pare002", "SPARE"))
    slurm.drain(bad, ours("dead0001"))
    cfg = dataclasses.replace(CFG, spare_pool=spare, replacement="none", evict=False)
    b = make_bridge(lab, api, cfg)
    b.reconcile_once()
    assert not lab.client().get_node(spare).drained
    assert api.get("nodes", bad)["metadata"]["annotations"][K.spare] == spare
    assert b.reconcile_once().results == ()


def test_cli_run_once(world, tmp_path, monkeypatch):
    from slurm_hooks.cli.bridge import command

    lab, api = world
    node = lab.node_names[-1]
    lab.client().drain(node, ours("c11c11c1"))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        f"current-context: s\nclusters:\n- name: s\n  cluster: {{server: '{api.url}'}}\n"
        "contexts:\n- name: s\n  context: {cluster: s, user: u}\nusers:\n- name: u\n  user: {token: t}\n"
    )
    conf = tmp_path / "config.toml"
    conf.write_text('[bridge]\nreplacement = "crd"\nmax_cordoned_fraction = 0.5\n')
    monkeypatch.setenv("SLURM_CONF", str(lab.slurm_conf))
    from slurm_hooks.core import config

    # as registered in SECTIONS by the integrator (harmless once it is)
    monkeypatch.setitem(config.SECTIONS, "bridge", "slurm_hooks.bridge.settings:BridgeConfig")
    runner = CliRunner()
    dry = runner.invoke(
        command,
        ["run", "--once", "--dry-run", "--config", str(conf), "--kubeconfig", str(kubeconfig)],
    )
    assert dry.exit_code == 0, dry.output
    assert "dry-run" in dry.output and "unschedulable" not in api.get("nodes", node)["spec"]
    res = runner.invoke(
        command, ["run", "--once", "--config", str(conf), "--kubeconfig", str(kubeconfig)]
    )
    assert res.exit_code == 0, res.output
    assert "Cordon" in res.output and api.get("nodes", node)["spec"]["unschedulable"] is True
    assert len(api.items("nodereplacements")) == 1
