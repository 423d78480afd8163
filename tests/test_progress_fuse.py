"""A FUSE mount a user puts under the progress directory holds no look of root's.

The hostile user for real: ``sltest`` mounts ``bindfs`` with ``allow_other``
(``fusermount`` is setuid root; the site allows ``user_allow_other``, and
``/dev/fuse`` is 0666 as udev makes it) on a directory of its own under the
progress directory, then stops its daemon (``kill -STOP``, as itself).
Every ``stat``, ``open`` or directory read of that mount then waits for the
daemon for as long as the user likes.  Before, the watcher's progress pass
(``is_job_dir``, ``read_job``, ``read_hints``) and the prolog's claim of the
next job's directory waited with it: every other job's hang checks stopped,
and slurmd drained the node for a prolog timeout.  Each look runs in a child
with a timeout, so a regression fails here instead of hanging the suite.

Root, ``bindfs``, ``fusermount`` and ``/dev/fuse`` needed (tools/bootstrap.sh
installs bindfs); the site's FUSE settings are put back afterwards.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from slurm_hooks_lab.lab import TEST_USER, ensure_user

ROOT = Path(__file__).resolve().parents[1]
VICTIM = "sltest2"
FUSE_CONF = Path("/etc/fuse.conf")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mounts, other users)")
needs_fuse = pytest.mark.skipif(
    not shutil.which("bindfs") or not os.path.exists("/dev/fuse"),
    reason="needs bindfs and /dev/fuse",
)


def _record(job: str, rank: int = 0) -> str:
    return f"P1 job={job} restart=0 rank={rank} node=n1 pid=4242 step=7 time={time.time():.3f}\n"


def _as(user: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", user, "--", *argv],
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip


@dataclass
class Scene:
    base: Path
    hostile_uid: int
    victim_uid: int


#: Held by each test that changes the site's FUSE settings or mounts as the
#: test user, for as long as it does: pytest-xdist's workers (and the lab
#: test) would otherwise save each other's settings as the site's, or kill
#: each other's daemons.
FUSE_LOCK = Path("/tmp/slurm-hooks-test-fuse.lock")


@pytest.fixture
def fuse_site() -> Iterator[None]:
    """What a site that lets users mount FUSE for others has: user_allow_other
    in /etc/fuse.conf, /dev/fuse open to all.  Put back afterwards."""
    with FUSE_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        conf = FUSE_CONF.read_text() if FUSE_CONF.exists() else None
        mode = stat.S_IMODE(os.stat("/dev/fuse").st_mode)
        FUSE_CONF.write_text((conf or "") + "\nuser_allow_other\n")
        os.chmod("/dev/fuse", 0o666)
        try:
            yield
        finally:
            os.chmod("/dev/fuse", mode)
            if conf is None:
                FUSE_CONF.unlink()
            else:
                FUSE_CONF.write_text(conf)


@pytest.fixture
def scene(fuse_site: None) -> Iterator[Scene]:
    """A progress directory (root's, 1777) with sltest's job 101 under a
    stopped FUSE mount of sltest's, and sltest2's job 102 beside it."""
    hostile = ensure_user(TEST_USER)
    victim = ensure_user(VICTIM)
    top = Path(tempfile.mkdtemp(prefix="slurm-hooks-fuse-", dir="/tmp"))
    top.chmod(0o755)
    base = top / "progress"
    base.mkdir()
    base.chmod(0o1777)
    src = top / "src"
    mounts: list[Path] = []
    try:
        src.mkdir()
        os.chown(src, hostile.pw_uid, hostile.pw_gid)  # the user's own, elsewhere
        assert _as(TEST_USER, "mkdir", "--", str(base / "101")).returncode == 0
        # The user's records, seen through the mount once it is there.
        write = 'printf "%s" "$1" > "$2"'
        _as(TEST_USER, "sh", "-c", write, "-", _record("101"), str(src / "rank0.log"))
        job = base / "102"
        job.mkdir()
        (job / "rank0.log").write_text(_record("102"))
        (job / "fr_0").write_text("{}")
        for p in (job, job / "rank0.log", job / "fr_0"):
            os.chown(p, victim.pw_uid, victim.pw_gid)
        mounted = _as(TEST_USER, "bindfs", "-o", "allow_other,attr_timeout=0,entry_timeout=0",
                      str(src), str(base / "101"))  # fmt: skip
        assert mounted.returncode == 0, mounted.stderr
        mounts.append(base / "101")
        for pid in _daemons(hostile.pw_uid, top):
            assert _as(TEST_USER, "kill", "-STOP", str(pid)).returncode == 0
        yield Scene(base, hostile.pw_uid, victim.pw_uid)
    finally:
        _kill_daemons(hostile.pw_uid, top)
        for m in mounts:
            subprocess.run(["umount", "-l", "--", str(m)], capture_output=True, check=False)
        shutil.rmtree(top, ignore_errors=True)


def _daemons(uid: int, top: Path) -> list[int]:
    """The user's bindfs daemons serving a mount under ``top`` (this test's
    own directory): not another test's, which may still be on its way out."""
    out = subprocess.run(["pgrep", "-u", str(uid), "-f", f"^bindfs .*{top}/"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    return [int(p) for p in out.stdout.split()]


def _kill_daemons(uid: int, top: Path) -> None:
    """SIGKILL this test's daemons and wait (5 s at most) until they are gone."""
    for pid in _daemons(uid, top):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
    deadline = time.monotonic() + 5
    while _daemons(uid, top) and time.monotonic() < deadline:
        time.sleep(0.05)


def _looks(script: str, *args: str) -> dict[str, object]:
    """``script`` in a child (it prints one JSON line); a look that waits on
    the stopped daemon fails the test after 20 s instead of hanging it."""
    try:
        res = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                             text=True, timeout=20, cwd=ROOT, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("a look under the progress directory waited on the user's stopped daemon")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


PASS_LOOKS = """
import json, sys
from slurm_hooks.detect.progress import gather
base, hostile, victim = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print(json.dumps({
    "is_job_dir_101": gather.is_job_dir(base, "101", hostile),
    "read_job_101": len(gather.read_job(base, "101", uid=hostile)),
    "hints_101": len(gather.read_hints(base + "/{job}/ras*", base + "/{job}/fr_*", "101", uid=hostile)),
    "is_job_dir_102": gather.is_job_dir(base, "102", victim),
    "read_job_102": [r.job for r in gather.read_job(base, "102", uid=victim)],
}))
"""


@needs_fuse
def test_a_stopped_fuse_mount_a_user_put_over_their_job_dir_holds_no_pass(scene: Scene):
    got = _looks(PASS_LOOKS, str(scene.base), str(scene.hostile_uid), str(scene.victim_uid))
    # The user's own job: not read at all (its records are behind the mount).
    assert got["is_job_dir_101"] is False
    assert got["read_job_101"] == 0 and got["hints_101"] == 0
    # The other user's job beside it: read as ever, in the same pass.
    assert got["is_job_dir_102"] is True
    assert got["read_job_102"] == ["102"]


CLAIM = """
import json, os, sys
from slurm_hooks.detect.progress.claim import claim_job_dir
base, victim = sys.argv[1], int(sys.argv[2])
aside = claim_job_dir(base, "101", victim)
print(json.dumps({"aside": aside, "left": os.path.lexists(os.path.join(base, "101"))}))
"""


@needs_fuse
def test_the_prolog_detaches_a_users_mount_under_the_next_jobs_id_and_moves_it_aside(
    scene: Scene,
):
    """sltest's mount sits under the id sltest2's next job gets: the prolog,
    as root, detaches it (never looking into it) and moves sltest's
    directory aside, so sltest2's job makes its own."""
    got = _looks(CLAIM, str(scene.base), str(scene.victim_uid))
    assert got["left"] is False
    aside = Path(str(got["aside"]))
    assert aside.parent == scene.base and aside.name.startswith(".untrusted-101-")
    assert aside.lstat().st_uid == scene.hostile_uid
    mounts = Path("/proc/self/mounts").read_text()
    assert str(scene.base / "101") not in mounts and str(aside) not in mounts


FILE_LOOKS = """
import json, sys
from slurm_hooks.detect.progress import gather
base, uid = sys.argv[1], int(sys.argv[2])
evidence = {}
with gather._evidence(base + "/{job}/rank*.log", "103") as found:
    for one in found:
        got = gather._read_whole(one.path, 4096, uid, None, at=(one.dir_fd, one.name))
        evidence[one.name] = got is not None
print(json.dumps({
    "ranks": sorted(r.rank for r in gather.read_job(base, "103", uid=uid)),
    # What read_hints reads of a glob's files (a RAS output or a dump each).
    "evidence": evidence,
}))
"""


def test_a_file_mounted_over_a_rank_file_is_not_read(tmp_path: Path):
    """A file can be a mount point too (FUSE mounts single files where the
    user owns the file).  bindfs here mounts only directories, so root's
    bind mount stands in for the mount: the check is the mount, not who
    made it.  The rank file under it is not read; its sibling is."""
    base = tmp_path / "progress"
    job = base / "103"
    job.mkdir(parents=True)
    (job / "rank0.log").write_text(_record("103", 0))
    (job / "rank1.log").write_text(_record("103", 1))
    other = tmp_path / "elsewhere.log"
    other.write_text(_record("103", 0))
    subprocess.run(["mount", "--bind", "--", str(other), str(job / "rank0.log")], check=True)
    try:
        got = _looks(FILE_LOOKS, str(base), str(os.geteuid()))
    finally:
        subprocess.run(["umount", "--", str(job / "rank0.log")], check=True)
    assert got == {"ranks": [1], "evidence": {"rank0.log": False, "rank1.log": True}}
    # Unmounted, the same file is read: what refused it was the mount.
    assert _looks(FILE_LOOKS, str(base), str(os.geteuid()))["ranks"] == [0, 1]


BASE_LOOKS = """
import json, os, stat, sys
from slurm_hooks.detect.progress import gather
from slurm_hooks.detect.progress.claim import claim_job_dir
base, victim = sys.argv[1], int(sys.argv[2])
out = {"base_stat": gather.base_stat(base) is not None,
       "claim_job_dir": claim_job_dir(base, "5", victim),
       "is_job_dir": gather.is_job_dir(base, "5", victim),
       "read_job": len(gather.read_job(base, "5", uid=victim))}
out["claim_base"] = gather.claim_base(base)
st = os.lstat(base)
out["now"] = [st.st_uid, oct(stat.S_IMODE(st.st_mode))]
out["aside"] = sorted(n for n in os.listdir(os.path.dirname(base)) if ".untrusted-" in n)
print(json.dumps(out))
"""


@needs_fuse
def test_a_progress_directory_a_user_made_first_and_mounted_holds_no_look(fuse_site: None):
    """sltest makes the progress directory before the watcher does (it is
    in /dev/shm-like space, 1777) and mounts its stopped FUSE on it.  Before,
    the pass's ``lstat`` of the directory, the prolog's claim and the
    watcher's claim all waited on the daemon.  Now none of them asks it: the
    pass reads nothing, the prolog does nothing, and the watcher detaches
    the mount, moves the user's directory aside and makes its own."""
    hostile = ensure_user(TEST_USER)
    victim = ensure_user(VICTIM)
    top = Path(tempfile.mkdtemp(prefix="slurm-hooks-fuse-", dir="/tmp"))
    top.chmod(0o1777)  # as /dev/shm
    base = top / "progress"
    src = top / "src"
    try:
        src.mkdir()
        os.chown(src, hostile.pw_uid, hostile.pw_gid)
        assert _as(TEST_USER, "mkdir", "--", str(base)).returncode == 0
        mounted = _as(TEST_USER, "bindfs", "-o", "allow_other,attr_timeout=0,entry_timeout=0",
                      str(src), str(base))  # fmt: skip
        assert mounted.returncode == 0, mounted.stderr
        for pid in _daemons(hostile.pw_uid, top):
            assert _as(TEST_USER, "kill", "-STOP", str(pid)).returncode == 0
        got = _looks(BASE_LOOKS, str(base), str(victim.pw_uid))
        mounts = Path("/proc/self/mounts").read_text()  # before this test's clean-up
    finally:
        _kill_daemons(hostile.pw_uid, top)
        subprocess.run(["umount", "-l", "--", str(base)], capture_output=True, check=False)
        shutil.rmtree(top, ignore_errors=True)
    assert got["base_stat"] is False
    assert got["claim_job_dir"] is None
    assert got["is_job_dir"] is False and got["read_job"] == 0
    assert got["claim_base"] is True
    assert got["now"] == [0, "0o1777"]
    assert len(got["aside"]) == 1 and got["aside"][0].startswith("progress.untrusted-")
    assert str(top) not in mounts  # the watcher detached it


WRITER = """
import json, sys, warnings
from slurm_hooks.jobside.progress import Progress
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    p = Progress(sys.argv[1], sys.argv[2], 0, node="n1")
print(json.dumps({"enabled": p.enabled, "warned": [str(w.message) for w in seen]}))
"""


@needs_fuse
def test_the_job_side_writer_never_waits_on_another_users_mount_under_its_jobs_id(scene: Scene):
    """Without the prolog (a site running the watcher alone), sltest's
    stopped mount sits under the id sltest2's job gets.  sltest2's training
    starts its writer there: before, the writer's ``lstat`` waited on the
    daemon and the training never began; now the writer turns itself off
    with a warning and the training goes on."""
    try:
        res = subprocess.run(
            ["runuser", "-u", VICTIM, "--", "env", f"PYTHONPATH={ROOT}", "/usr/bin/python3",
             "-c", WRITER, str(scene.base), "101"],
            capture_output=True, text=True, timeout=20, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("the job-side writer waited on another user's stopped daemon")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["enabled"] is False
    assert any("mount point" in w for w in got["warned"]), got
