"""One exception tree for slurm-hooks.

Callers catch the narrowest type they can handle; the CLI is the only place
that turns these into exit codes (0 ok, 1 unhealthy/action needed, 2 usage or
could not run).
"""

from __future__ import annotations

from collections.abc import Sequence


class SlurmHooksError(Exception):
    """Base of every error we raise on purpose."""

    exit_code = 2


class ConfigError(SlurmHooksError):
    """A configuration file is missing, unreadable or invalid.  The message
    names the file and the key."""

    def __init__(self, message: str, *, path: str | None = None, key: str | None = None):
        where = ":".join(p for p in (path, key) if p)
        super().__init__(f"{where}: {message}" if where else message)
        self.path = path
        self.key = key


class CommandError(SlurmHooksError):
    """An external command failed or could not be started."""

    def __init__(self, argv: Sequence[str], rc: int | None, stderr: str = "", message: str = ""):
        self.argv = list(argv)
        self.rc = rc
        self.stderr = stderr
        text = message or f"command {self.argv[0]!r} failed with rc={rc}"
        if stderr.strip():
            text += f": {stderr.strip()[:500]}"
        super().__init__(text)


class CommandTimeout(CommandError):
    """An external command ran past its time limit and was killed.
    ``stderr``: what it had written before (a caller may need to know how
    far it got: scancel names each job before it asks slurmctld)."""

    def __init__(self, argv: Sequence[str], timeout: float, stderr: str = ""):
        super().__init__(argv, None, message=f"command {argv[0]!r} timed out after {timeout:g}s")
        self.timeout = timeout
        self.stderr = stderr


class SlurmError(SlurmHooksError):
    """Slurm refused or failed an operation (after retries)."""


class SlurmUnavailable(SlurmError):
    """slurmctld (or slurmrestd) could not be reached, even after retries."""


class SignalMaybeSent(SlurmUnavailable):
    """A signal request went to a controller that did not answer: it may
    still be delivered when slurmctld reads its queued request, so it must
    never be sent again (a checkpoint signal is sent at most once)."""


class ForeignReasonError(SlurmError):
    """We were asked to change a node whose reason someone else wrote."""


class JobGone(SlurmError):
    """The job no longer exists in slurmctld (finished and purged, or never
    was): signalling, requeueing or cancelling it has nothing to act on."""

    def __init__(self, job_id: str, message: str = ""):
        super().__init__(message or f"job {job_id} no longer exists")
        self.job_id = job_id


class NotRequeueable(SlurmError):
    """Slurm refuses to requeue this job (``--no-requeue``, or a state that
    cannot be requeued); the caller cancels it instead or leaves it."""

    def __init__(self, job_id: str, message: str = ""):
        super().__init__(message or f"job {job_id} cannot be requeued")
        self.job_id = job_id


class NodeNotFound(SlurmError):
    """Slurm knows no node by that name."""

    def __init__(self, node: str, message: str = ""):
        super().__init__(message or f"node {node!r} not found")
        self.node = node


class ReasonChanged(SlurmError):
    """A node's reason changed between our read and our write (someone else
    drained or resumed it): the write was not made."""

    def __init__(self, node: str, expected: str | None, found: str | None):
        super().__init__(
            f"node {node}: reason changed under us (expected {expected!r}, found {found!r})"
        )
        self.node = node
        self.expected = expected
        self.found = found


class ReasonFormatError(SlurmHooksError, ValueError):
    """A string is not a reason in our format."""


class NvmlError(SlurmHooksError):
    """NVML could not be loaded or used."""


class KubernetesError(SlurmHooksError):
    """The Kubernetes API answered with an error we cannot handle here."""

    def __init__(self, message: str, status: int | None = None, reason: str | None = None):
        super().__init__(message)
        self.status = status
        self.reason = reason


class ConflictError(KubernetesError):
    """409: the object changed under us (resourceVersion mismatch)."""


class StateError(SlurmHooksError):
    """The local state store is unreadable or could not be written."""


class LabError(SlurmHooksError):
    """The local Slurm lab could not be started, queried or stopped."""


class BudgetExceeded(SlurmHooksError):
    """A hook ran out of its time budget before a step could start."""


class KernelLogError(SlurmHooksError):
    """The kernel log (a file, /dev/kmsg or the journal) could not be read."""


class CheckNotInstalled(SlurmHooksError):
    """A registered check's module or class cannot be imported (not written
    yet, or an optional part not installed).  The runner reports it as
    UNKNOWN; it never stops the other checks."""


class TimelineError(SlurmHooksError, ValueError):
    """An incident timeline handed to the demo plot is malformed; the message
    names the entry and the field."""
