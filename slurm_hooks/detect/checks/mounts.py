"""Required file systems: mounted, not read-only, and actually writable.

Presence comes from the mount table (``/proc/self/mounts`` through
``probes.host``, the table ``psutil.disk_partitions(all=True)`` reads; it
never stats a mount, so a hung NFS server cannot hang it).  The write test
creates and removes a file in-process, in a daemon thread joined with a
timeout (``probes.host.write_test``): a call stuck in the kernel on a dead
mount is then a thread left behind, not a hung hook.  A mount that times
out is reported as hung.  Tests inject a psutil-shaped ``psutil`` service
and, to exercise the command path, ``run_command`` (the test then runs
``mktemp`` and ``rm`` through it, as :func:`write_test` does).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from slurm_hooks.core.errors import CommandError, CommandTimeout
from slurm_hooks.core.model import Action, Component, Finding, Phase, Status
from slurm_hooks.core.record import record
from slurm_hooks.detect.checks.base import CheckContext, Problem, ok
from slurm_hooks.detect.probes.host import WRITE_FULL
from slurm_hooks.detect.profiles import as_profile

MOUNT_MISSING = Problem("MOUNT_MISSING", Status.FAIL, Action.DRAIN)
MOUNT_READONLY = Problem("MOUNT_READONLY", Status.FAIL, Action.DRAIN)
#: The write test timed out: a storm of the users' I/O on a shared file
#: system does that as well as a server in trouble (core/user_caused.py:
#: drained, no job moved, lifted by a passing check).
MOUNT_HUNG = Problem("MOUNT_HUNG", Status.FAIL, Action.DRAIN)
MOUNT_NOT_WRITABLE = Problem("MOUNT_NOT_WRITABLE", Status.FAIL, Action.DRAIN)
#: No space or inodes left to create a file: what users can cause by filling
#: it (core/user_caused.py: drained, no job moved).
MOUNT_FULL = Problem("MOUNT_FULL", Status.FAIL, Action.DRAIN)


@record
class Settings:
    """``[checks.mounts]``: whether and how the profile's mounts are write-tested."""

    #: Create and remove a file on each of the profile's mounts that is not
    #: read-only; a failure is MOUNT_NOT_WRITABLE (MOUNT_FULL with no space or
    #: inodes left, jobs kept), a hang MOUNT_HUNG (drain, jobs kept).
    write_test: bool = True
    #: Seconds the create+remove of the test file may take per mount.
    write_timeout_s: float = 5.0
    #: Mounts not to write-test (e.g. NFS home with root_squash).
    no_write_test: tuple[str, ...] = ()


@record
class MountState:
    """What the mount table and the write test say about one expected mount."""

    path: str
    mounted: bool
    fstype: str = ""
    readonly: bool = False
    #: None: not tested; "" ok; otherwise why the write failed; "timeout" hung.
    write_error: str | None = None


def write_test(path: str, timeout: float, run: Any = None) -> str:
    """Create and remove a file under ``path``; "" on success, "timeout" when
    a step hung, else the error.  With ``run`` (``probes.commands.run`` or a
    fake) the steps are ``mktemp`` and ``rm`` child processes; without it
    they run in-process (``probes.host.write_test``)."""
    if run is None:
        from slurm_hooks.detect.probes.host import write_test as write_in_process

        return write_in_process(path, timeout)
    deadline_each = max(timeout / 2, 0.5)
    try:
        made = run(["mktemp", "-p", path, ".slurm-hooks-write.XXXXXX"], timeout=deadline_each)
        name = made.stdout.strip()
        if not name.startswith(path.rstrip("/") + "/"):
            return f"mktemp printed {name!r}"
        run(["rm", "-f", "--", name], timeout=deadline_each)
    except CommandTimeout:
        return "timeout"
    except CommandError as exc:
        return str(exc)
    return ""


class MountsCheck:
    name: ClassVar[str] = "mounts"
    settings_class: ClassVar[type | None] = Settings
    phases: ClassVar[frozenset[Phase]] = frozenset(
        {Phase.HEALTHCHECK, Phase.PROLOG, Phase.EPILOG, Phase.ACCEPTANCE}
    )

    def gather(self, ctx: CheckContext) -> list[MountState]:
        mounts = as_profile(ctx.profile).mounts
        if not mounts:
            return []
        s = ctx.settings_as(Settings, self.name)
        table = {os.path.normpath(p.mountpoint): p for p in ctx.host().disk_partitions(all=True)}
        run = ctx.services.get("run_command")
        out = []
        for path in mounts:
            part = table.get(os.path.normpath(path))
            if part is None:
                out.append(MountState(path, mounted=False))
                continue
            readonly = "ro" in part.opts.split(",")
            err = None
            if s.write_test and not readonly and path not in s.no_write_test:
                err = write_test(path, s.write_timeout_s, run)
            out.append(MountState(path, True, part.fstype, readonly, err))
        return out

    def judge(self, data: list[MountState], ctx: CheckContext) -> list[Finding]:
        if not data:
            return [ok(self.name, "not applicable: profile requires no mounts")]
        findings = []
        for m in data:
            comp = Component("mount", name=m.path)
            if not m.mounted:
                problem, message = MOUNT_MISSING, f"{m.path} is not mounted"
            elif m.readonly:
                problem, message = MOUNT_READONLY, f"{m.path} ({m.fstype}) is mounted read-only"
            elif m.write_error == "timeout":
                problem = MOUNT_HUNG
                message = f"{m.path} ({m.fstype}): write test timed out, mount hung?"
            elif m.write_error == WRITE_FULL:
                problem = MOUNT_FULL
                message = f"{m.path} ({m.fstype}): no space or inodes left to create a file"
            elif m.write_error:
                problem = MOUNT_NOT_WRITABLE
                message = f"{m.path} ({m.fstype}): cannot write: {m.write_error}"
            else:
                continue
            findings.append(problem.finding(self.name, message, comp))
        if not findings:
            findings.append(
                ok(self.name, f"{len(data)} mount(s) ok", mounts=",".join(m.path for m in data))
            )
        return findings
