"""Pure judges of site checks: what was gathered + the arguments -> problems.

Each returns the list of :class:`Problem` it found (empty: the check
passes).  The verdicts follow NHC's documented semantics for the same
check, so a translated ``nhc.conf`` passes and fails the same nodes
(tests/test_site_checks.py replays NHC's own test cases).
"""

from __future__ import annotations

import os
import re
import stat as st
from collections.abc import Iterable, Sequence
from typing import Any

from slurm_hooks.core.model import Value
from slurm_hooks.core.reason import sanitize_text
from slurm_hooks.core.record import field, record
from slurm_hooks.detect.probes.host import Partition
from slurm_hooks.detect.site import args as A
from slurm_hooks.detect.site.gather import CpuInfo, FsUsage, MemInfo, Proc, Ran
from slurm_hooks.detect.site.match import is_negated, mcheck
from slurm_hooks.detect.site.nhc_function import Outcome
from slurm_hooks.detect.site.units import parse_count, parse_size


@record
class Problem:
    message: str
    values: dict[str, Value] = field(default_factory=dict)
    #: The finding's code when it is not the kind's (``kinds.Kind.code``).
    code: str | None = None


#: A process that must not run, found running as a user's (not root's): a
#: user chose to run it (core/user_caused.py: drained, no job moved).
PS_FORBIDDEN_USER = "PS_FORBIDDEN_USER"


def _lines_match(lines: Sequence[str], matches: Iterable[str], what: str) -> list[Problem]:
    """NHC's rule for file contents and command output: a plain match string
    must match some line, a negated one must match every line (no line
    matches its positive form)."""
    out = []
    for m in matches:
        if is_negated(m):
            bad = next((ln for ln in lines if not mcheck(ln, m)), None)
            if bad is not None:
                out.append(Problem(f"{what}: line {bad[:120]!r} matches {m[1:]!r}"))
        elif not any(mcheck(ln, m) for ln in lines):
            out.append(Problem(f"{what}: no line matches {m!r}"))
    return out


# -- file systems ---------------------------------------------------------------------


def fs_mount(a: A.FsMount, mounts: list[Partition]) -> list[Problem]:
    out = []
    by_point: dict[str, Partition] = {}
    for p in mounts:
        by_point[os.path.normpath(p.mountpoint)] = p  # the last one is on top
    for path in a.paths:
        top = by_point.get(os.path.normpath(path))
        if top is None:
            out.append(Problem(f"{path} is not mounted", {"path": path}))
            continue
        opts = top.opts.split(",")
        if a.fstype and not mcheck(top.fstype, a.fstype):
            out.append(
                Problem(f"{path} is {top.fstype}, expected {a.fstype}", {"fstype": top.fstype})
            )
        if a.source and not mcheck(top.device, a.source):
            out.append(
                Problem(f"{path} is from {top.device}, expected {a.source}", {"source": top.device})
            )
        if a.options and not mcheck(top.opts, a.options):
            out.append(Problem(f"{path} options {top.opts} do not match {a.options}"))
        if a.mode == "rw" and "rw" not in opts:
            out.append(Problem(f"{path} ({top.fstype}) is mounted read-only", {"path": path}))
        if a.mode == "ro" and "ro" not in opts:
            out.append(Problem(f"{path} ({top.fstype}) is mounted read-write, expected read-only"))
    return out


def _df_pct(used: float, free: float) -> int:
    """df's Use%: used over what a user could have, rounded up."""
    whole = used + free
    return 0 if whole <= 0 else int(-(-used * 100 // whole))


def fs_space(a: A.FsSpace, u: FsUsage | None) -> list[Problem]:
    """NHC's df rules: a path that is not a mount point, or a file system
    of size 0 (a pseudo file system), passes; percentages are df's Use%
    (rounded up); a limit is reached at equality for used space."""
    if u is None or u.total_kb <= 0:
        return []
    out = []
    pct = _df_pct(u.used_kb, u.free_kb)
    values: dict[str, Value] = {
        "free_kb": round(u.free_kb),
        "total_kb": round(u.total_kb),
        "used_pct": pct,
    }
    if a.min_free:
        need = parse_size(a.min_free)
        short = (100 - pct < need.value) if need.percent else u.free_kb < need.value
        if short:
            out.append(
                Problem(
                    f"{a.path}: {100 - pct}% free ({u.free_kb:.0f} kB), minimum {a.min_free}",
                    values,
                )
            )
    if a.max_used:
        limit = parse_size(a.max_used)
        full = pct >= limit.value if limit.percent else u.used_kb >= limit.value
        if full:
            out.append(
                Problem(
                    f"{a.path}: {pct}% used ({u.used_kb:.0f} kB), threshold {a.max_used}", values
                )
            )
    if a.min_size and u.total_kb < parse_size(a.min_size).value:
        out.append(Problem(f"{a.path}: size {u.total_kb:.0f} kB, less than {a.min_size}", values))
    if a.max_size and u.total_kb > parse_size(a.max_size).value:
        out.append(Problem(f"{a.path}: size {u.total_kb:.0f} kB, more than {a.max_size}", values))
    return out


def fs_inodes(a: A.FsInodes, u: FsUsage | None) -> list[Problem]:
    """As :func:`fs_space`, for inodes (counts: "1k" = 1000; or percent)."""
    if u is None or u.inodes <= 0:
        return []
    out = []
    pct = _df_pct(u.inodes_used, u.inodes_free)
    values: dict[str, Value] = {"inodes": u.inodes, "inodes_free": u.inodes_free, "iused_pct": pct}
    if a.min_total and u.inodes < parse_count(a.min_total):
        out.append(Problem(f"{a.path}: {u.inodes} inodes, fewer than {a.min_total}", values))
    if a.max_total and u.inodes > parse_count(a.max_total):
        out.append(Problem(f"{a.path}: {u.inodes} inodes, more than {a.max_total}", values))
    if a.min_free:
        if a.min_free.endswith("%"):
            short = 100 - pct < float(a.min_free[:-1])
        else:
            short = u.inodes_free < parse_count(a.min_free)
        if short:
            out.append(
                Problem(
                    f"{a.path}: {u.inodes_free} inodes free ({100 - pct}%), minimum {a.min_free}",
                    values,
                )
            )
    if a.max_used:
        if a.max_used.endswith("%"):
            full = pct >= float(a.max_used[:-1])
        else:
            full = u.inodes_used >= parse_count(a.max_used)
        if full:
            out.append(
                Problem(
                    f"{a.path}: {u.inodes_used} inodes used ({pct}%), threshold {a.max_used}",
                    values,
                )
            )
    return out


# -- processes ------------------------------------------------------------------------


def service_procs(a: A.PsService, procs: Sequence[Proc]) -> list[Proc]:
    """The processes that count as ``a.service`` (NHC's matching)."""
    found = []
    for p in procs:
        name = p.args if a.full else (p.args.split() or [""])[0]
        if not mcheck(name, a.pattern):
            continue
        if a.user and not mcheck(p.user, a.user):
            continue
        found.append(p)
    return found


def ps_service(a: A.PsService, data: tuple[list[Proc], Ran | None]) -> list[Problem]:
    found, restarted = data
    owner = f" owned by {a.user}" if a.user else ""
    if a.running and not found:
        msg = f"service {a.service} (process {a.pattern}){owner} not running"
        if restarted is not None:
            msg += f"; restart {'ran' if restarted.rc == 0 else 'failed: ' + (restarted.error or str(restarted.rc))}"
        return [Problem(msg)]
    if not a.running and found:
        pids = ",".join(str(p.pid) for p in found[:5])
        users = any(p.uid != 0 for p in found)
        return [Problem(f"service {a.service} (process {a.pattern}){owner} running (pid {pids})",
                        code=PS_FORBIDDEN_USER if users else None)]  # fmt: skip
    return []


def _descends(p: Proc, by_pid: dict[int, Proc], rm: str) -> bool:
    seen = set()
    cur = by_pid.get(p.ppid)
    while cur is not None and cur.pid not in seen:
        seen.add(cur.pid)
        if mcheck(cur.args, rm) or mcheck(cur.comm, rm):
            return True
        cur = by_pid.get(cur.ppid)
    return False


def ps_users(a: A.PsUsers, procs: list[Proc]) -> list[Problem]:
    by_pid = {p.pid: p for p in procs}
    system = set(a.auth_users)
    job_users = {p.user for p in procs if _descends(p, by_pid, a.rm_daemon)}
    out = []
    for p in procs:
        if p.uid <= a.max_sys_uid or p.user in system:
            continue
        if not a.lineage and p.user in job_users:
            continue
        if a.lineage and _descends(p, by_pid, a.rm_daemon):
            continue
        why = "not a child of the resource manager" if a.lineage else "unauthorised user"
        # The arguments are the process owner's words: one line, no control
        # characters (they reach the audit log, alerts and an admin's terminal).
        args = sanitize_text(p.args)[:60]
        out.append(Problem(f"{why}: {p.user} process {p.pid} ({args})", {"user": p.user}))
    return out[:5]


def ps_loadavg(
    a: A.PsLoadavg, data: tuple[tuple[float, float, float], CpuInfo | None]
) -> list[Problem]:
    load, cpu = data
    scale = getattr(cpu, a.per) if a.per and cpu is not None else 1
    out = []
    for label, per_limit, value in zip(
        ("1m", "5m", "15m"), (a.max_1m, a.max_5m, a.max_15m), load, strict=True
    ):
        limit = None if per_limit is None else per_limit * scale
        # NHC's rule (bash integers): the whole part of the load, at or above the limit.
        if limit is not None and int(value) >= limit:
            out.append(
                Problem(
                    f"{label} load average {value:g} at or above {limit:g}",
                    {f"load_{label}": value},
                )
            )
    return out


# -- hardware -------------------------------------------------------------------------


def hw_cpuinfo(a: A.HwCpuinfo, c: CpuInfo) -> list[Problem]:
    out = []
    for what, want, have in (
        ("sockets", a.sockets, c.sockets),
        ("cores", a.cores, c.cores),
        ("threads", a.threads, c.threads),
    ):
        if want is not None and want != have:
            out.append(Problem(f"{have} {what}, expected {want}", {what: have}))
    return out


def _mem_total(which: str, m: MemInfo) -> int:
    return {"physmem": m.ram_total, "swap": m.swap_total, "total": m.ram_total + m.swap_total}[
        which
    ]


def _mem_free(which: str, m: MemInfo) -> int:
    return {"physmem": m.ram_free, "swap": m.swap_free, "total": m.ram_free + m.swap_free}[which]


def hw_memory(a: A.HwMemory, m: MemInfo) -> list[Problem]:
    have = _mem_total(a.which, m)
    lo, hi = parse_size(a.min).value, parse_size(a.max).value
    fudge = parse_size(a.fudge).of(have) if a.fudge else 0.0
    if a.fudge and parse_size(a.fudge).percent:
        fudge = float(int(fudge))  # NHC's integer arithmetic
    values: dict[str, Value] = {f"{a.which}_kb": have}
    if have + fudge < lo:
        return [Problem(f"{a.which} {have} kB, less than the minimum {a.min}", values)]
    if have - fudge > hi:
        return [Problem(f"{a.which} {have} kB, more than the maximum {a.max}", values)]
    return []


def hw_memory_free(a: A.HwMemoryFree, m: MemInfo) -> list[Problem]:
    have = _mem_free(a.which, m)
    if have < parse_size(a.min).value:
        return [Problem(f"{have} kB {a.which} free, less than {a.min}", {"free_kb": have})]
    return []


def hw_ib(a: A.HwIb, ports: list[Any]) -> list[Problem]:
    dev, _, port = a.device.partition(":")
    for p in ports:
        if not p.active:
            continue
        if dev and (p.device != dev or (port and str(p.port) != port)):
            continue
        if a.rate is not None and (p.rate_gbps is None or p.rate_gbps != a.rate):
            continue
        return []
    where = f" {a.device}" if a.device else ""
    rate = f" at {a.rate:g} Gb/sec" if a.rate is not None else ""
    seen = ", ".join(
        f"{p.name} {p.state_text or '?'}/{p.phys_state_text or '?'} {p.rate_text or '?'}"
        for p in ports
    )
    return [Problem(f"no IB port{where} ACTIVE/LinkUp{rate} (ports: {seen or 'none'})")]


def hw_eth(a: A.HwEth, devices: frozenset[str]) -> list[Problem]:
    if a.device in devices:
        return []
    return [Problem(f"network interface {a.device} not present")]


_MCE_COUNT = re.compile(r"^\s*(\d+)\s+in 24h")


def hw_mcelog(a: A.HwMcelog, r: Ran) -> list[Problem]:
    """NHC: no output, or no daemon (connection refused, mcelog missing):
    pass; with both limits, per-DIMM 24 h counts above them fail;
    otherwise any output fails."""
    if r.error and not r.timed_out:
        return []  # mcelog not installed: NHC's "no daemon" case
    if r.timed_out:
        return [Problem(f"mcelog: {r.error}")]
    text = r.output.strip()
    if not text or "Connection refused" in text:
        return []
    if a.max_corrected_per_day is None or a.max_uncorrected_per_day is None:
        return [Problem(f"MCEs detected in log: {text.splitlines()[0][:100]}")]
    lines = text.splitlines()
    for i, line in enumerate(lines):
        kind = line.strip()
        if kind not in ("corrected memory errors:", "uncorrected memory errors:") or i + 2 >= len(
            lines
        ):
            continue
        m = _MCE_COUNT.match(lines[i + 2])
        if not m:
            continue
        n = int(m.group(1))
        limit = (
            a.max_corrected_per_day if kind.startswith("corrected") else a.max_uncorrected_per_day
        )
        if n > limit:
            what = kind.split(" memory")[0]
            return [Problem(f"{n} {what} memory errors in 24h (limit {limit}/day)", {"mce_24h": n})]
    return []


# -- files ----------------------------------------------------------------------------


def _test(letter: str, path: str, s: os.stat_result | None, follow: os.stat_result | None) -> bool:
    """``test -<letter> path``; ``s`` is lstat, ``follow`` stat (None: missing)."""
    if letter in "hL":
        return s is not None and st.S_ISLNK(s.st_mode)
    if follow is None:
        return False
    m = follow.st_mode
    checks = {
        "a": True,
        "e": True,
        "f": st.S_ISREG(m),
        "d": st.S_ISDIR(m),
        "b": st.S_ISBLK(m),
        "c": st.S_ISCHR(m),
        "p": st.S_ISFIFO(m),
        "S": st.S_ISSOCK(m),
        "k": bool(m & st.S_ISVTX),
        "u": bool(m & st.S_ISUID),
        "g": bool(m & st.S_ISGID),
        "s": follow.st_size > 0,
        "O": follow.st_uid == os.geteuid(),
        "G": follow.st_gid == os.getegid(),
        "N": follow.st_mtime > follow.st_atime,
    }
    if letter in checks:
        return checks[letter]
    return os.access(path, {"r": os.R_OK, "w": os.W_OK, "x": os.X_OK}.get(letter, os.F_OK))


def file_test(
    a: A.FileTest, data: dict[str, tuple[os.stat_result | None, os.stat_result | None]]
) -> list[Problem]:
    out = []
    for path in a.paths:
        s, follow = data[path]
        failed = [t for t in a.tests if not _test(t, path, s, follow)]
        if failed:
            out.append(Problem(f"{path}: test -{' -'.join(failed)} false", {"path": path}))
    return out


def file_stat(
    a: A.FileStat, data: dict[str, tuple[os.stat_result | None, str, str]], now: float
) -> list[Problem]:
    out = []
    for path in a.paths:
        s, user, group = data[path]
        if s is None:
            out.append(Problem(f"{path} does not exist", {"path": path}))
            continue
        bad = []
        perm = st.S_IMODE(s.st_mode)
        if a.mode and perm != int(a.mode, 8):
            bad.append(f"mode {perm:04o} not {a.mode}")
        if a.min_mode and perm & int(a.min_mode, 8) != int(a.min_mode, 8):
            bad.append(f"mode {perm:04o} lacks {a.min_mode}")
        for what, want, have in (
            ("uid", a.uid, s.st_uid),
            ("gid", a.gid, s.st_gid),
            ("device", a.device, s.st_rdev),
            ("major", a.major, os.major(s.st_rdev)),
            ("minor", a.minor, os.minor(s.st_rdev)),
        ):
            if want is not None and want != have:
                bad.append(f"{what} {have} not {want}")
        if a.user and a.user != user:
            bad.append(f"owner {user} not {a.user}")
        if a.group and a.group != group:
            bad.append(f"group {group} not {a.group}")
        for what, newer, older, t in (
            ("mtime", a.mtime_newer_s, a.mtime_older_s, s.st_mtime),
            ("ctime", a.ctime_newer_s, a.ctime_older_s, s.st_ctime),
        ):
            age = now - t
            if newer is not None and age > newer:
                bad.append(f"{what} {age:.0f}s ago, not within {newer:g}s")
            if older is not None and age < older:
                bad.append(f"{what} {age:.0f}s ago, not older than {older:g}s")
        if bad:
            out.append(Problem(f"{path}: {'; '.join(bad)}", {"path": path}))
    return out


def file_contents(a: A.FileContents, text: str | None) -> list[Problem]:
    if text is None:
        return [Problem(f"{a.path} cannot be read", {"path": a.path})]
    return _lines_match(text.splitlines(), a.matches, a.path)


# -- commands -------------------------------------------------------------------------


def command(a: A.Command, r: Ran) -> list[Problem]:
    name = " ".join(a.argv)[:80]
    if r.error:
        return [Problem(f"{name}: {r.error}")]
    out = []
    if a.check_status and r.rc != a.status:
        out.append(Problem(f"{name}: exit status {r.rc}, expected {a.status}", {"rc": r.rc}))
    out += _lines_match(r.output.splitlines(), a.matches, name)
    return out


# -- the site's own NHC functions ------------------------------------------------------


def nhc_function(a: A.NhcFunction, r: Outcome) -> list[Problem]:
    """NHC's verdict on a check function (its driver, without ``-a``)."""
    call = " ".join((a.function, *a.args))[:120]
    values: dict[str, Value] = {"function": a.function}
    if r.timed_out:
        return [Problem(f"{call}: timed out after {a.timeout_s:g}s", values)]
    if r.died is not None:
        return [Problem(r.died or f"{call}: died without a message", {**values, "rc": r.rc})]
    if r.undefined:
        where = (
            f"no *.nhc script in {a.scripts_dir}"
            if not r.loaded
            else f"none of the {r.loaded} *.nhc script(s) in {a.scripts_dir} defines it"
        )
        return [Problem(f"{a.function} is not defined: {where}", {**values, "rc": r.rc})]
    if r.rc != 0:
        # NHC's fallback text; a subshell's die said more, where there was one.
        text = r.subshell_died or f"Check {call} returned {r.rc}"
        return [Problem(text, {**values, "rc": r.rc})]
    return []


# -- DMI ------------------------------------------------------------------------------


def parse_dmi(text: str) -> list[tuple[str, str, str]]:
    """``dmidecode`` output as (handle, type, line) with each indented line
    prefixed by its headers, as NHC expands it: "BIOS Information: Version:
    2.0.1", "Memory Device: Speed: 1866 MHz"."""
    out: list[tuple[str, str, str]] = []
    handle = dtype = ""
    stack: list[str] = []
    for raw in text.splitlines():
        if raw.startswith("Handle "):
            handle = raw.split()[1].rstrip(",")
            m = re.search(r"DMI type (\d+)", raw)
            dtype, stack = (m.group(1) if m else ""), []
            continue
        if not raw.strip():
            continue
        depth = len(raw) - len(raw.lstrip())  # NHC counts any leading blank
        line = raw.strip()
        if depth == 0:
            stack = [line]
            out.append((handle, dtype, line))
            continue
        stack = stack[:depth]
        full = ": ".join([*stack, line])
        out.append((handle, dtype, full))
        if line.endswith(":"):
            stack.append(line[:-1])
    return out


def dmi(a: A.DmiMatch, r: Ran) -> list[Problem]:
    if r.error:
        return [Problem(f"dmidecode: {r.error}")]
    if a.raw:
        lines = r.output.splitlines()
    else:
        lines = []
        for handle, dtype, line in parse_dmi(r.output):
            if a.handle and handle.lower() != a.handle.lower():
                continue
            if a.type and dtype != a.type and not line.startswith(a.type):
                continue
            lines.append(line)
    hit = any(mcheck(ln, a.match) for ln in lines)
    if a.absent and hit:
        return [Problem(f"DMI data matches {a.match!r}")]
    if not a.absent and not hit:
        return [Problem(f"no DMI data matches {a.match!r}")]
    return []
