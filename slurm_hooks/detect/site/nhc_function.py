"""The ``nhc_function`` kind: run a site's own NHC check function, without NHC.

A site moving off NHC often has checks of its own (``check_oom``,
``check_gpu_topo`` ...) defined in ``/etc/nhc/scripts/*.nhc``: bash whose
code is not in nhc.conf, so ``nhc import`` cannot translate it.  This kind
keeps it running as NHC ran it: bash sources every ``*.nhc`` of the
scripts directory (NHC's ``$INCDIR``; on an NHC host NHC's own
``common.nhc`` and ``lbnl_*.nhc`` are there too, so the helpers and
built-in checks a site function calls exist), after :data:`SHIM`, a small
stand-in for the functions and variables of NHC's driver (``nhc``) that
check functions rely on, then calls the function.

Nothing is evaluated: the scripts directory, the variables and the
function's name and arguments reach the fixed script :data:`SHIM`
(slurm_hooks/data/nhc_shim.bash) as positional parameters; names are checked
against bash's name rule before use, on both sides.  Root runs the site's
own files, as NHC did (docs/security.md), but not files anyone could have
written: a world-writable directory or script, or one another user owns,
is refused, the config file's rule.

The verdict follows NHC's driver (run without ``-a``): ``die`` ends the
check with its message (the node's reason); a non-zero return without
``die`` fails with NHC's own text ("Check ... returned N"); a ``die`` in a
subshell (``$(...)``) ends only that subshell, as under NHC, and the
function's status decides; a function
that is not defined after sourcing fails as NHC's ``eval`` of an unknown
command does; past ``timeout_s`` the process group is killed and the check
fails (NHC's watchdog: "Script timed out").
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Collection
from typing import Any

from slurm_hooks.core.errors import CommandTimeout
from slurm_hooks.core.record import record
from slurm_hooks.detect.site.args import NhcFunction
from slurm_hooks.detect.site.gather import Facts, bounded
from slurm_hooks.detect.site.nhc_scripts import DEFINITION

log = logging.getLogger(__name__)

#: What the shim writes to its channel (a file in the run's own directory,
#: not a pipe a process the function leaves behind could hold open).
DIED, SUBSHELL_DIED, LOADED, UNDEFINED = "died", "subshell-died", "loaded", "undefined"

#: The fixed script (package data): the driver's functions and variables,
#: then the function.  Its header says what each positional parameter is.
SHIM = "nhc_shim.bash"


@record
class Outcome:
    """What one run of a site function said."""

    rc: int | None
    #: die's message.
    died: str | None = None
    #: The first message of a die in a subshell (NHC goes on after one).
    subshell_died: str | None = None
    #: How many *.nhc files were sourced (None: the shim stopped before).
    loaded: int | None = None
    undefined: bool = False
    timed_out: bool = False
    #: The end of the function's own output (its log lines), for the log.
    output: str = ""


class UntrustedScripts(RuntimeError):
    """The scripts directory, or a ``*.nhc`` in it, is writable by anyone or
    (for root) owned by another user: whoever that is could make root run
    anything, so nothing of it is run (the check is UNKNOWN)."""


class ShimStopped(RuntimeError):
    """The shim ended before it sourced the scripts (its own arguments were
    refused, or bash could not start it): the check did not run."""


def shim_path() -> str:
    """Where the installed package keeps :data:`SHIM` (a file bash reads:
    the package is installed as files, so no importlib.resources, whose
    import costs every healthcheck more than this lookup)."""
    import slurm_hooks

    return os.path.join(os.path.dirname(slurm_hooks.__file__), "data", SHIM)


#: The files the shim writes in its run directory.
CHANNEL, OUTPUT = "channel", "output"


def private_dir() -> str:
    """A new directory only this user can enter (mode 0700, created with
    mkdir, which never follows or reuses what is there), under $TMPDIR or
    /tmp: tempfile's rule, without importing tempfile and shutil (about 4
    ms of each run's start)."""
    base = os.environ.get("TMPDIR") or "/tmp"
    for _ in range(100):
        path = os.path.join(base, f"slurm-hooks-nhc-{os.urandom(8).hex()}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free name for a run directory under {base}")


def remove_dir(path: str) -> None:
    """Remove the run directory: the shim's two files, then the directory;
    anything else in it (a process left behind wrote there) through
    shutil."""
    for name in (CHANNEL, OUTPUT):
        try:
            os.unlink(os.path.join(path, name))
        except FileNotFoundError:
            pass
    try:
        os.rmdir(path)
    except OSError:
        import shutil

        shutil.rmtree(path, ignore_errors=True)


def argv(a: NhcFunction, run_dir: str, only: Collection[str] | None = None) -> list[str]:
    """``bash SHIM`` with every value in its own positional slot; ``only``:
    the names of the ``*.nhc`` to source (None: every one)."""
    env = [f"{k}={v}" for k, v in a.env.items()]
    files = "*" if only is None else "/" + "".join(f"{n}/" for n in sorted(only))
    return [
        "bash", "--noprofile", "--norc", "--", shim_path(), run_dir, a.scripts_dir, files,
        str(max(1, math.ceil(a.timeout_s))), str(len(env)), *env, a.function, *a.args,
    ]  # fmt: skip


def parse(rc: int | None, channel: str, output: str) -> Outcome:
    """The shim's channel file and the end of the function's output."""
    died: str | None = None
    subshell: str | None = None
    loaded: int | None = None
    undefined = False
    for line in channel.splitlines():
        word, _, rest = line.partition(" ")
        if word == DIED and died is None:
            died = rest.strip()
        elif word == SUBSHELL_DIED and subshell is None:
            subshell = rest.strip()
        elif word == LOADED and rest.strip().isdigit():
            loaded = int(rest)
        elif word == UNDEFINED:
            undefined = True
    return Outcome(rc, died, subshell, loaded, undefined, output=output)


def _read(path: str, tail: int | None = None) -> str:
    try:
        with open(path, "rb") as f:
            if tail is not None:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - tail))
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def defined_here(scripts_dir: str) -> set[str] | None:
    """The functions the ``*.nhc`` of ``scripts_dir`` define, read as text
    (nothing is run), or None when there is no such directory on this host:
    ``nhc import`` warns about a site function it would not find."""
    import glob

    if not os.path.isdir(scripts_dir):
        return None
    names: set[str] = set()
    for path in glob.glob(os.path.join(glob.escape(scripts_dir), "*.nhc")):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        names.update(a or b for a, b in DEFINITION.findall(text))
    return names


def check_trust(scripts_dir: str) -> list[tuple[str, os.stat_result]]:
    """The rule the config file has (core/config.py ``_check_owner``), for
    the directory and each ``*.nhc`` bash will source (symlinks followed, as
    bash follows them).  A missing directory passes: nothing is sourced,
    and the verdict says the function is not defined."""
    import glob

    paths = [scripts_dir, *sorted(glob.glob(os.path.join(glob.escape(scripts_dir), "*.nhc")))]
    seen: list[tuple[str, os.stat_result]] = []
    for path in paths:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue  # nothing there to source (the verdict says so)
        seen.append((path, st))
        if st.st_mode & 0o002:
            raise UntrustedScripts(
                f"{path} is world-writable (mode {st.st_mode & 0o7777:04o}): anyone could "
                "make root run anything; chmod o-w it"
            )
        if os.geteuid() == 0 and st.st_uid != 0:
            raise UntrustedScripts(
                f"{path} is owned by uid {st.st_uid}, not root: that user could make root "
                "run anything; chown root it"
            )
    return seen[1:] if seen and seen[0][0] == scripts_dir else seen


#: The state dir's file that remembers which scripts each function needs.
MEMO = "nhc-scripts.json"
#: Answers kept (one per function, arguments and scripts' versions).
MEMO_MAX = 64


def _memo_key(a: NhcFunction, scripts: list[tuple[str, os.stat_result]]) -> str:
    """The function, its words, and each script's identity and version (a
    changed, added or removed file makes a new key)."""
    files = [
        [os.path.basename(p), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        for p, st in scripts
    ]
    return json.dumps([a.scripts_dir, a.function, list(a.args), sorted(a.env.items()), files])


def to_source(
    a: NhcFunction, scripts: list[tuple[str, os.stat_result]], state_dir: str
) -> list[str] | None:
    """The names of the ``*.nhc`` the function needs sourced, or None for
    every one (:mod:`.nhc_scripts`).  Reading and analysing NHC's own 150
    kB of scripts costs more than sourcing them, so the answer is
    remembered in ``state_dir`` (a cache: one that cannot be read or
    written costs the analysis, never the verdict), with the variables the
    files left out set: one of them in the environment now (where it would
    reach the function's programs) makes the analysis run again."""
    key = _memo_key(a, scripts)
    path = os.path.join(state_dir, MEMO) if state_dir else ""
    memo: dict[str, Any] = {}
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                loaded = json.load(fh)
            if isinstance(loaded, dict):
                memo = loaded
        except (OSError, ValueError):
            pass
        hit = memo.get(key)
        hit = hit if isinstance(hit, dict) else {}
        unset = hit.get("unset")
        if isinstance(unset, list) and not any(str(v) in os.environ for v in unset):
            only = hit.get("only")
            if only is None or isinstance(only, list):
                return None if only is None else [str(n) for n in only]
    from slurm_hooks.detect.site.nhc_scripts import needed, read_script

    parsed = []
    for p, _st in scripts:
        try:
            with open(p, encoding="utf-8", errors="replace") as fh:
                parsed.append(read_script(os.path.basename(p), fh.read()))
        except OSError:
            return None  # cannot tell what it holds: source every one, as NHC
    words = [*a.args, *a.env.keys(), *a.env.values()]
    chosen = needed(parsed, a.function, words)
    answer = None if chosen is None else sorted(chosen)
    unset = sorted(
        {v for p in parsed if chosen is not None and p.name not in chosen for v in p.sets}
    )
    if path and os.path.isdir(state_dir):
        memo.pop(key, None)
        memo[key] = {"only": answer, "unset": unset}
        while len(memo) > MEMO_MAX:
            memo.pop(next(iter(memo)))
        from slurm_hooks.store.atomicfile import write_atomic

        try:
            write_atomic(path, json.dumps(memo), durable=False)
        except OSError:
            log.debug("could not remember the scripts %s needs in %s", a.function, path)
    return answer


def gather(a: NhcFunction, f: Facts) -> Outcome:
    """Run the function through the one subprocess site (``f.run``), its
    channel and output in a private directory.  Raises UntrustedScripts or
    ShimStopped (the check is UNKNOWN) when it did not run; CommandError
    when bash cannot be started."""
    # One bounded call (one thread) for the trust check and the choice of
    # scripts: both read the directory.
    only = bounded(
        lambda: to_source(a, check_trust(a.scripts_dir), f.state_dir), 5.0, f"stat {a.scripts_dir}"
    )
    run_dir = private_dir()
    try:
        try:
            r = f.run(argv(a, run_dir, only), timeout=a.timeout_s)
        except CommandTimeout:
            return Outcome(None, timed_out=True)
        outcome = parse(
            r.rc,
            _read(os.path.join(run_dir, CHANNEL)),
            _read(os.path.join(run_dir, OUTPUT), tail=2000),
        )
    finally:
        remove_dir(run_dir)
    if outcome.output:
        log.debug("nhc function %s said: %s", a.function, outcome.output)
    if outcome.loaded is None and outcome.died is None:
        said = (r.stderr or r.stdout or outcome.output).strip()[-200:]
        raise ShimStopped(f"bash stopped before sourcing {a.scripts_dir} (exit {r.rc}): {said}")
    return outcome
