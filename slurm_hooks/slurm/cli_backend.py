"""The default Slurm backend: scontrol, sinfo, squeue and scancel.

Every call goes through probes.commands.run with an argument list (reasons
and names are never seen by a shell), a timeout and a PATH (hooks get none).
A controller that does not answer is retried with exponential backoff and
then reported as SlurmUnavailable; anything Slurm refuses is a SlurmError
carrying the command, its exit status and Slurm's own words.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from slurm_hooks.core import hostlist
from slurm_hooks.core.config import SLURM_SIGNAL_WAYS
from slurm_hooks.core.errors import (
    CommandError,
    CommandTimeout,
    JobGone,
    NodeNotFound,
    SlurmError,
    SlurmUnavailable,
)
from slurm_hooks.core.model import JobInfo, NodeState
from slurm_hooks.core.slurm_model import ACTIVE_JOB_STATES
from slurm_hooks.detect.probes.commands import CommandResult, run
from slurm_hooks.slurm import job_gpus, libslurm_signal, parse, parse_config, scancel, squeue, steps
from slurm_hooks.slurm.base import SignalTarget
from slurm_hooks.slurm.refusals import (
    ALREADY_DONE,
    INVALID_JOB_ID,
    Op,
    is_transient,
    scancel_errno,
    typed,
)
from slurm_hooks.slurm.sinfo_node import parse_sinfo_node, sinfo_node_argv

log = logging.getLogger(__name__)

Runner = Callable[..., CommandResult]

_SIGNAL_RE = re.compile(r"^(?:SIG)?[A-Z][A-Z0-9+\-]*$|^\d{1,2}$")
_JOB_ID_RE = re.compile(r"^\d+(?:_\d+|\+\d+)?$")


def _op_of(argv: Sequence[str]) -> tuple[Op, str]:
    """What a Slurm command line asks for, and of which job or node."""
    words = [str(a) for a in argv]
    if not words:
        return Op.OTHER, ""
    if words[0] == "scancel":
        op = Op.JOB_SIGNAL if any(w.startswith("--signal=") for w in words) else Op.JOB_CANCEL
        return op, words[-1]
    if words[0] != "scontrol":
        return Op.OTHER, ""
    rest = [w for w in words[1:] if not w.startswith("-")]
    for w in rest:
        key, _, value = w.partition("=")
        if key.lower() == "jobid":
            return Op.JOB_UPDATE, value
        if key.lower() == "nodename":
            return Op.NODE_UPDATE, value
    if rest[:1] == ["requeue"]:
        return Op.JOB_REQUEUE, words[-1]
    if rest[:2] in (["show", "job"], ["show", "step"]):
        return Op.JOB_READ, rest[2] if len(rest) > 2 else ""
    if rest[:2] == ["show", "node"]:
        return Op.NODE_READ, rest[2] if len(rest) > 2 else ""
    return Op.OTHER, ""


def classify_failure(argv: Sequence[str], rc: int, stderr: str, stdout: str = "") -> SlurmError:
    """The one place this backend reads Slurm's words: a failed command as
    a typed error (JobGone, NotRequeueable, NodeNotFound; see
    slurm/refusals.py for the texts, as scontrol/scancel 22.05 print them),
    else a SlurmError carrying the command, its status and Slurm's words."""
    op, subject = _op_of(argv)
    cmd = " ".join(str(a) for a in argv[:2])
    message = f"{cmd} failed (rc={rc}): {stderr.strip()[:500] or stdout.strip()[:200]}"
    # ``scontrol show node X`` says ``Node X not found`` on stdout (rc=1).
    if op is Op.NODE_READ and subject and f"Node {subject} not found" in stdout:
        return NodeNotFound(subject, message)
    errno = scancel_errno(rc) if argv and argv[0] == "scancel" and not stderr.strip() else None
    return typed(op, subject, message, errno=errno, text=stderr)


def check_reason(reason: str) -> str:
    """Slurm refuses an empty reason, and a newline breaks every line-based
    reader of ``sinfo``/``scontrol`` output: refuse both before asking."""
    if not reason or not reason.strip():
        raise SlurmError("a drain/down reason must not be empty")
    if "\n" in reason or "\r" in reason:
        raise SlurmError("a reason must be one line (it contains a newline)")
    return reason


def check_comment(comment: str) -> str:
    """A node comment we write: one line, bounded (empty clears it)."""
    if "\n" in comment or "\r" in comment or len(comment) > 256:
        raise SlurmError(f"invalid node comment {comment!r}")
    return comment


def check_job_id(job_id: str | int) -> str:
    text = str(job_id).strip()
    if not _JOB_ID_RE.match(text):
        raise SlurmError(f"invalid job id {job_id!r}")
    return text


def check_signal(signal: str) -> str:
    text = str(signal).strip().upper()
    if not _SIGNAL_RE.match(text):
        raise SlurmError(f"invalid signal {signal!r}")
    return text


#: Job ids per ``scancel`` of :meth:`CliClient.signal_jobs` (bounds argv;
#: up to 23.11 each invocation reads the job table once).
SIGNAL_BATCH = 256


class CliClient:
    """SlurmClient over Slurm's command-line tools.

    ``slurm_conf`` sets SLURM_CONF for every call (hooks started by slurmd
    get no SLURM_CONF in HealthCheckProgram).  ``node_source`` selects how
    nodes are read: ``scontrol`` (``scontrol -o show node``, one format on
    every version) or ``json`` (``sinfo --json`` on 22.05, ``scontrol --json``
    on 23.02+; robust to any reason text, a little slower).  ``runner`` is the
    command port; tests pass a fake to exercise the retry logic.
    """

    def __init__(
        self,
        *,
        slurm_conf: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 5.0,
        node_source: str = "scontrol",
        env: Mapping[str, str] | None = None,
        runner: Runner = run,
        sleep: Callable[[float], None] = time.sleep,
        deadline_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        signal_via: str = "scancel",
    ) -> None:
        if node_source not in ("scontrol", "json"):
            raise SlurmError(f"unknown node_source {node_source!r} (scontrol or json)")
        if signal_via not in SLURM_SIGNAL_WAYS:
            raise SlurmError(
                f"unknown signal_via {signal_via!r} ({' or '.join(SLURM_SIGNAL_WAYS)})"
            )
        #: ``auto``: below Slurm 24.05, where scancel reads the whole job
        #: table for any ``--signal``, signals go through libslurm's
        #: ``slurm_kill_job2`` (:mod:`~slurm_hooks.slurm.libslurm_signal`)
        #: when the library is here; ``scancel``: always scancel.
        self.signal_via = signal_via
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.node_source = node_source
        self._env = dict(env or {})
        if slurm_conf:
            self._env["SLURM_CONF"] = str(slurm_conf)
        self._run = runner
        self._sleep = sleep
        self._clock = clock
        #: One total deadline for every call this client makes (an operator
        #: command: ``slurm-hooks status`` answers or says why within it);
        #: None: each call gets its own timeout and retries (hooks, which
        #: have their own budgets).
        self.deadline_s = deadline_s
        self._ends = None if deadline_s is None else clock() + deadline_s
        self._version: tuple[int, int, int] | None = None
        #: ``get_node`` asks sinfo for the one node (False once sinfo refused).
        self._single_read = True

    # -- plumbing -----------------------------------------------------------

    def _call(
        self, argv: Sequence[str], *, retry: bool = True, refusal_ok: bool = False
    ) -> CommandResult:
        """Run one Slurm command; retry while the controller is unreachable.
        ``refusal_ok``: a non-zero status that is not the controller's
        absence is returned to the caller instead of raised."""
        last = ""
        tried = 0
        for timeout in self._attempts(argv, self.retries + 1 if retry else 1):
            tried += 1
            try:
                res = self._run(argv, timeout=timeout, check=False, env=self._env)
            except CommandTimeout as exc:
                last = str(exc)
                continue
            except CommandError as exc:
                raise SlurmError(f"cannot run {argv[0]}: {exc}") from exc
            if res.rc == 0:
                return res
            stderr = res.stderr.strip()
            if is_transient(stderr):
                last = stderr
                continue
            if refusal_ok:
                return res
            raise classify_failure(argv, res.rc, stderr, res.stdout)
        raise self._unreachable(argv, tried, last)

    def _attempts(self, argv: Sequence[str], attempts: int) -> Iterator[float]:
        """Each attempt's timeout, after the back-off between attempts, while
        the client's deadline leaves time for one."""
        for attempt in range(attempts):
            if attempt:
                delay = min(self.backoff * 2 ** (attempt - 1), self.max_backoff)
                if self._left() <= delay:
                    return  # no time for another attempt within the deadline
                log.info("slurm retry argv=%s attempt=%d delay=%.2f", argv[:2], attempt, delay)
                self._sleep(delay)
            timeout = min(self.timeout, self._left())
            if timeout <= 0:
                return
            yield timeout

    def _unreachable(
        self, argv: Sequence[str], tried: int, last: str, sent: str = ""
    ) -> SlurmUnavailable:
        within = f" within the {self.deadline_s:g}s deadline" if self._ends is not None else ""
        return SlurmUnavailable(
            f"slurm controller unreachable after {tried} attempt(s){within} "
            f"running {argv[0]}{sent}: {last[:300] or 'no time left'}"
        )

    def _left(self) -> float:
        """Seconds left of the client's deadline (infinite without one)."""
        return float("inf") if self._ends is None else self._ends - self._clock()

    def version(self) -> tuple[int, int, int]:
        """The client tools' Slurm version (cached)."""
        if self._version is None:
            out = self._call(["sinfo", "--version"], retry=False).stdout
            self._version = parse_config.parse_version(out)
        return self._version

    def ping(self) -> bool:
        """True when the primary controller answers ``scontrol ping``."""
        try:
            res = self._run(["scontrol", "ping"], timeout=self.timeout, check=False, env=self._env)
        except CommandError:
            return False
        return res.rc == 0 and " is UP" in res.stdout

    # -- nodes --------------------------------------------------------------

    def list_nodes(self, names: Sequence[str] | str | None = None) -> list[NodeState]:
        wanted: list[str] | None = None
        if names is not None:
            wanted = hostlist.expand(names) if isinstance(names, str) else list(names)
            if not wanted:
                return []
        if self.node_source == "json":
            nodes = self._nodes_json()
            if wanted is not None:
                index = {n.name: n for n in nodes}
                missing = [w for w in wanted if w not in index]
                if missing:
                    raise SlurmError(f"unknown node(s): {hostlist.fold(missing)}")
                nodes = [index[w] for w in wanted]
            return nodes
        argv = ["scontrol", "-o", "show", "node"]
        if wanted is not None:
            argv.append(hostlist.fold(wanted))
        return parse.parse_scontrol_nodes(self._call(argv).stdout)

    def _nodes_json(self) -> list[NodeState]:
        if self.version() >= (23, 2, 0):
            argv = ["scontrol", "--json", "show", "node"]
        else:
            argv = ["sinfo", "--json"]
        return parse.parse_nodes_json(self._call(argv).stdout)

    def get_node(self, name: str) -> NodeState:
        """One node, read alone (``sinfo_node_argv``: one node's record
        crosses the wire, not the table: the door's read before each write
        is O(1) in the cluster's size).  Falls back to ``scontrol -o show
        node NAME`` when sinfo cannot say (``parse_sinfo_node``)."""
        if self._single_read and name and not any(c in name for c in " ,[]="):
            try:
                out = self._call(sinfo_node_argv(name)).stdout
            except SlurmUnavailable:
                raise
            except SlurmError as exc:
                # A release whose sinfo lacks one of the fields: the long way,
                # from now on (this client), instead of failing every read.
                log.warning("sinfo single-node read refused (%s); scontrol from now on", exc)
                self._single_read = False
            else:
                node = parse_sinfo_node(out, name)
                if node is not None:
                    return node
                log.debug("sinfo -n %s: no single reading; scontrol show node", name)
        nodes = [n for n in self.list_nodes([name]) if n.name == name]
        if not nodes:
            raise NodeNotFound(name)
        return nodes[0]

    def _update_node(self, name: str, *args: str) -> None:
        if not name or any(c in name for c in " ,[]="):
            raise SlurmError(f"invalid node name {name!r}")
        self._call(["scontrol", "update", f"NodeName={name}", *args])

    def drain(self, name: str, reason: str) -> None:
        self._update_node(name, "State=DRAIN", f"Reason={check_reason(reason)}")

    def resume(self, name: str) -> None:
        self._update_node(name, "State=RESUME")

    def down(self, name: str, reason: str) -> None:
        self._update_node(name, "State=DOWN", f"Reason={check_reason(reason)}")

    def update_reason(self, name: str, reason: str) -> None:
        self._update_node(name, f"Reason={check_reason(reason)}")

    def reboot(self, name: str, reason: str, nextstate: str = "DOWN") -> None:
        """``scontrol reboot ASAP nextstate=... reason=... NODE``: Slurm
        drains the node, runs its RebootProgram once it is idle, and puts it
        in ``nextstate`` when slurmd registers after the boot."""
        if not name or any(c in name for c in " ,[]="):
            raise SlurmError(f"invalid node name {name!r}")
        if nextstate.upper() not in ("DOWN", "RESUME"):
            raise SlurmError(f"invalid reboot nextstate {nextstate!r}")
        self._call(
            ["scontrol", "reboot", "ASAP", f"nextstate={nextstate.upper()}",
             f"reason={check_reason(reason)}", name]
        )  # fmt: skip

    def reservation_names(self) -> set[str]:
        from slurm_hooks.slurm.reservation import list_argv, names_in

        return names_in(self._call(list_argv()).stdout)

    def create_reservation(self, name: str, node: str, minutes: int) -> None:
        """Not retried: a create that went through before a lost answer
        would be refused as a duplicate (``SlurmDoor.ensure_reservation``
        looks first)."""
        from slurm_hooks.slurm.reservation import create_argv

        self._call(create_argv(name, node, minutes), retry=False)

    def delete_reservation(self, name: str) -> None:
        from slurm_hooks.slurm.reservation import delete_argv

        self._call(delete_argv(name), retry=False)

    def set_node_comment(self, name: str, comment: str) -> None:
        """Set the node's ``Comment`` (empty string: clear it)."""
        self._update_node(name, f"Comment={check_comment(comment)}")

    def set_node_extra(self, name: str, extra: str) -> None:
        """Set the node's ``Extra`` (``scontrol update Extra=``; 22.05.8 takes it)."""
        self._update_node(name, f"Extra={check_comment(extra)}")

    def server_time(self) -> datetime:
        """slurmctld's own clock (``sdiag``'s first line): what the breaker's
        claim protocol waits on, never this host's clock."""
        return parse_config.parse_sdiag_time(self._call(["sdiag"]).stdout)

    # -- jobs ---------------------------------------------------------------

    def _squeue(self, *args: str) -> list[JobInfo]:
        out = self._call(["squeue", "-h", *args, "-o", squeue.squeue_format()]).stdout
        jobs, bad = squeue.parse_squeue(out)
        if bad:
            log.warning("squeue: skipped %d malformed line(s)", bad)
        return jobs

    def jobs_on_node(self, name: str) -> list[JobInfo]:
        """The node's active jobs.  Not ``squeue -w NODE``: on 22.05 that
        reads the whole node table besides the job table (sdiag:
        ``REQUEST_NODE_INFO``); the job table alone, filtered here by each
        job's node list, is the same answer for one read less.  ``-a``: jobs
        of hidden partitions are on the node too."""
        jobs = self._squeue("-a", "-t", ",".join(ACTIVE_JOB_STATES))
        return [j for j in jobs if j.runs_on(name)]

    def list_jobs(self, states: Sequence[str] | None = None) -> list[JobInfo]:
        args: list[str] = []
        if states:
            args += ["-t", ",".join(s.upper() for s in states)]
        return self._squeue(*args)

    def get_job(self, job_id: str) -> JobInfo:
        jid = check_job_id(job_id)
        skipped: list[str] = []
        out = self._call(["scontrol", "-o", "show", "job", jid]).stdout
        jobs = parse.parse_scontrol_jobs(out, skipped=skipped)
        if skipped:
            # A record user text made ambiguous: never guessed, never "gone",
            # and no record beside it believed (a job name with newlines can
            # hold a whole record of another user's job with this id).
            raise parse.ShadowedRecord("; ".join(skipped)[:500])
        same = [job for job in jobs if job.job_id == jid]
        if len(same) > 1:
            raise parse.ShadowedRecord(f"{len(same)} records of job {jid}")
        if same:
            return same[0]
        if jobs:
            return jobs[0]
        raise JobGone(jid)

    def job_steps(self, job_id: str) -> dict[str, str]:
        """The job's steps and their states (``slurm/steps.py``): one read
        of that job's steps alone.  A plain job id only: an array task's
        steps are listed under its own job id."""
        jid = check_job_id(job_id)
        if not jid.isdigit():
            raise SlurmError(f"job steps of {jid!r}: a plain job id is needed")
        return steps.parse_steps(self._call(steps.steps_argv(jid)).stdout, jid)

    def job_gpu_detail(self, job_id: str) -> list[tuple[str, str]]:
        """``scontrol -d -o show job``'s per-node GRES runs (JobGpus)."""
        jid = check_job_id(job_id)
        out = self._call(["scontrol", "-d", "-o", "show", "job", jid]).stdout
        return job_gpus.detail_from_scontrol(out, jid)

    def signal_job(self, job_id: str, signal: str, target: SignalTarget) -> None:
        """One job: :meth:`signal_jobs` of it alone (a refusal is named on
        scancel's stderr, also when it exits 0), its typed error raised."""
        jid = check_job_id(job_id)
        err = self.signal_jobs([jid], signal, target).get(jid)
        if err is not None:
            raise err

    def signal_jobs(
        self, job_ids: Sequence[str], signal: str, target: SignalTarget
    ) -> dict[str, SlurmError | None]:
        """Signal every job in ``job_ids`` with one ``scancel`` per
        :data:`SIGNAL_BATCH` ids (see :class:`~slurm_hooks.slurm.base.JobsSignal`:
        one request to slurmctld from 24.05, one whole job-table read up to
        23.11; never one per job).  scancel signals each job on its own and
        names each one it could not (``Kill job error on job id N: ...``;
        rc 1 up to 23.11, rc 0 from 24.05: the lines are read either way):
        those get their typed error, the others None.

        A signal is never asked for twice (:meth:`_signal_chunk`): a job
        whose request may have reached a controller that did not answer
        gets SignalMaybeSent and is not asked again.  SlurmUnavailable is
        raised only when the first ``scancel`` sent nothing; once the
        controller stops answering, the jobs not asked carry
        SlurmUnavailable as their outcome (what went out before stays
        known)."""
        ids = [check_job_id(j) for j in job_ids]
        head = self._signal_head(check_signal(signal), target)
        out: dict[str, SlurmError | None] = {}
        for start in range(0, len(ids), SIGNAL_BATCH):
            chunk = ids[start : start + SIGNAL_BATCH]
            try:
                answers = self._signal_chunk([*head, *chunk], chunk)
            except SlurmUnavailable as exc:
                if not out:
                    raise
                out.update(dict.fromkeys(ids[start:], exc))
                break
            out.update(answers)
            lost = [e for e in answers.values() if isinstance(e, SlurmUnavailable)]
            if lost:
                # The controller stopped answering: nothing more is sent.
                rest = ids[start + len(chunk) :]
                out.update(dict.fromkeys(rest, SlurmUnavailable(f"not sent: {lost[0]}")))
                break
        return out

    def _signal_chunk(
        self, argv: Sequence[str], chunk: Sequence[str]
    ) -> dict[str, SlurmError | None]:
        """One ``scancel`` for ``chunk``; asked again (the client's retries)
        only while it provably sent nothing: the job-table read failed
        (``slurm_load_jobs error``, up to 23.11, where scancel reads before
        it signals), it could not connect (``connect failure``), or it was
        killed before it named any job (up to 23.11 it names each job, with
        ``-v``, just before asking).  Anything else that leaves a job
        without an answer may have reached slurmctld (a stopped controller
        accepts connections and reads the queued request when it
        continues): that job gets SignalMaybeSent, never a second request.
        Raises SlurmUnavailable when nothing was sent after the retries."""
        last = ""
        tried = 0
        for timeout in self._attempts(argv, self.retries + 1):
            tried += 1
            try:
                res = self._run(argv, timeout=timeout, check=False, env=self._env)
            except CommandTimeout as exc:
                asked = set(chunk) if self._one_request() else scancel.asked_job_ids(exc.stderr)
                if asked:
                    return scancel.cut_short(chunk, asked, exc.stderr, str(exc))
                last = str(exc)
                continue
            except CommandError as exc:
                raise SlurmError(f"cannot run {argv[0]}: {exc}") from exc
            failed = scancel.failed_job_ids(res.stderr)
            if not failed and res.rc and is_transient(res.stderr):
                if scancel.sent_nothing(res.stderr, self._one_request):
                    last = res.stderr.strip()
                    continue
                return scancel.cut_short(chunk, set(chunk), res.stderr, res.stderr.strip())
            if res.rc and not failed and scancel.silent_failure(res):
                # A job of the chunk was completing or unknown (scancel names
                # none): which one, Slurm's job table tells; the others got
                # the signal.
                failed = self._ended_of(chunk) if len(chunk) > 1 else {chunk[0]: ""}
            elif res.rc and not failed:
                # scancel failed as a whole (no job named): nothing is known.
                raise classify_failure(argv, res.rc, res.stderr.strip(), res.stdout)
            return scancel.outcomes(argv, chunk, failed, res.rc)
        raise self._unreachable(argv, tried, last, ", nothing sent")

    def _signal_head(self, signal: str, target: SignalTarget) -> list[str]:
        """The command line before the job ids: scancel's, or (``auto``,
        below 24.05, with the library here) the libslurm signaller's, which
        sends the same per-job requests without the table read first and
        answers in scancel's words."""
        if self.signal_via == "auto" and not self._one_request():
            if libslurm_signal.find_library() is not None:
                return libslurm_signal.signal_argv(sys.executable, signal, target)
        return scancel.signal_argv(signal, target)

    def _one_request(self) -> bool:
        """Whether this release's ``scancel --ctld`` asks slurmctld at once
        (:data:`scancel.ONE_REQUEST_SIGNAL`): read before a signal with
        ``signal_via = "auto"``, else only when a signal went wrong.  A
        version that cannot be read counts as yes: then no silence is taken
        for "nothing sent", and scancel is used."""
        try:
            return self.version() >= scancel.ONE_REQUEST_SIGNAL
        except SlurmError as exc:
            log.warning(
                "cannot read the Slurm version (%s): a signal without answer may be sent", exc
            )
            return True

    def _ended_of(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Job id -> why, for each of ``job_ids`` that is no longer running
        (gone, completing or ended): what a silent scancel left unnamed."""
        out = {}
        for jid in job_ids:
            try:
                job = self.get_job(jid)
            except JobGone:
                out[jid] = f"job {jid}: {INVALID_JOB_ID.text}"
                continue
            if job.state not in ACTIVE_JOB_STATES or job.state == "COMPLETING":
                out[jid] = f"job {jid}: {ALREADY_DONE.text} ({job.state})"
        return out

    def requeue(self, job_id: str) -> None:
        self._call(["scontrol", "requeue", check_job_id(job_id)])

    def cancel(self, job_id: str) -> None:
        self._call(["scancel", check_job_id(job_id)])

    def set_job_comment(self, job_id: str, comment: str, *, admin: bool = False) -> None:
        if "\n" in comment:
            raise SlurmError("a job comment must be one line")
        key = "AdminComment" if admin else "Comment"
        self._call(["scontrol", "update", f"JobId={check_job_id(job_id)}", f"{key}={comment}"])

    # -- cluster ------------------------------------------------------------

    def show_config(self) -> dict[str, str]:
        return parse_config.parse_show_config(self._call(["scontrol", "show", "config"]).stdout)

    def reconfigure(self) -> None:
        """``scontrol reconfigure``: slurmctld and every slurmd re-read slurm.conf."""
        self._call(["scontrol", "reconfigure"])

    def raw(self, *argv: str) -> str:
        """Run a Slurm command through the same retry/timeout path; for the lab
        and for diagnostics, not for remediation logic."""
        return self._call(list(argv)).stdout

    def __repr__(self) -> str:
        conf: Any = self._env.get("SLURM_CONF")
        return f"CliClient(slurm_conf={conf!r}, node_source={self.node_source!r})"
