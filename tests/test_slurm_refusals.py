"""Slurm's refusals as typed errors, from what Slurm really printed.

The cli strings were recorded on the lab (Slurm 22.05.8, ``slurm-hooks lab
up``, 2026-12-01): each case is the exact argv we run, rc and stderr/stdout.
The rest cases are the recorded slurmrestd answers in tests/data/slurm/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_hooks.core.errors import JobGone, NodeNotFound, NotRequeueable, SlurmError
from slurm_hooks.detect.probes.commands import CommandResult
from slurm_hooks.slurm.cli_backend import CliClient, classify_failure
from slurm_hooks.slurm.rest_backend import classify_errors

DATA = Path(__file__).parent / "data" / "slurm"

#: argv, rc, stderr, stdout, expected type; recorded on 22.05.8.
RECORDED = [
    # scontrol requeue of an unknown (or purged) job
    (["scontrol", "requeue", "99999"], 1, "Invalid job id specified for job 99999", "", JobGone),
    # scancel --signal of an unknown job, and of one that ended (not yet purged)
    (["scancel", "--signal=TERM", "--batch", "99999"], 1,
     "scancel: error: Kill job error on job id 99999: Invalid job id specified", "", JobGone),
    (["scancel", "--signal=USR1", "4"], 1,
     "scancel: error: Kill job error on job id 4: Invalid job id specified", "", JobGone),
    (["scontrol", "-o", "show", "job", "99999"], 1,
     "slurm_load_jobs error: Invalid job id specified", "", JobGone),
    (["scontrol", "update", "JobId=99999", "Comment=x"], 1,
     "Invalid job id specified for job 99999", "", JobGone),
    (["scontrol", "update", "JobId=1", "Comment=x"], 1,
     "Job has already finished for job 1", "", JobGone),
    # requeue of a --no-requeue job, running or ended
    (["scontrol", "requeue", "1"], 1,
     "Requested operation is presently disabled for job 1", "", NotRequeueable),
    (["scontrol", "update", "NodeName=bogus", "State=DRAIN", "Reason=x"], 1,
     "slurm_update error: Invalid node name specified", "", NodeNotFound),
    (["scontrol", "-o", "show", "node", "bogus"], 1, "", "Node bogus not found", NodeNotFound),
    # none of ours: stay plain SlurmError
    (["scontrol", "update", "NodeName=n1", "State=RESUME"], 1,
     "slurm_update error: Invalid node state specified", "", SlurmError),
    (["scontrol", "requeue", "3"], 1, "Job is pending execution for job 3", "", SlurmError),
    (["scancel", "--signal=TERM", "3"], 228,
     "scancel: error: Kill job error on job id 3: Job can not be altered now, try again later",
     "", SlurmError),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "rc", "stderr", "stdout", "kind"), RECORDED)
def test_cli_refusals_recorded_on_2205(argv, rc, stderr, stdout, kind) -> None:  # type: ignore[no-untyped-def]
    err = classify_failure(argv, rc, stderr, stdout)
    assert type(err) is kind
    assert (stderr or stdout) in str(err)  # Slurm's words stay in the message


def test_requeue_refusal_means_not_requeueable_only_for_a_requeue() -> None:
    text = "Requested operation is presently disabled for job 1"
    assert type(classify_failure(["scontrol", "update", "JobId=1", "Comment=x"], 1, text)) is (
        SlurmError
    )


def test_cli_client_raises_the_typed_error() -> None:
    def runner(argv, **kw):  # type: ignore[no-untyped-def]
        return CommandResult(
            tuple(argv), 1, "", "Requested operation is presently disabled for job 5", 0.01
        )

    with pytest.raises(NotRequeueable) as info:
        CliClient(runner=runner, sleep=lambda s: None).requeue("5")
    assert info.value.job_id == "5"


def doc(name: str) -> list:  # type: ignore[type-arg]
    return json.loads((DATA / name).read_text())["errors"]


@pytest.mark.parametrize(
    ("method", "path", "params", "name", "kind"),
    [
        ("GET", "job/99", None, "22.05-rest-job-not-found.json", JobGone),  # HTTP 500, 2017
        ("GET", "job/12740", None, "24.11-rest-v0.0.42-job-unfound.json", JobGone),  # HTTP 200
        ("DELETE", "job/99", {"signal": "TERM"}, "22.05-rest-job-not-found.json", JobGone),
        ("GET", "node/unexisting-node", None, "24.11-rest-v0.0.42-node-unfound.json",
         NodeNotFound),
    ],
)  # fmt: skip
def test_rest_refusals_recorded(method, path, params, name, kind) -> None:  # type: ignore[no-untyped-def]
    err = classify_errors(method, path, params, doc(name), "msg")
    assert type(err) is kind


def test_rest_requeue_refusal_by_errno() -> None:
    errors = [{"error_number": 2037, "error": "Requested operation is presently disabled"}]
    assert type(classify_errors("POST", "job/5", None, errors, "m")) is SlurmError  # an update
    assert type(classify_errors("GET", "jobs", None, [{"error_number": 9}], "m")) is SlurmError
