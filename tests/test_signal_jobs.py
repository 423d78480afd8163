"""``CliClient.signal_jobs``: a node's jobs signalled with one ``scancel
--ctld -v`` (one whole job-table read in scancel up to Slurm 23.11, one
request and no table read from 24.05; never one per job), each job's
outcome typed from the lines scancel writes for the jobs it could not
signal, whatever its exit status."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hooks.core.errors import (
    CommandTimeout,
    JobGone,
    SignalMaybeSent,
    SlurmError,
    SlurmUnavailable,
)
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
    assert fake.calls == [
        ["scancel", "--ctld", "-v", "--signal=USR1", "--batch", "101", "102", "103_4"]
    ]
    assert out["101"] is None and out["103_4"] is None
    assert isinstance(out["102"], JobGone) and out["102"].job_id == "102"


def test_ids_are_sent_in_bounded_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_backend, "SIGNAL_BATCH", 2)
    fake = Scancel()
    out = CliClient(runner=fake).signal_jobs(["1", "2", "3", "4", "5"], "TERM", SignalTarget.STEPS)
    assert [c[4:] for c in fake.calls] == [["1", "2"], ["3", "4"], ["5"]]
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
    assert [c[5:] for c in calls] == [["1", "2"], ["3", "4"], ["3", "4"]]  # no try for 5


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


DATA = Path(__file__).parent / "data" / "slurm"


@pytest.mark.parametrize(
    ("release", "rc", "ended"),
    [
        # 24.05+: one REQUEST_KILL_JOBS (scancel.c ``_ctld_signal_jobs``),
        # exit status 0 whatever the jobs' answers; job 1 had just completed.
        ("24.11", 0, "Job/step already completing or completed"),
        # 22.05: the table read, then one REQUEST_KILL_JOB per job; exit 1;
        # a finished job is not in the table read (``_verify_job_ids``).
        ("22.05", 1, "Invalid job id specified"),
    ],
)
def test_recorded_answers_give_each_job_its_outcome(release: str, rc: int, ended: str) -> None:
    """``scancel --ctld -v --signal=CONT --batch 2 3 1 999999`` as each
    release answered it on the lab (jobs 2, 3 running, 1 completed, 999999
    never existed): notes for the jobs signalled, an error line for each
    other, plugin chatter on 22.05."""
    stderr = (DATA / f"{release}-scancel_ctld_v.stderr.txt").read_text()
    assert f"job id 1: {ended}" in stderr
    fake = Scancel(stderr=stderr, rc=rc)
    out = CliClient(runner=fake).signal_jobs(["2", "3", "1", "999999"], "CONT", SignalTarget.BATCH)
    assert out["2"] is None and out["3"] is None
    assert isinstance(out["1"], JobGone) and isinstance(out["999999"], JobGone)
    assert len(fake.calls) == 1


def test_a_refusal_that_is_not_an_end_stays_a_plain_error_with_exit_status_0() -> None:
    line = "scancel: error: Kill job error on job id 4: Batch script is missing, aborting job"
    fake = Scancel(stderr="scancel: Signal 10 to batch job 5\n" + line, rc=0)
    out = CliClient(runner=fake).signal_jobs(["4", "5"], "USR1", SignalTarget.BATCH)
    assert type(out["4"]) is SlurmError and "Batch script is missing" in str(out["4"])
    assert out["5"] is None


def test_one_job_refused_with_exit_status_0_is_raised() -> None:
    line = "scancel: error: Kill job error on job id 7: Job/step already completing or completed"
    fake = Scancel(stderr=line, rc=0)
    with pytest.raises(JobGone):
        CliClient(runner=fake).signal_job("7", "TERM", SignalTarget.STEPS)


def test_a_silent_refusal_among_verbose_notes_is_still_job_gone() -> None:
    """``-v`` notes but no error line, exit status 229: the silent refusal."""
    fake = Scancel(stderr="scancel: Signal 15 to job 7", rc=229)
    out = CliClient(runner=fake).signal_jobs(["7"], "TERM", SignalTarget.STEPS)
    assert isinstance(out["7"], JobGone)


class Stalled:
    """scancel meeting a stopped slurmctld, on a given release: ``answers``
    in order (a CommandResult, or a CommandTimeout to raise); ``sinfo
    --version`` answers ``release``."""

    def __init__(self, release: str, answers: list[object]):
        self.release, self.answers = release, list(answers)
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], **_kw: object) -> CommandResult:
        if argv[0] == "sinfo":
            return CommandResult(tuple(argv), 0, f"slurm {self.release}\n", "", 0.01)
        self.calls.append(list(argv))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        assert isinstance(answer, CommandResult)
        return answer


def _timeout(stderr: str = "") -> CommandTimeout:
    return CommandTimeout(["scancel"], 2.0, stderr=stderr)


def _client(fake: Stalled) -> CliClient:
    return CliClient(runner=fake, retries=3, sleep=lambda s: None)


OK = CommandResult((), 0, "", "", 0.01)
TIMED_OUT = "scancel: error: Socket timed out on send/recv operation"


@pytest.mark.parametrize("release", ["24.11.5", "26.05.3"])
def test_one_request_release_killed_scancel_is_never_asked_again(release: str) -> None:
    """24.05+: ``scancel --ctld`` sends REQUEST_KILL_JOBS before anything
    else; killed while waiting for the answer, the request may sit in the
    stopped controller's queue: every job is SignalMaybeSent, one call."""
    fake = Stalled(release, [_timeout(), OK])
    out = _client(fake).signal_jobs(["1", "2"], "USR1", SignalTarget.BATCH)
    assert len(fake.calls) == 1
    assert all(isinstance(out[j], SignalMaybeSent) for j in ("1", "2"))


def test_one_request_release_socket_timeout_is_never_asked_again() -> None:
    fake = Stalled("24.11.5", [CommandResult((), 1, "", TIMED_OUT, 0.01), OK])
    out = _client(fake).signal_jobs(["1"], "USR1", SignalTarget.BATCH)
    assert len(fake.calls) == 1 and isinstance(out["1"], SignalMaybeSent)
    with pytest.raises(SignalMaybeSent):
        _client(Stalled("24.11.5", [CommandResult((), 1, "", TIMED_OUT, 0.01)])).signal_job(
            "1", "USR1", SignalTarget.BATCH
        )


@pytest.mark.parametrize("release", ["22.05.8", "24.11.5"])
def test_no_connection_is_asked_again_on_every_release(release: str) -> None:
    down = "scancel: error: Unable to contact slurm controller (connect failure)"
    fake = Stalled(release, [CommandResult((), 1, "", down, 0.01), OK])
    out = _client(fake).signal_jobs(["1"], "USR1", SignalTarget.BATCH)
    assert len(fake.calls) == 2 and out == {"1": None}


def test_table_first_release_killed_in_the_table_read_is_asked_again() -> None:
    """22.05: scancel reads the job table before it signals and names each
    job (``-v``) just before asking; killed with no job named, it sent
    nothing."""
    notes = "scancel: select/cons_tres: common_init: select/cons_tres loaded\n"
    fake = Stalled("22.05.8", [_timeout(notes), OK])
    out = _client(fake).signal_jobs(["1", "2"], "USR1", SignalTarget.BATCH)
    assert len(fake.calls) == 2 and out == {"1": None, "2": None}


def test_table_first_release_failed_table_read_is_asked_again() -> None:
    said = "scancel: error: slurm_load_jobs error: Socket timed out on send/recv operation"
    fake = Stalled("22.05.8", [CommandResult((), 1, "", said, 0.01), OK])
    out = _client(fake).signal_jobs(["1"], "USR1", SignalTarget.BATCH)
    assert len(fake.calls) == 2 and out == {"1": None}


def test_a_failed_table_read_on_a_one_request_release_is_not_taken_for_nothing_sent() -> None:
    """The same words from a release that sends first prove nothing."""
    said = "scancel: error: slurm_load_jobs error: Socket timed out on send/recv operation"
    fake = Stalled("24.11.5", [CommandResult((), 1, "", said, 0.01), OK])
    out = _client(fake).signal_jobs(["1"], "USR1", SignalTarget.BATCH)
    assert len(fake.calls) == 1 and isinstance(out["1"], SignalMaybeSent)


def test_table_first_release_killed_while_signalling_splits_the_jobs() -> None:
    """Killed after naming job 1 (its request may be queued) but before
    job 2: 1 is SignalMaybeSent, 2 was not sent (SlurmUnavailable only)."""
    fake = Stalled("22.05.8", [_timeout("scancel: Signal 10 to batch job 1\n"), OK])
    out = _client(fake).signal_jobs(["1", "2"], "USR1", SignalTarget.BATCH)
    assert len(fake.calls) == 1
    assert isinstance(out["1"], SignalMaybeSent)
    assert isinstance(out["2"], SlurmUnavailable) and not isinstance(out["2"], SignalMaybeSent)


def test_table_first_release_one_job_timed_out_keeps_the_others() -> None:
    """Job 2's request timed out (may be queued), job 1's was answered."""
    line = "scancel: error: Kill job error on job id 2: Socket timed out on send/recv operation"
    fake = Stalled("22.05.8", [CommandResult((), 1, "", line, 0.01), OK])
    out = _client(fake).signal_jobs(["1", "2"], "USR1", SignalTarget.BATCH)
    assert len(fake.calls) == 1
    assert out["1"] is None and isinstance(out["2"], SignalMaybeSent)


def test_after_a_maybe_sent_batch_the_rest_is_not_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_backend, "SIGNAL_BATCH", 2)
    fake = Stalled("24.11.5", [OK, _timeout(), OK])
    out = _client(fake).signal_jobs(["1", "2", "3", "4", "5"], "USR1", SignalTarget.BATCH)
    assert [c[5:] for c in fake.calls] == [["1", "2"], ["3", "4"]]
    assert out["1"] is None and out["2"] is None
    assert isinstance(out["3"], SignalMaybeSent) and isinstance(out["4"], SignalMaybeSent)
    assert isinstance(out["5"], SlurmUnavailable) and not isinstance(out["5"], SignalMaybeSent)


def test_an_unreadable_version_counts_as_one_request() -> None:
    """Without the release, a killed scancel's silence proves nothing."""

    def runner(argv: list[str], **_kw: object) -> CommandResult:
        if argv[0] == "sinfo":
            return CommandResult(tuple(argv), 1, "", "sinfo: error: broken", 0.01)
        raise _timeout()

    out = CliClient(runner=runner, sleep=lambda s: None).signal_jobs(
        ["1"], "USR1", SignalTarget.BATCH
    )
    assert isinstance(out["1"], SignalMaybeSent)
