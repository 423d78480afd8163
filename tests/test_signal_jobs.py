"""``CliClient.signal_jobs``: a node's jobs signalled with one ``scancel``
(one whole job-table read in scancel, not one per job), each job's outcome
typed from the lines scancel writes for the jobs it could not signal."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hooks.core.errors import JobGone, SlurmError, SlurmUnavailable
from slurm_hooks.detect.probes.commands import CommandResult
from slurm_hooks.slurm import cli_backend
from slurm_hooks.slurm.base import JobsSignal, SignalTarget
from slurm_hooks.slurm.cli_backend import CliClient


class Scancel:
    """Answers like scancel 22.05: rc 1 and one ``Kill job error`` line per
    job id it could not signal (scancel.c ``_cancel_job_id``)."""

    def __init__(self, gone: set[str] = frozenset(), stderr: str | None = None, rc: int = 1):
        self.gone, self.stderr, self.rc = gone, stderr, rc
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], **_kw: object) -> CommandResult:
        self.calls.append(list(argv))
        if self.stderr is not None:
            return CommandResult(tuple(argv), self.rc, "", self.stderr, 0.01)
        lines = [
            f"scancel: error: Kill job error on job id {j}: Invalid job id specified"
            for j in argv
            if j in self.gone
        ]
        return CommandResult(tuple(argv), 1 if lines else 0, "", "\n".join(lines), 0.01)


def test_one_scancel_for_all_of_a_nodes_jobs() -> None:
    fake = Scancel(gone={"102"})
    client = CliClient(runner=fake, sleep=lambda s: None)
    assert isinstance(client, JobsSignal)
    out = client.signal_jobs(["101", "102", "103_4"], "USR1", SignalTarget.BATCH)
    assert fake.calls == [["scancel", "--signal=USR1", "--batch", "101", "102", "103_4"]]
    assert out["101"] is None and out["103_4"] is None
    assert isinstance(out["102"], JobGone) and out["102"].job_id == "102"


def test_ids_are_sent_in_bounded_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_backend, "SIGNAL_BATCH", 2)
    fake = Scancel()
    out = CliClient(runner=fake).signal_jobs(["1", "2", "3", "4", "5"], "TERM", SignalTarget.STEPS)
    assert [c[2:] for c in fake.calls] == [["1", "2"], ["3", "4"], ["5"]]
    assert out == dict.fromkeys(["1", "2", "3", "4", "5"])


def test_a_failure_that_names_no_job_is_raised() -> None:
    fake = Scancel(stderr="scancel: error: Invalid user id: 1234")
    with pytest.raises(SlurmError, match="Invalid user id"):
        CliClient(runner=fake).signal_jobs(["1"], "USR1", SignalTarget.FULL)


def test_an_absent_controller_is_retried_then_unavailable() -> None:
    fake = Scancel(stderr="scancel: error: Unable to contact slurm controller (connect failure)")
    with pytest.raises(SlurmUnavailable):
        CliClient(runner=fake, retries=2, sleep=lambda s: None).signal_jobs(
            ["1"], "USR1", SignalTarget.BATCH
        )
    assert len(fake.calls) == 3


def test_ids_and_signals_are_checked_before_anything_runs() -> None:
    fake = Scancel()
    with pytest.raises(SlurmError):
        CliClient(runner=fake).signal_jobs(["1", "2;rm"], "USR1", SignalTarget.BATCH)
    with pytest.raises(SlurmError):
        CliClient(runner=fake).signal_jobs(["1"], "USR1 --uid=0", SignalTarget.BATCH)
    assert fake.calls == []


def test_a_controller_lost_after_a_batch_went_out_keeps_what_went_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The second ``scancel`` finds no controller: the first one's jobs stay
    signalled, the rest carry SlurmUnavailable (nothing raised: something
    went out, and the caller must not send it again)."""
    monkeypatch.setattr(cli_backend, "SIGNAL_BATCH", 2)
    down = "scancel: error: Unable to contact slurm controller (connect failure)"
    answers = [CommandResult((), 0, "", "", 0.01)] + [CommandResult((), 1, "", down, 0.01)] * 9
    calls: list[list[str]] = []

    def runner(argv: list[str], **_kw: object) -> CommandResult:
        calls.append(list(argv))
        return answers.pop(0)

    out = CliClient(runner=runner, retries=1, sleep=lambda s: None).signal_jobs(
        ["1", "2", "3", "4", "5"], "USR1", SignalTarget.BATCH
    )
    assert out["1"] is None and out["2"] is None
    assert all(isinstance(out[j], SlurmUnavailable) for j in ("3", "4", "5"))
    assert [c[3:] for c in calls] == [["1", "2"], ["3", "4"], ["3", "4"]]  # no try for 5


def test_a_silent_scancel_on_a_completing_job_is_job_gone() -> None:
    """scancel keeps quiet about a job that is already completing and exits
    with ESLURM_ALREADY_DONE cut to 8 bits (229): seen on the lab when the
    batch shell exits on USR1 just before the steps' TERM goes out."""
    fake = Scancel(stderr="", rc=229)
    client = CliClient(runner=fake, sleep=lambda s: None)
    out = client.signal_jobs(["7"], "TERM", SignalTarget.STEPS)
    assert isinstance(out["7"], JobGone) and out["7"].job_id == "7"
    with pytest.raises(JobGone):
        client.signal_job("7", "TERM", SignalTarget.STEPS)


def test_a_silent_scancel_for_many_jobs_asks_slurm_which_ended() -> None:
    """Several ids, rc 229 and no words: the job table (real 22.05 records)
    tells which ended; the others were signalled (never sent again)."""
    data = Path(__file__).parent / "data" / "slurm"
    records = {
        "1": (data / "22.05-job_running_comments.txt").read_text(),
        "2": (data / "22.05-job_completing.txt").read_text().replace("JobId=1 ", "JobId=2 ", 1),
    }
    calls: list[list[str]] = []

    def runner(argv: list[str], **_kw: object) -> CommandResult:
        calls.append(list(argv))
        if argv[0] == "scancel":
            return CommandResult(tuple(argv), 229, "", "", 0.01)
        if argv[-1] not in records:
            gone = "slurm_load_jobs error: Invalid job id specified"
            return CommandResult(tuple(argv), 1, "", gone, 0.01)
        return CommandResult(tuple(argv), 0, records[argv[-1]], "", 0.01)

    out = CliClient(runner=runner, sleep=lambda s: None).signal_jobs(
        ["1", "2", "3"], "TERM", SignalTarget.STEPS
    )
    assert out["1"] is None
    assert isinstance(out["2"], JobGone) and isinstance(out["3"], JobGone)
    assert sum(c[0] == "scancel" for c in calls) == 1


def test_an_unknown_exit_status_without_words_is_still_raised() -> None:
    fake = Scancel(stderr="", rc=1)
    with pytest.raises(SlurmError) as err:
        CliClient(runner=fake).signal_jobs(["1", "2"], "TERM", SignalTarget.STEPS)
    assert not isinstance(err.value, JobGone)
