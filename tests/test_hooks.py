"""The hook entry point (``python3 -m slurm_hooks hook <phase>``)."""

from __future__ import annotations

import threading

import pytest

from slurm_hooks.agent import hook as hooks
from slurm_hooks.store.state import DETECT_LOCK, StateStore


@pytest.fixture
def node_config(tmp_path, monkeypatch):
    state = tmp_path / "state"
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[general]\nstate_dir = "{state}"\n')
    monkeypatch.setenv("SLURM_HOOKS_CONFIG", str(cfg))
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    return state


def test_usage_error_exits_2():
    assert hooks.main(["nonsense"]) == 2


@pytest.fixture
def checks_seen(node_config, monkeypatch):
    """The runner's run_phase replaced: each call is recorded as (the checks
    it was asked for, whether the node's detect lock was free meanwhile);
    ``fail`` names checks that report a FAIL."""
    from slurm_hooks.core.model import Finding, Phase, Status
    from slurm_hooks.detect import runner
    from slurm_hooks.detect.outcome import CheckOutcome

    calls: list[tuple[tuple[str, ...], bool]] = []
    fail: set[str] = set()

    def fake(phase, *, run_setup=None, only=None, budget_s=None, **_kw):
        calls.append((tuple(only), lock_free(node_config)))
        outcomes = tuple(
            CheckOutcome(n, (Finding(check=n, status=Status.FAIL, code="BAD", message="bad"),), 0.0)
            for n in only
            if n in fail
        )
        return runner.RunResult(phase=Phase(phase), node="n1", profile="default", outcomes=outcomes)

    monkeypatch.setattr(runner, "run_phase", fake)
    return calls, fail


def lock_free(state) -> bool:
    from slurm_hooks.store.state import LockTimeout

    try:
        with StateStore(state).lock(DETECT_LOCK, timeout=0.01):
            return True
    except LockTimeout:
        return False


@pytest.mark.parametrize(("phase", "rc"), [("healthcheck", 2), ("epilog", 0)])
def test_hook_waits_for_the_watchers_detect_lock_then_gives_up(
    node_config, checks_seen, monkeypatch, phase, rc
):
    """While the watcher holds the node's detect lock (it is scanning the
    shared kernel-log cursor and acting), a hook must not scan too: it waits,
    then skips this run.  The epilog still exits 0 (a non-zero epilog makes
    Slurm drain the node with a reason that is not ours)."""
    monkeypatch.setattr(hooks, "DETECT_LOCK_WAIT_S", 0.3)
    calls, _ = checks_seen
    held, release = threading.Event(), threading.Event()

    def watcher():
        with StateStore(node_config).lock(DETECT_LOCK):
            held.set()
            release.wait(10)

    t = threading.Thread(target=watcher)
    t.start()
    try:
        held.wait(5)
        assert hooks.main([phase]) == rc
        assert calls == []
    finally:
        release.set()
        t.join()
    assert hooks.main([phase]) == 0 and calls[0][0] == ("xid",)


@pytest.mark.parametrize("phase", ["healthcheck", "epilog"])
def test_only_the_kernel_log_scan_and_acting_hold_the_detect_lock(checks_seen, phase):
    """The XID check runs first, under the lock; every other check (site,
    mounts, scratch: what a user's processes can slow) runs after it with
    the lock free, so the watcher's XID scan never waits behind them."""
    calls, _ = checks_seen
    assert hooks.main([phase]) == 0
    assert calls[0] == (("xid",), False)
    assert len(calls) == 2 and "xid" not in calls[1][0] and "mounts" in calls[1][0]
    assert calls[1][1] is True


def test_what_the_other_checks_found_is_acted_on_under_the_lock(
    node_config, checks_seen, monkeypatch
):
    calls, fail = checks_seen
    fail.add("mounts")
    acted = []

    def act(self, findings):
        acted.append(([f.check for f in findings], lock_free(node_config)))
        self.held = False
        return True

    monkeypatch.setattr(hooks._Acting, "act", act)
    assert hooks.main(["healthcheck"]) == 1  # unhealthy and not held by our drain
    assert acted == [(["mounts"], False)]
    assert calls[1][1] is True  # the check itself ran with the lock free


def test_healthy_node_does_not_even_import_the_engine(tmp_path):
    """Every node runs the health check every interval: with all checks OK and
    no incident open, the hook neither calls Slurm nor imports the engine."""
    import subprocess
    import sys

    (tmp_path / "kern.log").write_text("")
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[general]\nstate_dir = "{tmp_path / "state"}"\n'
        '[profiles.default]\nbase = "cpu"\n'
        f'[checks.xid]\nsource = "file"\npath = "{tmp_path / "kern.log"}"\n'
    )
    code = (
        "import sys\nfrom slurm_hooks.agent import hook as hooks\n"
        "rc = hooks.main(['healthcheck'])\n"
        "print(rc, *(m in sys.modules for m in "
        "('slurm_hooks.act.engine', 'slurm_hooks.slurm.cli_backend', 'slurm_hooks.decide')))\n"
    )
    env = {"SLURM_HOOKS_CONFIG": str(cfg), "SLURMD_NODENAME": "n1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    ).stdout.split()
    assert out == ["0", "False", "False", "False"]


@pytest.fixture
def root_level():
    """The root logger's level, restored after the test (hooks set it)."""
    import logging

    root = logging.getLogger()
    old = root.level
    root.setLevel(5)  # a sentinel no config sets
    yield root
    root.setLevel(old)


def test_config_log_level_applies_after_loading(node_config, monkeypatch, root_level):
    """``[general] log_level`` sets the level once the config is read, unless
    SLURM_HOOKS_LOG_LEVEL chose one."""
    import os

    monkeypatch.setattr(hooks, "_run_and_act", lambda *a: 0)
    monkeypatch.delenv("SLURM_HOOKS_LOG_LEVEL", raising=False)
    cfg = os.environ["SLURM_HOOKS_CONFIG"]
    with open(cfg, "a") as f:
        f.write('log_level = "warning"\n')
    assert hooks.main(["healthcheck"]) == 0
    assert root_level.level == 30
    root_level.setLevel(5)
    monkeypatch.setenv("SLURM_HOOKS_LOG_LEVEL", "DEBUG")
    assert hooks.main(["healthcheck"]) == 0
    assert root_level.level == 5  # the environment wins: the config's level is not applied


def test_invalid_config_log_level_is_a_config_error(node_config, monkeypatch, root_level):
    import os

    ran = []
    monkeypatch.setattr(hooks, "_run_and_act", lambda *a: ran.append(a) or 0)
    monkeypatch.delenv("SLURM_HOOKS_LOG_LEVEL", raising=False)
    with open(os.environ["SLURM_HOOKS_CONFIG"], "a") as f:
        f.write('log_level = "LOUD"\n')
    assert hooks.main(["healthcheck"]) == 2 and ran == []
    assert hooks.main(["epilog"]) == 0 and ran == []


@pytest.mark.parametrize(("phase", "rc"), [("prolog", 0), ("epilog", 0), ("healthcheck", 2)])
def test_a_crash_in_the_hook_fails_open(node_config, monkeypatch, phase, rc):
    """A bug of ours (any exception) must not fail a prolog or an epilog: Slurm
    would drain the node with its own reason, on every node at once."""

    def boom(*_a, **_k):
        raise RuntimeError("bug")

    monkeypatch.setattr(hooks, "_main", boom)
    assert hooks.main([phase]) == rc


def test_work_left_only_while_an_incident_has_unsettled_jobs(tmp_path):
    from slurm_hooks.store.state import StateStore

    store = StateStore(tmp_path)
    assert not hooks._work_left(store, store.read_node("n1"))
    store.write_incident({"incident": "abcd1234", "node": "n1", "jobs_done": False})
    store.set_open_incident("n1", "abcd1234")
    assert hooks._work_left(
        store, store.read_node("n1")
    )  # jobs still to signal or requeue: roll forward
    store.write_incident({"incident": "abcd1234", "node": "n1", "jobs_done": True})
    assert not hooks._work_left(
        store, store.read_node("n1")
    )  # drained, jobs settled: nothing for a hook
