"""The lab's RebootProgram: "reboot" one node by restarting its slurmd.

slurmd runs ``RebootProgram`` as root on the node when ``scontrol reboot``
asks for it.  In the lab every slurmd shares this host, so a reboot is: stop
exactly that node's slurmd (by the PID the lab recorded), apply what the test
asked to happen at boot, start it again with the same arguments
(``Lab.start_slurmd``).  slurmd then registers afresh, as after a real boot.

Files under ``<lab>/reboot/`` (tests read and write them):

* ``<node>.on-boot.json``: ``{"write": {path: text}}`` applied before slurmd
  starts (e.g. a healthy fake-NVML scenario: the fault cleared by the
  "reboot"); absent: the fault is kept;
* ``<node>.log``: one line per reboot (the tests count them);
* ``<node>.boot_id``: a fresh id per boot, like ``/proc/sys/kernel/random/boot_id``.

The program returns at once and does the work in a detached child: slurmd
waits for its RebootProgram, and this one stops that very slurmd.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

SCRIPT = """#!/bin/sh
# slurm-hooks lab RebootProgram: restarts this node's slurmd (slurm_hooks_lab.reboot)
exec {python} -m slurm_hooks_lab.reboot {base} "$(hostname)"
"""


def reboot_dir(base: str | os.PathLike[str]) -> Path:
    return Path(base) / "reboot"


def install(base: str | os.PathLike[str], python: str = sys.executable) -> Path:
    """Write ``<base>/bin/reboot-node`` (the RebootProgram slurm.conf names)."""
    import shlex

    b = Path(base)
    (b / "bin").mkdir(parents=True, exist_ok=True)
    rd = reboot_dir(b)
    shutil.rmtree(rd, ignore_errors=True)
    rd.mkdir(parents=True, exist_ok=True)
    path = b / "bin" / "reboot-node"
    path.write_text(SCRIPT.format(python=shlex.quote(python), base=shlex.quote(str(b))))
    path.chmod(0o755)
    return path


def reboots(base: str | os.PathLike[str], node: str) -> int:
    """How many times ``node`` was "rebooted"."""
    log = reboot_dir(base) / f"{node}.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def on_boot(base: str | os.PathLike[str], node: str, writes: dict[str, str]) -> None:
    """Ask that the next reboot of ``node`` writes these files first."""
    path = reboot_dir(base) / f"{node}.on-boot.json"
    path.write_text(json.dumps({"write": writes}))


def host_uptime() -> float:
    """Seconds since the host booted, also from inside a time namespace.

    A "rebooted" slurmd runs in a time namespace whose boot time is the
    reboot (``Lab._slurmd_argv``), and its RebootProgram (this module)
    inherits it: ``/proc/uptime`` then counts from the last "reboot", while
    a new namespace's offset counts from the host's boot.  Without taking the
    inherited offset back out, a node's second reboot in one lab got an
    uptime of the host's minus a few seconds, slurmctld saw a boot before its
    request and left the node REBOOT_ISSUED."""
    with open("/proc/uptime") as f:
        up = float(f.read().split()[0])
    offset = 0.0
    try:
        with open("/proc/self/timens_offsets") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[0] in ("boottime", "7"):
                    offset = int(parts[1]) + int(parts[2]) / 1e9
    except OSError:  # no time namespaces (Linux < 5.6): no offset
        pass
    return up - offset


def _restart(base: Path, node: str) -> None:
    from slurm_hooks_lab.lab import Lab

    rd = reboot_dir(base)
    time.sleep(0.3)  # let slurmd answer slurmctld's RPC first
    with open(rd / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lab = Lab(base)
        lab.stop_slurmd(node)
        plan = rd / f"{node}.on-boot.json"
        if plan.exists():
            data = json.loads(plan.read_text() or "{}")
            for target, text in (data.get("write") or {}).items():
                Path(target).write_text(text)
            plan.unlink()
        # A boot after the request: slurmctld compares the boot time slurmd
        # reports (now - uptime, whole seconds) with the reboot request's.
        time.sleep(1.5)
        (rd / f"{node}.boot_id").write_text(str(uuid.uuid4()) + "\n")
        with open(rd / f"{node}.log", "a") as f:
            f.write(f"{time.time():.3f} reboot\n")
        lab.start_slurmd(node, boot_now=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 3 and args[0] == "--now":
        _restart(Path(args[1]), args[2])
        return 0
    if len(args) != 2:
        print("usage: python -m slurm_hooks_lab.reboot LAB_DIR NODE", file=sys.stderr)
        return 2
    base, node = Path(args[0]), args[1]
    rd = reboot_dir(base)
    rd.mkdir(parents=True, exist_ok=True)
    with open(rd / f"{node}.out", "a") as out:
        subprocess.Popen(  # noqa: S603 - fixed argv, our own module
            [sys.executable, "-m", "slurm_hooks_lab.reboot", "--now", str(base), node],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
            cwd="/",
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
