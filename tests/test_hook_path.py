"""The health check's hook path stays cheap: what it imports, the remembered
hostlist answers, the stdlib host probe (psutil's values without psutil),
the in-process write test, and GPU checks skipped from the registry alone.

Timing is bench/bench_healthcheck.py's job; these tests pin the behaviour
that makes it fast and the equivalences that make it safe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hook_config import write_config

from slurm_hooks.core import config
from slurm_hooks.core.errors import ConfigError
from slurm_hooks.core.model import Phase, Status
from slurm_hooks.detect import profiles
from slurm_hooks.detect.checks.base import CheckContext
from slurm_hooks.detect.checks.registry import CHECKS, load_class
from slurm_hooks.detect.probes import host
from slurm_hooks.detect.profiles import Profile, as_profile, load_builtin
from slurm_hooks.detect.runner import run_phase

#: The CPU node's config (tests/hook_config.py) plus an 8-GPU profile.
GPU_PROFILE = """[profiles.gpu]
base = "h100-sxm5-80gb"
nodes = "gpu[001-128]"
memory_gb = 1
"""

#: Runs the CPU node's health check the way the hook does (the runner's
#: process entry) and reports which modules it loaded.
HOOK = """
import io, json, sys
from slurm_hooks.detect import runner
out = io.StringIO()
real, sys.stdout = sys.stdout, out
code = runner.one_shot(lambda: runner.main(["healthcheck"]))
sys.stdout = real
result = json.loads(out.getvalue())
print(json.dumps({
    "code": code,
    "status": result["status"],
    "findings": {f["check"]: f["message"] for f in result["findings"]},
    "modules": sorted(sys.modules),
}))
"""

#: Never on the hook path of a healthy CPU node.
HEAVY = ("psutil", "ClusterShell", "click", "requests", "urllib3", "pynvml", "subprocess")


def _write_config(tmp_path: Path) -> Path:
    return write_config(tmp_path, GPU_PROFILE)


def _hook(tmp_path: Path, cfg: Path) -> dict[str, Any]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SLURM_HOOKS_")},
        "SLURM_HOOKS_CONFIG": str(cfg),
        "SLURMD_NODENAME": "cpu01",
    }
    proc = subprocess.run(
        [sys.executable, "-c", HOOK],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.skipif(not os.path.ismount("/dev/shm"), reason="no /dev/shm mount to write-test")
def test_cpu_healthcheck_imports_nothing_heavy(tmp_path: Path) -> None:
    cfg = _write_config(tmp_path)
    (tmp_path / "state").mkdir()
    first = _hook(tmp_path, cfg)
    # The first run asks ClusterShell (gpu[001-128], cpu[01-64]) and remembers.
    assert "ClusterShell" in {m.split(".")[0] for m in first["modules"]}
    assert (tmp_path / "state" / profiles.HOSTLIST_CACHE).exists()
    warm = _hook(tmp_path, cfg)
    assert (warm["code"], warm["status"]) == (0, "OK")
    loaded = {m.split(".")[0] for m in warm["modules"]}
    assert sorted(loaded & set(HEAVY)) == []
    # GPU checks were judged from the registry: no GPU check module, no NVML.
    gpu_modules = {CHECKS[n].module for n in CHECKS if CHECKS[n].gpu}
    assert sorted(gpu_modules & set(warm["modules"])) == []
    assert warm["findings"]["gpu_count"] == "not applicable: profile expects no GPUs"
    assert warm["findings"]["persistence"] == (
        "not applicable: profile does not require persistence mode"
    )
    assert warm["findings"]["mounts"] == "1 mount(s) ok"
    # The warm run judges what the first one judged; the free space figure
    # moves with whatever else writes to the disk meanwhile.
    assert _steady(warm["findings"]) == _steady(first["findings"])


def _steady(findings: dict[str, str]) -> dict[str, str]:
    """The findings with the scratch check's free-space figure left out."""
    return {k: (v.rsplit(":", 1)[0] if k == "scratch" else v) for k, v in findings.items()}


# -- remembered hostlist answers ---------------------------------------------


@pytest.fixture
def fresh_answers() -> Any:
    profiles.forget_hostlist_answers()
    yield
    profiles.forget_hostlist_answers()


def test_hostlist_answers_round_trip(tmp_path: Path, fresh_answers: Any) -> None:
    assert profiles.hostlist_contains("gpu[001-004]", "gpu003")
    assert not profiles.hostlist_contains("gpu[001-004]", "gpu005")
    profiles.check_hostlist("gpu[001-004]")
    assert profiles.save_hostlist_cache(str(tmp_path))
    assert not profiles.save_hostlist_cache(str(tmp_path))  # nothing new
    data = json.loads((tmp_path / profiles.HOSTLIST_CACHE).read_text())
    assert data["valid"] == ["gpu[001-004]"]
    assert ["gpu[001-004]", "gpu005", False] in data["contains"]
    profiles.forget_hostlist_answers()
    profiles.load_hostlist_cache(str(tmp_path))
    a = profiles._answers
    assert a.contains[("gpu[001-004]", "gpu003")] is True and "gpu[001-004]" in a.valid
    assert not a.dirty


def test_invalid_hostlists_are_never_remembered(tmp_path: Path, fresh_answers: Any) -> None:
    for _ in range(2):
        with pytest.raises(ConfigError, match="invalid hostlist"):
            profiles.check_hostlist("gpu[001-")
    assert not profiles.save_hostlist_cache(str(tmp_path))
    # A forged cache entry for a bad hostlist is only an answer for that
    # string; loading a profile still validates what is not remembered.
    cfg = config.parse('[profiles.x]\nnodes = "gpu[9-"\n', validate=False)
    with pytest.raises(ConfigError, match="profiles.x"):
        profiles.load_profiles(cfg)


def test_group_hostlists_are_asked_every_time(tmp_path: Path, fresh_answers: Any) -> None:
    (tmp_path / profiles.HOSTLIST_CACHE).write_text(
        json.dumps({"version": 1, "valid": ["@gpus"], "contains": [["@gpus", "n1", True]]})
    )
    profiles.load_hostlist_cache(str(tmp_path))
    assert profiles._answers.valid == set() and profiles._answers.contains == {}


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '{"version": 99, "valid": ["a"], "contains": []}',
        '{"version": 1, "valid": "a", "contains": []}',
        '{"version": 1, "valid": [1], "contains": [["a", "b"], ["a", "b", "yes"], 3]}',
    ],
)
def test_bad_cache_files_are_ignored(tmp_path: Path, text: str, fresh_answers: Any) -> None:
    (tmp_path / profiles.HOSTLIST_CACHE).write_text(text)
    profiles.load_hostlist_cache(str(tmp_path))
    assert profiles._answers.valid == set() and profiles._answers.contains == {}


def test_cache_creates_the_state_dir_as_the_lock_does(tmp_path: Path, fresh_answers: Any) -> None:
    """A node's first prolog asks ClusterShell before anything has made the
    state dir: its answers are kept all the same (0700, as the lock's)."""
    profiles.check_hostlist("n[1-2]")
    state = tmp_path / "absent" / "state"
    assert profiles.save_hostlist_cache(str(state))
    assert (state / profiles.HOSTLIST_CACHE).is_file()
    assert (state.stat().st_mode & 0o777) == 0o700
    profiles.forget_hostlist_answers()
    profiles.load_hostlist_cache(str(state))
    assert "n[1-2]" in profiles._answers.valid


def test_cache_that_cannot_be_written_is_not_an_error(tmp_path: Path, fresh_answers: Any) -> None:
    profiles.check_hostlist("n[1-2]")
    (tmp_path / "file").write_text("")
    assert not profiles.save_hostlist_cache(str(tmp_path / "file" / "state"))


def test_remembered_answers_select_the_same_profile(tmp_path: Path, fresh_answers: Any) -> None:
    cfg = config.load(_write_config(tmp_path), validate=False)
    state = str(tmp_path / "state")
    os.makedirs(state)
    r1 = run_phase("healthcheck", cfg=cfg, node="gpu017", only=["memory"])
    profiles.forget_hostlist_answers()
    profiles.load_hostlist_cache(state)
    assert ("gpu[001-128]", "gpu017") in profiles._answers.contains
    r2 = run_phase("healthcheck", cfg=cfg, node="gpu017", only=["memory"])
    assert r1.profile == r2.profile == "gpu"
    assert run_phase("healthcheck", cfg=cfg, node="cpu64", only=["memory"]).profile == "cpu"


# -- registry skip_when agrees with the checks -------------------------------

PROFILES = {
    "cpu": load_builtin("cpu"),
    "no_gpus": as_profile({"gpu_count": 0}),
    "no_fabric": as_profile({"gpu_count": 8, "fabric_manager": False}),
    "no_nvlink": as_profile({"gpu_count": 8, "nvlinks_per_gpu": 0}),
    "no_persistence": as_profile({"gpu_count": 8, "persistence_mode": False}),
    "unknown_count": as_profile({"fabric_manager": None, "nvlinks_per_gpu": None}),
}


class NoNvml:
    """A check that is not skipped must not reach NVML in this test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"NVML used: {name}")


@pytest.mark.parametrize("name", [n for n in CHECKS if CHECKS[n].skip_when])
@pytest.mark.parametrize("profile", list(PROFILES))
def test_skip_when_matches_the_check(name: str, profile: str) -> None:
    prof: Profile = PROFILES[profile]
    reason = CHECKS[name].not_applicable(prof)
    if reason is None:
        return
    check = load_class(CHECKS[name])()
    ctx = CheckContext(
        node="n1", phase=Phase.HEALTHCHECK, profile=prof, services={"nvml": NoNvml()}
    )
    [own] = check.judge(check.gather(ctx), ctx)
    assert (own.status, own.code, own.message) == (Status.OK, "OK", f"not applicable: {reason}")


def test_skip_rules_match_exact_values() -> None:
    fabric = CHECKS["fabric"]
    assert fabric.not_applicable(as_profile({"gpu_count": 8})) is None
    assert fabric.not_applicable(as_profile({"gpu_count": 8, "fabric_manager": True})) is None
    assert fabric.not_applicable(PROFILES["no_fabric"]) == "profile expects no fabric manager"
    assert CHECKS["ecc"].not_applicable(as_profile({"gpu_count": 1})) is None
    assert CHECKS["ecc"].not_applicable(as_profile({})) is None  # unknown count: look
    assert CHECKS["burnin"].not_applicable(PROFILES["cpu"]) is None  # decides itself


# -- stdlib host probe: psutil's values -------------------------------------


def test_parse_mounts_decodes_getmntent_escapes() -> None:
    text = (
        "sysfs /sys sysfs rw,nosuid 0 0\n"
        "srv:/export/my\\040data /mnt/my\\040data nfs4 rw,vers=4.2 0 0\n"
        "none /run/x tmpfs ro 0 0\n"
        "garbage\n"
    )
    parts = host.parse_mounts(text)
    assert [p.mountpoint for p in parts] == ["/sys", "/mnt/my data", "/run/x"]
    assert parts[1].device == "srv:/export/my data" and parts[2].device == ""
    assert parts[2].opts == "ro"


def test_host_agrees_with_psutil(tmp_path: Path) -> None:
    psutil = pytest.importorskip("psutil")
    assert host.HOST.virtual_memory().total == psutil.virtual_memory().total
    assert host.mem_total() == psutil.virtual_memory().total
    ours = {(p.mountpoint, p.fstype, p.opts) for p in host.HOST.disk_partitions(all=True)}
    theirs = {(p.mountpoint, p.fstype, p.opts) for p in psutil.disk_partitions(all=True)}
    assert ours == theirs
    a, b = host.disk_usage(str(tmp_path)), psutil.disk_usage(str(tmp_path))
    assert (a.total, a.percent) == (b.total, b.percent)
    assert abs(a.free - b.free) < 64 * 2**20 and abs(a.used - b.used) < 64 * 2**20
    with pytest.raises(FileNotFoundError):
        host.disk_usage(str(tmp_path / "missing"))


def test_meminfo_fallback(tmp_path: Path) -> None:
    fake = tmp_path / "meminfo"
    fake.write_text("MemTotal:       2097152 kB\nMemFree: 1 kB\n")
    assert host.mem_total(str(fake)) == 2 * 2**30
    expected = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert host.mem_total(str(tmp_path / "none")) == expected


def test_write_test_in_process(tmp_path: Path) -> None:
    assert host.write_test(str(tmp_path), 5) == ""
    assert os.listdir(tmp_path) == []  # removed again
    err = host.write_test(str(tmp_path / "missing"), 5)
    assert err.startswith("cannot create a file in") and "No such file" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")
def test_a_mount_a_user_filled_is_full_drained_without_moving_jobs(tmp_path: Path) -> None:
    """A required mount whose inodes a user used up (a tmpfs of 8 inodes,
    filled with files): root's write test finds it full, the mounts check
    says MOUNT_FULL (not MOUNT_NOT_WRITABLE), and the policy drains without
    evacuating, as for a full scratch (core/user_caused.py)."""
    from datetime import UTC, datetime

    from slurm_hooks.core.model import NodeState
    from slurm_hooks.decide import DecisionKind, PolicyConfig, decide
    from slurm_hooks.detect.checks.base import CheckContext
    from slurm_hooks.detect.checks.mounts import MountsCheck, MountState

    m = tmp_path / "m"
    m.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=8", "tmpfs", str(m)],
                         capture_output=True, text=True, check=False)  # fmt: skip
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        for i in range(64):
            try:
                (m / f"f{i}").touch()
            except OSError:
                break
        assert host.write_test(str(m), 5) == host.WRITE_FULL
        ctx = CheckContext(node="n1", phase=Phase.HEALTHCHECK, profile={"mounts": [str(m)]})
        [f] = MountsCheck().judge([MountState(str(m), True, "tmpfs", False, host.WRITE_FULL)], ctx)
        assert f.code == "MOUNT_FULL"
        now = datetime(2026, 1, 1, tzinfo=UTC)
        [d] = decide([f], NodeState("n1", "mixed"), None, None, PolicyConfig(), now, node="n1")
        assert (d.kind, d.evacuate) == (DecisionKind.DRAIN, False)
    finally:
        subprocess.run(["umount", "-l", str(m)], check=False)


def test_write_test_permission(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    if os.geteuid() != 0:
        assert "Permission denied" in host.write_test(str(ro), 5)
        return
    # Root writes into a 0555 directory; what stops root is a read-only
    # mount, the case the mounts check exists for: a read-only bind mount
    # in a mount namespace of the child's own (nothing outside it changes).
    import subprocess
    import sys

    probe = (
        "import sys; from slurm_hooks.detect.probes import host; "
        "print(host.write_test(sys.argv[1], 5))"
    )
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && exec "$2" -c "$3" "$1"'
    res = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", str(ro), sys.executable, probe],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "Read-only file system" in res.stdout
    assert os.listdir(ro) == []


def test_write_test_hung_mount_is_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system that never answers leaves a thread behind, not a hung check."""
    release = threading.Event()
    monkeypatch.setattr(host, "_create_and_remove", lambda path: release.wait(30))
    try:
        assert host.write_test("/nfs/dead", 0.2) == "timeout"
    finally:
        release.set()


def test_mounts_check_uses_the_in_process_test(tmp_path: Path) -> None:
    from slurm_hooks.detect.checks.mounts import MountsCheck

    fake_table = [host.Partition("srv:/x", str(tmp_path), "nfs4", "rw")]

    class Table:
        def disk_partitions(self, all: bool = False) -> list[host.Partition]:  # noqa: A002
            return fake_table

    ctx = CheckContext(
        node="n1",
        phase=Phase.HEALTHCHECK,
        profile={"mounts": [str(tmp_path)]},
        services={"psutil": Table()},
    )
    check = MountsCheck()
    [f] = check.judge(check.gather(ctx), ctx)
    assert f.status == Status.OK
    os.chmod(tmp_path, 0o555)
    try:
        if os.geteuid() != 0:
            [f] = check.judge(check.gather(ctx), ctx)
            assert f.code == "MOUNT_NOT_WRITABLE" and "Permission denied" in f.message
    finally:
        os.chmod(tmp_path, 0o755)
