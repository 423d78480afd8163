"""Our real hooks, installed into a running :class:`~slurm_hooks_lab.lab.Lab`.

The lab is real Slurm; this module makes it a GPU cluster as far as
slurm-hooks can tell, with the only fakes at the outermost boundary:

* per node ``<node_dir>/slurm-hooks.toml``: its own state dir, audit log,
  kernel log (a plain file, ``<node_dir>/kern.log``) and the fake NVML by
  name (``nvml = "lab:fake"``, scenario ``<node_dir>/gpus.json``: N healthy
  GPUs of a preset, DGX bus ids);
  burn-in and NCCL use the fake engines (``engine = "lab:fake"``), which read
  that scenario through the config and their own ``<node_dir>/engine.toml``
  (empty: healthy; :meth:`LabHooks.set_engine`), so the prolog and
  acceptance run on the lab from the node's config alone, no environment;
* the shims ``slurm-hooks install`` writes (``install.render_shim``, with this
  interpreter), plus one line that picks the node's config by
  ``$SLURMD_NODENAME`` - all slurmd gives a HealthCheckProgram;
* ``HealthCheckProgram``/``Epilog`` (and ``Prolog`` once ``hook prolog``
  exists) in slurm.conf through ``lab.reconfigure``;
* faults: :meth:`LabHooks.inject_xid` appends a kernel-log line in the
  syslog format (``Mon DD HH:MM:SS host kernel: [secs] NVRM: Xid (PCI:...)``)
  naming the scenario's real bus id; :meth:`LabHooks.set_gpu` edits the
  node's scenario (lost, ECC ...), which the fake NVML re-reads;
* watchers: :meth:`LabHooks.start_watcher` runs ``python -m slurm_hooks.agent.watch``
  for a node in the background and records its PID.

Exactly one owner: a :class:`LabHooks` owns the files it wrote and the
watchers it started; :meth:`LabHooks.close` stops those (by recorded PID,
checked against the command line) and takes the hooks out of slurm.conf.
:class:`WebhookRecorder` is a loopback "owner's webhook" that keeps every POST.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from slurm_hooks.core.errors import LabError
from slurm_hooks.store.atomicfile import write_atomic
from slurm_hooks_lab.lab import Lab

log = logging.getLogger(__name__)

CONFIG_NAME = "slurm-hooks.toml"
SCENARIO_NAME = "gpus.json"
#: The NVML calls that reach the driver before any GPU's own: what fails
#: when the driver no longer answers (:meth:`LabHooks.silence_nvml`).
SILENT_NVML = ("nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex")
ENGINE_SCENARIO_NAME = "engine.toml"
KERN_LOG = "kern.log"
AUDIT_NAME = "audit.jsonl"
WATCH_LOG = "watch.log"
DEFAULT_PRESET = "h100-sxm5-80gb"


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return _toml_str(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} to TOML")


def _table(name: str, values: Mapping[str, Any]) -> str:
    lines = [f"[{name}]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in values.items() if v is not None]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class NodeFiles:
    """Where one node's hook files live."""

    node: str
    dir: Path
    config: Path
    state_dir: Path
    kern_log: Path
    scenario: Path
    audit_log: Path
    #: The fake burn-in/NCCL scenario (``[checks.burnin|nccl] scenario``).
    engine_scenario: Path | None = None


@dataclass
class Watch:
    """A watcher process this LabHooks started."""

    node: str
    pid: int
    log: Path
    proc: Any = field(repr=False, default=None)


class LabHooks:
    """slurm-hooks installed into ``lab``.  Build with :func:`install`."""

    def __init__(
        self,
        lab: Lab,
        files: Mapping[str, NodeFiles],
        shims: Mapping[str, Path],
        extra_conf: str,
        breaker_file: Path,
        gpus: int,
        preset: str,
    ):
        self.lab = lab
        self.files = dict(files)
        self.shims = dict(shims)
        self.extra_conf = extra_conf
        self.breaker_file = breaker_file
        self.gpus = gpus
        self.preset = preset
        self.watchers: dict[str, Watch] = {}
        self._seq = 0

    # -- reading -------------------------------------------------------------

    def node(self, name: str) -> NodeFiles:
        try:
            return self.files[name]
        except KeyError:
            raise LabError(f"hooks are not installed on {name!r}") from None

    def audit(self, node: str) -> list[dict[str, Any]]:
        """The node's audit log entries, oldest first."""
        from slurm_hooks.store.audit import AuditLog

        return list(AuditLog(self.node(node).audit_log).entries())

    def incidents(self, node: str) -> list[dict[str, Any]]:
        from slurm_hooks.store.state import StateStore

        return StateStore(self.node(node).state_dir).incidents(node)

    def bus_ids(self, node: str) -> list[str]:
        """The scenario's GPU bus ids in NVML's form (``00000000:18:00.0``), by index."""
        from slurm_hooks_lab.fake_nvml import read_scenario

        return [g["pci_bus_id"] for g in read_scenario(str(self.node(node).scenario)).gpus]

    # -- configuration ----------------------------------------------------------

    def add_config(self, node: str, toml: str) -> None:
        """Append ``toml`` to the node's config: every hook run reads the file
        afresh, so the next health check sees it."""
        with open(self.node(node).config, "a", encoding="utf-8") as f:
            f.write("\n" + toml)

    # -- faults ----------------------------------------------------------------

    def xid_line(
        self,
        node: str,
        xid: int,
        *,
        gpu: int = 0,
        pci: str | None = None,
        message: str | None = None,
        pid: int | None = None,
        name: str | None = None,
        when: datetime | None = None,
    ) -> str:
        """One kernel-log line as rsyslog writes kern.log (``RSYSLOG_TraditionalFileFormat``):
        ``Nov 29 11:00:13 n2 kernel: [ 5123.456789] NVRM: Xid (PCI:0000:2a:00): 79, ...``.
        The bus id is the scenario's GPU ``gpu`` unless ``pci`` is given."""
        from slurm_hooks.detect.xid.pci import normalise_pci

        if pci is None:
            ids = self.bus_ids(node)
            if not 0 <= gpu < len(ids):
                raise LabError(f"{node} has {len(ids)} GPUs; no gpu {gpu}")
            norm = normalise_pci(ids[gpu])
            assert norm is not None
            pci = norm.rsplit(".", 1)[0]  # the driver prints domain:bus:device
        if message is None:
            message = _DEFAULT_MESSAGES.get(xid, "Unspecified error")
        if pid is None:
            who = "pid='<unknown>', name=<unknown>, "
        else:
            who = f"pid={pid}, name={name or 'python3'}, "
        t = when or datetime.now()
        stamp = f"{t:%b} {t.day:2d} {t:%H:%M:%S}"  # syslog's "%b %e %T", local time
        self._seq += 1
        mono = time.monotonic() + self._seq * 1e-6
        return f"{stamp} {node} kernel: [{mono:12.6f}] NVRM: Xid (PCI:{pci}): {xid}, {who}{message}"

    def inject_xid(self, node: str, xid: int, **kw: Any) -> str:
        """Append an XID line to the node's kernel log (one ``write``, as
        rsyslog does); returns the line."""
        line = self.xid_line(node, xid, **kw)
        fd = os.open(self.node(node).kern_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
        return line

    def set_gpu(self, node: str, index: int, **settings: Any) -> None:
        """Change GPU ``index`` in the node's NVML scenario, e.g.
        ``lost=True`` or ``ecc={"volatile_uncorrected": 2}``; ``None`` removes a key."""
        path = self.node(node).scenario
        data = json.loads(path.read_text())
        gpu = data.setdefault("gpu", {}).setdefault(str(index), {})
        for key, value in settings.items():
            if value is None:
                gpu.pop(key, None)
            else:
                gpu[key] = value
        write_atomic(path, json.dumps(data, indent=1) + "\n")

    def lose_gpu(self, node: str, index: int) -> None:
        """GPU ``index`` falls off the bus as NVML sees it: every call on it
        fails with GPU_IS_LOST, also through a handle a running watcher
        fetched earlier."""
        self.set_gpu(node, index, lost=True)

    def silence_nvml(self, node: str, error: str = "TIMEOUT") -> None:
        """The node's driver stops answering NVML: counting the GPUs and
        fetching a handle fail with ``error`` (a GPU wedged so hard that
        ``nvidia-smi`` hangs), whatever each GPU's own keys say."""
        path = self.node(node).scenario
        data = json.loads(path.read_text())
        rules = [r for r in data.get("errors", []) if r.get("function") not in SILENT_NVML]
        data["errors"] = rules + [{"function": f, "error": error} for f in SILENT_NVML]
        write_atomic(path, json.dumps(data, indent=1) + "\n")

    def heal_gpus(self, node: str) -> None:
        """Every GPU of the node healthy again (NVML and the fake engines)."""
        nf = self.node(node)
        write_atomic(nf.scenario, _scenario_text(self.preset, self.gpus))
        if nf.engine_scenario is not None:
            write_atomic(nf.engine_scenario, ENGINE_SCENARIO_DEFAULT)

    def set_engine(self, node: str, text: str) -> None:
        """Replace the node's fake burn-in/NCCL scenario (TOML, see
        ``slurm_hooks_lab.fake_engines``), e.g. ``"[burnin.gpu.2]\nerrors = 40\n"``."""
        nf = self.node(node)
        if nf.engine_scenario is None:
            raise LabError(f"{node} has no fake engine scenario")
        write_atomic(nf.engine_scenario, text)

    # -- watchers ---------------------------------------------------------------

    def watcher_env(self, node: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SLURM_HOOKS_CONFIG=str(self.node(node).config),
            SLURM_CONF=str(self.lab.slurm_conf),
            SLURMD_NODENAME=node,
            PYTHONUNBUFFERED="1",
        )
        return env

    def watch_argv(self, node: str, *args: str) -> list[str]:
        return [sys.executable, "-m", "slurm_hooks.agent.watch", "--node", node, *args]

    def start_watcher(self, node: str, *, ready_timeout: float = 15.0) -> Watch:
        """Start ``python -m slurm_hooks.agent.watch`` for ``node`` (in its own
        session, output in ``<node_dir>/watch.log``) and wait until it has
        made its first pass.  Returns the record; :meth:`stop_watcher` ends it."""
        import subprocess

        if node in self.watchers:
            raise LabError(
                f"a watcher for {node} is already running (pid {self.watchers[node].pid})"
            )
        nf = self.node(node)
        logf = nf.dir / WATCH_LOG
        with open(os.devnull, "rb") as null, open(logf, "ab") as out:
            proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
                self.watch_argv(node, "--metrics-port", "0"),
                stdin=null,
                stdout=out,
                stderr=out,
                env=self.watcher_env(node),
                cwd="/",
                start_new_session=True,
            )
        w = Watch(node, proc.pid, logf, proc)
        self.watchers[node] = w
        mark = f"watch node={node}: following"
        deadline = time.monotonic() + ready_timeout
        while True:
            if proc.poll() is not None:
                self.watchers.pop(node, None)
                raise LabError(f"watcher for {node} exited rc={proc.returncode}:\n{_tail(logf)}")
            # Ready once the first poll finished (its "polls" count is logged
            # at the first decision; the loop logs "following" before it).
            if mark in _tail(logf, 4000) and self._first_pass_done(node):
                return w
            if time.monotonic() > deadline:
                self.stop_watcher(node)
                raise LabError(f"watcher for {node} not ready after {ready_timeout:g}s")
            time.sleep(0.05)

    def _first_pass_done(self, node: str) -> bool:
        """The watcher's first scan wrote the XID cursor for the kernel log."""
        xid_dir = self.node(node).state_dir / "xid"
        return xid_dir.is_dir() and any(p.name.startswith("cursor-") for p in xid_dir.iterdir())

    def stop_watcher(self, node: str, *, timeout: float = 10.0) -> int | None:
        """SIGTERM the watcher we started for ``node``; SIGKILL if it does not
        stop.  Returns its exit status (None if none was running)."""
        w = self.watchers.pop(node, None)
        if w is None:
            return None
        proc = w.proc
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(w.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired
                log.warning("watcher for %s (pid %d) ignored SIGTERM; killing", node, w.pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(w.pid, signal.SIGKILL)
                proc.wait(5)
        return int(proc.returncode)

    def stop_watchers(self) -> None:
        for node in list(self.watchers):
            self.stop_watcher(node)

    def watch_once(self, node: str, *, timeout: float = 60.0) -> Any:
        """``python -m slurm_hooks.agent.watch --once`` for ``node``; the CommandResult."""
        from slurm_hooks.detect.probes.commands import run

        return run(
            self.watch_argv(node, "--once"),
            timeout=timeout,
            check=False,
            env=self.watcher_env(node),
            cwd="/",
        )

    # -- cleaning up -------------------------------------------------------------

    def _kill_workers(self) -> None:
        """End the detached grace/repair workers of this lab's nodes (their
        argv names an incident file under a node's state dir): one still
        running would write into the state dir the reset is removing (seen:
        ``FileExistsError`` on its mkdir in the breaker test's next round)."""
        roots = tuple(str(nf.state_dir) + os.sep for nf in self.files.values())
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv = f.read().decode(errors="replace").split("\0")
            except OSError:
                continue
            if "slurm_hooks.agent.worker" in argv and any(a.startswith(roots) for a in argv):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(entry), signal.SIGKILL)

    def reset_state(self) -> None:
        """Between tests: watchers stopped, kernel logs emptied, GPUs healthy,
        every node's state, audit log and the shared breaker latch gone."""
        self.stop_watchers()
        self._kill_workers()
        for nf in self.files.values():
            _fresh_dir(nf.state_dir)
            with contextlib.suppress(FileNotFoundError):
                nf.audit_log.unlink()
            nf.kern_log.write_bytes(b"")
            self.heal_gpus(nf.node)
        for p in (self.breaker_file, self.breaker_file.with_name(self.breaker_file.name + ".lock")):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()

    def close(self, *, reconfigure: bool = True) -> None:
        """Stop our watchers and grace/repair workers, and take our lines out
        of slurm.conf.  A worker left running outlives the lab: seen writing
        an incident lock into the lab's directory after its teardown removed
        it (an empty ``nodes/n1/state/locks`` left in /tmp)."""
        self.stop_watchers()
        self._kill_workers()
        if reconfigure and self.extra_conf and self.lab.is_running():
            if self.lab.extra_conf == self.extra_conf:
                self.lab.reconfigure("")

    def finish(self, *, reconfigure: bool = True) -> None:
        """A module's last step: close (``reconfigure=False`` leaves our lines
        in slurm.conf for the next module's install to replace, saving a
        slurmctld restart), then the lab and our state back to fresh."""
        self.close(reconfigure=reconfigure)
        self.lab.reset()
        self.reset_state()

    def __enter__(self) -> LabHooks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Messages the driver prints after the pid/name part (from public reports;
#: see tests/data/kernel-logs/README.md).
_DEFAULT_MESSAGES = {
    79: "GPU has fallen off the bus.",
    13: "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
    31: "Ch 0000003b, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_1 faulted @ "
    "0x0_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
    "partition 6, subpartition 0.",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 10 "
    "(FREE) (0xc0000005 0x0).",
}


#: A healthy node's fake engine scenario: the fake engines' defaults.
ENGINE_SCENARIO_DEFAULT = (
    "# fake burn-in/NCCL scenario (slurm_hooks_lab.fake_engines); empty: healthy\n"
)


def _scenario_text(preset: str, gpus: int) -> str:
    return json.dumps({"preset": preset, "gpu_count": gpus, "gpu": {}}, indent=1) + "\n"


def _tail(path: Path, size: int = 3000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - size))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def render_node_config(
    nf: NodeFiles,
    *,
    breaker_file: Path,
    grace_s: float,
    webhook_url: str | None,
    policy: Mapping[str, Any] | None = None,
    watch: Mapping[str, Any] | None = None,
    prolog: Mapping[str, Any] | None = None,
    slurm_timeout: float = 10.0,
    progress: Mapping[str, Any] | None = None,
    repair: Mapping[str, Any] | None = None,
) -> str:
    """The node's config file (every section the hooks and the watcher read)."""
    pol: dict[str, Any] = {
        "grace_seconds": float(grace_s),
        "audit_log": str(nf.audit_log),
        "breaker_state_file": str(breaker_file),
        # 4 lab nodes: 2 may be drained by automation, the 3rd trips the breaker.
        "breaker_max_share": 0.5,
        "breaker_min_nodes": 1,
    }
    pol.update(policy or {})
    notify: dict[str, Any] = {"job_comment": True}
    if webhook_url:
        notify.update(webhook_url=webhook_url, webhook_retries=1, webhook_timeout=3.0)
    parts = [
        f"# slurm-hooks lab config for {nf.node} (written by slurm_hooks_lab.hooks)\n",
        _table("general", {"state_dir": str(nf.state_dir), "slurm_timeout": slurm_timeout}),
        _table("checks", {"nvml": "lab:fake", "nvml_scenario": str(nf.scenario)}),
        _table("checks.xid", {"source": "file", "path": str(nf.kern_log)}),
    ]
    if nf.engine_scenario is not None:
        # No GPU here: burn-in and NCCL print real tool output from the
        # node's scenarios (gpus.json through [checks] nvml_scenario).
        fake = {"engine": "lab:fake", "scenario": str(nf.engine_scenario)}
        parts += [_table("checks.burnin", fake), _table("checks.nccl", fake)]
    parts += [
        _table("policy", pol),
        _table("notify", notify),
        _table("metrics", {"enabled": False, "textfile_dir": str(nf.dir), "watch_port": 0}),
    ]
    if prolog:
        parts.append(_table("prolog", prolog))
    if progress:
        parts.append(_table("progress", progress))
    if repair:
        parts.append(_table("repair", repair))
    if watch:
        # Only when asked: until "watch" is in config.SECTIONS, the grace
        # worker (which validates the whole file) refuses an unknown section.
        parts.append(_table("watch", watch))
    return "\n".join(parts)


def render_lab_shim(
    phase: str, lab: Lab, python: str = sys.executable, chain: str | None = None
) -> str:
    """``install.render_shim`` for this lab, plus the per-node config choice;
    ``chain``: the site HealthCheckProgram the healthcheck shim runs first."""
    from slurm_hooks.cli.installer import render_shim

    text = render_shim(phase, python=python, slurm_conf=str(lab.slurm_conf), chain=chain)
    nodes_dir = lab.base_dir / "nodes"
    if any(ch in str(nodes_dir) for ch in '"$`\\\n'):
        raise LabError(f"lab path not allowed in a shim: {nodes_dir}")
    pick = (
        "# lab: one config per node, chosen by the name slurmd passes\n"
        f'export SLURM_HOOKS_CONFIG="{nodes_dir}/${{SLURMD_NODENAME:?}}/{CONFIG_NAME}"\n'
    )
    marker = "\nexport PATH="
    head, sep, tail = text.partition(marker)
    first, nl, rest = tail.partition("\n")
    return head + sep + first + nl + pick + rest


def prolog_available() -> bool:
    """Whether ``python -m slurm_hooks hook prolog`` exists yet."""
    from slurm_hooks.agent import hook as hooks

    return "prolog" in getattr(hooks, "PHASES", ())


def install(
    lab: Lab,
    *,
    gpus: int = 4,
    preset: str = DEFAULT_PRESET,
    grace_s: float = 5.0,
    webhook_url: str | None = None,
    healthcheck_interval: int | None = None,
    epilog: bool = False,
    prolog: bool | None = False,
    prolog_settings: Mapping[str, Any] | None = None,
    policy: Mapping[str, Any] | None = None,
    watch: Mapping[str, Any] | None = None,
    python: str = sys.executable,
    reconfigure: bool = True,
    chain_healthcheck: str | None = None,
    progress: Mapping[str, Any] | None = None,
    repair: Mapping[str, Any] | None = None,
) -> LabHooks:
    """Write every node's config, scenario and kernel log, the shims, and
    (``reconfigure``) put the hook lines into slurm.conf.

    ``healthcheck_interval`` None leaves HealthCheckProgram out (the watcher
    alone detects); ``prolog`` None means "if ``hook prolog`` exists".  The
    prolog's burn-in and NCCL run the fake engines from each node's config.
    ``chain_healthcheck``: a site HealthCheckProgram (the NHC stand-in,
    ``nhc_standin``) that our healthcheck shim runs first.
    ``prolog_settings`` is written as every node's ``[prolog]`` table: the
    lab has no GPU GRES, so a prolog that should test GPUs for every job
    needs ``{"gres_gpus": False}`` (else every job is CPU-only).  The
    existing state of each node (cursor, history, audit) is wiped: the
    installation starts clean."""
    if not lab.is_running():
        raise LabError(f"no lab running in {lab.base_dir}")
    hooks_dir = lab.hooks_dir
    breaker_file = hooks_dir / "breaker.json"  # shared by all nodes, like an NFS latch
    files: dict[str, NodeFiles] = {}
    for node in lab.node_names:
        d = lab.node_dir(node)
        d.mkdir(parents=True, exist_ok=True)
        nf = NodeFiles(
            node=node,
            dir=d,
            config=d / CONFIG_NAME,
            state_dir=d / "state",
            kern_log=d / KERN_LOG,
            scenario=d / SCENARIO_NAME,
            audit_log=d / AUDIT_NAME,
            engine_scenario=d / ENGINE_SCENARIO_NAME,
        )
        files[node] = nf
        text = render_node_config(
            nf, breaker_file=breaker_file, grace_s=grace_s, webhook_url=webhook_url,
            policy=policy, watch=watch, prolog=prolog_settings, progress=progress,
            repair=repair,
        )  # fmt: skip
        write_atomic(nf.config, text)
    phases = ["healthcheck", "epilog"]
    if prolog is None:
        prolog = prolog_available()
    if prolog:
        phases.append("prolog")
    shims: dict[str, Path] = {}
    from slurm_hooks.cli.installer import shim_path

    for phase in phases:
        path = shim_path(hooks_dir, phase)
        path.parent.mkdir(parents=True, exist_ok=True)
        chain = chain_healthcheck if phase == "healthcheck" else None
        write_atomic(path, render_lab_shim(phase, lab, python, chain), mode=0o755)
        shims[phase] = path
    lines = []
    if healthcheck_interval is not None:
        lines += [
            f"HealthCheckProgram={shims['healthcheck']}",
            f"HealthCheckInterval={int(healthcheck_interval)}",
            "HealthCheckNodeState=ANY",
        ]
    if epilog:
        lines.append(f"Epilog={shims['epilog']}")
    if prolog:
        lines += [f"Prolog={shims['prolog']}", "PrologFlags=Alloc,DeferBatch"]
    extra = "\n".join(lines)
    hooks = LabHooks(lab, files, shims, extra, breaker_file, gpus, preset)
    hooks.reset_state()
    if reconfigure and lab.extra_conf != extra:
        lab.reconfigure(extra)
    return hooks


# -- the owner's webhook ------------------------------------------------------------------


class WebhookRecorder:
    """A loopback HTTP server that answers 200 to every POST and keeps the
    JSON bodies (the "owner's webhook" of the tests and the demo)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.posts: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size)
                try:
                    doc = json.loads(body or b"null")
                except ValueError:
                    doc = {"raw": body.decode(errors="replace")}
                with recorder._lock:
                    recorder.posts.append({"path": self.path, "body": doc})
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("webhook recorder: " + fmt, *args)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/hook"

    def alerts(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The ``slurm_hooks`` part of each POST (the raw alert), optionally of one kind."""
        with self._lock:
            docs = [
                p["body"].get("slurm_hooks", {}) for p in self.posts if isinstance(p["body"], dict)
            ]
        return [d for d in docs if kind is None or d.get("kind") == kind]

    def clear(self) -> None:
        with self._lock:
            self.posts.clear()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def __enter__(self) -> WebhookRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_drained(lab: Lab, node: str, *, timeout: float = 10.0, interval: float = 0.02) -> str:
    """Poll ``sinfo -R`` until ``node`` shows a reason; returns it (``%E``)."""
    from slurm_hooks.detect.probes.commands import run

    deadline = time.monotonic() + timeout
    while True:
        res = run(
            ["sinfo", "-R", "-h", "-n", node, "-o", "%E|%N"], timeout=10, env=lab.env(), check=False
        )
        for line in res.stdout.splitlines():
            reason, _, nodes = line.rpartition("|")
            if reason and node in _expand(nodes):
                return reason
        if time.monotonic() > deadline:
            raise LabError(f"{node} not drained after {timeout:g}s")
        time.sleep(interval)


def _expand(nodes: str) -> Sequence[str]:
    from slurm_hooks.core.hostlist import expand

    try:
        return list(expand(nodes.strip()))
    except Exception:  # noqa: BLE001 - a plain name list is fine too
        return nodes.strip().split(",")


def _fresh_dir(path: Path, tries: int = 20) -> None:
    """``path`` emptied and recreated, even while a process that was just
    killed (or one we do not know of) still writes into it for a moment."""
    for _ in range(tries):
        shutil.rmtree(path, ignore_errors=True)
        try:
            path.mkdir(parents=True)
            return
        except FileExistsError:
            time.sleep(0.1)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
