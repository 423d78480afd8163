"""On the lab: a rank that runs in a PID namespace of its own (a container:
``apptainer --containall``, ``unshare --pid``) and is stopped by its owner is
judged by its real process, not by the pid it sees inside.

sltest's job runs its one rank under ``unshare --user --map-root-user --pid
--fork``, as any user can where unprivileged user namespaces are allowed:
inside, the rank is pid 1, and its records say so.  On the host, pid 1 is
init.  Before, the watcher looked at init for the rank (alive, so the stall
counted, then init is root's, so "process gone"): the owner was told their
rank died.  Now the writer adds its PID namespace to each record and the
watcher finds the rank among the job's own processes as Slurm lists them
(``/proc/PID/ns/pid`` and the innermost ``NSpid``): the owner is told the
rank is stopped, and the opted-in job is requeued.  Another user's job on the
node is untouched.

On the host's Slurm only (``one_slurm``): what is tested is the kernel's
namespaces and the watcher's reading of them, the same with every Slurm; a
debootstrap root refuses a new user namespace to a process in a chroot.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from slurm_hooks_lab.lab import TEST_USER
from test_trust_lab import (
    PROGRESS,
    REPO,
    USER_PYTHON,
    _rigged,
    assert_untouched_victims,
    dump,
    script,
    submit,
    told,
    victim,
)

from slurm_hooks.detect.probes.commands import run

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.one_slurm]

#: The rank: the job-side writer, a step every 0.3 s, in a PID namespace.
RANK = """
import time
from slurm_hooks.jobside.progress import Progress
p = Progress.from_env()
s = 0
while True:
    s += 1
    time.sleep(0.3)
    p.step(s)
"""

BATCH = """
export SLURM_HOOKS_PROGRESS_DIR={pdir} PYTHONPATH={repo}
exec unshare --user --map-root-user --pid --fork -- {python} -c '{rank}'
"""


def _own_pidns_or_skip() -> None:
    res = run(["runuser", "-u", TEST_USER, "--", "unshare", "--user", "--map-root-user", "--pid",
               "--fork", "--", "true"], timeout=30, check=False)  # fmt: skip
    if not res.ok:
        pytest.skip(f"{TEST_USER} cannot make a PID namespace here (unshare: rc {res.rc}, "
                    f"{(res.stderr or res.stdout).strip()!r})")  # fmt: skip


def _last(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines() if path.exists() else []
    return dict(tok.split("=", 1) for tok in lines[-1].split()[1:]) if lines else {}


def _host_pid() -> int | None:
    """The rank's pid on the host: the one child of the user's ``unshare``
    (root's look at the process tree, for the test only)."""
    res = run(["pgrep", "-u", TEST_USER, "-x", "unshare"], timeout=10, check=False)
    parents = res.stdout.split()
    if len(parents) != 1:
        return None
    kids = Path(f"/proc/{parents[0]}/task/{parents[0]}/children").read_text().split()
    return int(kids[0]) if len(kids) == 1 else None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_a_rank_in_its_own_pid_namespace_stopped_by_its_owner_is_judged_by_its_process(
    fresh_lab, job_dir
):
    _own_pidns_or_skip()
    with _rigged(fresh_lab, job_dir, PROGRESS) as (lab, hooks, pdir):
        node = lab.node_names[0]
        victims = [victim(lab, job_dir, node)]
        body = BATCH.format(pdir=pdir, repo=REPO, python=USER_PYTHON, rank=RANK)
        s = script(job_dir / "pidns.sh", body)
        job = submit(lab, s, "-w", node, "-n1", "--comment", "slurm-hooks:requeue-on-hang",
                     f"--output={job_dir}/pidns.out")  # fmt: skip
        pid = None
        try:
            rec = pdir / job / "rank0.log"
            lab.wait_for(lambda: int(_last(rec).get("step", 0)) >= 5, 60, what="the rank's steps")
            assert _last(rec)["pid"] == "1", _last(rec)  # its own namespace's pid
            pid = lab.wait_for(_host_pid, 10, what="the rank's host pid")
            # The owner stops their own rank: what any user can do.
            run(["runuser", "-u", TEST_USER, "--", "kill", "-STOP", str(pid)], timeout=10)
            try:
                entry = lab.wait_for(lambda: told(hooks, node, job), 60, what="the owner told")
            except Exception:
                dump(lab, hooks, pdir, node)
                print(rec.read_text()[-2000:], lab.client().get_job(job))
                raise
            assert entry["user"] == TEST_USER, entry
            assert entry["decision"] == "requeue_job" and "process stopped" in entry["why"], entry
            lab.wait_for(lambda: lab.client().get_job(job).restart_count >= 1, 60, what="requeue")
            state = lab.client().get_node(node)
            assert not (state.drained or state.down), state
            for e in hooks.audit(node):
                assert e.get("action") not in ("drain", "breaker_trip"), e
            assert_untouched_victims(lab, victims)
        finally:
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            run(["scancel", job, *[j for j, _ in victims]], timeout=30, env=lab.env(), check=False)
