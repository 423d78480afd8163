"""The REST backend asks slurmrestd which OpenAPI versions it serves.

A loopback HTTP stand-in plays slurmrestd of different releases: the paths
its ``/openapi/v3`` lists are the ones real servers listed (22.05.8:
v0.0.38 only; 24.11.5: v0.0.40-v0.0.42, checked in the trixie matrix root),
every other ``/slurm/...`` path is a 404 with slurmrestd's own text.
Answers for unknown nodes and jobs are the recorded 24.11 ones
(tests/data/slurm/24.11-rest-v0.0.42-*-unfound.json): HTTP 200 or 500 with
an ``errors[]`` list.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from slurm_hooks.core.errors import JobGone, NodeNotFound, SlurmError, SlurmUnavailable
from slurm_hooks.slurm.rest_backend import KNOWN_APIS, LACKS, RestClient

DATA = Path(__file__).parent / "data" / "slurm"
NOT_FOUND = b"Unable find requested URL. Please view /openapi/v3 for API reference."


def recorded(name: str) -> Any:
    return json.loads((DATA / name).read_text())


class Standin:
    """slurmrestd serving ``apis``; ``openapi=False``: no /openapi/v3."""

    def __init__(self, apis: Sequence[str], *, openapi: bool = True) -> None:
        self.apis = list(apis)
        self.openapi = openapi
        self.requests: list[str] = []
        #: path -> (status, JSON body) for /slurm/<api>/<rest>
        self.answers: dict[str, tuple[int, Any]] = {}
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                standin.requests.append(self.path)
                status, body = standin.answer(self.path)
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                kind = "text/plain" if isinstance(body, bytes) else "application/json"
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, path: str) -> tuple[int, Any]:
        path = path.split("?", 1)[0]
        if path == "/openapi/v3" and self.openapi:
            paths = {
                f"/slurm/{api}/{p}": {"get": {}}
                for api in self.apis
                for p in ("ping/", "nodes/", "node/{node_name}", "job/{job_id}")
            }
            paths["/slurmdb/v0.0.42/jobs/"] = {"get": {}}  # other prefixes are ignored
            return 200, {"openapi": "3.0.3", "paths": paths}
        parts = path.strip("/").split("/", 2)
        if len(parts) == 3 and parts[0] == "slurm" and parts[1] in self.apis:
            rest = parts[2].rstrip("/")
            if rest in self.answers:
                return self.answers[rest]
            if rest == "ping":
                return 200, recorded("24.11-rest-v0.0.42-ping.json")
        return 404, NOT_FOUND

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def standin() -> Iterator[Any]:
    made: list[Standin] = []

    def make(apis: Sequence[str], **kw: Any) -> Standin:
        made.append(Standin(apis, **kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


def client(url: str, **kw: Any) -> RestClient:
    return RestClient(url=url, retries=0, timeout=5, **kw)


@pytest.mark.parametrize(
    ("served", "spoken"),
    [
        (["v0.0.38"], "v0.0.38"),  # 22.05 (the lab: -s openapi/v0.0.38)
        (["v0.0.40", "v0.0.41", "v0.0.42"], "v0.0.42"),  # 24.11
        (["v0.0.42", "v0.0.43", "v0.0.44"], "v0.0.44"),  # 25.11 and later
        (["v0.0.44", "v0.0.45", "v0.0.46"], "v0.0.44"),  # a newer server: what we speak
    ],
)
def test_speaks_the_newest_version_the_server_offers(standin, served, spoken) -> None:  # type: ignore[no-untyped-def]
    s = standin(served)
    c = client(s.url)
    assert c.ping() is True
    assert c.api == spoken
    assert s.requests == ["/openapi/v3", f"/slurm/{spoken}/ping"]


def test_negotiated_once_per_client(standin) -> None:  # type: ignore[no-untyped-def]
    s = standin(["v0.0.40", "v0.0.41", "v0.0.42"])
    c = client(s.url)
    for _ in range(3):
        assert c.ping()
    assert s.requests.count("/openapi/v3") == 1
    assert len(s.requests) == 4


def test_without_openapi_document_pings_newest_first(standin) -> None:  # type: ignore[no-untyped-def]
    s = standin(["v0.0.40", "v0.0.41", "v0.0.42"], openapi=False)
    c = client(s.url)
    assert c.api == "v0.0.42"
    tried = [r for r in s.requests if r.endswith("/ping")]
    assert tried == ["/slurm/v0.0.44/ping", "/slurm/v0.0.43/ping", "/slurm/v0.0.42/ping"]


def test_a_server_offering_nothing_we_speak_is_a_clear_error(standin) -> None:  # type: ignore[no-untyped-def]
    s = standin(["v0.0.37"])
    c = client(s.url)
    with pytest.raises(SlurmError, match=r"offers none of .*v0\.0\.38\.\.v0\.0\.44.*v0\.0\.37"):
        c.list_nodes()
    assert c.ping() is False


def test_an_explicit_version_is_not_negotiated(standin) -> None:  # type: ignore[no-untyped-def]
    s = standin(["v0.0.40", "v0.0.41", "v0.0.42"])
    c = client(s.url, api="v0.0.38")  # what the old default asked a 24.11 server for
    assert c.ping() is False  # 404: that server has no v0.0.38
    assert s.requests == ["/slurm/v0.0.38/ping"]
    assert client(s.url, api="auto").ping() is True


def test_unreachable_server_is_unavailable_and_asked_again(standin) -> None:  # type: ignore[no-untyped-def]
    s = standin(["v0.0.42"])
    url = s.url
    s.close()
    c = client(url)
    with pytest.raises(SlurmUnavailable):
        c.list_nodes()
    assert c._api is None  # nothing kept from a failed negotiation


def test_errors_on_http_200_are_typed(standin) -> None:  # type: ignore[no-untyped-def]
    # 24.11: an unknown node is HTTP 200 with errors[] (recorded in the trixie root too)
    s = standin(["v0.0.40", "v0.0.41", "v0.0.42"])
    s.answers["node/nope"] = (200, recorded("24.11-rest-v0.0.42-node-unfound.json"))
    s.answers["job/12740"] = (500, recorded("24.11-rest-v0.0.42-job-unfound.json"))
    s.answers["job/99999"] = (200, {"jobs": [], "errors": [], "warnings": []})
    c = client(s.url)
    with pytest.raises(NodeNotFound):
        c.get_node("nope")
    with pytest.raises(SlurmError, match="Unable to query JobId=12740"):
        c.get_job("12740")
    with pytest.raises(JobGone):
        c.get_job("99999")


def test_lacks_table_names_known_versions_only() -> None:
    for op, apis in LACKS.items():
        assert apis <= set(KNOWN_APIS), op
    assert "v0.0.39" not in LACKS["node update"]
    assert LACKS["job requeue"] == set(KNOWN_APIS)
