"""Parsers and the slurmrestd backend on answers recorded from Slurm 23.02,
23.11 and 24.11 (OpenAPI data_parser v0.0.39 .. v0.0.42); sources in
tests/data/slurm/README.md.  The 22.05 captures are in test_slurm_parse.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from slurm_hooks_lab import lab

from slurm_hooks.core.errors import SlurmError
from slurm_hooks.slurm import parse
from slurm_hooks.slurm.rest_backend import RestClient, api_for_version, job_from_json

DATA = Path(__file__).parent / "data" / "slurm"


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def doc(name: str) -> Any:
    return json.loads(read(name))


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


# -- nodes ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "node", "state", "flags", "reason", "when", "partition", "alloc"),
    [
        (
            "24.11-rest-v0.0.42-node-drain.json",
            "cn4",
            "idle",
            {"DRAIN"},
            "ECC memory error",
            1762942786,
            "standard",
            0,
        ),
        (
            "24.11-rest-v0.0.42-node-down.json",
            "cn1",
            "down",
            set(),
            "CPU dead",
            1762942786,
            "standard",
            0,
        ),
        (
            "23.11-rest-v0.0.40-node-mixed-drain.json",
            "cn2",
            "mixed",
            {"DRAIN"},
            "ECC memory error",
            1732027838,
            "normal",
            2,
        ),
    ],
)
def test_openapi_node_objects(  # noqa: PLR0913
    name: str,
    node: str,
    state: str,
    flags: set[str],
    reason: str,
    when: int,
    partition: str,
    alloc: int,
) -> None:
    (got,) = parse.parse_nodes_json(read(name))
    assert (got.name, got.state, got.flags) == (node, state, frozenset(flags))
    assert (got.reason, got.reason_user, got.reason_time) == (reason, "root", at(when))
    assert got.partitions == (partition,)
    assert (got.cpus, got.alloc_cpus) == (64, alloc)
    # "gres": "" and "features": [] mean none
    assert got.gres is None and got.features == ()
    assert got.drained == ("DRAIN" in flags)
    assert got.busy == (state == "mixed")


def test_sinfo_json_2302_shape_is_read() -> None:
    # 23.02+ sinfo --json has a top-level "sinfo" list, not "nodes"; before,
    # it silently gave no nodes at all.
    (node,) = parse.parse_nodes_json(read("23.02-sinfo-dataparser.json"))
    assert (node.name, node.state, node.flags) == ("localhost", "allocated", frozenset())
    assert node.partitions == ("debug",)
    assert (node.cpus, node.alloc_cpus) == (1, 1)
    # "reason": {"description": "", "time": 0, "user": ""} is no reason
    assert (node.reason, node.reason_user, node.reason_time) == (None, None, None)
    assert node.busy and not node.drained


def test_sinfo_json_merges_partitions_of_one_node() -> None:
    record = doc("23.02-sinfo-dataparser.json")["sinfo"][0]
    other = json.loads(json.dumps(record))
    other["partition"]["name"] = "gpu"
    other["reason"] = {"description": "bad gpu", "time": 1700000000, "user": "alice"}
    other["node"]["state"] = ["ALLOCATED", "DRAIN"]
    (node,) = parse.nodes_from_doc({"sinfo": [record, other]})
    assert node.partitions == ("debug", "gpu")
    assert (node.flags, node.reason, node.reason_user) == ({"DRAIN"}, "bad gpu", "alice")
    assert node.reason_time == at(1700000000)


def test_node_not_found_answer_raises() -> None:
    with pytest.raises(SlurmError, match="Failure to query node unexisting-node"):
        parse.parse_nodes_json(read("24.11-rest-v0.0.42-node-unfound.json"))


def test_reservation_after_reason_is_a_field() -> None:
    # slurm_sprint_node_table() (src/api/node_info.c, 24.x) prints Comment,
    # Extra, InstanceId/InstanceType and ReservationName after the Reason.
    line = (
        "NodeName=g1 CoresPerSocket=4 CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=0.00 "
        "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) "
        "RestrictedCoresPerGPU=2(0-1) State=IDLE+DRAIN+MAINTENANCE+RESERVED "
        "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu "
        "BootTime=None SlurmdStartTime=None LastBusyTime=2025-01-01T00:00:00 "
        "ResumeAfterTime=None CfgTRES=cpu=8 AllocTRES= CurrentWatts=0 AveWatts=0 "
        "Reason=gpu check [root@2025-01-02T03:04:05] ReservationName=maint_0107"
    )
    (node,) = parse.parse_scontrol_nodes(line + "\n")
    assert node.reason == "gpu check"
    assert node.reason_user == "root"
    assert node.flags == {"DRAIN", "MAINTENANCE", "RESERVED"}


# -- jobs -------------------------------------------------------------------


def test_openapi_v0042_running_job() -> None:
    (obj,) = doc("24.11-rest-v0.0.42-job-running.json")["jobs"]
    job = job_from_json(obj)
    assert (job.job_id, job.user, job.state) == ("6368", "jbeck", "RUNNING")
    assert (job.nodes, job.batch_host, job.num_nodes) == ("cn3", "cn3", 1)
    assert (job.requeue, job.restart_count) == (True, 0)
    assert (job.partition, job.name) == ("standard", "wrap")
    assert job.comment is None and job.admin_comment is None


@pytest.mark.parametrize(
    ("value", "word"),
    [
        ("COMPLETING", "COMPLETING"),  # v0.0.38: already squeue's word
        (["RUNNING"], "RUNNING"),
        (["COMPLETED", "COMPLETING"], "COMPLETING"),
        (["CANCELLED", "COMPLETING"], "COMPLETING"),
        (["PENDING", "REQUEUED"], "REQUEUED"),
        (["PENDING", "REQUEUED", "COMPLETING"], "COMPLETING"),
        (["RUNNING", "CONFIGURING"], "CONFIGURING"),
        (["PENDING", "REQUEUE_HOLD"], "REQUEUE_HOLD"),
        (["RUNNING", "LAUNCH_FAILED"], "RUNNING"),  # not a word squeue shows
        ([], "UNKNOWN"),
        (None, "UNKNOWN"),
    ],
)
def test_job_state_name_follows_job_state_string(value: Any, word: str) -> None:
    assert parse.job_state_name(value) == word


def test_completing_job_counts_as_on_the_node() -> None:
    # The same 24.11 job as its flags would read right after it ended: the
    # first element alone ("COMPLETED") would hide it from jobs_on_node.
    (obj,) = doc("24.11-rest-v0.0.42-job-running.json")["jobs"]
    obj = {**obj, "job_state": ["COMPLETED", "COMPLETING"]}
    assert job_from_json(obj).state == "COMPLETING"


# -- the REST backend on recorded answers -------------------------------------


class _Response:
    def __init__(self, status: int, body: Any) -> None:
        self.status_code = status
        self.reason = "OK" if status < 400 else "Error"
        self.text = json.dumps(body)
        self.content = self.text.encode()

    def json(self) -> Any:
        return json.loads(self.text)


class RecordedSession:
    """The requests.Session surface RestClient uses; answers by path from
    recorded slurmrestd bodies and keeps what was asked."""

    def __init__(self, routes: dict[tuple[str, str], tuple[int, Any]]) -> None:
        self.routes = routes
        self.headers: dict[str, str] = {}
        self.calls: list[tuple[str, str, Any, Any]] = []

    def mount(self, prefix: str, adapter: Any) -> None:
        pass

    def request(self, method: str, url: str, *, params: Any, json: Any, timeout: float) -> Any:
        path = url.split("://", 1)[1].split("/", 1)[1]
        self.calls.append((method, "/" + path, params, json))
        status, body = self.routes.get((method, "/" + path), (404, {"errors": []}))
        return _Response(status, body)


API = "/slurm/v0.0.42"


@pytest.fixture
def rest() -> tuple[RestClient, RecordedSession]:
    drain = doc("24.11-rest-v0.0.42-node-drain.json")
    down = doc("24.11-rest-v0.0.42-node-down.json")
    both = {**drain, "nodes": drain["nodes"] + down["nodes"]}
    session = RecordedSession(
        {
            ("GET", f"{API}/ping"): (200, doc("24.11-rest-v0.0.42-ping.json")),
            ("GET", f"{API}/nodes"): (200, both),
            ("GET", f"{API}/node/cn4"): (200, drain),
            ("GET", f"{API}/node/unexisting-node"): (
                500,
                doc("24.11-rest-v0.0.42-node-unfound.json"),
            ),
            ("GET", f"{API}/jobs"): (200, doc("24.11-rest-v0.0.42-job-running.json")),
            ("GET", f"{API}/job/6368"): (200, doc("24.11-rest-v0.0.42-job-running.json")),
            ("GET", f"{API}/job/12740"): (500, doc("24.11-rest-v0.0.42-job-unfound.json")),
            ("POST", f"{API}/node/cn4"): (200, {"errors": [], "warnings": []}),
        }
    )
    client = RestClient(url="http://slurm:6820", api="v0.0.42", session=session, retries=0)
    return client, session


def test_rest_2411_ping_nodes_jobs(rest: tuple[RestClient, RecordedSession]) -> None:
    client, _ = rest
    assert client.ping() is True
    assert [(n.name, n.state, sorted(n.flags)) for n in client.list_nodes()] == [
        ("cn4", "idle", ["DRAIN"]),
        ("cn1", "down", []),
    ]
    assert client.get_node("cn4").reason == "ECC memory error"
    with pytest.raises(SlurmError, match="Failure to query node"):
        client.get_node("unexisting-node")
    assert client.get_job("6368").batch_host == "cn3"
    assert [j.job_id for j in client.jobs_on_node("cn3")] == ["6368"]
    assert client.jobs_on_node("cn4") == []
    with pytest.raises(SlurmError, match="Unable to query JobId=12740"):
        client.get_job("12740")


def test_rest_2411_drain_posts_node_update(rest: tuple[RestClient, RecordedSession]) -> None:
    client, session = rest
    client.drain("cn4", "slurm-hooks/1 XID79 gpu3 :: fallen off the bus")
    assert session.calls[-1] == (
        "POST",
        f"{API}/node/cn4",
        None,
        {"state": ["DRAIN"], "reason": "slurm-hooks/1 XID79 gpu3 :: fallen off the bus"},
    )


@pytest.mark.parametrize(
    ("name", "up"),
    [("24.11-rest-v0.0.42-ping.json", True), ("23.11-rest-v0.0.40-ping.json", True)],
)
def test_ping_reads_pinged(name: str, up: bool) -> None:
    body = doc(name)
    session = RecordedSession({("GET", "/slurm/v0.0.40/ping"): (200, body)})
    client = RestClient(url="http://slurm:6820", api="v0.0.40", session=session, retries=0)
    assert client.ping() is up
    body["pings"][0]["pinged"] = "DOWN"
    assert client.ping() is False


@pytest.mark.parametrize(
    ("version", "api", "plugin"),
    [
        ((22, 5, 8), "v0.0.38", "openapi/v0.0.38"),
        ((23, 2, 5), "v0.0.39", "openapi/v0.0.39"),
        ((23, 11, 10), "v0.0.40", "openapi/slurmctld"),
        ((24, 5, 2), "v0.0.41", "openapi/slurmctld"),
        ((24, 11, 5), "v0.0.42", "openapi/slurmctld"),
        ((25, 5, 0), "v0.0.42", "openapi/slurmctld"),
    ],
)
def test_rest_versions(version: tuple[int, int, int], api: str, plugin: str) -> None:
    assert api_for_version(version) == api == lab.rest_api(version)
    assert lab.rest_plugin(version) == plugin


def test_recorded_versions_match_their_meta() -> None:
    for name, api in [
        ("24.11-rest-v0.0.42-node-drain.json", "v0.0.42"),
        ("23.11-rest-v0.0.40-node-mixed-drain.json", "v0.0.40"),
    ]:
        meta = doc(name)["meta"]
        version = parse.parse_version(meta["slurm"]["release"])
        assert meta["plugin"]["data_parser"] == f"data_parser/{api}"
        assert api_for_version(version) == api
        assert lab.rest_plugin(version) == meta["plugin"]["type"]
