"""Signal jobs through libslurm, as scancel does, without scancel's table read.

Up to Slurm 23.11 ``scancel --signal=SIG [--batch|--full] JOB...`` reads
the whole job table (``REQUEST_JOB_INFO``) before it asks slurmctld to
signal anything: its option parser (``has_default_opt`` in opt.c) sends
any command line with an option besides job ids down the filtering path,
even when the ids are all it was given.  At a site with 10,000 jobs that
read is some 13 MB packed by slurmctld per signal, twice per fault (USR1 to
the batch shell, TERM to the steps).  What scancel sends after the read is
one ``slurm_kill_job2(id, signal, flags, NULL)`` per job (scancel.c
``_cancel_job_id``), a ``REQUEST_KILL_JOB`` that needs no table; this
program makes exactly those calls, through the library the Slurm commands
themselves load, and nothing else.

It speaks scancel 22.05's words so that ``CliClient`` reads its answers
with the same parser (:mod:`slurm_hooks.slurm.scancel`): before each
request ``Signal N to [batch |full ]job ID`` (scancel's ``-v`` note,
written and flushed first, so that a call cut short names the jobs that
may have been asked), after a refusal ``error: Kill job error on job id
ID: <slurm_strerror>``; exit status 1 when any job was refused, 2 on bad
usage or when no library is found.  Like scancel it asks again, after 5 s
and more, while slurmctld answers that the job is in a transitional state.

    python -m slurm_hooks.slurm.libslurm_signal --signal=USR1 [--batch|--full] -- JOBID...

From Slurm 24.05 ``scancel --ctld`` sends one ``REQUEST_KILL_JOBS`` and
reads no table, so ``CliClient`` uses this program only below that release
(``[general] slurm_signal``).  The flags are slurm.h's from 22.05 to 23.11
(``KILL_JOB_BATCH`` bit 0, ``KILL_FULL_JOB`` bit 3).

The parent finds the library with :func:`find_library` (a glob, no
ctypes); only this program, run as its own process through the one
subprocess site and within the client's timeout, loads it.
"""

from __future__ import annotations

import glob
import re
import signal
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the child stays cheap: no slurm_hooks import at run time
    from slurm_hooks.slurm.base import SignalTarget

#: Where the library the Slurm commands load lives: Debian and Ubuntu link
#: scontrol/scancel against a private ``libslurmfull.so`` (no public
#: ``libslurm.so.N`` unless ``libslurmNN`` is installed); other builds
#: install ``libslurm.so.N``.  The private one comes first: it is always the
#: same build as the commands.
LIBRARIES = (
    "/usr/lib/*/slurm-wlm/libslurmfull.so",
    "/usr/lib64/slurm/libslurmfull.so",
    "/usr/lib/slurm/libslurmfull.so",
    "/usr/local/lib/slurm/libslurmfull.so",
    "/usr/lib/*/libslurm.so.[0-9]*",
    "/usr/lib64/libslurm.so.[0-9]*",
    "/usr/local/lib/libslurm.so.[0-9]*",
)
#: slurm.h (22.05 to 23.11): flags of ``slurm_kill_job2``.
KILL_JOB_BATCH = 1 << 0
KILL_FULL_JOB = 1 << 3
#: slurm_errno.h: the job is in a transitional state; scancel asks again.
ESLURM_TRANSITION_STATE_NO_UPDATE = 2020
#: scancel.c ``MAX_CANCEL_RETRY``.
TRANSITION_TRIES = 10
PROG = "libslurm_signal"
MODULE = "slurm_hooks.slurm.libslurm_signal"

_JOB_ID = re.compile(r"^\d+(?:_\d+|\+\d+)?$")


class UsageError(ValueError):
    """A command line this program refuses (exit status 2)."""


def find_library(patterns: Sequence[str] | None = None) -> str | None:
    """The first library of ``patterns`` (:data:`LIBRARIES`) present here, or None."""
    for pattern in LIBRARIES if patterns is None else patterns:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


def signal_number(text: str) -> int:
    """``USR1``, ``SIGUSR1`` or ``10`` -> 10 (Linux numbers, as scancel's
    ``sig_name2num``); UsageError for anything else."""
    name = text.strip().upper().removeprefix("SIG")
    if name.isdigit() and 0 < int(name) < 65:
        return int(name)
    try:
        return int(signal.Signals[f"SIG{name}"])
    except KeyError:
        raise UsageError(f"invalid signal {text!r}") from None


def parse_args(argv: Sequence[str]) -> tuple[int, int, str, list[str]]:
    """(signal, flags, scancel's job kind word, job ids) from ``argv``:
    ``[-v] --signal=SIG [--batch|--full] [--] JOBID...``."""
    sig: int | None = None
    flags = 0
    kind = ""
    ids: list[str] = []
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            ids.extend(rest)
            break
        if arg.startswith("--signal="):
            sig = signal_number(arg.partition("=")[2])
        elif arg == "--batch":
            flags, kind = KILL_JOB_BATCH, "batch "
        elif arg == "--full":
            flags, kind = KILL_FULL_JOB, "full "
        elif arg == "-v":
            pass  # always verbose: the notes are what the parent reads
        elif arg.startswith("-"):
            raise UsageError(f"unknown option {arg!r}")
        else:
            ids.append(arg)
    if sig is None:
        raise UsageError("--signal=SIG is required")
    if not ids:
        raise UsageError("no job id given")
    bad = [j for j in ids if not _JOB_ID.match(j)]
    if bad:
        raise UsageError(f"invalid job id {bad[0]!r}")
    return sig, flags, kind, ids


def signal_argv(python: str, signal: str, target: SignalTarget) -> list[str]:
    """This program's command line for ``signal`` (already checked) to
    ``target``, before the job ids (after ``--``)."""
    argv = [python, "-m", MODULE, "-v", f"--signal={signal}"]
    if target == "batch":
        argv.append("--batch")
    elif target == "full":
        argv.append("--full")
    return [*argv, "--"]


def _say(text: str) -> None:
    print(f"{PROG}: {text}", file=sys.stderr, flush=True)


def _load(path: str) -> Any:
    """The library with the four calls typed (ctypes, here only)."""
    import ctypes

    # Global: the plugins libslurm opens (auth_munge.so) resolve its symbols
    # (``slurm_conf``) from the process, as they do in scancel.
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    lib.slurm_init.argtypes = [ctypes.c_char_p]
    lib.slurm_init.restype = None
    lib.slurm_kill_job2.argtypes = [
        ctypes.c_char_p,
        ctypes.c_uint16,
        ctypes.c_uint16,
        ctypes.c_char_p,
    ]
    lib.slurm_kill_job2.restype = ctypes.c_int
    lib.slurm_get_errno.argtypes = []
    lib.slurm_get_errno.restype = ctypes.c_int
    lib.slurm_strerror.argtypes = [ctypes.c_int]
    lib.slurm_strerror.restype = ctypes.c_char_p
    return lib


def main(argv: Sequence[str] | None = None) -> int:
    try:
        sig, flags, kind, ids = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        _say(f"error: {exc}")
        return 2
    path = find_library()
    if path is None:
        _say("error: no libslurm found (looked for " + ", ".join(LIBRARIES) + ")")
        return 2
    lib = _load(path)
    lib.slurm_init(None)  # reads SLURM_CONF, as scancel does
    refused = 0
    for jid in ids:
        _say(f"Signal {sig} to {kind}job {jid}")
        err = 0
        for attempt in range(TRANSITION_TRIES):
            if lib.slurm_kill_job2(jid.encode(), sig, flags, None) == 0:
                err = 0
                break
            err = lib.slurm_get_errno() or -1
            if err != ESLURM_TRANSITION_STATE_NO_UPDATE:
                break
            _say("Job is in transitional state, retrying")
            time.sleep(5 + attempt)
        if err:
            text = (lib.slurm_strerror(err) or b"unknown error").decode(errors="replace")
            _say(f"error: Kill job error on job id {jid}: {text}")
            refused += 1
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
