"""Wall time of the healthcheck phase as a whole process, next to bare start-up.

Runs, in one session and interleaved (so machine noise hits all alike):

* ``python -c pass`` and ``python -S -c pass``: the interpreter's floor;
* ``python -m slurm_hooks.detect.runner healthcheck`` on a CPU node (profile with
  no GPUs, one mount, scratch, memory; NVML never loaded);
* the same on an 8-GPU node through the fake NVML (``h100_healthy.toml``),
  with the InfiniBand check reading a recorded sysfs tree;
* with ``--hook``, also the real hook entry ``python -m slurm_hooks hook
  healthcheck`` (what the shim execs: the runner's phase, the state lock,
  the metrics check) on the CPU node and on the 8-GPU node, and the CPU
  node's ``hook epilog`` and ``hook prolog``;
* with ``--site``, the CPU node with a typical imported NHC config as well
  (:func:`site_config`: 25 check lines through ``nhc import``, all passing
  on this machine, the last a site's own NHC function run by kind
  ``nhc_function``), next to the built-in case; with ``--nhc PROGRAM``
  also that NHC (installed separately; nothing is fetched) on the same 25
  lines, with ``MARK_OFFLINE=0`` and its scripts beside the site's.

Timed runs are a node's steady state: two untimed runs first write the
bytecode, the XID cursor and the remembered hostlist answers (the state
dir), as every run after a node's first does.  Prints medians of wall
time and of CPU time (user + system of the child, from ``getrusage``) and
the differences to ``python -c pass``.  Goals (issue #31): the healthy hook
without GPUs within +30 ms of ``python -c pass``, with 8 fake GPUs within
+70 ms.  No assertions: these are figures to watch, not a test.  Other processes on the machine move medians by several ms: run it
more than once.

``--baseline DIR`` also times each hook entry (and with ``--site`` the
imported config) from another source tree
(``git worktree add /tmp/base <commit>``: DIR holds ``slurm_hooks/`` and
``lab/slurm_hooks_lab/``), interleaved with the others, so that before and
after meet the same machine noise.

``--instructions`` also counts, once per case, the instructions the child
executes (valgrind's callgrind, where installed; some 50 times slower than
a plain run).  Unlike wall and CPU time these hardly move with the load of
a shared machine, so two trees can be compared on a busy one; the
millisecond goals are still judged on the medians.

    .venv/bin/python bench/bench_healthcheck.py [--runs 21] [--hook] [--baseline DIR] [--instructions] [--site [--nhc "/usr/sbin/nhc"] [--nhc-scripts /etc/nhc/scripts]]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"


def config(tmp: Path, gpus: bool) -> Path:
    scratch = tmp / "scratch"
    scratch.mkdir(exist_ok=True)
    kern = tmp / "kern.log"
    kern.write_text("")
    text = f'[general]\nstate_dir = "{tmp / "state"}"\n[checks]\n'
    text += f'sysfs_root = "{DATA / "sysfs" / "dgx_h100_healthy"}"\n'
    if gpus:
        text += 'nvml = "lab:fake"\n'
        text += f'nvml_scenario = "{DATA / "nvml" / "h100_healthy.toml"}"\n'
    # The xid check reads a (quiet) log file here, as it would /dev/kmsg on a node.
    text += f'[checks.xid]\nsource = "file"\npath = "{kern}"\n'
    text += '[profiles.gpu]\nbase = "h100-sxm5-80gb"\nnodes = "gpu[001-128]"\nmemory_gb = 1\n'
    text += f'scratch_path = "{scratch}"\nscratch_min_free_gb = 0.001\nmounts = ["/dev/shm"]\n'
    text += '[profiles.cpu]\nbase = "cpu"\nnodes = "cpu[01-64]"\nmemory_gb = 1\n'
    text += f'scratch_path = "{scratch}"\nscratch_min_free_gb = 0.001\nmounts = ["/dev/shm"]\n'
    path = tmp / ("gpu.toml" if gpus else "cpu.toml")
    path.write_text(text)
    return path


#: A typical site's nhc.conf (the checks of NHC's sample config and of the
#: public site configs in tests/data/nhc), with values this machine passes.
TYPICAL_NHC_CONF = """\
* || export TIMEOUT=25
* || check_hw_cpuinfo {sockets} {cores} {threads}
* || check_hw_physmem 1k 100TB 5%
* || check_hw_swap 0 100TB
* || check_hw_mem 1k 200TB
* || check_hw_physmem_free 1
* || check_hw_mem_free 1mb
* || check_hw_eth lo
* || check_fs_mount_rw -f /
* || check_fs_mount_rw -t proc -f /proc
* || check_fs_mount -t sysfs -f /sys
* || check_fs_mount_rw -t tmpfs -f /dev/shm
* || check_fs_free / 1%
* || check_fs_ifree / 1k
* || check_fs_used / 100%
* || check_fs_iused / 100%
* || check_file_test -r -w -x -d -k /tmp
* || check_file_test -r -s /etc/passwd /etc/group
* || check_file_test -c -r -w /dev/null /dev/zero
* || check_file_contents /etc/passwd "/^root:/"
* || check_ps_service -m '*' init
* || check_ps_blacklist nosuchdaemon
* || check_ps_loadavg 10000
* || check_cmd_status -t 5 -r 0 true
* || check_cmd_output -t 5 -m '/Linux/' uname -s
* || check_site_oom 1000000000
"""
#: The site's own NHC function the last line calls (kind nhc_function).
SITE_SCRIPTS = DATA / "nhc" / "scripts"
#: Where NHC's own scripts are on a host with NHC (``--nhc-scripts``).
NHC_SCRIPTS = Path("/etc/nhc/scripts")
LINES = sum(1 for ln in TYPICAL_NHC_CONF.splitlines() if "|| check_" in ln)


def scripts_dir(tmp: Path, nhc_scripts: Path = NHC_SCRIPTS) -> Path:
    """NHC's scripts (where installed) and the site's, in one directory as on
    an NHC host: both sides source the same files."""
    d = tmp / "nhc-scripts"
    if not d.exists():
        d.mkdir()
        for f in sorted(nhc_scripts.glob("*.nhc")):
            (d / f.name).symlink_to(f)
        for f in SITE_SCRIPTS.glob("*.nhc"):
            (d / f.name).write_text(f.read_text())
    return d


def site_config(tmp: Path, nhc_scripts: Path = NHC_SCRIPTS) -> Path:
    """The CPU node's config plus a typical nhc.conf imported (``nhc
    import``): the site checks run in the same healthcheck."""
    from slurm_hooks.detect.site.gather import parse_cpuinfo
    from slurm_hooks.detect.site.nhc_import import import_conf, to_toml

    cpu = parse_cpuinfo(Path("/proc/cpuinfo").read_text())
    conf = TYPICAL_NHC_CONF.format(sockets=cpu.sockets, cores=cpu.cores, threads=cpu.threads)
    imp = import_conf(conf, variables={"INCDIR": str(scripts_dir(tmp, nhc_scripts))})
    if not imp.complete or len(imp.rows) < 20:
        raise SystemExit(f"typical config did not import: {imp.untranslated}")
    path = tmp / "site.toml"
    base = (
        config(tmp, False)
        .read_text()
        .replace("[checks]\n", "[checks]\nbudget_s = { healthcheck = 25 }\n", 1)
    )
    # Site checks read this machine's /sys (the CPU case reads a recorded tree).
    base = base.replace(
        f'sysfs_root = "{DATA / "sysfs" / "dgx_h100_healthy"}"', 'sysfs_root = "/sys"'
    )
    path.write_text(
        base + "\n" + to_toml(imp).replace("[checks]\nbudget_s = { healthcheck = 25.0 }\n", "")
    )
    return path


def nhc_case(
    tmp: Path, nhc: str, env: dict[str, str], nhc_scripts: Path = NHC_SCRIPTS
) -> tuple[list[str], dict[str, str]]:
    """The site's NHC on :data:`TYPICAL_NHC_CONF`, marking nothing."""
    import shlex

    from slurm_hooks.detect.site.gather import parse_cpuinfo

    cpu = parse_cpuinfo(Path("/proc/cpuinfo").read_text())
    conf = tmp / "nhc.conf"
    conf.write_text(
        TYPICAL_NHC_CONF.format(sockets=cpu.sockets, cores=cpu.cores, threads=cpu.threads)
    )
    argv = [*shlex.split(nhc), "-c", str(conf), "-l", str(tmp / "nhc.log"), "-t", "30"]
    # Output to /dev/null, not to our pipes: NHC's background timers of
    # check_cmd_* keep inherited pipes open after it exits.
    quiet = ["sh", "-c", 'exec "$@" >/dev/null 2>&1', "sh"]
    return [
        *quiet,
        *argv,
        "MARK_OFFLINE=0",
        "NHC_RM=slurm",
        f"INCDIR={scripts_dir(tmp, nhc_scripts)}",
    ], env


def _child_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one run."""
    c0 = _child_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, cwd=cwd)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{argv} failed rc={proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return dt, _child_cpu() - c0


def instructions(argv: list[str], env: dict[str, str], cwd: Path) -> int:
    """Instructions one run executes, counted by callgrind (threads included)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--instructions needs valgrind")
    vg = [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    proc = subprocess.run(
        [*vg, *argv], env=env, capture_output=True, text=True, check=False, cwd=cwd
    )
    found = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"{argv} under callgrind failed rc={proc.returncode}:\n{proc.stderr}")
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--hook", action="store_true", help="also time the real hook entry")
    ap.add_argument("--site", action="store_true", help="also a typical imported NHC config")
    ap.add_argument(
        "--nhc", default="", help="with --site: time this NHC command on the same lines"
    )
    ap.add_argument(
        "--nhc-scripts",
        type=Path,
        default=NHC_SCRIPTS,
        help="with --site: NHC's own scripts, sourced beside the site's by both sides",
    )
    ap.add_argument("--baseline", type=Path, help="also time the hooks from this source tree")
    ap.add_argument(
        "--instructions", action="store_true", help="also count instructions (valgrind)"
    )
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="bench-hc-") as d:
        tmp = Path(d)
        # Production installs ship compiled bytecode; let the warm-up run
        # write it even where the environment disables that.
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("SLURM_HOOKS_") and k != "PYTHONDONTWRITEBYTECODE"
        }
        cases = {
            "python -c pass": ([py, "-c", "pass"], base),
            "python -S -c pass": ([py, "-S", "-c", "pass"], base),
            "healthcheck, no GPU": (
                [py, "-m", "slurm_hooks.detect.runner", "healthcheck"],
                {**base, "SLURM_HOOKS_CONFIG": str(config(tmp, False)), "SLURMD_NODENAME": "cpu01"},
            ),
            "healthcheck, 8 fake GPUs": (
                [py, "-m", "slurm_hooks.detect.runner", "healthcheck"],
                {**base, "SLURM_HOOKS_CONFIG": str(config(tmp, True)), "SLURMD_NODENAME": "gpu001"},
            ),
        }
        if args.hook:
            cpu_env = cases["healthcheck, no GPU"][1]
            job = {"SLURM_JOB_ID": "4242", "SLURM_JOB_USER": "nobody"}
            for phase in ("healthcheck", "epilog", "prolog"):
                cases[f"hook {phase}, no GPU"] = (
                    [py, "-m", "slurm_hooks", "hook", phase],
                    {**cpu_env, **job} if phase != "healthcheck" else cpu_env,
                )
            # No profile at all: on a host without an NVIDIA device the GPU
            # checks are skipped from the PCI bus (with one, NVML is asked).
            bare = tmp / "bare.toml"
            bare.write_text(config(tmp, False).read_text().split("[profiles.gpu]")[0])
            cases["hook healthcheck, no profile"] = (
                [py, "-m", "slurm_hooks", "hook", "healthcheck"],
                {**cpu_env, "SLURM_HOOKS_CONFIG": str(bare)},
            )
            cases["hook healthcheck, 8 fake GPUs"] = (
                [py, "-m", "slurm_hooks", "hook", "healthcheck"],
                cases["healthcheck, 8 fake GPUs"][1],
            )
        if args.baseline:
            src = args.baseline.resolve()
            path = os.pathsep.join([str(src), str(src / "lab")])
            state = str(tmp / "state")
            for name in [n for n in cases if n.startswith("hook ")]:
                argv, env = cases[name]
                # Its own state dir: the plug-in memo is stamped with sys.path,
                # which PYTHONPATH changes, so trees sharing one would each
                # find the other's memo stale and rescan the entry points
                # (importlib.metadata) on every run.
                conf = Path(env["SLURM_HOOKS_CONFIG"])
                own = conf.with_name(f"base-{conf.name}")
                own.write_text(conf.read_text().replace(f'"{state}"', f'"{state}-base"', 1))
                cases[f"{name} (baseline)"] = (
                    argv,
                    {**env, "PYTHONPATH": path, "SLURM_HOOKS_CONFIG": str(own)},
                )
        if args.site:
            cases[f"healthcheck + {LINES} NHC lines"] = (
                cases["healthcheck, no GPU"][0],
                {
                    **cases["healthcheck, no GPU"][1],
                    "SLURM_HOOKS_CONFIG": str(site_config(tmp, args.nhc_scripts)),
                },
            )
        if args.site and args.baseline:
            name = f"healthcheck + {LINES} NHC lines"
            argv, env = cases[name]
            src = args.baseline.resolve()
            path = os.pathsep.join([str(src), str(src / "lab")])
            cases[f"{name} (baseline)"] = (argv, {**env, "PYTHONPATH": path})
        if args.site and args.nhc:
            cases[f"NHC, the same {LINES} lines"] = nhc_case(tmp, args.nhc, base, args.nhc_scripts)
        # Outside the source tree: "python -m" puts the working directory first on sys.path.
        run_dir = tmp
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
        for _ in range(2):  # page cache, .pyc files, cursor, hostlist answers
            for argv, env in cases.values():
                timed(argv, env, run_dir)
        for _ in range(args.runs):
            for name, (argv, env) in cases.items():
                times[name].append(timed(argv, env, run_dir))
        counts = (
            {name: instructions(argv, env, run_dir) for name, (argv, env) in cases.items()}
            if args.instructions
            else {}
        )
    floor = statistics.median(w for w, _ in times["python -c pass"])
    cpu_floor = statistics.median(c for _, c in times["python -c pass"])
    goals = {
        "hook healthcheck, no GPU": 0.030,
        "hook epilog, no GPU": 0.030,
        "hook prolog, no GPU": 0.030,
        "hook healthcheck, 8 fake GPUs": 0.070,
        "healthcheck, no GPU": 0.030,
        "healthcheck, 8 fake GPUs": 0.070,
    }
    floor_count = counts.get("python -c pass", 0)
    icol = f"{'+ Minstr':>9}" if counts else ""
    print(
        f"{'case':<42}{'wall ms':>8}{'min':>7}{'+ vs pass':>10}{'cpu ms':>8}{'+ cpu':>8}{icol}  goal"
    )
    for name, ts in times.items():
        wall = statistics.median(w for w, _ in ts)
        cpu = statistics.median(c for _, c in ts)
        extra = wall - floor
        goal = goals.get(name)
        verdict = f"+{goal * 1000:.0f} ms {'met' if extra <= goal else 'MISSED'}" if goal else ""
        instr = f"{(counts[name] - floor_count) / 1e6:>+9.1f}" if counts else ""
        print(
            f"{name:<42}{wall * 1000:>8.1f}{min(w for w, _ in ts) * 1000:>7.1f}"
            f"{extra * 1000:>+10.1f}{cpu * 1000:>8.1f}{(cpu - cpu_floor) * 1000:>+8.1f}{instr}"
            f"  {verdict}"
        )
    print(f"runs={args.runs} (medians, interleaved) python={sys.version.split()[0]}")


if __name__ == "__main__":
    main()
