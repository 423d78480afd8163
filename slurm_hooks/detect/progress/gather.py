"""Read a job's progress files and its ranks' processes (the only I/O of the judge).

The files live in a directory every user's jobs write to
(``[progress] dir``, tmpfs by default), so everything read here is
untrusted: files are opened with ``O_NOFOLLOW`` (a symlink to someone
else's file is skipped), never across a mount point a user put there
(:mod:`~slurm_hooks.detect.progress.beneath`: a stopped FUSE daemon would
hold the pass), must be regular files, only their tail is read,
and :func:`read_job` keeps only files owned by the uid the caller names
(the job's owner, from Slurm).  A process counts as the rank's only when
its uid is the job's and it started before the rank's first record (a
recycled pid is GONE, not a healthy stranger).
"""

from __future__ import annotations

import contextlib
import fnmatch
import itertools
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from slurm_hooks.core.reason import printable
from slurm_hooks.detect.progress.beneath import (
    AnotherMount,
    detach_while,
    lstat_path,
    mount_id,
    open_beneath,
    open_dir,
    stat_beneath,
)
from slurm_hooks.detect.progress.bounded import Rejected
from slurm_hooks.detect.progress.external import (
    MAX_BYTES,
    FrDump,
    RasReport,
    Suspect,
    fr_waited_for,
    parse_ras,
    read_flight_recorder,
)
from slurm_hooks.detect.progress.judge import ProcState
from slurm_hooks.detect.progress.records import Record, parse_line

log = logging.getLogger(__name__)

#: Rank files per job read at most (a job cannot make the watcher read forever).
MAX_FILES = 1024
#: Entries of one job's directory looked at, at most.
MAX_ENTRIES = 16 * MAX_FILES
_STATES = {
    "R": ProcState.RUNNING,
    "S": ProcState.SLEEPING,
    "I": ProcState.SLEEPING,
    "T": ProcState.STOPPED,
    "t": ProcState.STOPPED,
    "D": ProcState.DISK,
    "Z": ProcState.GONE,
    "X": ProcState.GONE,
}


# -- what one pass may read ----------------------------------------------------------------


@dataclass
class Budget:
    """What one pass over users' files may cost, and what it cost.

    Every read below charges the budget of the pass running in this thread
    (:func:`metering`); once a cap is reached the rest is skipped and
    counted, never read: the directory is the users', its size is theirs to
    choose, the pass's cost is not."""

    max_files: int = 2048
    max_bytes: int = 32 << 20
    #: Seconds of this thread's CPU (``time.thread_time``) per pass.
    max_cpu_s: float = 2.0
    files: int = 0
    bytes: int = 0
    skipped_files: int = 0
    #: (path, why) of each file refused by a parser's limits.
    rejected: list[tuple[str, str]] = field(default_factory=list)
    started_cpu: float = field(default_factory=time.thread_time)

    def cpu_s(self) -> float:
        return time.thread_time() - self.started_cpu

    def spent(self) -> bool:
        return (
            self.files >= self.max_files
            or self.bytes >= self.max_bytes
            or self.cpu_s() >= self.max_cpu_s
        )

    def take(self, size: int) -> bool:
        """Charge one file of ``size`` bytes; False (counted) when over budget."""
        if self.spent() or self.bytes + size > self.max_bytes:
            self.skipped_files += 1
            return False
        self.files += 1
        self.bytes += size
        return True

    def reject(self, path: str, why: str) -> None:
        if len(self.rejected) < 256:
            self.rejected.append((path, why))


_current = threading.local()


def current_budget() -> Budget | None:
    return getattr(_current, "budget", None)


@contextlib.contextmanager
def metering(budget: Budget) -> Iterator[Budget]:
    """Charge every read in this thread to ``budget`` until the block ends."""
    before = current_budget()
    _current.budget = budget
    try:
        yield budget
    finally:
        _current.budget = before


def base_stat(base: str | os.PathLike[str]) -> os.stat_result | None:
    """The progress directory's ``lstat`` if it is one root can trust: a
    real directory (never a symlink), owned by root or by this process, and
    sticky if others may write it.  Whoever owns it can rename or remove
    every job's directory in it, so one a user made (a job that ran before
    the watcher made it) is refused (None, logged once) until
    :func:`claim_base` replaces it.  A user's FUSE mount there is refused
    before anything asks it (:func:`lstat_path`)."""
    try:
        st = lstat_path(os.fspath(base))
    except AnotherMount:
        if str(base) not in _told_bases:
            _told_bases.add(str(base))
            log.error("progress: %s is a FUSE mount of a user's: not read", base)
        return None
    except OSError:
        return None
    mode = st.st_mode
    trusted = (
        stat.S_ISDIR(mode)
        and st.st_uid in (0, os.geteuid())
        and (not mode & (stat.S_IWGRP | stat.S_IWOTH) or bool(mode & stat.S_ISVTX))
    )
    if trusted:
        return st
    if str(base) not in _told_bases:
        _told_bases.add(str(base))
        log.error("progress: %s is not a directory root owns (owner uid %d, mode %o): not read",
                  base, st.st_uid, mode)  # fmt: skip
    return None


_told_bases: set[str] = set()
_told_claims: set[tuple[str, int | None]] = set()


def claim_base(base: str | os.PathLike[str]) -> bool:
    """Make the progress directory root's (mode 1777, like /tmp): create it,
    or move one that :func:`base_stat` refuses aside (``<dir>.untrusted-<time>``,
    kept for the admin to read) and create it afresh.  False when that
    failed (the passes then read nothing)."""
    path = os.fspath(base)
    if base_stat(path) is not None:
        return True
    try:
        detach_while(path, lambda: _users_mount(path))
        if os.path.lexists(path):
            aside = f"{path}.untrusted-{int(time.time())}"
            os.rename(path, aside)
            log.error("progress: moved %s (not root's) aside to %s", path, aside)
        os.mkdir(path, 0o700)
        os.chmod(path, 0o1777)
    except OSError as exc:
        told = (path, exc.errno)
        if told not in _told_claims:  # the watcher tries again before every pass
            _told_claims.add(told)
            log.error("progress: cannot make %s root's: %s", path, exc)
        return False
    _told_bases.discard(path)
    _told_claims.difference_update({t for t in _told_claims if t[0] == path})
    return base_stat(path) is not None


def _users_mount(path: str) -> bool:
    """Whether a user's FUSE mount is at ``path`` (:func:`lstat_path`)."""
    try:
        lstat_path(path)
    except AnotherMount:
        return True
    except OSError:
        return False
    return False


def job_dirs(base: str | os.PathLike[str], limit: int | None = None) -> Iterator[str]:
    """Names that may be job directories (digits only); at most ``limit``
    entries are looked at.  Whether one is a real directory is asked
    (:func:`is_job_dir`) only of the few a pass reads."""
    try:
        it = os.scandir(base)
    except OSError:
        return
    with it:
        for e in itertools.islice(it, limit):
            if e.name.isdigit() and len(e.name) <= 20:
                yield e.name


def is_job_dir(base: str | os.PathLike[str], name: str, uid: int | None = None) -> bool:
    """A real directory (never a symlink to someone else's), owned by
    ``uid`` (None: by anyone): a directory another user made under a job's
    id before the job ran is not that job's, nor is a mount point."""
    try:
        bfd = open_dir(os.fspath(base))
    except OSError:
        return False
    try:
        st = stat_beneath(name, dir_fd=bfd)
    except OSError:
        return False
    finally:
        os.close(bfd)
    return stat.S_ISDIR(st.st_mode) and (uid is None or st.st_uid == uid)


def read_tail(
    path: str, limit: int, uid: int | None, *, dir_fd: int | None = None, here: int | None = None
) -> list[str]:
    """The last ``limit`` bytes of ``path`` (a name in ``dir_fd`` when
    given) as lines (a cut first line dropped); [] for a symlink, a
    non-regular file, a mount point or a file of another owner.  ``here``:
    ``dir_fd``'s mount id where the caller has it (:func:`mount_id`)."""
    try:
        fd = _open_file(path, dir_fd, here)
    except OSError:
        return []
    budget = current_budget()
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (uid is not None and st.st_uid != uid):
            return []
        start = max(0, st.st_size - limit)
        if budget is not None and not budget.take(min(limit, st.st_size)):
            return []
        os.lseek(fd, start, os.SEEK_SET)
        data = os.read(fd, limit)
    except OSError:
        return []
    finally:
        os.close(fd)
    lines = data.decode("ascii", errors="replace").split("\n")
    if start > 0:
        lines = lines[1:]
    return lines[:-1]  # the last piece has no newline yet (or is empty)


def read_job(
    base: str | os.PathLike[str], job: str, *, tail_bytes: int = 65536, uid: int | None = None
) -> list[Record]:
    """The records of ``job``'s directory under ``base``: a real directory
    (never a symlink), owned by ``uid`` (None: by anyone), opened once and
    read through that descriptor, so a directory swapped for a symlink or
    another owner's between a pass's looks is read no further."""
    try:
        bfd = open_dir(os.fspath(base))
    except OSError:
        return []
    try:
        dfd = open_beneath(job, dir_fd=bfd, flags=os.O_RDONLY | os.O_DIRECTORY, kind=stat.S_IFDIR)
    except OSError:
        return []
    finally:
        os.close(bfd)
    out: list[Record] = []
    try:
        if uid is not None and os.fstat(dfd).st_uid != uid:
            return []
        here = mount_id(dfd)  # once for all its files
        with os.scandir(dfd) as it:  # the job's user chooses how many entries there are
            names = sorted(
                e.name
                for e in itertools.islice(it, MAX_ENTRIES)
                if e.name.startswith("rank") and e.name.endswith(".log")
            )
        for name in names[:MAX_FILES]:
            for line in read_tail(name, tail_bytes, uid, dir_fd=dfd, here=here):
                rec = parse_line(line)
                # A file speaks for one rank: the one its name says.
                if rec is not None and rec.job == job and name == f"rank{rec.rank}.log":
                    out.append(rec)
    except OSError:
        return []
    finally:
        os.close(dfd)
    return out


def _boot_time(proc: str) -> float | None:
    try:
        with open(f"{proc}/stat", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def proc_state(
    pid: int, *, uid: int | None, started: float, proc: str = "/proc", slack_s: float = 5.0
) -> ProcState:
    """The state of ``pid`` as the rank's process: GONE when it does not exist,
    is a zombie, belongs to another uid, or started after the rank's first
    record (pid reuse)."""
    try:
        st = os.stat(f"{proc}/{pid}")
        with open(f"{proc}/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return ProcState.GONE
    if uid is not None and st.st_uid != uid:
        return ProcState.GONE
    try:
        state = _STATES.get(fields[0][:1], ProcState.UNKNOWN)
        ticks = int(fields[19])
    except (IndexError, ValueError):
        return ProcState.UNKNOWN
    btime = _boot_time(proc)
    if btime is not None:
        began = btime + ticks / float(os.sysconf("SC_CLK_TCK"))
        if began > started + slack_s:
            return ProcState.GONE
    return state


# -- outside evidence: NCCL RAS output, flight-recorder dumps -----------------------------

#: Evidence files per job and kind read at most.
MAX_EVIDENCE_FILES = 256
_TRAILING_RANK = re.compile(r"(\d{1,9})(?:\.(?:json|pkl|pickle))?$")


def read_whole(path: str, limit: int, uid: int | None) -> bytes | None:
    """At most ``limit`` bytes of a regular file owned by ``uid`` (None: any),
    never through a symlink; None when it cannot be read or is too large."""
    got = _read_whole(path, limit, uid, None)
    return got if isinstance(got, bytes) else None


#: Parsed evidence by file identity (device, inode, size, mtime, owner, kind):
#: an unchanged file - a hostile one above all - is not read or parsed again
#: every pass.  Bounded by entries and by what they hold (suspects, process
#: groups), so a user's many large dumps cannot grow the watcher past its
#: memory limit.
_PARSED: dict[tuple[object, ...], object] = {}
_PARSED_MAX = 1024
_PARSED_WEIGHT_MAX = 65536
_parsed_weight = 0
_MISSING = object()


def _open_file(path: str, dir_fd: int | None, here: int | None = None) -> int:
    """``path`` opened for reading without waiting on a FIFO or following a
    symlink; a name in ``dir_fd`` (never across a mount point) when given."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    if dir_fd is None:
        return os.open(path, flags)
    return open_beneath(path, dir_fd=dir_fd, flags=flags, kind=stat.S_IFREG, here=here)


def _read_whole(
    path: str, limit: int, uid: int | None, kind: str | None, *, at: tuple[int, str] | None = None
) -> object:
    """The bytes (``kind`` None), or the cached parse of this very file
    (keyed by what ``fstat`` says of the descriptor read, so never another
    file's), or None.  ``at``: the file as (directory descriptor, name),
    opened there (:func:`_open_file`); ``path`` then only names it."""
    try:
        fd = _open_file(path, None) if at is None else _open_file(at[1], at[0])
    except OSError:
        return None
    budget = current_budget()
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (uid is not None and st.st_uid != uid):
            return None
        if st.st_size > limit:
            _rejected(path, f"rejected: {st.st_size} bytes, more than {limit}")
            return None
        if kind is not None:
            key = (kind, path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_uid)
            hit = _PARSED.get(key, _MISSING)
            if hit is not _MISSING:
                return _Cached(key, hit)
        if budget is not None and not budget.take(st.st_size):
            return None
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        return None
    return data if kind is None else _Cached(key, data, fresh=True)


@dataclass
class _Cached:
    key: tuple[object, ...]
    value: object
    fresh: bool = False


@dataclass(frozen=True)
class _Found:
    """A file a glob names (:func:`_evidence`): its path, for reports, and
    where it is opened: its directory's descriptor and its name there."""

    path: str
    dir_fd: int
    name: str


def _parsed(found: _Found, uid: int | None, kind: str, parse: Callable[[bytes], object]) -> object:
    """``parse`` of the bytes of ``found``, from the cache while the file is
    unchanged."""
    path = found.path
    got = _read_whole(path, MAX_BYTES, uid, kind, at=(found.dir_fd, found.name))
    if not isinstance(got, _Cached):
        return None
    if not got.fresh:
        return got.value
    assert isinstance(got.value, bytes)
    try:
        value = parse(got.value)
    except Exception as exc:  # noqa: BLE001 - a user's file must never stop the pass
        log.exception("progress: the %s parser failed on %s", kind, printable(path))
        value = Rejected(f"the parser failed ({type(exc).__name__})")
    global _parsed_weight  # noqa: PLW0603 - the cache is this module's own
    weight = _weight(value)
    if len(_PARSED) >= _PARSED_MAX or _parsed_weight + weight > _PARSED_WEIGHT_MAX:
        _PARSED.clear()
        _parsed_weight = 0
    _PARSED[got.key] = value
    _parsed_weight += weight
    return value


def _weight(value: object) -> int:
    """What a parse holds, in suspects and process groups (one at least)."""
    if isinstance(value, RasReport):
        return 1 + len(value.suspects) + len(value.flagged)
    if isinstance(value, FrDump):
        return 1 + len(value.pg_status) + len(value.last_entry)
    return 1


@contextlib.contextmanager
def _evidence(pattern: str, job: str) -> Iterator[list[_Found]]:
    """The files a glob with ``{job}`` names for ``job``, sorted, at most
    :data:`MAX_EVIDENCE_FILES`.  Only the
    file name may hold wildcards (settings say so).  The directories from
    the one ``{job}`` names on are the job's user's, so they are opened one
    name at a time, never across a mount point (:func:`open_beneath`); the
    directories before it are the admin's."""
    raw = [p for p in pattern.split("/") if p]
    at = next((i for i, p in enumerate(raw) if "{job}" in p), None)
    parts = [p.replace("{job}", job) for p in raw]
    if not job.isdigit() or not parts or at is None:
        yield []
        return
    *dirs, last = parts
    fds: list[int] = []
    try:
        fds.append(open_dir("/" + "/".join(dirs[:at])))
        for name in dirs[at:]:
            flags = os.O_RDONLY | os.O_DIRECTORY
            fds.append(open_beneath(name, dir_fd=fds[-1], flags=flags, kind=stat.S_IFDIR))
        if len(fds) == 1:  # no directory of the user's: list the admin's
            fds.append(os.open(f"/proc/self/fd/{fds[0]}", os.O_RDONLY | os.O_DIRECTORY))
        with os.scandir(fds[-1]) as it:
            names = [
                e.name
                for e in itertools.islice(it, MAX_ENTRIES)
                if fnmatch.fnmatchcase(e.name, last)
                and (last.startswith(".") or not e.name.startswith("."))  # as glob
            ]
    except OSError:
        names = []
    try:
        where = "/" + "/".join(dirs)
        yield [_Found(f"{where}/{n}", fds[-1], n) for n in sorted(names)[:MAX_EVIDENCE_FILES]]
    finally:
        for fd in fds:
            os.close(fd)


_told: set[tuple[str, str]] = set()


def _rejected(path: str, why: str) -> None:
    """A user's file a parser refused: logged (once per file and reason),
    and kept for the pass's report (counted every pass).  Its name is the
    user's to choose: a newline or an escape sequence in it must not forge
    a line of the watcher's log or reach an admin's terminal."""
    path = printable(path)
    if (path, why) not in _told:
        if len(_told) >= 4096:
            _told.clear()
        _told.add((path, why))
        log.warning("progress: %s %s", path, why)
    else:
        log.debug("progress: %s %s", path, why)
    budget = current_budget()
    if budget is not None:
        budget.reject(path, why)


def read_hints(ras_pattern: str, fr_pattern: str, job: str, *, uid: int | None) -> list[Suspect]:
    """What NCCL RAS outputs and flight-recorder dumps of ``job`` say about
    the rank the others wait for (RAS first: it sees dead processes).  A
    file a parser refuses (too large, too deep, not plain data) is left out
    and reported (:func:`_rejected`)."""
    hints: list[Suspect] = []
    with _evidence(ras_pattern, job) as ras:
        hints += _ras_hints(ras, uid)
    with _evidence(fr_pattern, job) as dumps:
        fr = fr_waited_for(_dumps(dumps, uid))
    if fr is not None:
        hints.append(fr)
    return hints


def _ras_hints(found: list[_Found], uid: int | None) -> list[Suspect]:
    hints: list[Suspect] = []
    for one in found:
        path = one.path
        report = _parsed(one, uid, "ras",
                         lambda b: parse_ras(b.decode("utf-8", errors="replace")))  # fmt: skip
        if isinstance(report, RasReport):
            if report.rejected is not None:
                _rejected(path, f"rejected: {report.rejected}")
            hints += report.suspects
        elif isinstance(report, Rejected):
            _rejected(path, str(report))
    return hints


def _dumps(found: list[_Found], uid: int | None) -> dict[int, FrDump]:
    """Flight-recorder dumps by the rank their file name ends with."""
    dumps: dict[int, FrDump] = {}
    for one in found:
        path = one.path
        m = _TRAILING_RANK.search(one.name)
        if m is None:
            continue
        dump = _parsed(one, uid, "fr", read_flight_recorder)
        if isinstance(dump, Rejected):
            _rejected(path, str(dump))
        elif isinstance(dump, FrDump):
            dumps[int(m.group(1))] = dump
    return dumps
