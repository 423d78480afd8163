"""The watcher without Slurm: followers, event vs state findings, retries,
the shared detect lock, metrics, the CLI and clean shutdown on SIGTERM.

The kernel log is a plain file (the XID check's ``source = "file"``), GPUs
come from the fake NVML scenario, and the engine is a recorder that stands
in for Slurm (the real engine on real Slurm is tests/test_selfheal_lab.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hooks.agent.watch import (
    FileFollower,
    KmsgFollower,
    WatchConfig,
    Watcher,
    detect_lock,
    serve_metrics,
)
from slurm_hooks.cli.watch import command
from slurm_hooks.core import config as config_mod
from slurm_hooks.core.errors import SlurmUnavailable, StateError
from slurm_hooks.core.model import Status
from slurm_hooks.store.state import DETECT_LOCK, StateStore

# A real XID 79 line in rsyslog's kern.log format (body as in
# https://github.com/NVIDIA/NVSentinel/issues/155; bus id of DGX H100 GPU 1).
XID79 = "{stamp} gpu017 kernel: [ 5123.456789] NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
XID13 = "{stamp} gpu017 kernel: [ 5124.000001] NVRM: Xid (PCI:0000:2a:00): 13, pid={pid}, name=python3, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address"


def stamp() -> str:
    t = datetime.now()
    return f"{t:%b} {t.day:2d} {t:%H:%M:%S}"


class RecordingEngine:
    """Stands in for actions.Engine: records what it is handed."""

    def __init__(self, fail: int = 0):
        self.calls: list[list] = []
        self.fail = fail
        self.resumed = 0

    def handle(self, node, findings):
        findings = list(findings)
        if self.fail:
            self.fail -= 1
            raise SlurmUnavailable("slurmctld not answering")
        self.calls.append([f for f in findings if f.status is not Status.OK])
        return []

    def resume_pending(self, node=None):
        self.resumed += 1
        return []

    def codes(self) -> list[list[str]]:
        return [[f.code for f in c] for c in self.calls if c]


@pytest.fixture
def node_cfg(tmp_path: Path):
    scenario = tmp_path / "gpus.json"
    scenario.write_text(json.dumps({"preset": "h100-sxm5-80gb", "gpu_count": 4}))
    kern = tmp_path / "kern.log"
    kern.write_text("")
    cfg_path = tmp_path / "config.toml"
    cfg_path.write_text(
        f'[general]\nstate_dir = "{tmp_path / "state"}"\n'
        f'[checks]\nnvml = "lab:fake"\nnvml_scenario = "{scenario}"\n'
        f'[checks.xid]\nsource = "file"\npath = "{kern}"\n'
        "[metrics]\nenabled = false\nwatch_port = 0\n"
        "[watch]\nlog_interval_s = 0.02\nnvml_interval_s = 30\nretry_s = 0.05\n"
    )
    return {"path": cfg_path, "scenario": scenario, "kern": kern, "state": tmp_path / "state"}


def load(node_cfg):
    return config_mod.load(node_cfg["path"], validate=False)


def append(path: Path, line: str) -> None:
    with open(path, "a") as fh:
        fh.write(line + "\n")


def set_lost(scenario: Path, index: int, lost: bool) -> None:
    # "queries": every call on the GPU fails, also through a handle the
    # watcher's long-lived NVML session fetched while the GPU was healthy.
    data = json.loads(scenario.read_text())
    data.setdefault("gpu", {})[str(index)] = {"lost": "queries"} if lost else {}
    scenario.write_text(json.dumps(data))


def test_xid_line_reaches_engine_once(node_cfg):
    eng = RecordingEngine()
    w = Watcher(load(node_cfg), "gpu017", engine=eng)
    assert w.poll() == [] and eng.codes() == []  # healthy: nothing handed
    append(node_cfg["kern"], XID79.format(stamp=stamp()))
    w.scan_log()
    assert eng.codes() == [["XID79"]]
    (f,) = eng.calls[-1]
    assert f.component.index == 1 and f.component.pci == "0000:2a:00.0"
    w.scan_log()
    w.poll()
    assert eng.codes() == [["XID79"]], "the cursor moved: the same line is never handed twice"
    assert w.stats.xid_counts == {"79": 1}


def test_state_findings_are_handed_when_they_change(node_cfg):
    eng = RecordingEngine()
    w = Watcher(load(node_cfg), "gpu017", engine=eng)
    set_lost(node_cfg["scenario"], 2, True)
    w.poll()
    assert any("GPU_LOST" in c for c in eng.codes()[-1])
    n = len(eng.codes())
    w.poll()
    assert len(eng.codes()) == n, "an unchanged lost GPU is not handed again every poll"
    set_lost(node_cfg["scenario"], 2, False)
    w.poll()
    set_lost(node_cfg["scenario"], 2, True)
    w.poll()
    assert len(eng.codes()) == n + 1, "lost again after recovering is news"


def test_refeed_after_refeed_s(node_cfg):
    eng = RecordingEngine()
    now = [0.0]
    w = Watcher(
        load(node_cfg),
        "gpu017",
        engine=eng,
        settings=WatchConfig(refeed_s=60),
        clock=lambda: now[0],
    )
    set_lost(node_cfg["scenario"], 0, True)
    w.poll()
    now[0] = 30
    w.poll()
    now[0] = 61
    w.poll()
    assert len(eng.codes()) == 2


def test_failed_action_is_retried_not_lost(node_cfg):
    eng = RecordingEngine(fail=1)
    w = Watcher(load(node_cfg), "gpu017", engine=eng, settings=WatchConfig(retry_s=0.01))
    append(node_cfg["kern"], XID79.format(stamp=stamp()))
    w.scan_log()
    assert eng.codes() == [] and w.stats.failures == 1
    w.scan_log()  # nothing new in the log, but the kept finding goes again
    assert eng.codes() == [["XID79"]]


def test_run_loop_acts_fast_and_stops(node_cfg, monkeypatch):
    import slurm_hooks.detect.checks.xid as xid_check

    # The three processes the driver names are three users'.
    users = {101: "alice", 102: "bob", 103: "carol"}
    monkeypatch.setattr(xid_check, "process_owners", lambda pids: {p: users[p] for p in pids})
    eng = RecordingEngine()
    w = Watcher(load(node_cfg), "gpu017", engine=eng)
    t = threading.Thread(target=w.run)
    t.start()
    try:
        deadline = time.monotonic() + 10
        while w.stats.polls == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert eng.resumed == 1, "an open incident left by a crash is rolled forward at start"
        for pid in (101, 102, 103):
            append(node_cfg["kern"], XID13.format(stamp=stamp(), pid=pid))
            deadline = time.monotonic() + 5
            while len(eng.codes()) < pid - 100 and time.monotonic() < deadline:
                time.sleep(0.005)
        codes = eng.codes()
        assert codes == [["XID13"]] * 3
        statuses = [c[0].status for c in eng.calls if c]
        # Once is an application's bug; three users' processes on one GPU: the GPU.
        assert statuses == [Status.WARN, Status.WARN, Status.FAIL]
    finally:
        w.stop()
        t.join(5)
    assert not t.is_alive()


def test_detect_lock_is_shared_with_hooks(node_cfg):
    """A hook holding the node's detect lock (another open file, as in another
    process) keeps the watcher from scanning until it lets go."""
    eng = RecordingEngine()
    w = Watcher(load(node_cfg), "gpu017", engine=eng, settings=WatchConfig(lock_timeout_s=0.3))
    append(node_cfg["kern"], XID79.format(stamp=stamp()))
    with detect_lock(str(node_cfg["state"])):
        with pytest.raises(StateError, match="timed out"):
            w.scan_log()
    assert (node_cfg["state"] / "locks" / f"{DETECT_LOCK}.lock").exists()
    with StateStore(node_cfg["state"]).lock(DETECT_LOCK):
        pass
    w.scan_log()
    assert eng.codes() == [["XID79"]]


def test_file_follower_sees_append_and_rotation(tmp_path):
    p = tmp_path / "kern.log"
    p.write_text("a\n")
    f = FileFollower(str(p), 0.01)
    stop = threading.Event()
    assert f.wait(0.05, stop) is True  # first look
    assert f.wait(0.05, stop) is False
    append(p, "b")
    assert f.wait(0.5, stop) is True
    p.rename(tmp_path / "kern.log.1")
    p.write_text("")
    assert f.wait(0.5, stop) is True
    stop.set()
    t0 = time.monotonic()
    assert f.wait(5, stop) is False and time.monotonic() - t0 < 0.5


def test_kmsg_follower_wakes_on_record(tmp_path):
    """poll() wakes on a new record; here a FIFO stands in for /dev/kmsg
    (writing a fake XID into the host's real kernel log is not ours to do)."""
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    f = KmsgFollower(str(fifo))
    writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        stop = threading.Event()
        assert f.wait(0.01, stop) is True  # catch-up pass
        assert f.wait(0.05, stop) is False
        os.write(
            writer,
            b"6,1234,5123456789,-;NVRM: Xid (PCI:0000:2a:00): 79, GPU has fallen off the bus.\n",
        )
        t0 = time.monotonic()
        assert f.wait(2, stop) is True and time.monotonic() - t0 < 0.5
        assert f.wait(0.05, stop) is False, "the record was drained"
    finally:
        os.close(writer)
        f.close()


def test_metrics_endpoint(node_cfg):
    eng = RecordingEngine()
    w = Watcher(load(node_cfg), "gpu017", engine=eng)
    append(node_cfg["kern"], XID79.format(stamp=stamp()))
    w.poll()
    server = serve_metrics(w, 0, "127.0.0.1")
    assert server is not None
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    finally:
        server.shutdown()
    assert 'slurm_hooks_xid_events_total{xid="79"} 1.0' in text
    assert 'slurm_hooks_check_status{check="gpu_lost",phase="watch"} 0.0' in text


def test_cli_once_healthy_node_exits_0(node_cfg, monkeypatch):
    res = CliRunner().invoke(command, ["--once", "--node", "gpu017", "-c", str(node_cfg["path"])])
    assert res.exit_code == 0, res.output


def test_cli_once_cannot_act_exits_2(node_cfg, monkeypatch, tmp_path):
    """A lost GPU and no Slurm to drain it with: the watcher says so (exit 2)
    instead of claiming it handled the node."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no scontrol: Slurm unreachable
    cfg = node_cfg["path"]
    set_lost(node_cfg["scenario"], 1, True)
    res = CliRunner().invoke(command, ["--once", "--node", "gpu017", "-c", str(cfg)])
    assert res.exit_code == 2, res.output


def test_daemon_stops_cleanly_on_sigterm(node_cfg):
    env = dict(os.environ)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "slurm_hooks.agent.watch",
            "-c",
            str(node_cfg["path"]),
            "--node",
            "n1",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 15
        cursor_dir = node_cfg["state"] / "xid"
        while not (cursor_dir.is_dir() and any(cursor_dir.iterdir())):
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "watcher made no first pass"
            time.sleep(0.05)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(10)
        assert time.monotonic() - t0 < 2
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert rc == 0, err
    assert "SIGTERM, stopping" in err and "stopped (" in err
    assert "Traceback" not in err


# -- log level ----------------------------------------------------------------------------


@pytest.fixture
def levels():
    """Root, package and runner logger levels, restored after the test."""
    import logging

    names = ("", "slurm_hooks", "slurm_hooks.detect.runner")
    old = {n: logging.getLogger(n).level for n in names}
    logging.getLogger().setLevel(5)
    yield {n: logging.getLogger(n) for n in names}
    for n, lvl in old.items():
        logging.getLogger(n).setLevel(lvl)


class _IdleWatcher:
    def __init__(self, cfg, node, **kw):
        from slurm_hooks.agent.watch import WatchStats

        self.stats = WatchStats()

    def once(self):
        return []


@pytest.mark.parametrize(
    ("env", "flag", "want"),
    [(None, True, 10), ("ERROR", True, 5), (None, False, 5)],
)
def test_run_watch_takes_the_config_log_level(tmp_path, monkeypatch, levels, env, flag, want):
    """``[general] log_level`` applies unless SLURM_HOOKS_LOG_LEVEL or a flag chose."""
    from slurm_hooks.agent import watch

    conf = tmp_path / "c.toml"
    conf.write_text(f'[general]\nstate_dir = "{tmp_path}"\nlog_level = "debug"\n')
    if env:
        monkeypatch.setenv("SLURM_HOOKS_LOG_LEVEL", env)
    else:
        monkeypatch.delenv("SLURM_HOOKS_LOG_LEVEL", raising=False)
    monkeypatch.setattr(watch, "Watcher", _IdleWatcher)
    levels["slurm_hooks"].setLevel(20)  # as `slurm-hooks watch` leaves it
    rc = watch.run_watch(config_path=str(conf), node="n1", once=True, config_log_level=flag)
    assert rc == 0
    assert levels[""].level == want
    if want == 10:
        # our package follows the root, and the runner's per-run lines are back at DEBUG
        assert levels["slurm_hooks"].getEffectiveLevel() == 10
        assert levels["slurm_hooks.detect.runner"].getEffectiveLevel() == 10


def test_watch_flags_win_over_the_config_log_level(tmp_path, monkeypatch, levels):
    from slurm_hooks.agent import watch
    from slurm_hooks.cli import main as cli_main

    seen = []
    monkeypatch.setattr(watch, "run_watch", lambda **kw: seen.append(kw["config_log_level"]) or 0)
    assert watch.main(["--once", "--log-level", "ERROR"]) == 0
    assert watch.main(["--once"]) == 0
    assert CliRunner().invoke(cli_main, ["-v", "watch", "--once"]).exit_code == 0
    assert CliRunner().invoke(cli_main, ["watch", "--once"]).exit_code == 0
    assert seen == [False, True, False, True]
