"""The watcher: follow the kernel log and poll NVML, act within a fraction of a second.

HealthCheckProgram runs every few minutes; a GPU that falls off the bus in
between keeps taking jobs (and killing them) until then.  ``slurm-hooks
watch`` is the long-running daemon (deploy/systemd/slurm-hooks-watch.service)
that closes the gap:

* it **follows the kernel log** the XID check reads (``[checks.xid]``): on
  ``/dev/kmsg`` it sleeps in ``poll()`` until the kernel appends a record; on
  a plain file it ``stat()``s every ``log_interval_s`` (50 ms by default, one
  syscall); on the journal it asks every ``journal_interval_s``.  When
  something new arrives it runs the ``xid`` check alone - through the same
  runner, the same cursor and history as the hooks - and hands the findings
  to the same remediation :class:`~slurm_hooks.act.engine.Engine` (the
  followers live in ``detect/xid/follow.py``);
* every ``nvml_interval_s`` it runs the whole ``watch`` phase (GPU lost,
  ECC, row remapping, throttling, temperature, and the XID check again) and
  hands what changed to the engine; every call also rolls forward an
  incident whose grace worker died.

The progress pass (hangs and stragglers from records jobs write,
docs/progress.md) runs in its own thread (:class:`ProgressThread`): it reads
files users write, so its cost is theirs to choose, and the kernel-log scan
and the NVML poll never wait behind it.  It takes the detect lock only
around the engine call a hang verdict makes; a pass that raises is counted
(``slurm_hooks_progress_crashes``) and the thread goes on.

One event is handled once.  The scan (cursor read, records read, cursor and
XID history written) and the engine call run under the node's ``detect``
lock in the state dir (:func:`detect_lock`), which the hooks take too, so a
health check that starts while the watcher acts sees the cursor already
moved and the drain already written.

Nothing heavy on the per-event path: no click (``python -m slurm_hooks.agent.watch``
is click-free), requests only when a webhook actually fires, prometheus_client
only when ``/metrics`` is served (``watch_metrics.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_hooks.agent.hook_output import ENV_LOG_LEVEL
from slurm_hooks.agent.watch_metrics import (  # noqa: F401 (re-exported: importable from here too)
    _WatchCollector,
    serve_metrics,
)
from slurm_hooks.core.bounds import require_positive
from slurm_hooks.core.errors import ConfigError, SlurmHooksError
from slurm_hooks.core.model import Finding, Phase, Status
from slurm_hooks.detect.xid.follow import (  # noqa: F401 (re-exported: importable from here too)
    FileFollower,
    Follower,
    IntervalFollower,
    KmsgFollower,
)

log = logging.getLogger("slurm_hooks.agent.watch")  # also under python -m

#: Name of the lock (under ``<state_dir>/locks/``) held while XIDs are read
#: and acted on, by the watcher and the hooks alike.
#: The check whose findings are events (new kernel-log lines), not state.
XID_CHECK = "xid"


@dataclass(frozen=True)
class WatchConfig:
    """``[watch]``: how often the watcher looks.  Times are seconds."""

    #: Sleep between looks at a kernel-log *file* (one ``stat()`` each).
    log_interval_s: float = 0.05
    #: Seconds between ``journalctl`` calls when the kernel log is the journal.
    journal_interval_s: float = 1.0
    #: Seconds between NVML polls (the whole ``watch`` phase).
    nvml_interval_s: float = 10.0
    #: A GPU state finding that has not changed is handed to the engine again
    #: after this long (an admin may have resumed a node that is still broken).
    refeed_s: float = 300.0
    #: Seconds to wait for the detect lock a hook may hold.
    lock_timeout_s: float = 20.0
    #: After the engine failed (Slurm unreachable), retry the findings it
    #: could not act on after this long, doubling up to ``retry_max_s``.
    retry_s: float = 1.0
    #: Ceiling of that doubling delay, seconds.
    retry_max_s: float = 60.0
    #: Least seconds between two kernel-log scans: under a flood (hundreds
    #: of lines a second) each scan takes everything written since the last
    #: one, so the watcher's CPU stays bounded and an XID still drains
    #: within this long.
    scan_min_interval_s: float = 0.2

    def validate(self) -> None:
        require_positive(
            self,
            "log_interval_s",
            "journal_interval_s",
            "nvml_interval_s",
            "refeed_s",
            "lock_timeout_s",
            "retry_s",
            "retry_max_s",
            "scan_min_interval_s",
        )


@contextlib.contextmanager
def detect_lock(state_dir: str, timeout: float = 20.0) -> Iterator[None]:
    """The node's detect-and-act lock (an fcntl lock in the state store).

    Hold it around "scan the kernel log, then act": two processes that read
    the same cursor at once would both report (and count) the same XID."""
    from slurm_hooks.store.state import DETECT_LOCK, StateStore

    with StateStore(state_dir).lock(DETECT_LOCK, timeout):
        yield


def make_follower(
    cfg: Any, watch_cfg: WatchConfig, wakeup_fd: int | None = None
) -> Follower | None:
    """The follower for the configured XID source; None when the XID check
    is disabled (then only NVML is polled)."""
    from slurm_hooks.detect.checks.settings import load_checks_config
    from slurm_hooks.detect.checks.xid import make_source
    from slurm_hooks.detect.xid.settings import XidSettings
    from slurm_hooks.detect.xid.source import FileSource, KmsgSource

    checks = load_checks_config(cfg)
    if not checks.enabled(XID_CHECK) or Phase.WATCH not in checks.phases(XID_CHECK):
        return None
    table = {k: v for k, v in checks.table(XID_CHECK).items() if k not in ("timeout_s", "phases")}
    settings = XidSettings.from_mapping(table, path=cfg.path)
    source = make_source(settings)
    if isinstance(source, FileSource):
        return FileFollower(source.path, watch_cfg.log_interval_s)
    if isinstance(source, KmsgSource):
        try:
            return KmsgFollower(source.path, wakeup_fd)
        except OSError as exc:
            log.warning("cannot poll %s (%s); looking every %gs", source.path, exc,
                        watch_cfg.journal_interval_s)  # fmt: skip
    return IntervalFollower(watch_cfg.journal_interval_s)


# -- the watcher --------------------------------------------------------------------


class _NotActed(Exception):  # noqa: N818 - internal signal, never escapes the watcher
    """The engine could not act: the scope's cursor is not committed."""


def _signature(f: Finding) -> tuple[str, str, str, str]:
    return (f.check, str(f.status), f.code, f.component.short())


@dataclass
class WatchStats:
    """What the watcher did since it started (for logs and /metrics)."""

    scans: int = 0
    polls: int = 0
    handled: int = 0
    failures: int = 0
    xid_counts: dict[str, int] = field(default_factory=dict)
    last_findings: tuple[Finding, ...] = ()
    last_poll_at: float = 0.0
    last_poll_s: float = 0.0
    durations: dict[str, float] = field(default_factory=dict)


class Watcher:
    """Detect and act for one node.  ``engine`` and ``run_setup`` are built
    from ``cfg`` unless passed in (tests pass their own)."""

    def __init__(
        self,
        cfg: Any,
        node: str,
        *,
        engine: Any = None,
        run_setup: Any = None,
        settings: WatchConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        from slurm_hooks.detect import runner

        self.cfg = cfg
        self.node = node
        self.settings = settings or cfg.section("watch", WatchConfig)
        self.state_dir = cfg.general.state_dir
        if engine is None:
            from slurm_hooks.act.engine import Engine

            engine = Engine.from_config(cfg, actor="slurm-hooks/watch")
        self.engine = engine
        self.rs = run_setup or runner.setup(cfg, node=node)
        self.clock = clock
        self.stats = WatchStats()
        self.stop_event = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        #: State findings last handed to the engine: signature -> when.
        self._fed: dict[tuple[str, str, str, str], float] = {}
        #: Findings the engine could not act on yet (Slurm unreachable).
        #: XID findings are not kept: their cursor was not committed, so the
        #: retry scans the same kernel-log records again (``_rescan``).
        self._retry: list[Finding] = []
        self._rescan = False
        self._last_scan = float("-inf")
        self._retry_at = 0.0
        self._retry_delay = self.settings.retry_s
        #: Hang and straggler pass over jobs' progress records (docs/progress.md),
        #: run by its own thread (:meth:`run`).
        self.progress = self._progress_pass(cfg)

    def _progress_pass(self, cfg: Any) -> Any:
        from slurm_hooks.detect.progress.settings import ProgressConfig

        settings = cfg.section("progress", ProgressConfig)
        if not settings.enabled:
            return None
        from slurm_hooks.agent.progress_pass import ProgressPass
        from slurm_hooks.detect.probes.gpu_view import gpu_view

        nvml = self.rs.services.get("nvml") if hasattr(self.rs, "services") else None
        view = (lambda: gpu_view(nvml)) if nvml is not None else None
        from slurm_hooks.agent.progress_thread import SerialEngine
        from slurm_hooks.detect.probes.gpu_procs import GpuProcesses

        engine = SerialEngine(self.engine, self.state_dir, self.settings.lock_timeout_s)
        procs = GpuProcesses(nvml) if nvml is not None else None
        return ProgressPass(settings, self.node, engine, gpu_view=view, gpu_procs=procs)

    def progress_pass(self) -> list[Any]:
        """Judge the progress of this node's jobs that write records."""
        return list(self.progress.run())

    # -- one step each ---------------------------------------------------------

    def _run(self, only: Sequence[str] | None) -> Any:
        from slurm_hooks.detect.runner import run_phase

        return run_phase(Phase.WATCH, run_setup=self.rs, only=only)

    def _handle(self, findings: Sequence[Finding]) -> list[Any]:
        """Hand findings (plus any left over from a failed try) to the engine.
        Failures are kept for a retry with backoff, never lost silently."""
        todo = [*self._retry, *findings]
        try:
            decisions = self.engine.handle(self.node, todo)
        except SlurmHooksError as exc:
            self.stats.failures += 1
            problems = [f for f in todo if f.status is not Status.OK and f.check != XID_CHECK]
            log.error("watch node=%s: acting failed (%s); %d finding(s) kept and the kernel log "
                      "re-read in %gs", self.node, exc, len(problems), self._retry_delay)  # fmt: skip
            self._retry = problems
            self._rescan = True
            self._retry_at = self.clock() + self._retry_delay
            self._retry_delay = min(self._retry_delay * 2, self.settings.retry_max_s)
            raise _NotActed from exc
        self._retry = []
        self._rescan = False
        self._retry_delay = self.settings.retry_s
        for d in decisions:
            self.stats.handled += 1
            log.info("decision node=%s kind=%s code=%s why=%s", self.node, d.kind, d.code,
                     d.explanation)  # fmt: skip
        return list(decisions)

    def _count_xids(self, findings: Sequence[Finding]) -> None:
        """Cumulative XID events by number (``slurm_hooks_xid_events``): every
        parsed XID, the ones the catalogue ignores too (status OK)."""
        for f in findings:
            if f.check != XID_CHECK or not f.code.startswith("XID") or not f.code[3:].isdigit():
                continue
            n = f.values.get("count", 1) if f.values else 1
            n = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
            self.stats.xid_counts[f.code[3:]] = self.stats.xid_counts.get(f.code[3:], 0) + n

    def scan_log(self) -> list[Any]:
        """New kernel-log lines: run the XID check alone and act on it.  The
        cursor is committed only once the engine has acted (journalled)."""
        from slurm_hooks.detect.xid.commit import deferred

        self._last_scan = self.clock()
        with detect_lock(self.state_dir, self.settings.lock_timeout_s), deferred() as pending:
            result = self._run([XID_CHECK])
            self.stats.scans += 1
            events = [f for f in result.findings if f.status is not Status.OK]
            if events or self._retry:
                try:
                    decisions = self._handle(events)
                except _NotActed:
                    return []
            else:
                decisions = []
            pending.commit()
            self._rescan = False
            self._count_xids(result.findings)
            return decisions

    def poll(self) -> list[Any]:
        """The whole watch phase; XID findings always go to the engine, GPU
        state findings only when they changed (or after ``refeed_s``).  The
        NVML checks run outside the detect lock (a hung driver call must not
        block a hook); the XID scan and the engine call run inside it."""
        from slurm_hooks.detect.runner import plan

        t0 = self.clock()
        names = plan(Phase.WATCH, self.rs.checks)
        others = [n for n in names if n != XID_CHECK]
        findings: list[Finding] = []
        durations: dict[str, float] = {}
        if others:
            result = self._run(others)
            findings.extend(result.findings)
            durations.update(result.durations)
        from slurm_hooks.detect.xid.commit import deferred

        with detect_lock(self.state_dir, self.settings.lock_timeout_s), deferred() as pending:
            if XID_CHECK in names:
                self._last_scan = self.clock()
                result = self._run([XID_CHECK])
                findings.extend(result.findings)
                durations.update(result.durations)
            now = self.clock()
            self.stats.polls += 1
            self.stats.last_findings = tuple(findings)
            self.stats.durations = durations
            events: list[Finding] = []
            state: list[Finding] = []
            current: set[tuple[str, str, str, str]] = set()
            for f in findings:
                if f.status is Status.OK:
                    continue
                if f.check == XID_CHECK:
                    events.append(f)
                    continue
                sig = _signature(f)
                current.add(sig)
                fed = self._fed.get(sig)
                if fed is None or now - fed >= self.settings.refeed_s:
                    state.append(f)
            # Called even with nothing new: it rolls forward an open incident.
            try:
                decisions = self._handle([*events, *state])
            except _NotActed:
                decisions = []
            else:
                pending.commit()
                self._count_xids([f for f in findings if f.check == XID_CHECK])
                for f in state:
                    self._fed[_signature(f)] = now
                # A fault that cleared and comes back is news again.
                self._fed = {s: t for s, t in self._fed.items() if s in current}
        self.stats.last_poll_at = time.time()
        self.stats.last_poll_s = self.clock() - t0
        return decisions

    def once(self) -> list[Finding]:
        """Roll forward what a dead predecessor left, poll once; returns the
        problems seen (the CLI's exit status)."""
        try:
            self.resume_pending()
            self.poll()
        finally:
            self.rs.close()
        return [f for f in self.stats.last_findings if f.is_problem]

    def resume_pending(self) -> None:
        try:
            touched = self.engine.resume_pending(self.node)
        except SlurmHooksError as exc:
            self.stats.failures += 1
            log.error("watch node=%s: cannot roll forward open incidents: %s", self.node, exc)
            return
        if touched:
            log.info("watch node=%s: rolled forward incident(s) %s", self.node, ",".join(touched))

    # -- the loop -----------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to end (safe from a signal handler or another thread)."""
        self.stop_event.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def run(self) -> None:
        """Until :meth:`stop`: follow the log, poll NVML, act."""
        s = self.settings
        follower = make_follower(self.cfg, s, self._wake_r)
        log.info("watch node=%s: following %s, NVML every %gs", self.node,
                 type(follower).__name__ if follower else "nothing", s.nvml_interval_s)  # fmt: skip
        self.resume_pending()
        next_poll = self.clock()
        from slurm_hooks.agent.progress_thread import ProgressThread

        progress = ProgressThread(self) if self.progress is not None else None
        if progress is not None:
            progress.start()
        try:
            while not self.stop_event.is_set():
                now = self.clock()
                if now >= next_poll:
                    self._guard(self.poll)
                    next_poll = self.clock() + s.nvml_interval_s
                    self._reap()
                    continue
                retry = bool(self._retry) or self._rescan
                if retry and now >= self._retry_at:
                    self._guard(self.scan_log)
                    continue
                wait = next_poll - now
                if retry:
                    wait = min(wait, max(0.0, self._retry_at - now))
                if follower is None:
                    self.stop_event.wait(wait)
                elif follower.wait(wait, self.stop_event):
                    # Batch a flood: at most one scan per scan_min_interval_s.
                    spacing = self._last_scan + s.scan_min_interval_s - self.clock()
                    if spacing > 0 and self.stop_event.wait(spacing):
                        break
                    self._guard(self.scan_log)
        finally:
            self.stop_event.set()
            if progress is not None:
                progress.join(self.settings.lock_timeout_s)
            if follower is not None:
                follower.close()
            self.rs.close()
            for fd in (self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    os.close(fd)
            log.info("watch node=%s: stopped (scans=%d polls=%d decisions=%d)", self.node,
                     self.stats.scans, self.stats.polls, self.stats.handled)  # fmt: skip

    def _guard(self, step: Callable[[], Any]) -> None:
        """One step; an error is logged and the loop goes on (a daemon that
        dies on a bad config file cannot drain the next broken GPU)."""
        try:
            step()
        except SlurmHooksError as exc:
            self.stats.failures += 1
            log.error("watch node=%s: %s failed: %s", self.node, step.__name__, exc)
        except Exception:  # noqa: BLE001 - logged with its traceback; the loop survives
            self.stats.failures += 1
            log.exception("watch node=%s: %s crashed", self.node, step.__name__)
            self.stop_event.wait(1.0)

    @staticmethod
    def _reap() -> None:
        """Collect grace workers that finished, so a daemon leaves no zombies."""
        from slurm_hooks.act import engine as actions

        reap = getattr(actions, "_reap", None)
        if callable(reap):
            reap()

    # -- metrics ----------------------------------------------------------------------

    def phase_run(self) -> Any:
        from slurm_hooks.act.metrics import PhaseRun

        return PhaseRun(
            phase=str(Phase.WATCH),
            findings=self.stats.last_findings,
            timestamp=self.stats.last_poll_at,
            duration_s=self.stats.last_poll_s,
            check_durations=self.stats.durations,
            xid_counts={code: n for code, n in self.stats.xid_counts.items()},
        )


# -- entry points -------------------------------------------------------------------------


def run_watch(
    *,
    config_path: str | None = None,
    node: str | None = None,
    once: bool = False,
    metrics_port: int | None = None,
    config_log_level: bool = True,
) -> int:
    """What ``slurm-hooks watch`` and ``python -m slurm_hooks.agent.watch`` do.
    Returns the exit status: 0; with ``once`` 1 when a check FAILed and 2
    when acting failed.  ``config_log_level``: take the log level from
    ``[general] log_level`` unless SLURM_HOOKS_LOG_LEVEL is set (callers
    pass False when a flag chose it)."""
    from slurm_hooks.act.metrics import MetricsConfig
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.detect.runner import node_name

    if config_path:
        config_path = os.path.abspath(config_path)  # the grace worker runs in /
    cfg = config_mod.load(config_path, validate=False)
    if config_log_level and not os.environ.get(ENV_LOG_LEVEL):
        set_log_level(cfg.general.log_level)
    node = node or node_name()
    watcher = Watcher(cfg, node)
    if once:
        problems = watcher.once()
        for f in problems:
            log.warning("node=%s %s %s %s: %s", node, f.status, f.check, f.code, f.message)
        if watcher.stats.failures:
            return 2  # could not act: the next run (or the hook) must
        return 1 if any(f.status is Status.FAIL for f in problems) else 0
    mcfg = cfg.section("metrics", MetricsConfig)
    port = mcfg.watch_port if metrics_port is None else metrics_port
    server = serve_metrics(watcher, port, mcfg.listen_addr) if port else None

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("watch node=%s: %s, stopping", node, signal.Signals(signum).name)
        watcher.stop()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        watcher.run()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if server is not None:
            with contextlib.suppress(Exception):
                server.shutdown()
    return 0


def quiet_runner(level: str | int) -> None:
    """The runner logs every run at INFO: fine for a hook, a line per event
    and per poll for a daemon.  Keep those for DEBUG."""
    numeric = level if isinstance(level, int) else logging.getLevelName(str(level).upper())
    if not isinstance(numeric, int) or numeric > logging.DEBUG:
        logging.getLogger("slurm_hooks.detect.runner").setLevel(logging.WARNING)
    else:
        logging.getLogger("slurm_hooks.detect.runner").setLevel(logging.NOTSET)


def set_log_level(level: str) -> None:
    """The watcher's level after the config is read: the root logger's, and
    our package follows it (``slurm-hooks watch`` raised it to INFO before)."""
    level = level.upper()
    logging.getLogger().setLevel(level)
    logging.getLogger("slurm_hooks").setLevel(logging.NOTSET)
    quiet_runner(level)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m slurm_hooks.agent.watch``: the watcher without click (what the
    lab and the benchmark start; ``slurm-hooks watch`` is the same)."""
    p = argparse.ArgumentParser(
        prog="python -m slurm_hooks.agent.watch", description=__doc__.split("\n")[0]
    )
    p.add_argument("-c", "--config", dest="config_path")
    p.add_argument("--node")
    p.add_argument("--once", action="store_true")
    p.add_argument("--metrics-port", type=int)
    p.add_argument(
        "--log-level",
        help="default: $SLURM_HOOKS_LOG_LEVEL, else [general] log_level (INFO until it is read)",
    )
    args = p.parse_args(argv)
    level = (args.log_level or os.environ.get(ENV_LOG_LEVEL) or "INFO").upper()
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s slurm-hooks[watch] %(name)s %(message)s",
    )
    quiet_runner(level)
    try:
        return run_watch(
            config_path=args.config_path,
            node=args.node,
            once=args.once,
            metrics_port=args.metrics_port,
            config_log_level=args.log_level is None,
        )
    except ConfigError as exc:
        print(f"slurm-hooks: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except SlurmHooksError as exc:
        print(f"slurm-hooks: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
