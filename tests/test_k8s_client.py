"""KubeClient at the HTTP level, against the loopback API stand-in."""

from __future__ import annotations

import base64
import time

import pytest
import requests
from slurm_hooks_lab.k8s_standin import StandinServer

from slurm_hooks.core.errors import ConfigError, ConflictError, KubernetesError
from slurm_hooks.k8s import client as C
from slurm_hooks.k8s.client import KubeClient


@pytest.fixture
def api():
    with StandinServer() as server:
        server.add("nodes", {"metadata": {"name": "n1", "labels": {"pool": "gpu"}}, "spec": {}})
        server.add("nodes", {"metadata": {"name": "n2", "labels": {"pool": "cpu"}}, "spec": {}})
        yield server


def client(api, **kw) -> KubeClient:
    kw.setdefault("retries", 3)
    kw.setdefault("backoff", 0.01)
    kw.setdefault("timeout", 5.0)
    return KubeClient(api.url, **kw)


def test_get_list_and_selectors(api):
    c = client(api)
    assert c.get(C.nodes_path("n1"))["kind"] == "Node"
    lst = c.list(C.nodes_path(), label_selector="pool=gpu")
    assert lst["kind"] == "NodeList" and [n["metadata"]["name"] for n in lst["items"]] == ["n1"]
    assert c.calls == {"GET": 1, "LIST": 1}


def test_not_found_is_a_status(api):
    with pytest.raises(KubernetesError) as exc:
        client(api).get(C.nodes_path("nope"))
    assert exc.value.status == 404 and exc.value.reason == "NotFound"
    assert 'nodes "nope" not found' in str(exc.value)


def test_stale_resource_version_is_a_conflict(api):
    c = client(api)
    node = c.get(C.nodes_path("n1"))
    c.patch(C.nodes_path("n1"), {"metadata": {"labels": {"x": "1"}}})
    with pytest.raises(ConflictError) as exc:
        c.patch(
            C.nodes_path("n1"),
            {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}},
        )
    assert exc.value.status == 409 and exc.value.reason == "Conflict"
    node["spec"]["unschedulable"] = True
    with pytest.raises(ConflictError):
        c.replace(C.nodes_path("n1"), node)
    # re-read and retry succeeds
    fresh = c.get(C.nodes_path("n1"))
    fresh["spec"]["unschedulable"] = True
    assert c.replace(C.nodes_path("n1"), fresh)["spec"]["unschedulable"] is True


def test_create_twice_is_already_exists(api):
    c = client(api)
    body = {
        "apiVersion": "slurm-hooks.io/v1alpha1",
        "kind": "NodeReplacement",
        "metadata": {"name": "n1-abc"},
        "spec": {"nodeName": "n1", "incident": "abc", "code": "XID79"},
    }
    created = c.create(C.replacement_path("slurm-hooks"), body)
    assert created["metadata"]["uid"] and created["metadata"]["namespace"] == "slurm-hooks"
    with pytest.raises(ConflictError) as exc:
        c.create(C.replacement_path("slurm-hooks"), body)
    assert exc.value.reason == "AlreadyExists"


def test_get_retries_5xx_with_backoff(api):
    c = client(api)
    api.fail_next(2, 503, method="GET")
    api.reset_requests()
    assert c.get(C.nodes_path("n1"))["metadata"]["name"] == "n1"
    assert api.count("GET") == 3


def test_get_gives_up_after_retries(api):
    c = client(api, retries=2)
    api.fail_next(10, 500, method="GET")
    api.reset_requests()
    with pytest.raises(KubernetesError) as exc:
        c.get(C.nodes_path("n1"))
    assert exc.value.status == 500 and api.count("GET") == 3


def test_patch_is_not_retried_on_5xx(api):
    c = client(api)
    api.fail_next(1, 503, method="PATCH")
    api.reset_requests()
    with pytest.raises(KubernetesError) as exc:
        c.patch(C.nodes_path("n1"), {"metadata": {"labels": {"a": "b"}}})
    assert exc.value.status == 503 and api.count("PATCH") == 1
    # nothing was written by the failed call; the next one works
    assert (
        c.patch(C.nodes_path("n1"), {"metadata": {"labels": {"a": "b"}}})["metadata"]["labels"]["a"]
        == "b"
    )


def test_eviction_429_is_returned_not_retried(api):
    api.add(
        "pods",
        {
            "metadata": {"name": "p1", "namespace": "default", "labels": {"app": "x"}},
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running"},
        },
    )
    api.add(
        "poddisruptionbudgets",
        {
            "metadata": {"name": "pdb", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}},
        },
    )
    c = client(api)
    api.reset_requests()
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "p1", "namespace": "default"},
    }
    started = time.monotonic()
    with pytest.raises(KubernetesError) as exc:
        c.create(C.eviction_path("default", "p1"), body)
    assert exc.value.status == 429 and exc.value.reason == "TooManyRequests"
    assert api.count("POST") == 1 and time.monotonic() - started < 0.9  # Retry-After: 1 not slept


def test_list_retries_429(api):
    c = client(api)
    api.fail_next(1, 429, method="GET")
    api.reset_requests()
    assert c.list(C.nodes_path())["items"]
    assert api.count("GET") == 2


def test_unauthorized():
    with StandinServer(token="s3cret") as api:
        with pytest.raises(KubernetesError) as exc:
            KubeClient(api.url, token="wrong", retries=0).list(C.nodes_path())
        assert exc.value.status == 401 and exc.value.reason == "Unauthorized"
        assert KubeClient(api.url, token="s3cret").list(C.nodes_path())["items"] == []


def test_token_file_is_read_again_after_rotation(tmp_path, monkeypatch):
    token = tmp_path / "token"
    token.write_text("one\n")
    with StandinServer(token="one") as api:
        c = KubeClient(api.url, token_file=str(token), retries=0)
        c.list(C.nodes_path())
        token.write_text("two")
        api.token = "two"
        monkeypatch.setattr(C, "TOKEN_REREAD_S", 0.0)
        c.list(C.nodes_path())


def test_timeout_is_an_error(api):
    api.delay = 0.5
    c = client(api, timeout=0.1, retries=0)
    with pytest.raises(KubernetesError) as exc:
        c.get(C.nodes_path("n1"))
    assert exc.value.status is None and "timed out" in str(exc.value).lower()


def test_unreachable_server_is_retried_then_an_error():
    c = KubeClient("http://127.0.0.1:9", retries=1, backoff=0.01, timeout=1)
    with pytest.raises(KubernetesError) as exc:
        c.list(C.nodes_path())
    assert isinstance(exc.value.__cause__, requests.RequestException)


def test_wrong_patch_content_type_is_415(api):
    c = client(api)
    with pytest.raises(KubernetesError) as exc:
        c.request("PATCH", C.nodes_path("n1"), body={}, content_type="text/plain")
    assert exc.value.status == 415 and exc.value.reason == "UnsupportedMediaType"


def test_in_cluster(tmp_path, monkeypatch):
    (tmp_path / "token").write_text("tok")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    c = KubeClient.in_cluster(root=str(tmp_path))
    assert c.server == "https://10.96.0.1:443"
    assert c.session.verify == str(tmp_path / "ca.crt")
    assert c._bearer() == "tok"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(ConfigError):
        KubeClient.in_cluster(root=str(tmp_path))


KUBECONFIG = """
apiVersion: v1
kind: Config
current-context: prod
clusters:
- name: prod-cluster
  cluster:
    server: https://k8s.example.org:6443
    certificate-authority-data: {ca}
- name: dev-cluster
  cluster:
    server: https://dev.example.org:6443
    certificate-authority: certs/dev-ca.crt
contexts:
- name: prod
  context: {{cluster: prod-cluster, user: bridge}}
- name: dev
  context: {{cluster: dev-cluster, user: dev}}
users:
- name: bridge
  user:
    token: abc.def
- name: dev
  user:
    client-certificate: certs/client.crt
    client-key-data: {key}
"""


def test_kubeconfig(tmp_path):
    ca = base64.b64encode(b"CA PEM").decode()
    key = base64.b64encode(b"KEY PEM").decode()
    path = tmp_path / "config"
    path.write_text(KUBECONFIG.format(ca=ca, key=key))
    c = KubeClient.from_kubeconfig(str(path))
    assert c.server == "https://k8s.example.org:6443" and c._bearer() == "abc.def"
    with open(c.session.verify, "rb") as fh:
        assert fh.read() == b"CA PEM"
    c.close()
    d = KubeClient.from_kubeconfig(str(path), context="dev")
    assert d.session.verify == str(tmp_path / "certs/dev-ca.crt")
    cert, keyfile = d.session.cert
    assert cert == str(tmp_path / "certs/client.crt")
    with open(keyfile, "rb") as fh:
        assert fh.read() == b"KEY PEM"
    d.close()


@pytest.mark.parametrize(
    "cluster_extra,user,message",
    [
        ("    insecure-skip-tls-verify: true\n", "    token: x\n", "insecure-skip-tls-verify"),
        ("", "    exec:\n      command: aws\n", "exec"),
    ],
)
def test_kubeconfig_refuses_unsafe_or_unsupported(tmp_path, cluster_extra, user, message):
    path = tmp_path / "config"
    path.write_text(
        "current-context: c\nclusters:\n- name: k\n  cluster:\n    server: https://x:6443\n"
        + cluster_extra
        + "contexts:\n- name: c\n  context: {cluster: k, user: u}\nusers:\n- name: u\n  user:\n"
        + user
    )
    with pytest.raises(ConfigError, match=message):
        KubeClient.from_kubeconfig(str(path))


def test_kubeconfig_missing_context(tmp_path):
    path = tmp_path / "config"
    path.write_text("clusters: []\n")
    with pytest.raises(ConfigError, match="current-context"):
        KubeClient.from_kubeconfig(str(path))
