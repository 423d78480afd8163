"""scancel's words and what its answers say, for ``CliClient.signal_jobs``.

Signalling is the one Slurm write whose retry can do harm: a request a
stalled controller queued is delivered when it wakes, so a second one would
signal the job twice.  What scancel printed decides, job by job, whether a
signal was refused (typed), may have been sent (never sent again) or was
not sent (may be retried); the parsing of those answers lives here, apart
from the client's calls.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from slurm_hooks.core.errors import SignalMaybeSent, SlurmError, SlurmUnavailable
from slurm_hooks.detect.probes.commands import CommandResult
from slurm_hooks.slurm.base import SignalTarget
from slurm_hooks.slurm.refusals import Op, is_transient, scancel_errno, typed

_KILL_ERROR = re.compile(r"error on job id ([0-9]+(?:_[0-9]+)?)(?:\.[0-9]+)?: (.*)")


def signal_argv(signal: str, target: SignalTarget) -> list[str]:
    """scancel's words for ``signal`` (already checked) to ``target``,
    before the job ids.

    ``--ctld``: from 24.05 scancel sends the ids, signal and flags to
    slurmctld in one request (``REQUEST_KILL_JOBS``, scancel.c
    ``_ctld_signal_jobs``) instead of reading the whole job table first and
    then asking job by job; slurmctld signals each job with the same
    ``job_signal`` and flags either way.  22.05 to 23.11 know the option
    (it only concerns job steps there) and read the table as before: one
    command line for every release, no version probe per hook run.

    ``-v``: the one-request path exits 0 whatever a job's answer and names
    a job that ended (ESLURM_ALREADY_DONE, ESLURM_INVALID_JOB_ID) only when
    verbose; so does 22.05's path (else silent, exit status 229).  With it
    every job scancel could not signal has its ``Kill job error on job id
    N: ...`` line on every release."""
    argv = ["scancel", "--ctld", "-v", f"--signal={signal}"]
    if target == SignalTarget.BATCH:
        argv.append("--batch")
    elif target == SignalTarget.FULL:
        argv.append("--full")
    return argv


def signal_refused(argv: Sequence[str], job_id: str, line: str, rc: int) -> SlurmError:
    """The typed error for one job scancel did not signal: from its line, or
    (a silent scancel) from its exit status."""
    if line:
        return typed(Op.JOB_SIGNAL, job_id, line, text=line)
    message = f"{' '.join(argv[:2])} {job_id}: exit status {rc}, no message"
    return typed(Op.JOB_SIGNAL, job_id, message, errno=scancel_errno(rc))


def silent_failure(res: CommandResult) -> bool:
    """scancel failed without an error line (at most its ``-v`` notes): a
    job was completing or unknown."""
    said = [ln for ln in res.stderr.splitlines() if "error" in ln.lower()]
    return not said and scancel_errno(res.rc) is not None


#: From Slurm 24.05 ``scancel --ctld`` sends its request at once (scancel.c
#: ``_proc_cluster``: ``if (opt.ctld && ...) return _ctld_signal_jobs()``,
#: before ``_load_job_records``); up to 23.11 the table read comes first
#: and ``--ctld`` concerns job steps only.
ONE_REQUEST_SIGNAL = (24, 5, 0)
#: ``-v``'s note as scancel is about to ask for one job (scancel.c
#: ``_cancel_job_id``: ``Signal %u to %sjob %s``, ``Terminating %sjob %s``).
_ASKING = re.compile(r"(?:Signal \d+ to|Terminating) (?:batch |full )?job ([0-9]+(?:_[0-9]+)?)\b")
#: What scancel prints when it sent no signal request at all: the table read
#: failed (``slurm_perror("slurm_load_jobs error")``, then ``exit(1)``), or
#: no controller accepted the connection (SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR).
_LOAD_FAILED = "slurm_load_jobs error"
_NO_CONNECTION = "(connect failure)"


def asked_job_ids(stderr: str) -> set[str]:
    """Jobs a table-first scancel named as about to be asked (``-v``) or
    answered for: those it may have sent a request for."""
    return {m.group(1) for m in _ASKING.finditer(stderr)} | set(failed_job_ids(stderr))


def sent_nothing(stderr: str, one_request: Callable[[], bool]) -> bool:
    """A failed scancel that named no job sent no signal request: it could
    not connect, or its table read failed (table-first releases; the
    release is asked only then)."""
    if _NO_CONNECTION in stderr:
        return True
    return _LOAD_FAILED in stderr and not one_request()


def cut_short(
    chunk: Sequence[str], asked: set[str], stderr: str, why: str
) -> dict[str, SlurmError | None]:
    """Outcomes of a scancel that got no answer for some jobs: a job it
    named as refused keeps its typed error; a job it may have asked for is
    SignalMaybeSent (never asked again); a job it had not reached is
    SlurmUnavailable (nothing went out for it)."""
    failed = failed_job_ids(stderr)
    out: dict[str, SlurmError | None] = {}
    for jid in chunk:
        line = failed.get(jid)
        if line is not None and not is_transient(line):
            out[jid] = typed(Op.JOB_SIGNAL, jid, line, text=line)
        elif jid in asked:
            out[jid] = SignalMaybeSent(f"scancel {jid}: no answer, may be delivered: {why[:300]}")
        else:
            out[jid] = SlurmUnavailable(f"scancel {jid}: not sent: {why[:300]}")
    return out


def failed_job_ids(stderr: str) -> dict[str, str]:
    """Job id -> scancel's line, for each job it names as not signalled
    (``scancel: error: Kill job error on job id 7: Invalid job id
    specified``, scancel.c ``_cancel_job_id``)."""
    out = {}
    for line in stderr.splitlines():
        m = _KILL_ERROR.search(line)
        if m:
            out[m.group(1)] = line.strip()
    return out


def outcomes(
    argv: Sequence[str], chunk: Sequence[str], failed: dict[str, str], rc: int
) -> dict[str, SlurmError | None]:
    """Each job's outcome of a scancel that answered: signalled (None), or
    the line it named the job with: the controller's absence (the request
    may still be delivered: SignalMaybeSent) or a typed refusal."""
    out: dict[str, SlurmError | None] = {}
    for jid in chunk:
        line = failed.get(jid)
        if line is not None and is_transient(line):
            out[jid] = SignalMaybeSent(f"{' '.join(argv[:2])} {jid}: {line[:300]}")
        else:
            out[jid] = None if line is None else signal_refused(argv, jid, line, rc)
    return out
