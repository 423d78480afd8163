"""The one subprocess site (slurm_hooks/detect/probes/commands.py): sync runs
kill the whole process group on timeout, detached children outlive us in a
session of their own, and nothing else in the package starts processes."""

from __future__ import annotations

import ast
import os
import sys
import time
from pathlib import Path

import pytest

from slurm_hooks.core.errors import CommandError, CommandTimeout
from slurm_hooks.detect.probes import commands

PKG = Path(__file__).resolve().parents[1] / "slurm_hooks"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (dead, not yet collected by its new parent) counts as gone.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pid: int, seconds: float = 5.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_run_captures_output_and_rc():
    res = commands.run(
        [
            sys.executable,
            "-c",
            "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)",
        ],
        timeout=30,
        check=False,
    )
    assert (res.rc, res.stdout, res.stderr) == (3, "out\n", "err\n")
    with pytest.raises(CommandError) as exc:
        commands.run([sys.executable, "-c", "import sys; sys.exit(4)"], timeout=30)
    assert exc.value.rc == 4


def test_run_feeds_input_and_gives_devnull_otherwise():
    echo = [sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"]
    assert commands.run(echo, timeout=30, input="hello").stdout == "'hello'\n"
    assert commands.run(echo, timeout=30).stdout == "''\n"  # not the test runner's stdin


def test_missing_program_is_a_command_error():
    with pytest.raises(CommandError, match="cannot run"):
        commands.run(["/nonexistent/tool-xyz"], timeout=5)


def test_timeout_kills_the_whole_process_group(tmp_path):
    """A grandchild (srun's step, gpu_burn's workers) holding our pipes dies
    with its parent: the call returns and leaves nothing running."""
    pidfile = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "print('started', flush=True)\n"
        "time.sleep(120)\n"
    )
    with pytest.raises(CommandTimeout):
        commands.run([sys.executable, "-c", script], timeout=1.5)
    grandchild = int(pidfile.read_text())
    assert _wait_gone(grandchild), f"grandchild {grandchild} survived the timeout"


def test_spawn_detached_outlives_in_its_own_session(tmp_path):
    out = tmp_path / "worker.log"
    out.write_text("before\n")
    pid = commands.spawn_detached(
        [
            sys.executable,
            "-c",
            "import os, time; print(os.environ['MARK'], flush=True); time.sleep(0.3)",
        ],
        output=out,
        env={"MARK": "detached-ok"},
    )
    assert os.getsid(pid) == pid != os.getsid(0)  # a session of its own
    end = time.monotonic() + 10
    while commands.reap_detached() and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(p.pid == pid for p in commands._DETACHED)  # reaped: no zombie
    assert out.read_text() == "before\ndetached-ok\n"  # appended, not truncated


def test_spawn_detached_that_cannot_start_is_a_command_error(tmp_path):
    with pytest.raises(CommandError):
        commands.spawn_detached(["/nonexistent/worker-xyz"], output=tmp_path / "log")


_PROCESS_CALLS = {
    "system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp",
    *(f"exec{s}" for s in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")),
    *(f"spawn{s}" for s in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")),
}  # fmt: skip


def test_subprocess_is_used_only_in_commands():
    """One subprocess site: no other module of the product imports
    subprocess (or pty) or calls os.exec*/os.spawn*/os.system.  (The torch
    NCCL engine's multiprocessing workers are Python functions, not programs,
    and are killed by that engine at its deadline.)"""
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).as_posix()
        if rel == "slurm_hooks/detect/probes/commands.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            if any(n.split(".")[0] in ("subprocess", "pty") for n in names):
                offenders.append(f"{rel}:{node.lineno} imports {names}")
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
                and node.attr in _PROCESS_CALLS
            ):
                offenders.append(f"{rel}:{node.lineno} os.{node.attr}")
    assert offenders == []


def test_a_timed_out_command_keeps_what_it_wrote_on_stderr() -> None:
    """A caller may need to know how far a killed command got (scancel
    names each job before it asks slurmctld)."""
    with pytest.raises(CommandTimeout) as err:
        commands.run(
            [
                sys.executable,
                "-c",
                "import sys, time; print('asked 1', file=sys.stderr, flush=True); time.sleep(30)",
            ],
            timeout=1.0,
        )
    assert "asked 1" in err.value.stderr
