"""How each of NHC's checks becomes site checks (for :mod:`.nhc_import`).

One function per NHC check family: NHC's words in, ``[[site_checks]]`` rows
and notes out, or :class:`Untranslatable` with the reason.  Semantics from
NHC's README ("Built-in Checks"); NHC's code is not used.
"""

from __future__ import annotations

import getopt
import shlex
from collections.abc import Callable
from typing import Any

Row = dict[str, Any]


class Untranslatable(ValueError):
    """This line has no slurm-hooks equivalent (the message says why)."""


def _opts(argv: list[str], spec: str) -> tuple[list[tuple[str, str]], list[str]]:
    try:
        return getopt.getopt(argv, spec)
    except getopt.GetoptError as exc:
        raise Untranslatable(f"bad option for this check: {exc}") from exc


def _kb(value: str) -> str:
    """NHC's size (a bare number is kB) in our spelling, which names the unit."""
    v = value.strip()
    if not v:
        return ""
    if v.endswith("%"):
        return v
    if v[-1:].isdigit():
        return f"{v}kB"
    return v


_ACTION_NOTE = (
    "NHC's {what} ({opt}) is not carried: slurm-hooks reports and drains, it does not repair here"
)


def fs_mount(fn: str, argv: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    notes: list[str] = []
    row: Row = {"kind": "fs_mount"}
    if fn == "check_fs_mount_rw":
        row["mode"] = "rw"
    elif fn == "check_fs_mount_ro":
        row["mode"] = "ro"
    fatal = True
    if argv and not argv[0].startswith("-"):
        paths = [argv[0]]
        for key, value in zip(("source", "fstype", "options"), argv[1:4], strict=False):
            if value:
                row[key] = value
    else:
        opts, rest = _opts(argv, "0rE:F:O:e:f:o:s:t:")
        paths = list(rest)
        multi: dict[str, list[str]] = {}
        for o, a in opts:
            if o in ("-f", "-F"):
                paths.append(a)
            elif o == "-0":
                fatal = False
            elif o in ("-t", "-s", "-o"):
                multi.setdefault({"-t": "fstype", "-s": "source", "-o": "options"}[o], []).append(a)
            elif o in ("-r", "-O"):
                notes.append(_ACTION_NOTE.format(what="remount", opt=o))
            elif o in ("-e", "-E"):
                notes.append(_ACTION_NOTE.format(what="action", opt=f"{o} {a!r}"))
        for key, values in multi.items():
            if len(values) > 1:
                raise Untranslatable(f"several {key} alternatives ({', '.join(values)})")
            row[key] = values[0]
    if not paths:
        raise Untranslatable("no mount point given")
    row["paths"] = paths
    if not fatal:
        row["fatal"] = False
    return [row], notes


def fs_space(fn: str, argv: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    if not argv:
        raise Untranslatable("no mount point given")
    path, rest = argv[0], argv[1:]
    if fn == "check_fs_free" and rest:
        return [{"kind": "fs_space", "path": path, "min_free": _kb(rest[0])}], []
    if fn == "check_fs_used" and rest:
        return [{"kind": "fs_space", "path": path, "max_used": _kb(rest[0])}], []
    if fn == "check_fs_size" and any(rest):
        row: Row = {"kind": "fs_space", "path": path}
        if rest[0:1] and rest[0]:
            row["min_size"] = _kb(rest[0])
        if rest[1:2] and rest[1]:
            row["max_size"] = _kb(rest[1])
        return [row], []
    raise Untranslatable("no limit given")


def fs_inodes(fn: str, argv: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    if len(argv) < 2:
        raise Untranslatable("no mount point or limit given")
    row: Row = {"kind": "fs_inodes", "path": argv[0]}
    if fn == "check_fs_inodes":
        if argv[1]:
            row["min_total"] = argv[1]
        if len(argv) > 2 and argv[2]:
            row["max_total"] = argv[2]
    else:
        row["min_free" if fn == "check_fs_ifree" else "max_used"] = argv[1]
    return [row], []


def file_test(fn: str, argv: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    tests = [w[1:] for w in argv if w.startswith("-") and len(w) == 2]
    paths = [w for w in argv if not (w.startswith("-") and len(w) == 2)]
    if "t" in tests:
        raise Untranslatable("test -t (a terminal) means nothing for a health check")
    if not paths:
        raise Untranslatable("no file given")
    return [{"kind": "file_test", "paths": paths, "tests": tests or ["e"]}], []


_STAT_KEYS = {"-m": ("mode", str), "-M": ("min_mode", str), "-u": ("uid", int), "-g": ("gid", int),
              "-U": ("user", str), "-G": ("group", str), "-t": ("major", int), "-T": ("minor", int),
              "-d": ("device", int), "-D": ("device", int), "-n": ("mtime_newer_s", float),
              "-o": ("mtime_older_s", float), "-N": ("ctime_newer_s", float), "-O": ("ctime_older_s", float)}  # fmt: skip


def file_stat(fn: str, argv: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    opts, paths = _opts(argv, "D:G:M:N:O:T:U:d:g:m:n:o:t:u:")
    row: Row = {"kind": "file_stat", "paths": paths}
    for o, a in opts:
        key, conv = _STAT_KEYS[o]
        try:
            row[key] = conv(int(a, 0)) if conv is int else conv(a)
        except ValueError as exc:
            raise Untranslatable(f"{o} {a!r}: {exc}") from exc
    if not paths:
        raise Untranslatable("no file given")
    return [row], []


def file_contents(fn: str, argv: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    if len(argv) < 2:
        raise Untranslatable("no file or match string given")
    return [{"kind": "file_contents", "path": argv[0], "matches": argv[1:]}], []


def _nonfatal_actions(actions: list[str]) -> tuple[bool, list[str]]:
    """NHC's action words: ``die`` (the default when none) fails the check."""
    notes = [_ACTION_NOTE.format(what=a, opt=a) for a in actions if a in ("kill",)]
    return (not actions or "die" in actions), notes


def ps_service(fn: str, argv: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    notes: list[str] = []
    row: Row = {"kind": "ps_service"}
    if fn in ("check_ps_daemon", "check_ps_blacklist"):
        if not argv:
            raise Untranslatable("no process name given")
        row["service"] = argv[0]
        if len(argv) > 1 and argv[1]:
            row["user"] = argv[1]
        if len(argv) > 2:
            row.update(full=True, match=f"*{argv[0]} {' '.join(argv[2:])}*")
        if fn == "check_ps_blacklist":
            row["running"] = False
        return [row], notes
    opts, rest = _opts(argv, "0E:SVcd:e:fkm:rsu:v")
    if not rest:
        raise Untranslatable("no service name given")
    row["service"] = " ".join(rest)
    for o, a in opts:
        if o == "-0":
            row["fatal"] = False
        elif o == "-d":
            row["daemon"] = a
        elif o == "-m":
            row["match"] = a
        elif o == "-u":
            row["user"] = a
        elif o == "-f":
            row["full"] = True
        elif o in ("-S", "-r", "-c"):
            notes.append(
                f"NHC starts/restarts the service ({o}); slurm-hooks does not by default "
                "(set restart = true to run systemctl restart)"
            )
        elif o in ("-s", "-k"):
            row["running"] = False
            notes.append(_ACTION_NOTE.format(what="stop/kill", opt=o))
        elif o == "-E":
            row["running"] = False
            notes.append(_ACTION_NOTE.format(what="found-action", opt=f"-E {a!r}"))
        elif o == "-e":
            notes.append(_ACTION_NOTE.format(what="missing-action", opt=f"-e {a!r}"))
    return [row], notes


def ps_users(fn: str, argv: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    fatal, notes = _nonfatal_actions(argv)
    row: Row = {"kind": "ps_users"}
    if fn == "check_ps_userproc_lineage":
        row["lineage"] = True
    if "MAX_SYS_UID" in v:
        row["max_sys_uid"] = int(v["MAX_SYS_UID"])
    if "NHC_AUTH_USERS" in v:
        row["auth_users"] = v["NHC_AUTH_USERS"].split()
    if "RM_DAEMON_MATCH" in v:
        row["rm_daemon"] = v["RM_DAEMON_MATCH"]
    if not fatal:
        row["fatal"] = False
    return [row], notes


def ps_loadavg(fn: str, argv: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    row: Row = {"kind": "ps_loadavg"}
    per = {v.split("*")[0] for v in argv if v.startswith("@")}
    if len(per) > 1 or (per and any(v and not v.startswith("@") for v in argv)):
        raise Untranslatable("mixes limits per core and absolute limits")
    if per:
        row["per"] = {"@HW_CORES": "cores", "@HW_THREADS": "threads", "@HW_SOCKETS": "sockets"}[
            per.pop()
        ]
        argv = [v.split("*")[1] if v else v for v in argv]
    for key, value in zip(("max_1m", "max_5m", "max_15m"), argv, strict=False):
        if value:
            if not value.isdigit():
                raise Untranslatable(
                    f"load limit {value!r} is not a whole number (NHC compares integers; "
                    "bash refuses this one, so NHC never fails on it)"
                )
            row[key] = float(value)
    return [row], []


def hw_cpuinfo(fn: str, argv: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    row: Row = {"kind": "hw_cpuinfo"}
    for key, value in zip(("sockets", "cores", "threads"), argv, strict=False):
        if value:
            if not value.isdigit():
                raise Untranslatable(f"{key} {value!r} is not a number")
            row[key] = int(value)
    return [row], []


_WHICH = {"check_hw_physmem": "physmem", "check_hw_swap": "swap", "check_hw_mem": "total",
          "check_hw_physmem_free": "physmem", "check_hw_swap_free": "swap", "check_hw_mem_free": "total"}  # fmt: skip


def hw_memory(fn: str, argv: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    which = _WHICH[fn]
    if fn.endswith("_free"):
        if not argv:
            raise Untranslatable("no minimum given")
        return [{"kind": "hw_memory_free", "which": which, "min": _kb(argv[0])}], []
    if len(argv) < 2:
        raise Untranslatable("give the minimum and the maximum")
    row: Row = {"kind": "hw_memory", "which": which, "min": _kb(argv[0]), "max": _kb(argv[1])}
    if len(argv) > 2 and argv[2]:
        row["fudge"] = _kb(argv[2])
    return [row], []


def hw_ib(fn: str, argv: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    row: Row = {"kind": "hw_ib"}
    if argv and argv[0]:
        try:
            row["rate"] = float(argv[0])
        except ValueError as exc:
            raise Untranslatable(f"rate {argv[0]!r} is not a number") from exc
    if len(argv) > 1:
        row["device"] = argv[1]
    return [row], ["NHC also fails when the kernel's umad ABI is absent; here a port must be up"]


def hw_eth(fn: str, argv: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    if not argv:
        raise Untranslatable("no interface given")
    notes = (
        ["the gm driver module is not checked, only the interface"] if fn == "check_hw_gm" else []
    )
    return [{"kind": "hw_eth", "device": argv[0]}], notes


def hw_mcelog(fn: str, argv: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    row: Row = {"kind": "hw_mcelog"}
    for var, key in (
        ("MCELOG_MAX_CORRECTED_RATE", "max_corrected_per_day"),
        ("MCELOG_MAX_UNCORRECTED_RATE", "max_uncorrected_per_day"),
    ):
        if var in v:
            if v[var] == "":
                row[key] = -1  # NHC: empty = any output fails; written as -1 below
            else:
                row[key] = int(v[var])
    if row.get("max_corrected_per_day") == -1 or row.get("max_uncorrected_per_day") == -1:
        raise Untranslatable(
            "MCELOG_MAX_*_RATE set empty (any MCE output fails): set both limits, or write a command check"
        )
    if "MCELOG" in v or "MCELOG_ARGS" in v:
        row["command"] = [v.get("MCELOG", "mcelog"), *shlex.split(v.get("MCELOG_ARGS", "--client"))]
    return [row], []


def dmi(fn: str, argv: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    if fn == "check_dmi_raw_data_match":
        # Each match string must match a raw line; one after "!" must not.
        rows: list[Row] = []
        negate = False
        for m in argv:
            if m == "!":
                negate = True
                continue
            rows.append(
                {"kind": "dmi", "raw": True, "match": m, **({"absent": True} if negate else {})}
            )
            negate = False
        if not rows:
            raise Untranslatable("no match string given")
        return rows, []
    args = ["-x" if a == "-!" else a for a in argv]
    absent = False
    if args and args[0] == "!":
        absent, args = True, args[1:]
    opts, rest = _opts(args, "xh:nt:")
    row: Row = {"kind": "dmi"}
    for o, a in opts:
        if o in ("-x", "-n"):
            absent = True
        elif o == "-h":
            row["handle"] = a
        elif o == "-t":
            row["type"] = a
    if len(rest) != 1:
        raise Untranslatable("expected one match string")
    row["match"] = rest[0]
    if absent:
        row["absent"] = True
    return [row], []


def command(fn: str, argv: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    opts, rest = _opts(argv, "C:M:O:e:m:r:t:")
    row: Row = {"kind": "command"}
    status: int | None = None if fn == "check_cmd_output" else 0
    matches: list[str] = []
    for o, a in opts:
        if o == "-t":
            row["timeout_s"] = float(a)
        elif o == "-r":
            status = int(a)
        elif o == "-m":
            matches.append(a)
        elif o == "-e":
            rest = a.split()  # NHC splits -e on blanks, no quotes
        elif o in ("-C", "-O", "-M"):
            raise Untranslatable(f"{o} is for NHC's own wrapper checks")
    if not rest:
        raise Untranslatable("no command given")
    row["argv"] = rest
    if status is None:
        row["check_status"] = False
    else:
        row["status"] = status
    if matches:
        row["matches"] = matches
    return [row], []


def net_ping(fn: str, argv: list[str], v: dict[str, str]) -> tuple[list[Row], list[str]]:
    opts, targets = _opts(argv, "I:W:c:i:s:t:w:")
    if not targets:
        raise Untranslatable("no target given")
    flags = [x for o, a in opts for x in (o, a)]
    return [
        {
            "kind": "command",
            "argv": ["ping", "-q", "-n", *flags, "--", t],
            "status": 0,
            "timeout_s": 10.0,
        }
        for t in targets
    ], []


GPU_BUILTIN = "gpu_count, gpu_lost, ecc, retired_pages, row_remap, pcie, nvlink, throttle, gpu_temp (built in, on by default)"

TRANSLATORS: dict[str, Callable[[str, list[str], dict[str, str]], tuple[list[Row], list[str]]]] = {
    **dict.fromkeys(("check_fs_mount", "check_fs_mount_rw", "check_fs_mount_ro"), fs_mount),
    **dict.fromkeys(("check_fs_free", "check_fs_used", "check_fs_size"), fs_space),
    **dict.fromkeys(("check_fs_inodes", "check_fs_ifree", "check_fs_iused"), fs_inodes),
    "check_file_test": file_test, "check_file_stat": file_stat, "check_file_contents": file_contents,
    **dict.fromkeys(("check_ps_service", "check_ps_daemon", "check_ps_blacklist"), ps_service),
    **dict.fromkeys(("check_ps_unauth_users", "check_ps_userproc_lineage"), ps_users),
    "check_ps_loadavg": ps_loadavg, "check_hw_cpuinfo": hw_cpuinfo,
    **dict.fromkeys(_WHICH, hw_memory),
    "check_hw_ib": hw_ib, "check_hw_eth": hw_eth, "check_hw_gm": hw_eth, "check_hw_mcelog": hw_mcelog,
    **dict.fromkeys(("check_dmi_data_match", "check_dmi_raw_data_match"), dmi),
    **dict.fromkeys(("check_cmd_status", "check_cmd_output"), command),
    "check_net_ping": net_ping,
}  # fmt: skip
NOT_CARRIED = {
    "check_moab_sched": "Moab is not Slurm", "check_moab_rm": "Moab is not Slurm",
    "check_moab_torque": "TORQUE is not Slurm",
    "check_ps_cpu": "kills or renices processes by CPU use (an action, not a health verdict)",
    "check_ps_mem": "kills processes by memory use (an action, not a health verdict)",
    "check_ps_physmem": "kills processes by memory use (an action, not a health verdict)",
    "check_ps_time": "kills processes by CPU time (an action, not a health verdict)",
    "check_ps_kswapd": "kswapd CPU-time balance has no site check kind yet",
    "check_net_socket": "socket tables have no site check kind yet (write a command check with ss)",
}  # fmt: skip
#: GPU checks of NHC and of public NHC distributions (csc_nvidia_smi.nhc in
#: NHC itself; the azure_*.nhc GPU scripts of Azure's HPC health checks,
#: shipped e.g. in lambdal/nhc), mapped onto the built-in NVML checks that
#: judge the same failure.  Each note says where the verdicts can differ.
GPU_MAP: dict[str, tuple[str, str]] = {
    "check_nv_healthmon": (GPU_BUILTIN, "NHC runs nvidia-healthmon; the NVML checks cover what it reports"),
    "check_nvsmi_healthmon": (GPU_BUILTIN, "NHC runs nvidia-smi; the NVML checks cover what it reports"),
    "check_gpu_persistence": ("persistence (built in)", "persistence mode off is a WARN here, a failure there"),
    "check_gpu_ecc": ("ecc, retired_pages, row_remap (built in)", "its SRAM/DRAM count thresholds are [checks.ecc] settings here"),
    "check_gpu_clock_throttling": ("throttle (built in)", "hardware slowdown reasons, as nvidia-smi reports them"),
    "check_gpu_xid": ("xid (built in)", "XIDs from the kernel log, with slurm-hooks' catalogue"),
    "check_nccl_allreduce": ("nccl (built in, prolog and acceptance)", "its bus bandwidth floor is [checks.nccl] here"),
}  # fmt: skip
GPU_CHECKS = tuple(GPU_MAP)
