"""The one place slurm-hooks starts external programs.

Every call has a timeout (a hung ``scontrol`` must never hang a hook; NHC's
worst incidents were exactly that), an argument list (never a shell), and a
PATH: slurmd starts Prolog, Epilog and HealthCheckProgram with no PATH at all.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_hooks.core.errors import CommandError, CommandTimeout

log = logging.getLogger(__name__)

#: Used when the environment has no PATH (slurmd hooks).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
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

    Raises CommandTimeout past ``timeout`` seconds (the child is killed),
    CommandError when the program is missing, or when ``check`` is set and it
    exits non-zero.  Output is decoded leniently: a stray byte from a tool
    must not turn into a crash.
    """
    args = [str(a) for a in argv]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(  # noqa: S603 - argument list, no shell
            args,
            input=input,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=command_env(env),
            cwd=cwd,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        log.warning("command timed out argv=%s timeout=%s", args, timeout)
        raise CommandTimeout(args, timeout) from exc
    except OSError as exc:
        raise CommandError(args, None, message=f"cannot run {args[0]!r}: {exc}") from exc
    seconds = time.monotonic() - t0
    result = CommandResult(tuple(args), proc.returncode, proc.stdout, proc.stderr, seconds)
    log.debug("command argv=%s rc=%s seconds=%.3f", args, proc.returncode, seconds)
    if check and proc.returncode != 0:
        raise CommandError(args, proc.returncode, proc.stderr)
    return result
