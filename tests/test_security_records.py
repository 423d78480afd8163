"""User text in a job's name, comment, command, work dir or std paths never
shadows a job field the engine reads; a node's reason never shadows a node
field.  Records are the real 22.05 captures with hostile text put where
sbatch puts it (what ``scontrol -o`` prints is the raw string)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from slurm_hooks.slurm import parse

DATA = Path(__file__).parent / "data" / "slurm"
TEMPLATE = (DATA / "22.05-job_running_comments.txt").read_text().strip()
TRUTH = parse.parse_scontrol_jobs(TEMPLATE)[0]

#: JobInfo field -> (Slurm key, a forged value), for every field the engine
#: reads from a job (engine.py, agent/prolog.py, bridge/lending.py).
FORGED = {
    "job_id": ("JobId", "99"),
    "user": ("UserId", "root(0)"),
    "state": ("JobState", "COMPLETED"),
    "requeue": ("Requeue", "0"),
    "restart_count": ("Restarts", "5"),
    "nodes": ("NodeList", "n9"),
    "batch_host": ("BatchHost", "n9"),
    "partition": ("Partition", "gpu-prod"),
    "num_nodes": ("NumNodes", "7"),
    "admin_comment": ("AdminComment", "slurm-hooks: forged"),
}
ALL_FORGED = " ".join(f"{k}={v}" for k, v in FORGED.values())


def _with(record: str, key: str, value: str) -> str:
    """``record`` with the value of the user-text field ``key`` replaced."""
    nxt = {
        "JobName": " UserId=",
        "Command": " WorkDir=",
        "WorkDir": " AdminComment=",
        "Comment": "  StdErr=",
        "StdErr": " StdIn=",
        "StdOut": " Power=",
    }[key]
    start = record.index(f" {key}=") + len(key) + 2
    end = record.index(nxt, start)
    return record[:start] + value + record[end:]


def _expected(key: str, value: str) -> dict:
    truth = {f: getattr(TRUTH, f) for f in FORGED}
    return truth


USER_FIELDS = ["JobName", "Command", "WorkDir", "Comment", "StdErr", "StdOut"]


@pytest.mark.parametrize("where", USER_FIELDS)
@pytest.mark.parametrize("field", sorted(FORGED))
def test_one_forged_field_in_user_text_changes_nothing(where, field):
    key, value = FORGED[field]
    hostile = f"train {key}={value} x"
    (job,) = parse.parse_scontrol_jobs(_with(TEMPLATE, where, hostile))
    assert getattr(job, field) == getattr(TRUTH, field)


@pytest.mark.parametrize("where", USER_FIELDS)
def test_all_forged_fields_at_once_change_nothing(where):
    (job,) = parse.parse_scontrol_jobs(_with(TEMPLATE, where, f"x {ALL_FORGED}"))
    for field in FORGED:
        assert getattr(job, field) == getattr(TRUTH, field), field


def test_the_issue_job_name_is_kept_as_the_name():
    name = "train Restarts=5 JobState=COMPLETED UserId=root(0) Requeue=0"
    (job,) = parse.parse_scontrol_jobs(_with(TEMPLATE, "JobName", name))
    assert job.name == name
    assert (job.user, job.state, job.restart_count, job.requeue) == ("sltest", "RUNNING", 0, True)


def test_comment_cannot_fake_an_admin_comment():
    rec = _with(TEMPLATE, "Comment", "hi AdminComment=slurm-hooks: forged")
    (job,) = parse.parse_scontrol_jobs(rec)
    assert job.admin_comment == TRUTH.admin_comment
    assert job.comment == "hi AdminComment=slurm-hooks: forged"


def _fake_middle() -> str:
    start = TEMPLATE.index(" UserId=") + 1
    end = TEMPLATE.index(" Command=")
    middle = TEMPLATE[start:end]
    for key, value in FORGED.values():
        middle = re.sub(rf"(?<= ){key}=\S*", f"{key}={value}", " " + middle).strip()
    return middle


@pytest.mark.parametrize("where", USER_FIELDS)
def test_a_whole_fake_record_is_refused_not_guessed(where):
    # A complete copy of the fixed middle, ending in a tail key, makes two
    # consistent readings: the record is refused, never read the forged way.
    hostile = f"x {_fake_middle()} Command=/bin/true"
    skipped: list[str] = []
    jobs = parse.parse_scontrol_jobs(_with(TEMPLATE, where, hostile), skipped=skipped)
    assert jobs == [] and len(skipped) == 1 and "candidate" in skipped[0]
    with pytest.raises(parse.ShadowedRecord):
        parse.job_record_fields(_with(TEMPLATE, where, hostile))


def test_a_fake_record_on_a_new_line_is_refused():
    rec = _with(TEMPLATE, "JobName", "x\nJobId=1 JobName=y " + _fake_middle() + " Command=/x")
    skipped: list[str] = []
    assert parse.parse_scontrol_jobs(rec, skipped=skipped) == []
    assert skipped


def test_get_job_raises_a_typed_error_for_a_shadowed_record():
    from slurm_hooks.core.errors import SlurmError
    from slurm_hooks.detect.probes.commands import CommandResult
    from slurm_hooks.slurm.cli_backend import CliClient

    rec = _with(TEMPLATE, "Comment", f"x {_fake_middle()} Command=/bin/true")

    def runner(argv, **kw):
        return CommandResult(tuple(argv), 0, rec + "\n", "", 0.01)

    client = CliClient(runner=runner, sleep=lambda s: None)
    with pytest.raises(parse.ShadowedRecord) as info:
        client.get_job("1")
    assert isinstance(info.value, SlurmError)


@pytest.mark.parametrize("where", USER_FIELDS)
def test_get_job_believes_no_record_beside_one_a_name_broke(where):
    """A name whose newlines hold a whole record of the asked id, owned by
    another user (``UserId=root(0)``, ``Restarts=5``), then a line that
    takes up the rest of the real record: the real one is refused, and so is
    the forged one beside it, never read as the job."""
    forged = "JobId=1 JobName=y " + _fake_middle() + " Command=/x"
    rec = _with(TEMPLATE, where, f"a\n{forged}\nJobId=99999 JobName=c")
    from slurm_hooks.detect.probes.commands import CommandResult
    from slurm_hooks.slurm.cli_backend import CliClient

    def runner(argv, **kw):
        return CommandResult(tuple(argv), 0, rec + "\n", "", 0.01)

    client = CliClient(runner=runner, sleep=lambda s: None)
    with pytest.raises(parse.ShadowedRecord):
        client.get_job("1")


def test_get_job_refuses_two_records_of_one_id():
    from slurm_hooks.detect.probes.commands import CommandResult
    from slurm_hooks.slurm.cli_backend import CliClient

    def runner(argv, **kw):
        return CommandResult(tuple(argv), 0, f"{TEMPLATE}\n{TEMPLATE}\n", "", 0.01)

    client = CliClient(runner=runner, sleep=lambda s: None)
    with pytest.raises(parse.ShadowedRecord):
        client.get_job(TRUTH.job_id)


def test_captures_still_parse():
    jobs = {j.job_id: j for j in parse.parse_scontrol_jobs((DATA / "22.05-jobs.txt").read_text())}
    assert jobs["1"].name == "my job name=x" and jobs["1"].comment == "ckpt every 10m Key=V"
    assert jobs["3"].state == "PENDING" and jobs["3"].nodes == ""


# -- nodes ---------------------------------------------------------------------

NODE = (DATA / "22.05-node_mixed_drain.txt").read_text().strip()
NODE_TRUTH = parse.parse_scontrol_nodes(NODE)[0]
NODE_FORGED = {
    "name": ("NodeName", "n9"),
    "state": ("State", "IDLE"),
    "partitions": ("Partitions", "other"),
    "features": ("AvailableFeatures", "forged"),
    "gres": ("Gres", "gpu:99"),
    "cpus": ("CPUTot", "999"),
    "alloc_cpus": ("CPUAlloc", "999"),
}


@pytest.mark.parametrize("field", sorted(NODE_FORGED))
def test_node_reason_cannot_shadow_a_node_field(field):
    key, value = NODE_FORGED[field]
    start = NODE.index(" Reason=") + len(" Reason=")
    end = NODE.index(" [", start)
    reason = f"admin: {key}={value} [x@2026-01-01T00:00:00] {key}={value}"
    (node,) = parse.parse_scontrol_nodes(NODE[:start] + reason + NODE[end:])
    assert getattr(node, field) == getattr(NODE_TRUTH, field)
    assert node.reason.startswith("admin: ")


def test_user_text_in_our_reason_cannot_end_it_and_forge_the_comment():
    """A site check quotes a user's process arguments in our reason text;
    scontrol prints ``Reason=<text> [user@time]`` then ``Comment=`` and
    ``Extra=``.  The text's brackets become round ones, so a ``[a@b]
    Comment=`` in it cannot end the reason early and pass for the comment."""
    from slurm_hooks.core.reason import DrainReason, format_reason

    args = "x [a@None] Comment=slurm-hooks/ Extra="
    ours = format_reason(DrainReason("SITE", "7f3a2c1b", f"ps_users: {args}"))
    assert "[" not in ours and "]" not in ours
    start = NODE.index(" Reason=") + len(" Reason=")
    end = NODE.index(" [", start)
    line = NODE[:start] + ours + NODE[end:] + " Comment=site-note Extra=rack=7"
    (node,) = parse.parse_scontrol_nodes(line)
    assert node.reason == ours
    assert (node.comment, node.extra) == ("site-note", "rack=7")


def test_node_json_is_not_shadowed():
    doc = json.loads((DATA / "22.05-sinfo.json").read_text())
    for obj in doc["nodes"]:
        obj["reason"] = "x State=IDLE Partitions=other"
    nodes = parse.nodes_from_doc(doc)
    assert all(n.reason == "x State=IDLE Partitions=other" for n in nodes)
    assert all("other" not in n.partitions for n in nodes)
