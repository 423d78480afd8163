"""The keep-alive transport under KubeClient (``k8s/transport.py``) and the
pieces of the cold-pass work that go with it: PATCH answers cut to a view,
cyclic GC paused while a LIST builds its items."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from slurm_hooks_lab.k8s_standin import StandinServer

from slurm_hooks.bridge.views import NODE_VIEW
from slurm_hooks.k8s import client as C
from slurm_hooks.k8s.cache import gc_paused
from slurm_hooks.k8s.client import KubeClient


class _Recorder(BaseHTTPRequestHandler):
    """Answers every request with ``{}`` over HTTP/1.1 keep-alive, records
    the path and the connection, and (``close_after``) closes the
    connection after answering without saying so: a server's idle timeout
    as a client sees it."""

    protocol_version = "HTTP/1.1"
    paths: list[str] = []
    peers: set[int] = set()
    close_after = False
    server_ref: Any = None

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        type(self).paths.append(self.path)
        type(self).peers.add(self.client_address[1])
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")
        self.wfile.flush()
        if type(self).close_after:
            self.close_connection = True

    do_GET = do_PATCH = do_POST = _answer


class _Server(ThreadingHTTPServer):
    """Counts the connections it has closed (``closed``)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.closed = threading.Semaphore(0)

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)
        self.closed.release()


@pytest.fixture
def recorder() -> Iterator[tuple[str, type[_Recorder]]]:
    handler = type("H", (_Recorder,), {"paths": [], "peers": set(), "close_after": False})
    httpd = _Server(("127.0.0.1", 0), handler)
    handler.server_ref = httpd
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_calls_share_one_kept_alive_connection(recorder):
    url, handler = recorder
    c = KubeClient(url, retries=0)
    for i in range(5):
        c.patch(C.nodes_path(f"n{i}"), {"metadata": {"labels": {"a": "b"}}})
    assert len(handler.peers) == 1 and len(handler.paths) == 5


def test_a_connection_the_server_closed_is_not_reused(recorder):
    """A PATCH is never retried after it went out, so an idle connection the
    server has closed must be noticed before the request is written."""
    url, handler = recorder
    handler.close_after = True
    c = KubeClient(url, retries=0)
    for i in range(3):
        assert c.patch(C.nodes_path(f"n{i}"), {"metadata": {"labels": {"a": "b"}}}) == {}
        # the server's close has happened (not still on its way) before the next call
        assert handler.server_ref.closed.acquire(timeout=5)
    assert len(handler.paths) == 3 and len(handler.peers) == 3


def test_a_server_url_with_a_path_keeps_it(recorder):
    url, handler = recorder
    c = KubeClient(url + "/k8s/clusters/c-1/", retries=0)
    c.list(C.nodes_path(), label_selector="pool=gpu")
    c.get(C.nodes_path("n1"))
    assert handler.paths == [
        "/k8s/clusters/c-1/api/v1/nodes?labelSelector=pool%3Dgpu",
        "/k8s/clusters/c-1/api/v1/nodes/n1",
    ]


def test_patch_answer_cut_to_the_view():
    with StandinServer() as api:
        api.add(
            "nodes",
            {
                "metadata": {"name": "n1", "labels": {"a": "b"}, "managedFields": [{"x": 1}]},
                "spec": {"podCIDR": "10.0.0.0/24"},
                "status": {
                    "images": [{"names": ["img"], "sizeBytes": 1}],
                    "conditions": [
                        {"type": "MemoryPressure", "status": "False"},
                        {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                    ],
                },
            },
        )
        c = KubeClient(api.url, retries=0)
        body = {"metadata": {"annotations": {"x/y": "z"}}}
        node = c.patch(C.nodes_path("n1"), body, view=NODE_VIEW)
        full = c.get(C.nodes_path("n1"))
    assert node["metadata"]["annotations"] == {"x/y": "z"}
    assert node["metadata"]["resourceVersion"] == full["metadata"]["resourceVersion"]
    assert "managedFields" not in node["metadata"] and node["spec"] == {}
    assert node["status"] == {"conditions": [{"type": "Ready", "status": "True"}]}
    assert node == NODE_VIEW.fallback(full)


def test_patch_answer_that_does_not_fit_the_view_is_cut_from_the_full_object():
    with StandinServer() as api:
        api.add("nodes", {"metadata": {"name": "n1", "labels": {"a": "b"}}, "spec": {}})
        c = KubeClient(api.url, retries=0)
        # spec.unschedulable is a bool in the view's schema: a string does not fit
        node = c.patch(C.nodes_path("n1"), {"spec": {"unschedulable": "yes"}}, view=NODE_VIEW)
    assert node["spec"] == {"unschedulable": "yes"} and node["metadata"]["name"] == "n1"


@pytest.mark.parametrize("enabled", [True, False])
def test_gc_paused_restores_the_collector_state(enabled):
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with gc_paused():
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
        with pytest.raises(RuntimeError), gc_paused():
            raise RuntimeError("boom")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
