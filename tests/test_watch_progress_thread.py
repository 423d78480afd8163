"""The progress pass runs beside the fault path, never in front of it (issue #27).

A pass that never returns, or raises every time, leaves the kernel-log scan
and the NVML poll untouched: the XID still reaches the engine, the crash is
counted, the watcher stops cleanly.  The engine call a hang verdict makes
holds the node's detect lock, like the XID path's, and nothing else does.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from types import SimpleNamespace

import pytest

from slurm_hooks.agent.progress_cost import PassStats, PassTotals
from slurm_hooks.agent.progress_thread import SerialEngine
from slurm_hooks.agent.watch import Watcher, detect_lock
from slurm_hooks.store.state import LockTimeout
from tests.test_watch import XID79, RecordingEngine, append, load, node_cfg, stamp  # noqa: F401


def fake_pass(run, base: str):  # type: ignore[no-untyped-def]
    """A progress pass running ``run``; its directory ``<base>/p`` (the
    thread makes it root's)."""
    return SimpleNamespace(s=SimpleNamespace(interval_s=0.02, dir=f"{base}/p"), run=run,
                           totals=PassTotals(), last=PassStats(),
                           metric_families=lambda: [])  # fmt: skip


def wait(cond, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def running(node_cfg):  # noqa: F811 - the fixture imported above
    started = []
    base = tempfile.mkdtemp(prefix="progress-")

    def start(progress_run):  # type: ignore[no-untyped-def]
        eng = RecordingEngine()
        w = Watcher(load(node_cfg), "gpu017", engine=eng)
        w.progress = fake_pass(progress_run, base)
        t = threading.Thread(target=w.run)
        t.start()
        started.append((w, t))
        assert wait(lambda: w.stats.polls > 0)
        return w, eng

    yield start
    for w, t in started:
        w.stop()
        t.join(10)
        assert not t.is_alive()
    shutil.rmtree(base, ignore_errors=True)


def test_an_xid_drains_while_the_progress_pass_is_stuck(running, node_cfg):  # noqa: F811
    release, entered = threading.Event(), threading.Event()

    def stuck() -> list:
        entered.set()
        release.wait(30)
        return []

    w, eng = running(stuck)
    try:
        assert entered.wait(10)
        append(node_cfg["kern"], XID79.format(stamp=stamp()))
        assert wait(lambda: eng.codes() == [["XID79"]]), eng.codes()
        assert not release.is_set(), "the pass was still stuck when the XID was handled"
    finally:
        release.set()


@pytest.mark.parametrize("error", [RecursionError, MemoryError, ValueError])
def test_a_crashing_pass_is_counted_and_the_watcher_goes_on(running, node_cfg, error):  # noqa: F811
    def crash() -> list:
        raise error("from a user's file")

    w, eng = running(crash)
    assert wait(lambda: w.progress.totals.crashes >= 3)
    append(node_cfg["kern"], XID79.format(stamp=stamp()))
    assert wait(lambda: eng.codes() == [["XID79"]]), eng.codes()
    assert wait(lambda: w.progress.totals.crashes >= 5), "the progress thread goes on too"


def test_the_progress_engine_call_holds_the_detect_lock(node_cfg):  # noqa: F811
    state = str(node_cfg["state"])
    seen = []

    class Probe:
        slurm = "the client"

        def handle(self, node, findings):  # type: ignore[no-untyped-def]
            try:
                with detect_lock(state, timeout=0.0):
                    seen.append("free")
            except LockTimeout:
                seen.append("held")
            return ["decision"]

    eng = SerialEngine(Probe(), state, timeout=5.0)
    assert eng.handle("n1", []) == ["decision"] and seen == ["held"]
    assert eng.slurm == "the client"  # reads pass through, unlocked
    with detect_lock(state, timeout=0.0):  # and the lock is free again
        pass


def test_a_progress_directory_a_user_makes_in_the_claims_gap_is_taken_before_the_next_pass(
    running, monkeypatch
):
    """The watcher moves a user's progress directory aside, then makes its
    own: a user who makes one in between wins that claim, and loses it
    before the next pass (the pass reads nothing while it is theirs)."""
    import os

    import pytest as _pytest

    if os.getuid() != 0:
        _pytest.skip("chown needs root")
    from slurm_hooks.detect.progress import gather

    real_mkdir = os.mkdir
    raced = []

    def user_first(path, mode=0o777):  # type: ignore[no-untyped-def]
        if not raced and str(path).endswith("/p"):  # the progress directory, not a tempdir
            raced.append(path)
            real_mkdir(path, 0o777)
            os.chown(path, 4242, 4242)  # the user's, made in the gap
        return real_mkdir(path, mode)

    monkeypatch.setattr(gather.os, "mkdir", user_first)
    seen = []
    box = {}
    w, _ = running(lambda: seen.append(gather.base_stat(box["dir"])) or [])
    box["dir"] = w.progress.s.dir
    assert wait(lambda: len(seen) >= 2)
    st = os.lstat(w.progress.s.dir)
    assert raced and (st.st_uid, st.st_mode & 0o7777) == (0, 0o1777)
    assert None not in seen[1:]  # from the pass after the lost claim on, the directory is root's
