"""The one place slurm-hooks starts external programs.

Two entry points (ReFrame's ``osext.run_command`` and its spawned-process
handling are the model):

* :func:`run`: wait for the program and capture its output, within a
  timeout.  The child starts in a session (process group) of its own, and
  on a timeout, or when we are interrupted, the whole group is killed, so an
  ``srun``/``gpu_burn``/``mpirun`` grandchild can neither outlive the call
  nor keep our pipes open;
* :func:`spawn_detached`: start a program that must outlive us (the grace
  worker), in its own session, stdio away from the hook's pipes; finished
  ones are reaped (:func:`reap_detached`) so a daemon leaves no zombies.

Every call has an argument list (never a shell) and a PATH: slurmd starts
Prolog, Epilog and HealthCheckProgram with no PATH at all.  Nothing else in
the package imports :mod:`subprocess` (tests/test_commands.py checks it).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from slurm_hooks.core.errors import CommandError, CommandTimeout
from slurm_hooks.core.record import record

log = logging.getLogger(__name__)

#: Used when the environment has no PATH (slurmd hooks).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Seconds to collect what a killed group wrote before giving up on its pipes
#: (a grandchild that left the group could still hold them).
DRAIN_S = 2.0


@record
class CommandResult:
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.rc == 0


def command_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment with a usable PATH."""
    env = dict(os.environ)
    if not env.get("PATH"):
        env["PATH"] = DEFAULT_PATH
    if extra:
        env.update(extra)
    return env


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    check: bool = True,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> CommandResult:
    """Run ``argv`` and capture its output as text.

    Raises CommandTimeout past ``timeout`` seconds (the child's whole
    process group is killed), CommandError when the program is missing, or
    when ``check`` is set and it exits non-zero.  Output is decoded
    leniently: a stray byte from a tool must not turn into a crash.  stdin
    is ``input``, else /dev/null (``srun`` would forward ours to its task).
    """
    args = [str(a) for a in argv]
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(  # noqa: S603 - argument list, no shell
            args,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=command_env(env),
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        raise CommandError(args, None, message=f"cannot run {args[0]!r}: {exc}") from exc
    try:
        stdout, stderr = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        said = kill_group(proc)
        log.warning("command timed out argv=%s timeout=%s", args, timeout)
        raise CommandTimeout(args, timeout, stderr=said) from exc
    except BaseException:
        # KeyboardInterrupt, SystemExit from a signal handler: the child is
        # in its own session, so nobody else would stop it.
        kill_group(proc)
        raise
    seconds = time.monotonic() - t0
    result = CommandResult(tuple(args), proc.returncode, stdout, stderr, seconds)
    log.debug("command argv=%s rc=%s seconds=%.3f", args, proc.returncode, seconds)
    if check and proc.returncode != 0:
        raise CommandError(args, proc.returncode, stderr)
    return result


def kill_group(proc: subprocess.Popen[str]) -> str:
    """SIGKILL the process group ``proc`` leads (its own session), then
    collect it; pipes still held by an escaped grandchild are closed after
    DRAIN_S instead of being waited on.  Returns what the child wrote on
    stderr before (empty when it was not collected)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    try:
        _, stderr = proc.communicate(timeout=DRAIN_S)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()
        return ""
    return stderr if isinstance(stderr, str) else ""


# -- detached: children that must outlive us -----------------------------------------

_DETACHED: list[subprocess.Popen[bytes]] = []


def spawn_detached(
    argv: Sequence[str],
    *,
    output: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    cwd: str = "/",
) -> int:
    """Start ``argv`` in its own session, stdin /dev/null, stdout and stderr
    appended to ``output``, and return its PID without waiting.  For a child
    that must outlive the hook that starts it (slurmd reads a hook's output
    until EOF and kills a HealthCheckProgram after 60 s).  ``env`` is added
    to ours (PATH made usable).  Raises CommandError when it cannot start."""
    args = [str(a) for a in argv]
    try:
        with open(os.devnull, "rb") as null_in, open(Path(output), "ab") as out:
            proc = subprocess.Popen(  # noqa: S603 - argument list, no shell
                args,
                stdin=null_in,
                stdout=out,
                stderr=out,
                start_new_session=True,
                close_fds=True,
                env=command_env(env),
                cwd=cwd,
            )
    except OSError as exc:
        raise CommandError(args, None, message=f"cannot start {args[0]!r}: {exc}") from exc
    log.debug("detached argv=%s pid=%s", args, proc.pid)
    _DETACHED.append(proc)
    reap_detached()
    return proc.pid


def reap_detached() -> int:
    """Collect detached children that finished (no zombies in a daemon);
    returns how many are still running."""
    _DETACHED[:] = [p for p in _DETACHED if p.poll() is None]
    return len(_DETACHED)
