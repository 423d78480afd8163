"""What Slurm's refusals mean, as typed errors.

Slurm tells a client why it refused only by an error number (slurmrestd's
``errors[].error_number``) or that number's text (``slurm_strerror``, which
scontrol and scancel print).  Each backend turns its raw answer into one of
our typed errors in exactly one function (``cli_backend.classify_failure``,
``rest_backend.classify_errors``) using this table, so nothing above the
access layer ever looks at Slurm's words.

The numbers and texts are Slurm's ``slurm_errno.h``/``slurm_errno.c``; each
was checked on Slurm 22.05.8 with ``slurm_strerror(n)`` from
``libslurmfull.so``, and each "seen" line below is what scontrol/scancel
printed on the lab (``slurm-hooks lab up``), recorded in
tests/test_slurm_refusals.py.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from slurm_hooks.core.errors import JobGone, NodeNotFound, NotRequeueable, SlurmError


class Op(enum.StrEnum):
    """What we asked for; the same refusal means different things per op."""

    JOB_READ = "job_read"
    JOB_SIGNAL = "job_signal"
    JOB_CANCEL = "job_cancel"
    JOB_REQUEUE = "job_requeue"
    JOB_UPDATE = "job_update"
    NODE_READ = "node_read"
    NODE_UPDATE = "node_update"
    OTHER = "other"

    @property
    def on_job(self) -> bool:
        return self.value.startswith("job_")

    @property
    def on_node(self) -> bool:
        return self.value.startswith("node_")


@dataclass(frozen=True)
class Refusal:
    errno: int
    text: str


#: ESLURM_INVALID_JOB_ID.  Seen: ``Invalid job id specified for job 99999``
#: (scontrol requeue/update), ``slurm_load_jobs error: Invalid job id
#: specified`` (scontrol show job), ``scancel: error: Kill job error on job id
#: 7: Invalid job id specified`` (scancel --signal, also for a job that ended
#: but is not purged yet).
INVALID_JOB_ID = Refusal(2017, "Invalid job id specified")
#: ESLURM_INVALID_NODE_NAME.  Seen: ``slurm_update error: Invalid node name specified``.
INVALID_NODE_NAME = Refusal(2018, "Invalid node name specified")
#: ESLURM_ALREADY_DONE: signal/requeue of a job that is completing or done.
ALREADY_DONE = Refusal(2021, "Job/step already completing or completed")
#: ESLURM_DISABLED.  Seen: ``Requested operation is presently disabled for
#: job 1`` (scontrol requeue of a ``--no-requeue`` job, running or ended).
DISABLED = Refusal(2037, "Requested operation is presently disabled")
#: ESLURM_BATCH_ONLY: requeue of an interactive (srun/salloc) job.
BATCH_ONLY = Refusal(2039, "Only batch jobs are accepted or processed")
#: ESLURM_JOB_FINISHED.  Seen: ``Job has already finished for job 1``
#: (scontrol update JobId=1 Comment=... on an ended job).
JOB_FINISHED = Refusal(2084, "Job has already finished")

#: Refusals that mean the job is gone, for any job operation.
JOB_GONE = (INVALID_JOB_ID, ALREADY_DONE, JOB_FINISHED)
#: Refusals that mean "this job cannot be requeued", for a requeue.
NOT_REQUEUEABLE = (DISABLED, BATCH_ONLY)
#: Refusals that mean "no such node", for a node operation.
NO_SUCH_NODE = (INVALID_NODE_NAME,)

#: scancel says nothing of a job it could not signal because the job was
#: already completing or is unknown (scancel.c ``_cancel_job_id`` prints
#: those two only with ``-v``; ``CliClient`` passes it, this is for a
#: scancel that still says nothing); its exit status is then the error
#: number cut to 8 bits (ESLURM_ALREADY_DONE 2021 -> 229,
#: ESLURM_INVALID_JOB_ID 2017 -> 225).  Seen on the lab: ``scancel
#: --signal=TERM`` rc 229, no output, on a job whose batch shell had just
#: exited.
SILENT_SCANCEL = (ALREADY_DONE, INVALID_JOB_ID)


def scancel_errno(rc: int) -> int | None:
    """The Slurm error number behind a silent scancel's exit status, when
    it is one scancel keeps quiet about (:data:`SILENT_SCANCEL`)."""
    for refusal in SILENT_SCANCEL:
        if rc and refusal.errno & 0xFF == rc:
            return refusal.errno
    return None


def typed(
    op: Op,
    subject: str,
    message: str,
    *,
    errno: int | None = None,
    text: str = "",
) -> SlurmError:
    """The typed error for a refusal of ``op`` on ``subject`` (a job id or a
    node name), recognised by ``errno`` when the backend has it, else by
    Slurm's ``text``; a plain SlurmError(message) when it is none of ours."""

    def hit(refusals: tuple[Refusal, ...]) -> bool:
        if errno is not None and errno in {r.errno for r in refusals}:
            return True
        return any(r.text in text for r in refusals)

    if op.on_job and hit(JOB_GONE):
        return JobGone(subject, message)
    if op is Op.JOB_REQUEUE and hit(NOT_REQUEUEABLE):
        return NotRequeueable(subject, message)
    if op.on_node and hit(NO_SUCH_NODE):
        return NodeNotFound(subject, message)
    return SlurmError(message)


#: stderr fragments that mean "the controller is not there right now" (or is
#: too busy), as opposed to "the controller said no".
TRANSIENT_ERRORS = (
    "unable to contact slurm controller",
    "socket timed out on send/recv",
    "connection refused",
    "zero bytes were transmitted or received",
    "communication connection failure",
    "slurm backup controller in standby mode",
    "resource temporarily unavailable",
    "transport endpoint is not connected",
    "connection reset by peer",
    "slurmctld not responding",
)


def is_transient(stderr: str) -> bool:
    """Whether Slurm's words say the controller was not there (retry), not
    that it refused."""
    text = stderr.lower()
    return any(t in text for t in TRANSIENT_ERRORS)
