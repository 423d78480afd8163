"""deploy/ validated against the official Kubernetes schemas (offline, through
kubernetes-validate's bundled JSON schemas) and our CRD's openAPIV3Schema."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml

kv = pytest.importorskip("kubernetes_validate")

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
K8S_VERSION = "1.30.0"
BUILTIN_GROUPS = ("v1", "apps/", "rbac.authorization.k8s.io/", "policy/", "apiextensions.k8s.io/")


def docs():
    out = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc:
                out.append(pytest.param(doc, id=f"{path.name}#{i}:{doc['kind']}"))
    return out


def crd_schema():
    crd = yaml.safe_load((DEPLOY / "crd-nodereplacement.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize("doc", docs())
def test_manifest_is_valid(doc):
    if doc["apiVersion"].startswith(BUILTIN_GROUPS):
        kv.validate(doc, K8S_VERSION, strict=True)
    else:
        assert doc["kind"] == "NodeReplacement"
        jsonschema.validate(doc, crd_schema())


def test_validation_catches_mistakes():
    deployment = yaml.safe_load((DEPLOY / "deployment.yaml").read_text())
    broken = copy.deepcopy(deployment)
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, K8S_VERSION, strict=True)
    typo = copy.deepcopy(deployment)
    typo["spec"]["template"]["spec"]["serviceAccount_Name"] = "x"
    with pytest.raises(kv.ValidationError):
        kv.validate(typo, K8S_VERSION, strict=True)
    example = yaml.safe_load((DEPLOY / "nodereplacement-example.yaml").read_text())
    del example["spec"]["incident"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(example, crd_schema())


def test_what_the_bridge_creates_matches_the_crd():
    from slurm_hooks.bridge.plan import RequestReplacement
    from slurm_hooks.bridge.replace import CrdReplacer
    from slurm_hooks.bridge.settings import BridgeConfig

    sent = {}

    class Recorder:
        def create(self, path, body):
            sent.update(body)
            return body

    step = RequestReplacement(
        "gpu017",
        "gpu017",
        "7f3a2c1b",
        "XID79",
        "slurm-hooks/1 XID79 inc=7f3a2c1b :: x",
        "m-1",
        "capi",
    )
    CrdReplacer(Recorder(), BridgeConfig(replacement="crd")).request(step)
    jsonschema.validate(sent, crd_schema())
    crd = yaml.safe_load((DEPLOY / "crd-nodereplacement.yaml").read_text())
    assert sent["apiVersion"] == f"{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}"


def test_rbac_covers_every_call_and_no_more():
    rbac = list(yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()))
    cluster_rules = next(d for d in rbac if d["kind"] == "ClusterRole")["rules"]
    granted = {
        (g, r, v)
        for rule in cluster_rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    needed = {
        ("", "nodes", "list"),
        ("", "nodes", "get"),
        ("", "nodes", "patch"),
        ("", "pods", "list"),
        ("", "pods/eviction", "create"),
        ("cluster.x-k8s.io", "machines", "patch"),
        ("cluster.x-k8s.io", "machines", "delete"),
        ("slurm-hooks.io", "nodereplacements", "create"),
    }
    assert needed <= granted
    assert not any(v in ("*", "escalate", "bind", "impersonate") for _, _, v in granted)
    assert not any(r in ("*", "secrets") for _, r, _ in granted)
    role = next(d for d in rbac if d["kind"] == "Role")
    assert {r for rule in role["rules"] for r in rule["resources"]} == {"leases"}
