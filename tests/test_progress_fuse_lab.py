"""On the lab: a user's stopped FUSE mount over their own job's progress
directory never stops the watcher's pass for another user's job.

sltest's job mounts ``bindfs`` (``allow_other``; the site allows
``user_allow_other``) over its own directory under the progress directory
and stops the daemon, as any user can.  sltest2's job on the same node then
stalls.  Before, the pass's first look at sltest's directory waited on the
daemon, so sltest2 was never told; now sltest's directory is refused as a
mount point and sltest2 is told, with nothing else done to anyone.

On the host's Slurm only (``one_slurm``): what is tested is the kernel's
FUSE and the watcher's file reads, the same with every Slurm.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from test_progress_fuse import fuse_site, needs_fuse  # noqa: F401 - fuse_site is a fixture
from test_trust_lab import (
    EXITED_RANK,
    PROGRESS,
    RECORD,
    VICTIM_USER,
    _rigged,
    owners_told_and_nothing_else,
    script,
    submit,
)

from slurm_hooks.detect.probes.commands import run

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.one_slurm, needs_fuse]

#: sltest's job: its records go behind the mount (a directory of its own
#: elsewhere, in the test's job directory: nothing left in /tmp), its job
#: directory becomes the mount point, the daemon stops.
MOUNT_AND_STOP = """
D={pdir}/$SLURM_JOB_ID; mkdir -p $D; S=$(mktemp -d {work}/behind.XXXXXX)
( for s in 0 1 2 3; do {rec} $SLURM_JOB_ID 0 $SLURMD_NODENAME $$ $s $(date +%s.%N) \\
    >> $S/rank0.log; sleep 0.3; done )
bindfs -o allow_other,attr_timeout=0,entry_timeout=0 $S $D || exit 3
kill -STOP $(pgrep -u "$(id -u)" -f "^bindfs .* $D\\$")
for i in $(seq 600); do sleep 1; done
"""


def _mounted(path: Path) -> bool:
    return any(
        line.split()[1] == str(path) for line in Path("/proc/self/mounts").read_text().splitlines()
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
@pytest.mark.usefixtures("fuse_site")
def test_a_users_stopped_fuse_mount_never_stops_the_pass_for_others(fresh_lab, job_dir):
    with _rigged(fresh_lab, job_dir, PROGRESS) as (lab, hooks, pdir):
        node = lab.node_names[0]
        hostile = script(
            job_dir / "fuse.sh", MOUNT_AND_STOP.format(pdir=pdir, rec=RECORD, work=job_dir)
        )
        plain = script(job_dir / "plain.sh", EXITED_RANK.format(pdir=pdir, rec=RECORD, extra=""))
        jobs = [submit(lab, hostile, "-w", node, "-n1", f"--output={job_dir}/fuse.out")]
        mount = pdir / jobs[0]
        try:
            lab.wait_for(lambda: _mounted(mount), 60, what="sltest's FUSE mount")
            jobs.append(submit(lab, plain, "-w", node, "-n1", f"--output={job_dir}/plain.out",
                               user=VICTIM_USER))  # fmt: skip
            # On failure the helper prints the records under the directory it
            # is given: not the progress directory, whose walk would wait on
            # the stopped daemon as the old pass did.
            unread = job_dir / "not-the-progress-dir"
            owners_told_and_nothing_else(lab, hooks, unread, node, [(jobs[1], VICTIM_USER)])
            assert lab.client().get_job(jobs[0]).state == "RUNNING"
        finally:
            run(["scancel", *jobs], timeout=30, env=lab.env(), check=False)
            subprocess.run(["pkill", "-KILL", "-u", "sltest", "-f", f"^bindfs .* {mount}$"],
                           check=False)  # fmt: skip
            subprocess.run(["umount", "-l", "--", str(mount)], capture_output=True, check=False)
