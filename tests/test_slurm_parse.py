"""Parsers on outputs recorded from the real lab (Slurm 22.05.8, see
tests/data/slurm/README.md)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from slurm_hooks.core.errors import SlurmError
from slurm_hooks.slurm import parse, squeue

DATA = Path(__file__).parent / "data" / "slurm"


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("text", "state", "flags"),
    [
        ("IDLE", "idle", set()),
        ("IDLE+DRAIN", "idle", {"DRAIN"}),
        ("MIXED+DRAIN", "mixed", {"DRAIN"}),
        ("DOWN*+DRAIN", "down", {"DRAIN", "NOT_RESPONDING"}),
        ("DOWN+DRAIN+NOT_RESPONDING", "down", {"DRAIN", "NOT_RESPONDING"}),
        ("ALLOCATED+COMPLETING", "allocated", {"COMPLETING"}),
        ("IDLE+COMPLETING+DRAIN", "idle", {"COMPLETING", "DRAIN"}),
        ("MIXED+NOT_RESPONDING", "mixed", {"NOT_RESPONDING"}),
        ("idle*", "idle", {"NOT_RESPONDING"}),
        ("IDLE~", "idle", {"POWERED_DOWN"}),
        ("drained", "idle", {"DRAIN"}),
        ("draining", "allocated", {"DRAIN"}),
        ("drained*", "idle", {"DRAIN", "NOT_RESPONDING"}),
        ("IDLE+CLOUD+POWERED_DOWN", "idle", {"CLOUD", "POWERED_DOWN"}),
        ("COMPLETING", "completing", {"COMPLETING"}),
        ("", "unknown", set()),
        ("FUTURE", "future", set()),
    ],
)
def test_parse_state(text: str, state: str, flags: set[str]) -> None:
    assert parse.parse_state(text) == (state, frozenset(flags))


def test_scontrol_nodes_all_states() -> None:
    nodes = {n.name: n for n in parse.parse_scontrol_nodes(read("22.05-nodes_states.txt"))}
    assert sorted(nodes) == ["n1", "n2", "n3", "n4"]
    n1, n2, n3, n4 = (nodes[k] for k in ("n1", "n2", "n3", "n4"))
    assert (n1.state, n1.flags) == ("idle", {"DRAIN"})
    assert n1.reason == "slurm-hooks/1 XID79 gpu3 inc=7f3a2c1b :: GPU has fallen off the bus"
    assert n1.reason_user == "root"
    assert n1.reason_time == datetime.fromisoformat("2026-11-29T10:52:30").astimezone()
    # An admin reason with blanks, '=' and brackets survives intact.
    assert n2.reason == "admin: bad DIMM Key=Value [see ticket#42] a=b"
    assert (n3.state, n3.flags, n3.reason) == ("mixed", frozenset(), None)
    assert (n4.state, n4.flags, n4.reason) == ("down", {"DRAIN", "NOT_RESPONDING"}, "foo")
    assert n1.partitions == ("debug",) and n1.cpus == 2 and n1.alloc_cpus == 0
    assert n1.gres is None and n1.features == ()


@pytest.mark.parametrize(
    ("name", "state", "flags", "reason"),
    [
        ("22.05-node_idle.txt", "idle", set(), None),
        (
            "22.05-node_mixed_drain.txt",
            "mixed",
            {"DRAIN"},
            "slurm-hooks/1 XID79 gpu3 inc=7f3a2c1b :: GPU has fallen off the bus",
        ),
        ("22.05-node_completing.txt", "mixed", {"COMPLETING"}, None),
        ("22.05-node_mixed_not_responding.txt", "mixed", {"NOT_RESPONDING"}, None),
        ("22.05-node_down_not_responding.txt", "down", {"NOT_RESPONDING"}, "Not responding"),
        ("22.05-node_down_drain_not_responding.txt", "down", {"DRAIN", "NOT_RESPONDING"}, "foo"),
    ],
)
def test_scontrol_single_node(name: str, state: str, flags: set[str], reason: str | None) -> None:
    (node,) = parse.parse_scontrol_nodes(read(name))
    assert (node.state, node.flags, node.reason) == (state, frozenset(flags), reason)
    assert node.busy == (state in ("mixed", "allocated") or "COMPLETING" in flags)
    assert node.drained == ("DRAIN" in flags)


def test_scontrol_reason_with_newline_is_rebuilt() -> None:
    # scontrol -o prints the first line, [user@time], then each further line
    # after 8 blanks; the reason even contains a fake "[x@y]" and "Weight=9".
    (node,) = parse.parse_scontrol_nodes(read("22.05-node_reason_newline.txt"))
    assert node.reason == "line one\nline two Weight=9 [x@y]"
    assert node.reason_user == "root"
    assert node.reason_time is not None


def test_sinfo_json_matches_scontrol() -> None:
    by_json = {n.name: n for n in parse.parse_nodes_json(read("22.05-sinfo-states.json"))}
    by_text = {n.name: n for n in parse.parse_scontrol_nodes(read("22.05-nodes_states.txt"))}
    assert sorted(by_json) == sorted(by_text)
    for name, node in by_text.items():
        other = by_json[name]
        assert (other.state, other.reason, other.reason_user) == (
            node.state,
            node.reason,
            node.reason_user,
        )
        assert other.reason_time == node.reason_time
        assert other.flags == node.flags


def test_sinfo_json_newline_reason_intact() -> None:
    nodes = {n.name: n for n in parse.parse_nodes_json(read("22.05-sinfo-newline.json"))}
    assert nodes["n2"].reason == "line one\nline two Weight=9 [x@y]"
    assert nodes["n3"].reason is None and nodes["n3"].reason_user is None


def test_rest_nodes_use_same_parser() -> None:
    nodes = parse.parse_nodes_json(read("22.05-rest-nodes.json"))
    assert [n.name for n in nodes] == ["n1", "n2", "n3", "n4"]
    assert nodes[1].reason == "admin: bad DIMM Key=Value [see ticket#42] a=b"


def test_json_errors_raise() -> None:
    with pytest.raises(SlurmError, match="Unable to find JobId=99"):
        parse.nodes_from_doc(__import__("json").loads(read("22.05-rest-job-not-found.json")))
    with pytest.raises(SlurmError, match="invalid JSON"):
        parse.parse_nodes_json("{not json")


def test_newer_json_shapes() -> None:
    # v0.0.39+ (Slurm 23.02+): state is a list and times are {"set", "number"}.
    doc = {
        "nodes": [
            {
                "name": "g1",
                "state": ["IDLE", "DRAIN"],
                "reason": "why",
                "reason_set_by_user": "alice",
                "reason_changed_at": {"set": True, "infinite": False, "number": 1700000000},
                "cpus": 8,
                "partitions": ["gpu"],
                "features": "a100,nvlink",
            }
        ]
    }
    (node,) = parse.nodes_from_doc(doc)
    assert (node.state, node.flags, node.reason_user) == ("idle", {"DRAIN"}, "alice")
    assert node.reason_time is not None and node.reason_time.timestamp() == 1700000000
    assert node.features == ("a100", "nvlink")


def test_scontrol_jobs() -> None:
    jobs = {j.job_id: j for j in parse.parse_scontrol_jobs(read("22.05-jobs.txt"))}
    j1, j2, j3 = jobs["1"], jobs["2"], jobs["3"]
    assert j1.name == "my job name=x"
    assert j1.comment == "ckpt every 10m Key=V"
    assert (j1.user, j1.state, j1.nodes, j1.batch_host) == ("sltest", "RUNNING", "n1", "n1")
    assert (j1.requeue, j1.restart_count, j1.num_nodes) == (True, 0, 1)
    assert (j2.requeue, j2.nodes, j2.batch_host, j2.num_nodes) == (False, "n[3-4]", "n3", 2)
    assert (j3.state, j3.nodes, j3.batch_host, j3.num_nodes) == ("PENDING", "", None, 4)


def test_scontrol_job_comments_and_restarts() -> None:
    (job,) = parse.parse_scontrol_jobs(read("22.05-job_running_comments.txt"))
    assert job.comment == "new comment"
    assert job.admin_comment == "slurm-hooks: requeued after XID79 on n1"
    (requeued,) = parse.parse_scontrol_jobs(read("22.05-job_requeued_running.txt"))
    assert (requeued.restart_count, requeued.batch_host) == (1, "n3")
    (completing,) = parse.parse_scontrol_jobs(read("22.05-job_completing.txt"))
    assert (completing.state, completing.restart_count) == ("COMPLETING", 2)


def test_squeue_delimited() -> None:
    jobs, bad = squeue.parse_squeue(read("22.05-squeue.txt"))
    assert bad == 0
    assert [(j.job_id, j.state, j.nodes, j.batch_host) for j in jobs] == [
        ("1", "COMPLETING", "n3", "n3"),
        ("3", "PENDING", "", None),
        ("2", "RUNNING", "n[3-4]", "n3"),
    ]
    assert jobs[0].partition == "debug" and jobs[0].name is None


def test_squeue_skips_and_counts_malformed() -> None:
    good = read("22.05-squeue.txt").splitlines()[0]
    jobs, bad = squeue.parse_squeue(f"{good}\ngarbage line\n\n")
    assert len(jobs) == 1 and bad == 1
    # A row with one column more (a job name of the old format) is refused,
    # never read with its columns shifted.
    jobs, bad = squeue.parse_squeue(good + squeue.SQUEUE_SEP + "a\x1fb")
    assert (jobs, bad) == ([], 1)


def test_a_job_name_cannot_add_rows_of_other_users_jobs() -> None:
    """squeue prints ``%j`` as the user wrote it, newlines and all: a name
    can hold whole rows naming any job on any node.  The listing asks for
    no free text, so what it reads is Slurm's alone."""
    from slurm_hooks.detect.probes.commands import CommandResult
    from slurm_hooks.slurm.cli_backend import CliClient

    seen: list[list[str]] = []

    def runner(argv, **kw):
        seen.append(list(argv))
        fields = ["7", "sltest", "RUNNING", "n1", "n1", "debug", "1"]
        return CommandResult(tuple(argv), 0, squeue.SQUEUE_SEP.join(fields) + "\n", "", 0.01)

    client = CliClient(runner=runner, sleep=lambda s: None)
    assert [j.job_id for j in client.jobs_on_node("n1")] == ["7"]
    fmt = seen[0][seen[0].index("-o") + 1]
    assert "%j" not in fmt and "%k" not in fmt and "%o" not in fmt


def test_show_config() -> None:
    conf = parse.parse_show_config(read("22.05-show_config.txt"))
    assert conf["MULTIPLE_SLURMD"] == "Yes"
    assert conf["SLURM_VERSION"] == "22.05.8"
    assert conf["SchedulerParameters"] == "sched_interval=2,bf_interval=5,nohold_on_prolog_fail"
    assert conf["KillWait"] == "10 sec"


@pytest.mark.parametrize(
    ("text", "version"),
    [("slurm-wlm 22.05.8\n", (22, 5, 8)), ("slurm 24.11.5", (24, 11, 5)), ("25.11", (25, 11, 0))],
)
def test_parse_version(text: str, version: tuple[int, int, int]) -> None:
    assert parse.parse_version(text) == version


def test_parse_version_garbage() -> None:
    with pytest.raises(SlurmError):
        parse.parse_version("no digits here")
