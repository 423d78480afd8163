"""The arguments of each kind of site check: one frozen dataclass per kind.

Validated by ``core.config.from_mapping`` (unknown keys and bad types are
refused with the dotted key), plus each class's ``validate``.  Sizes are
strings with their unit ("32GB", "512kB") or a percentage ("3%"); match
strings are NHC's (glob, ``/regex/``, ``{hostlist}``, ``!`` negates).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from slurm_hooks.core.config import InvalidKey
from slurm_hooks.core.record import field, record
from slurm_hooks.detect.site.match import validate_mstr
from slurm_hooks.detect.site.units import BadSize, parse_count, parse_size


def _sizes(obj: object, *names: str, percent: bool = True) -> None:
    for name in names:
        value = getattr(obj, name)
        if value:
            try:
                parse_size(value, allow_percent=percent)
            except BadSize as exc:
                raise InvalidKey(name, str(exc)) from exc


def _counts(obj: object, *names: str, percent: bool = False) -> None:
    for name in names:
        value = getattr(obj, name)
        if percent and value.endswith("%"):
            _sizes(obj, name)
        elif value:
            try:
                parse_count(value)
            except BadSize as exc:
                raise InvalidKey(name, str(exc)) from exc


def _mstrs(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        for v in value if isinstance(value, tuple) else (value,):
            if v:
                try:
                    validate_mstr(v)
                except Exception as exc:  # noqa: BLE001 - ConfigError or a hostlist error
                    raise InvalidKey(name, str(exc)) from exc


def _paths(paths: tuple[str, ...], key: str = "paths") -> None:
    if not paths:
        raise InvalidKey(key, "give at least one path")
    for p in paths:
        if not p.startswith("/"):
            raise InvalidKey(key, f"must be absolute paths, got {p!r}")


# -- file systems ---------------------------------------------------------------------


@record
class FsMount:
    """Mounted at each of ``paths``; the type, source and options match;
    ``mode`` "rw" or "ro" when given.  (NHC: check_fs_mount, _rw, _ro.)"""

    paths: tuple[str, ...] = ()
    fstype: str = ""
    source: str = ""
    options: str = ""
    mode: str = ""

    def validate(self) -> None:
        _paths(self.paths)
        if self.mode not in ("", "rw", "ro"):
            raise InvalidKey("mode", f"must be rw, ro or empty, got {self.mode!r}")
        _mstrs(self, "fstype", "source", "options")


@record
class FsSpace:
    """Space on the file system mounted at ``path`` (as NHC, which reads df:
    a path that is not a mount point passes; so does a pseudo file system).  (NHC: check_fs_free,
    check_fs_used, check_fs_size.)"""

    path: str = ""
    min_free: str = ""
    max_used: str = ""
    min_size: str = ""
    max_size: str = ""

    def validate(self) -> None:
        _paths((self.path,), "path")
        _sizes(self, "min_free", "max_used")
        _sizes(self, "min_size", "max_size", percent=False)
        if not (self.min_free or self.max_used or self.min_size or self.max_size):
            raise InvalidKey("min_free", "give min_free, max_used, min_size or max_size")


@record
class FsInodes:
    """Inodes of the file system mounted at ``path`` (counts: "1k" = 1000;
    free and used also as a percentage).
    (NHC: check_fs_inodes, check_fs_ifree, check_fs_iused.)"""

    path: str = ""
    min_total: str = ""
    max_total: str = ""
    min_free: str = ""
    max_used: str = ""

    def validate(self) -> None:
        _paths((self.path,), "path")
        _counts(self, "min_total", "max_total")
        _counts(self, "min_free", "max_used", percent=True)
        if not (self.min_total or self.max_total or self.min_free or self.max_used):
            raise InvalidKey("min_free", "give min_total, max_total, min_free or max_used")


# -- processes ------------------------------------------------------------------------


@record
class PsService:
    """A process for ``service`` runs (``running = false``: must not run).
    Matched on the first word of its command line (``full``: the whole line)
    against ``match``, by default ``*<daemon or service>``; ``user`` (a match
    string, ``!root`` negates) must own it.  ``restart``: run
    ``restart_command`` when it is missing (off by default; the check still
    fails this run).  (NHC: check_ps_service, check_ps_daemon,
    check_ps_blacklist.)"""

    service: str = ""
    daemon: str = ""
    match: str = ""
    user: str = ""
    full: bool = False
    running: bool = True
    restart: bool = False
    restart_command: tuple[str, ...] = ()

    def validate(self) -> None:
        if not self.service:
            raise InvalidKey("service", "name the service")
        _mstrs(self, "match", "user")

    @property
    def pattern(self) -> str:
        return self.match or f"*{self.daemon or self.service}"

    @property
    def restart_argv(self) -> tuple[str, ...]:
        return self.restart_command or ("systemctl", "restart", "--", self.service)


@record
class PsUsers:
    """Processes of users who have no business on the node.  Authorised:
    uid <= ``max_sys_uid``, ``auth_users``, and every user with a process
    under ``rm_daemon`` (a job's processes descend from slurmstepd).
    ``lineage``: also every unauthorised process must descend from the RM
    daemon.  (NHC: check_ps_unauth_users, check_ps_userproc_lineage.)"""

    max_sys_uid: int = 99
    auth_users: tuple[str, ...] = ("root", "nobody")
    rm_daemon: str = r"/\bslurm(d|stepd)\b/"
    lineage: bool = False

    def validate(self) -> None:
        _mstrs(self, "rm_daemon")


@record
class PsLoadavg:
    """Load averages below these: the whole part of a load average at or
    above its limit fails (NHC compares bash integers); ``per``: each limit
    is per core, thread or socket (NHC's ``$((2*HW_CORES))``).  (NHC:
    check_ps_loadavg.)"""

    max_1m: float | None = None
    max_5m: float | None = None
    max_15m: float | None = None
    per: str = ""

    def validate(self) -> None:
        if self.per not in ("", "cores", "threads", "sockets"):
            raise InvalidKey("per", f"must be cores, threads, sockets or empty, got {self.per!r}")


# -- hardware -------------------------------------------------------------------------


@record
class HwCpuinfo:
    """Sockets, cores and threads the OS sees, each exactly as given.
    (NHC: check_hw_cpuinfo.)"""

    sockets: int | None = None
    cores: int | None = None
    threads: int | None = None


@record
class HwMemory:
    """Total size of ``which`` (physmem: RAM, swap, total: both) within
    [min, max], give or take ``fudge`` (a size or a percentage of the
    actual).  (NHC: check_hw_physmem, check_hw_swap, check_hw_mem.)"""

    which: str = "physmem"
    min: str = ""
    max: str = ""
    fudge: str = ""

    def validate(self) -> None:
        if self.which not in ("physmem", "swap", "total"):
            raise InvalidKey("which", f"must be physmem, swap or total, got {self.which!r}")
        if not self.min or not self.max:
            raise InvalidKey("min", "give min and max (the same value for an exact size)")
        _sizes(self, "min", "max", percent=False)
        _sizes(self, "fudge")


@record
class HwMemoryFree:
    """Free ``which`` (physmem counts buffers and page cache as free, as NHC
    does) at least ``min``.  (NHC: check_hw_physmem_free, check_hw_swap_free,
    check_hw_mem_free.)"""

    which: str = "physmem"
    min: str = ""

    def validate(self) -> None:
        if self.which not in ("physmem", "swap", "total"):
            raise InvalidKey("which", f"must be physmem, swap or total, got {self.which!r}")
        if not self.min:
            raise InvalidKey("min", "give the minimum")
        _sizes(self, "min", percent=False)


@record
class HwIb:
    """Some InfiniBand port is ACTIVE and LinkUp, at ``rate`` Gb/s when
    given, on ``device`` ("mlx5_0" or "mlx5_0:1") when given.  (NHC:
    check_hw_ib.)"""

    rate: float | None = None
    device: str = ""


@record
class HwEth:
    """The network interface ``device`` exists.  (NHC: check_hw_eth,
    check_hw_gm.)"""

    device: str = ""

    def validate(self) -> None:
        if not self.device:
            raise InvalidKey("device", "name the interface")


@record
class HwMcelog:
    """The mcelog daemon's per-DIMM counts of the last 24 h within limits
    (None: any error it reports fails); no daemon: passes.  (NHC:
    check_hw_mcelog, MCELOG_MAX_*_RATE.)"""

    max_corrected_per_day: int | None = 9
    max_uncorrected_per_day: int | None = 0
    command: tuple[str, ...] = ("mcelog", "--client")
    timeout_s: float = 5.0


# -- files ----------------------------------------------------------------------------

FILE_TESTS = frozenset("abcdefghkprsuwxOGLSN")


@record
class FileTest:
    """Each of ``tests`` (the letters of ``test(1)``: e exists, f regular, d
    directory, r w x access, s not empty, k sticky, c b p S h/L types, u g
    setuid/setgid, O G owned by us) holds for every path.  (NHC:
    check_file_test.)"""

    paths: tuple[str, ...] = ()
    tests: tuple[str, ...] = ("e",)

    def validate(self) -> None:
        _paths(self.paths)
        bad = [t for t in self.tests if t not in FILE_TESTS]
        if bad or not self.tests:
            raise InvalidKey(
                "tests", f"letters of test(1) ({''.join(sorted(FILE_TESTS))}), got {bad}"
            )


@record
class FileStat:
    """Metadata of every path: ``mode`` exactly, ``min_mode`` at least those
    bits (octal strings), owner and group by id or name, device numbers,
    and how recent mtime/ctime are (seconds).  (NHC: check_file_stat.)"""

    paths: tuple[str, ...] = ()
    mode: str = ""
    min_mode: str = ""
    uid: int | None = None
    gid: int | None = None
    user: str = ""
    group: str = ""
    device: int | None = None
    major: int | None = None
    minor: int | None = None
    mtime_newer_s: float | None = None
    mtime_older_s: float | None = None
    ctime_newer_s: float | None = None
    ctime_older_s: float | None = None

    def validate(self) -> None:
        _paths(self.paths)
        for key in ("mode", "min_mode"):
            value = getattr(self, key)
            if value:
                try:
                    int(value, 8)
                except ValueError as exc:
                    raise InvalidKey(key, f'an octal mode such as "0644", got {value!r}') from exc


@record
class FileContents:
    """Every match string matches some line of ``path`` (a negated one: no
    line).  (NHC: check_file_contents.)"""

    path: str = ""
    matches: tuple[str, ...] = ()
    #: Read at most this many bytes (a log file must not stall the check).
    max_bytes: int = 4 * 1024 * 1024

    def validate(self) -> None:
        _paths((self.path,), "path")
        if not self.matches:
            raise InvalidKey("matches", "give at least one match string")
        _mstrs(self, "matches")


# -- commands -------------------------------------------------------------------------


@record
class Command:
    """Run ``argv`` (no shell) within ``timeout_s``; its exit status must be
    ``status`` (unless ``check_status = false``), and each match string must match some line of
    its output (negated: none).  (NHC: check_cmd_status, check_cmd_output.)"""

    argv: tuple[str, ...] = ()
    status: int = 0
    check_status: bool = True
    matches: tuple[str, ...] = ()
    timeout_s: float = 5.0

    def validate(self) -> None:
        if not self.argv:
            raise InvalidKey("argv", "give the command as a list of words")
        _mstrs(self, "matches")


# -- the site's own NHC functions ------------------------------------------------------

#: A bash name (function or variable): what the shim will accept.
SHELL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: NHC driver variables the shim (site/nhc_function.py) sets itself, so
#: ``env`` may not: it marks no node (slurm-hooks owns the drain), logs
#: nowhere but its own output, runs one check, and ``INCDIR`` is
#: ``scripts_dir``.
SHIM_OWNS = frozenset(
    {"CHECK", "CHECK_DIED", "DETACHED_MODE", "FAIL_CNT", "INCDIR", "LOGFILE", "MARK_OFFLINE",
     "NHC_CHECK_ALL", "NHC_CHECK_FORKED", "NHC_DETACHED", "NHC_FD_ERR", "NHC_FD_OUT", "NHC_PID",
     "NHC_RM", "OFFLINE_NODE", "ONLINE_NODE", "RESULTFILE", "TIMEOUT", "WATCHDOG_PID"}
)  # fmt: skip


@record
class NhcFunction:
    """Run the site's own NHC check ``function`` (defined in one of the
    ``*.nhc`` files of ``scripts_dir``, NHC's ``$INCDIR``) with ``args``,
    without NHC's driver: bash sources the scripts after a shim of the
    driver's functions (``die``, ``log``, ``dbg``, ``syslog`` ...), sets
    ``env`` (the variables nhc.conf or /etc/sysconfig/nhc set), and calls
    it within ``timeout_s``.  Fails as NHC would: the function called
    ``die`` (its message is the reason), returned non-zero, is not
    defined, or ran out of time.  (NHC: a site's ``check_*`` function.)"""

    function: str = ""
    args: tuple[str, ...] = ()
    scripts_dir: str = "/etc/nhc/scripts"
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 10.0

    def validate(self) -> None:
        if not SHELL_NAME.match(self.function):
            raise InvalidKey(
                "function", f"a bash function name (A-Z a-z 0-9 _), got {self.function!r}"
            )
        _paths((self.scripts_dir,), "scripts_dir")
        bad = [k for k in self.env if not SHELL_NAME.match(k)]
        if bad:
            raise InvalidKey("env", f"variable names are A-Z a-z 0-9 _, got {bad}")
        owned = sorted(set(self.env) & SHIM_OWNS)
        if owned:
            raise InvalidKey("env", f"set by slurm-hooks for every function, not here: {owned}")
        values = (self.scripts_dir, *self.args, *self.env.values())
        if any("\0" in v for v in values):
            raise InvalidKey("args", "no NUL character in arguments, paths or values")


# -- DMI ------------------------------------------------------------------------------


@record
class DmiMatch:
    """A line of ``dmidecode``'s output, expanded as NHC does ("BIOS
    Information: Version: 2.0.1"), matches ``match``, within ``type`` /
    ``handle`` when given; ``absent``: no line may match.  ``raw``: match
    ``dmidecode``'s raw lines instead.  (NHC: check_dmi_data_match,
    check_dmi_raw_data_match.)"""

    match: str = ""
    type: str = ""
    handle: str = ""
    absent: bool = False
    raw: bool = False
    timeout_s: float = 10.0

    def validate(self) -> None:
        if not self.match:
            raise InvalidKey("match", "give a match string")
        _mstrs(self, "match")
