"""A real Slurm cluster on one machine, for tests, the demo and curious admins.

Debian's slurmd is built with multiple-slurmd support, so N ``slurmd -N nX``
daemons can run side by side, each on its own loopback port, next to one
slurmctld and one munged (see docs: shared/notes/slurm-local-cluster.md).
Each slurmd runs in its own UTS namespace so ``hostname`` in jobs and hooks
prints the node name.

The lab owns everything under its base directory and nothing else: its own
munged socket (with the system key), its own ports (picked free, so a test
run and a demo can run at once), and a state file with every PID it started.
``down()`` stops exactly those PIDs (after checking each still is the
process we started) and never kills anything by name.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import pwd
import random
import shlex
import shutil
import signal
import socket
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from slurm_hooks.core import hostlist
from slurm_hooks.core.errors import CommandError, LabError, SlurmError
from slurm_hooks.core.model import NodeState
from slurm_hooks.detect.probes.commands import CommandResult, run
from slurm_hooks.detect.probes.process import pid_alive
from slurm_hooks.slurm import parse
from slurm_hooks.store.atomicfile import write_atomic

log = logging.getLogger(__name__)

STATE_FILE = "lab.json"
ENV_DIR = "SLURM_HOOKS_LAB_DIR"
DEFAULT_DIR = "/tmp/slurm-hooks-lab"
TEST_USER = "sltest"
MUNGE_KEY = "/etc/munge/munge.key"
#: Held while a lab picks ports and until its daemons have bound them.
PORT_LOCK = os.path.join(tempfile.gettempdir(), "slurm-hooks-lab.ports.lock")
REQUIRED_PROGRAMS = ("munged", "slurmctld", "slurmd", "scontrol", "sinfo", "squeue", "unshare")
DEFAULT_SCHED_PARAMS = ("sched_interval=2", "bf_interval=5", "nohold_on_prolog_fail")


def default_dir() -> str:
    return os.environ.get(ENV_DIR) or DEFAULT_DIR


@dataclass(frozen=True)
class LabStatus:
    """What ``lab status`` shows.  ``processes`` maps a daemon name to
    (pid, alive)."""

    base_dir: str
    running: bool
    slurm_conf: str
    slurm_version: str | None = None
    ctld_port: int | None = None
    node_ports: Mapping[str, int] = field(default_factory=dict)
    processes: Mapping[str, tuple[int, bool]] = field(default_factory=dict)
    nodes: tuple[NodeState, ...] = ()
    startup_seconds: float | None = None
    rest_socket: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["nodes"] = [
            {"name": n.name, "state": n.state, "flags": sorted(n.flags), "reason": n.reason}
            for n in self.nodes
        ]
        d["processes"] = {k: {"pid": p, "alive": a} for k, (p, a) in self.processes.items()}
        return d


# -- small helpers ------------------------------------------------------------


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _port_free(port: int) -> bool:
    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET, "127.0.0.1")):
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((addr, port))
            except OSError:
                return False
    return True


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def pick_ports(count: int, *, rng: random.Random | None = None) -> list[int]:
    """``count`` TCP ports that are free now (checked by binding), outside the
    kernel's ephemeral range so that no outgoing connection grabs one before
    the daemon binds it."""
    rng = rng or random.Random()
    lo_eph, hi_eph = _ephemeral_range()
    lo, hi = (10000, lo_eph - 1) if lo_eph > 10000 + count * 4 else (hi_eph + 1, 65000)
    ports: list[int] = []
    tried: set[int] = set()
    while len(ports) < count:
        if len(tried) > (hi - lo):
            raise LabError(f"no {count} free TCP ports in {lo}-{hi}")
        port = rng.randint(lo, hi)
        if port in tried:
            continue
        tried.add(port)
        if _port_free(port):
            ports.append(port)
    return ports


def ensure_user(name: str = TEST_USER) -> pwd.struct_passwd:
    """Create a plain local user (for submitting jobs as non-root) if missing."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    try:
        run(["useradd", "-m", "-s", "/bin/bash", name], timeout=30)
    except CommandError as exc:
        raise LabError(f"cannot create user {name!r}: {exc}") from exc
    return pwd.getpwnam(name)


def can_traverse(path: str | os.PathLike[str], uid: int, gids: Iterable[int]) -> bool:
    """Whether a process with ``uid`` and groups ``gids`` may enter the
    directory ``path`` by its mode bits (``os.access`` answers for us, and
    root may enter anything).  The kernel uses the first class that matches:
    owner, then group, then other; ACLs are not read."""
    st = os.stat(path)
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid in set(gids):
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def closed_parent(path: str | os.PathLike[str], user: str) -> Path | None:
    """The first existing directory above ``path`` (from ``/`` down) that
    ``user`` cannot enter, or None when every one is open to it."""
    pw = pwd.getpwnam(user)
    gids = os.getgrouplist(user, pw.pw_gid)
    for parent in reversed(Path(path).absolute().parents):
        if parent.is_dir() and not can_traverse(parent, pw.pw_uid, gids):
            return parent
    return None


def slurm_version() -> tuple[int, int, int]:
    """The installed Slurm's version, from ``slurmd -V`` (which, unlike
    ``sinfo --version``, needs no configuration)."""
    try:
        res = run(["slurmd", "-V"], timeout=10)
    except CommandError as exc:
        raise LabError(f"cannot run slurmd -V: {exc}") from exc
    try:
        return parse.parse_version(res.stdout or res.stderr)
    except SlurmError as exc:
        raise LabError(str(exc)) from exc


def rest_plugin(version: Sequence[int]) -> str:
    """slurmrestd's ``-s`` value for the slurmctld endpoints alone: one plugin
    per OpenAPI version up to 23.02, then ``openapi/slurmctld`` (the plugin
    type 23.11 and 24.11 report in their answers' ``meta``)."""
    major_minor = (int(version[0]), int(version[1]))
    if major_minor < (23, 2):
        return "openapi/v0.0.38"
    if major_minor < (23, 11):
        return "openapi/v0.0.39"
    return "openapi/slurmctld"


#: First release whose cgroup.conf takes ``CgroupPlugin=disabled``.  From
#: 23.11 slurmd loads a cgroup plugin even with proctrack/linuxproc and
#: task/none, and dies ("No filesystem mounted on /sys/fs/cgroup") where no
#: cgroup filesystem is mounted (a chroot, a container).  22.05 reads no
#: cgroup.conf with this lab's plugins and has no "disabled" value.
CGROUP_DISABLED_SINCE = (23, 11)


def cgroup_conf(version: Sequence[int]) -> str | None:
    """The lab's cgroup.conf for this Slurm ``version``, None for none."""
    if (int(version[0]), int(version[1])) < CGROUP_DISABLED_SINCE:
        return None
    return (
        "# generated by slurm_hooks_lab.lab: the lab tracks processes without cgroups\n"
        "CgroupPlugin=disabled\n"
    )


#: First release whose lab runs slurmrestd the way a site does: as an
#: unprivileged user with JWT authentication (``rest_auth/jwt``, clients send
#: a token from ``scontrol token``).  26.05 refuses the development shortcut
#: (root with ``SLURMRESTD_SECURITY=disable_user_check``: "should only be used
#: for development"); 24.11 runs it the same way so both token paths are
#: tested; 22.05 keeps ``rest_auth/local`` (root, by the socket peer's uid).
REST_JWT_SINCE = (24, 11)
#: The unprivileged user the lab's slurmrestd runs as under JWT.
REST_USER = "slrestd"
#: Where Debian's slurm-wlm-jwt-plugin puts auth_jwt.so (and builds from source).
_PLUGIN_GLOBS = ("/usr/lib/*/slurm-wlm", "/usr/lib*/slurm", "/usr/local/lib*/slurm")


def rest_auth(version: Sequence[int], *, jwt_installed: bool | None = None) -> str:
    """``jwt`` or ``local``: how this lab's slurmrestd authenticates clients
    on Slurm ``version``.  JWT needs auth_jwt.so (Debian: slurm-wlm-jwt-plugin);
    without it the lab falls back to ``local`` (which 26.05 refuses at
    :meth:`Lab.start_rest`, with the package to install)."""
    if (int(version[0]), int(version[1])) < REST_JWT_SINCE:
        return "local"
    if jwt_installed is None:
        jwt_installed = jwt_plugin() is not None
    return "jwt" if jwt_installed else "local"


def jwt_plugin() -> Path | None:
    """auth_jwt.so of the installed Slurm, None when it is not installed."""
    import glob

    for pattern in _PLUGIN_GLOBS:
        for found in sorted(glob.glob(os.path.join(pattern, "auth_jwt.so"))):
            return Path(found)
    return None


def requeue_params(version: Sequence[int]) -> list[str]:
    """SchedulerParameters the lab adds so a requeued job is eligible at once
    where Slurm lets it (``requeue_delay``, from 25.11; older releases accept
    the option and ignore it, so it is set by version, as ``install`` does)."""
    from slurm_hooks.cli.installer import SINCE_REQUEUE_DELAY, SUGGESTED_REQUEUE_DELAY

    if (int(version[0]), int(version[1])) < SINCE_REQUEUE_DELAY:
        return []
    return [f"requeue_delay={SUGGESTED_REQUEUE_DELAY}"]


def rest_api(version: Sequence[int]) -> str:
    """The OpenAPI version a RestClient should ask this lab's slurmrestd for."""
    from slurm_hooks.slurm.rest_backend import api_for_version

    return api_for_version(version)


def missing_prerequisites() -> list[str]:
    """Why a lab cannot start here (empty when it can): not root, programs or
    the munge key missing."""
    problems = []
    if os.geteuid() != 0:
        problems.append("the lab must run as root (it starts slurmd and munged)")
    missing = [p for p in REQUIRED_PROGRAMS if shutil.which(p, path=_path()) is None]
    if missing:
        problems.append(
            "missing programs: "
            + ", ".join(missing)
            + " (apt-get install slurmctld slurmd slurm-client munge)"
        )
    if not os.path.exists(MUNGE_KEY):
        problems.append(f"missing {MUNGE_KEY} (install munge)")
    try:
        pwd.getpwnam("munge")
    except KeyError:
        problems.append("missing user 'munge' (install munge)")
    return problems


def _path() -> str:
    from slurm_hooks.detect.probes.commands import DEFAULT_PATH

    return os.environ.get("PATH") or DEFAULT_PATH


# -- the lab ------------------------------------------------------------------


class Lab:
    """A real Slurm cluster under ``base_dir``.

    ``extra_conf`` is appended to the generated slurm.conf (Prolog=, Epilog=,
    HealthCheckProgram=, ...); a ``SchedulerParameters=`` line in it is merged
    into ours, since Slurm honours only one.  A Lab object for a directory
    whose lab another process started (``Lab(dir).down()``) reads the ports,
    PIDs and node names from the state file.

    ``cred_expire`` and ``kill_wait`` default to 5 s (Slurm's smallest
    cred_expire; the demo's values): a requeued job is eligible again after
    cred_expire+1 s on releases before 25.11 and a cancelled job's steps get
    KillWait between TERM and KILL, both waited out by many lab tests.  A
    site's values (install's suggestions) are longer; the tests' do not
    depend on these lengths.
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str] | None = None,
        nodes: int | None = None,
        *,
        cpus: int = 2,
        memory_mb: int = 1000,
        extra_conf: str = "",
        return_to_service: int = 1,
        sched_params: Sequence[str] = DEFAULT_SCHED_PARAMS,
        cred_expire: int = 5,
        kill_wait: int = 5,
        slurmd_timeout: int = 30,
        proctrack: str = "proctrack/linuxproc",
        uts: bool = True,
        timeout: float = 60.0,
        topology_conf: str = "",
        extra_records: int = 0,
        gpus: int = 0,
        shards: int = 0,
    ) -> None:
        self.base_dir = Path(base_dir or default_dir()).absolute()
        state = self._read_state()
        if nodes is None:
            nodes = len(state.get("nodes", [])) or 4
        if nodes < 1:
            raise LabError("a lab needs at least one node")
        self.nodes = nodes
        self.cpus = cpus
        self.memory_mb = memory_mb
        self.extra_conf = extra_conf if extra_conf else state.get("extra_conf", "")
        self.return_to_service = return_to_service
        self.sched_params = tuple(sched_params)
        self.cred_expire = max(5, cred_expire)
        self.kill_wait = kill_wait
        self.slurmd_timeout = slurmd_timeout
        self.proctrack = proctrack
        self.uts = uts
        self.timeout = timeout
        #: topology.conf text (written beside slurm.conf, TopologyPlugin=topology/tree).
        self.topology_conf = topology_conf
        #: Node records with no slurmd behind them (``r00001`` ...): powered-down
        #: CLOUD nodes in a partition of their own (listed: PrivateData=cloud;
        #: never pinged, where DOWN records cost slurmctld a thread each): a
        #: slurmctld whose node table is as large as a big site's, for
        #: measuring what one table read costs (bench/bench_fault_cost.py)
        #: without starting thousands of slurmd.
        if extra_records < 0:
            raise LabError("extra_records must be >= 0")
        self.extra_records = extra_records
        #: GPUs per node as Slurm GRES (``GresTypes=gpu``, ``Gres=gpu:N``, a
        #: gres.conf naming character devices made under the lab's ``dev/``,
        #: major 195 as the driver's): Slurm allocates them to jobs and puts
        #: ``SLURM_JOB_GPUS`` and ``CUDA_VISIBLE_DEVICES`` in the prolog's
        #: environment as on a GPU cluster.  0: no GRES (every job may use
        #: every fake GPU).
        if gpus < 0:
            raise LabError("gpus must be >= 0")
        self.gpus = gpus
        #: With ``gpus``: that many ``gres/shard`` a node, spread over its
        #: GPUs (Slurm's GPU sharing: jobs share a GPU, none holds it whole).
        if shards < 0 or (shards and not gpus):
            raise LabError("shards must be >= 0, and need gpus")
        self.shards = shards

    # -- paths and names -----------------------------------------------------

    @property
    def slurm_conf(self) -> Path:
        return self.base_dir / "etc" / "slurm.conf"

    @property
    def state_file(self) -> Path:
        return self.base_dir / STATE_FILE

    @property
    def node_names(self) -> list[str]:
        state = self._read_state()
        if state.get("nodes"):
            return list(state["nodes"])
        return [f"n{i}" for i in range(1, self.nodes + 1)]

    @property
    def log_dir(self) -> Path:
        return self.base_dir / "log"

    @property
    def shared_dir(self) -> Path:
        """World-writable (sticky) scratch space for job scripts and outputs,
        so that jobs of a non-root user can write there."""
        return self.base_dir / "shared"

    @property
    def jwt_key(self) -> Path:
        """slurmctld's JWT key (``AuthAltParameters=jwt_key=``), where used."""
        return self.base_dir / "etc" / "jwt.key"

    @property
    def hooks_dir(self) -> Path:
        return self.base_dir / "hooks"

    def node_dir(self, name: str) -> Path:
        """Per-node directory (fake kernel log, fake-GPU scenario, ...)."""
        if name not in self.node_names:
            raise LabError(f"no node {name!r} in this lab ({', '.join(self.node_names)})")
        return self.base_dir / "nodes" / name

    def env(self) -> dict[str, str]:
        """Environment for Slurm clients talking to this lab."""
        return {"SLURM_CONF": str(self.slurm_conf)}

    def client(self, **opts: Any):  # type: ignore[no-untyped-def]
        """A CLI-backend SlurmClient bound to this lab."""
        from slurm_hooks.slurm.cli_backend import CliClient

        opts.setdefault("timeout", 10.0)
        opts.setdefault("retries", 2)
        opts.setdefault("backoff", 0.2)
        return CliClient(slurm_conf=str(self.slurm_conf), **opts)

    # -- state file ------------------------------------------------------------

    def _read_state(self) -> dict[str, Any]:
        try:
            data = json.loads((self.base_dir / STATE_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise LabError(f"unreadable lab state {self.base_dir / STATE_FILE}: {exc}") from exc
        return data if isinstance(data, dict) else {}

    def _write_state(self, state: Mapping[str, Any]) -> None:
        write_atomic(self.state_file, json.dumps(state, indent=2, sort_keys=True) + "\n")

    def _ours(self, pid: int) -> bool:
        """Is ``pid`` still a process this lab started?  Its command line names
        a path under our base dir (munged --socket, slurm* -f conf)."""
        return pid_alive(pid) and str(self.base_dir) in _cmdline(pid)

    def _live_pids(self, state: Mapping[str, Any]) -> dict[str, int]:
        """Recorded PIDs that are still ours, plus what the daemons' own pid
        files say (a daemon that re-execs itself on ``scontrol reconfigure``,
        as newer slurmctld does, may have a new PID)."""
        live = {
            name: int(pid)
            for name, pid in (state.get("pids") or {}).items()
            if self._ours(int(pid))
        }
        if not state.get("pids"):
            return live
        pid_files = {"slurmctld": self.base_dir / "run" / "slurmctld.pid"}
        for node in state.get("nodes") or []:
            pid_files[f"slurmd-{node}"] = self.base_dir / "run" / f"slurmd-{node}.pid"
        for name, path in pid_files.items():
            if name in live:
                continue
            try:
                pid = int(path.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            if self._ours(pid):
                live[name] = pid
        return live

    def is_running(self) -> bool:
        return bool(self._live_pids(self._read_state()))

    # -- configuration -----------------------------------------------------------

    def _render_conf(self, state: Mapping[str, Any], extra_conf: str) -> str:
        b = self.base_dir
        sched = list(state.get("sched_params") or self.sched_params)
        extra_lines = []
        for line in extra_conf.splitlines():
            key, sep, value = line.strip().partition("=")
            if sep and key.strip().lower() == "schedulerparameters":
                sched += [v for v in value.strip().split(",") if v and v not in sched]
            else:
                extra_lines.append(line)
        lines = [
            f"# generated by slurm_hooks_lab.lab for {b} - rewritten on every up/reconfigure",
            "ClusterName=lab",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={state['ctld_port']}",
            "AuthType=auth/munge",
            f"AuthInfo=socket={b}/munge/munge.socket.2,cred_expire={state['cred_expire']}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={b}/ctld",
            f"SlurmdSpoolDir={b}/spool/%n",
            # Each node's own temporary directory: every slurmd of the lab runs
            # on one host, and Slurm's PMIx plugin makes a step's client
            # directory under TmpFS by job and step only, so with the default
            # /tmp the second node's `srun --mpi=pmix` task fails ("Cannot
            # create client cli tmpdir ... File exists").
            f"TmpFS={b}/tmp/%n",
            f"SlurmctldPidFile={b}/run/slurmctld.pid",
            f"SlurmdPidFile={b}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={b}/log/slurmctld.log",
            f"SlurmdLogFile={b}/log/slurmd-%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            # No cgroups here: linuxproc (or pgid) tracking, no task plugin.
            f"ProctrackType={state['proctrack']}",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            f"ReturnToService={state['return_to_service']}",
            f"SlurmdTimeout={state['slurmd_timeout']}",
            "SlurmctldTimeout=30",
            f"KillWait={state['kill_wait']}",
            "MinJobAge=300",
            # Every slurmd talks to slurmctld directly: no message fan-out tree.
            "TreeWidth=65533",
            f"SchedulerParameters={','.join(sched)}",
            # slurmd runs it for `scontrol reboot`: restarts that node's slurmd
            # (slurm_hooks_lab.reboot), the lab's stand-in for a machine reboot.
            f"RebootProgram={b}/bin/reboot-node",
        ]
        if state.get("rest_auth") == "jwt":
            # Only slurmctld reads the key; clients and slurmrestd need the plugin.
            lines += ["AuthAltTypes=auth/jwt", f"AuthAltParameters=jwt_key={self.jwt_key}"]
        if state.get("topology"):
            lines.append("TopologyPlugin=topology/tree")
        gpus = int(state.get("gpus") or 0)
        shards = int(state.get("shards") or 0)
        if gpus:
            lines.append("GresTypes=gpu,shard" if shards else "GresTypes=gpu")
        for name in state["nodes"]:
            lines.append(
                f"NodeName={name} NodeHostname={name} NodeAddr=127.0.0.1 "
                f"Port={state['node_ports'][name]} CPUs={state['cpus']} "
                f"RealMemory={state['memory_mb']} State=UNKNOWN"
                + (f" Gres=gpu:{gpus}" if gpus else "")
                + (f",shard:{shards}" if shards else "")
            )
        records = int(state.get("extra_records") or 0)
        if records:
            # Records only: powered-down CLOUD nodes, no slurmd, outside the
            # lab's partition so no job or hook sees them.
            span = f"r[{1:05d}-{records:05d}]" if records > 1 else "r00001"
            lines.append(
                f"NodeName={span} NodeAddr=127.0.0.1 Port=1 CPUs={state['cpus']} "
                f"RealMemory={state['memory_mb']} State=CLOUD"
            )
            part_nodes = hostlist.fold(state["nodes"])
            lines.append(f"PartitionName=debug Nodes={part_nodes} Default=YES MaxTime=INFINITE "
                         "State=UP")  # fmt: skip
            lines.append(f"PartitionName=records Nodes={span} MaxTime=INFINITE State=UP")
            lines.append("PrivateData=cloud")  # powered-down cloud nodes are listed
        else:
            lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        if extra_lines:
            lines.append("# --- extra configuration ---")
            lines.extend(extra_lines)
        return "\n".join(lines) + "\n"

    # -- processes -----------------------------------------------------------------

    def _spawn(self, name: str, argv: Sequence[str]) -> int:
        """Start a daemon in its own session with output to log/<name>.out and
        return its PID.  ``setsid X &`` in a non-interactive shell execs X
        (no job control, so X is not a group leader and setsid does not
        fork), hence ``$!`` is the daemon's own PID."""
        out = self.log_dir / f"{name}.out"
        # SLURMD_RECONF_LISTEN_FD: slurmd (24.11 here; not 22.05) re-execs itself on
        # `scontrol reconfigure` and hands its listening socket over in this
        # variable; every program that slurmd then starts (the RebootProgram
        # among them) inherits it, and a slurmd started from there would
        # take fd 9 of *its* parent for a socket and die at once
        # ("_create_msg_socket: unable to process fd:9", seen on 24.11).
        script = (
            "unset SLURMD_RECONF_LISTEN_FD; "
            'log=$1; shift; setsid "$@" >"$log" 2>&1 </dev/null & echo $!'
        )
        env = {"SLURM_CONF": str(self.slurm_conf)}
        try:
            res = run(
                ["/bin/sh", "-c", script, "sh", str(out), *argv], timeout=10, env=env, cwd="/"
            )
        except CommandError as exc:
            raise LabError(f"cannot start {name}: {exc}") from exc
        try:
            return int(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise LabError(f"cannot start {name}: no pid in {res.stdout!r}") from exc

    def _slurmd_argv(self, name: str, *, boot_now: bool = False) -> list[str]:
        conf = shlex.quote(str(self.slurm_conf))
        # A "rebooted" node (slurm_hooks_lab.reboot): slurmctld counts a
        # reboot as done only when the node's boot time moved past the
        # request, so that slurmd runs in a time namespace whose uptime
        # starts now (Linux 5.6+; unshare execs, so $! stays slurmd's PID).
        boot: list[str] = []
        if boot_now:
            from slurm_hooks_lab.reboot import host_uptime

            boot = ["--time", "--boottime", str(-int(host_uptime()))]
        if not self.uts and not boot:
            return ["slurmd", "-D", "-f", str(self.slurm_conf), "-N", name]
        if not self.uts:
            return ["unshare", *boot, "--", "slurmd", "-D", "-f", str(self.slurm_conf), "-N", name]
        inner = f"hostname {shlex.quote(name)} && exec slurmd -D -f {conf} -N {shlex.quote(name)}"
        return ["unshare", "--uts", *boot, "--", "/bin/sh", "-c", inner]

    def _tail_logs(self, lines: int = 15) -> str:
        chunks = []
        for path in sorted(self.log_dir.glob("*")):
            try:
                text = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            if text:
                chunks.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(chunks)

    def _check_alive(self, state: Mapping[str, Any]) -> None:
        dead = [n for n, pid in state["pids"].items() if not pid_alive(int(pid))]
        if dead:
            raise LabError(f"lab daemon(s) exited: {', '.join(dead)}\n{self._tail_logs()}")

    # -- up / down --------------------------------------------------------------------

    def up(self) -> float:
        """Start munged, slurmctld and the slurmd daemons; return the seconds
        from nothing running to all nodes idle."""
        problems = missing_prerequisites()
        if problems:
            raise LabError("; ".join(problems))
        if self.is_running():
            raise LabError(f"a lab is already running in {self.base_dir} (run 'lab down' first)")
        version = slurm_version()
        t0 = time.monotonic()
        b = self.base_dir
        self._check_reachable()
        created = [p for p in (b, *b.parents) if not p.exists()]
        b.mkdir(parents=True, exist_ok=True)
        for p in created:
            os.chmod(p, 0o755)  # ours: open them to munge and the job users
        os.chmod(b, 0o755)  # munge and job users must reach their parts
        for sub in ("ctld", "spool", "run", "log", "munge", "tmp"):
            shutil.rmtree(b / sub, ignore_errors=True)
        for sub in ("etc", "ctld", "spool", "run", "log", "munge", "hooks", "nodes", "tmp"):
            (b / sub).mkdir(parents=True, exist_ok=True)
        shared = self.shared_dir
        shutil.rmtree(shared, ignore_errors=True)
        shared.mkdir()
        os.chmod(shared, 0o1777)
        munge = pwd.getpwnam("munge")
        os.chown(b / "munge", munge.pw_uid, munge.pw_gid)
        names = [f"n{i}" for i in range(1, self.nodes + 1)]
        for name in names:
            (b / "spool" / name).mkdir(parents=True, exist_ok=True)
            (b / "tmp" / name).mkdir(parents=True, exist_ok=True)
            os.chmod(b / "tmp" / name, 0o1777)  # as /tmp: the job users' too
            (b / "nodes" / name).mkdir(parents=True, exist_ok=True)

        state: dict[str, Any] = {
            "format": 1,
            "base_dir": str(b),
            "slurm_version": f"{version[0]}.{version[1]:02d}.{version[2]}",
            "nodes": names,
            "cpus": self.cpus,
            "memory_mb": self.memory_mb,
            "cred_expire": self.cred_expire,
            "kill_wait": self.kill_wait,
            "slurmd_timeout": self.slurmd_timeout,
            "return_to_service": self.return_to_service,
            "proctrack": self.proctrack,
            "sched_params": list(self.sched_params)
            + [
                p
                for p in requeue_params(version)
                if p.partition("=")[0] not in {q.partition("=")[0] for q in self.sched_params}
            ],
            "rest_auth": rest_auth(version),
            "extra_conf": self.extra_conf,
            "topology": bool(self.topology_conf),
            "extra_records": self.extra_records,
            "gpus": self.gpus,
            "shards": self.shards,
            "pids": {},
            "started_at": time.time(),
        }
        with open(PORT_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            ports = pick_ports(len(names) + 1)
            state["ctld_port"] = ports[0]
            state["node_ports"] = dict(zip(names, ports[1:], strict=True))
            if state["rest_auth"] == "jwt":
                # The HS256 key slurmctld signs and checks tokens with: 32+
                # random bytes, readable by SlurmUser (root here) alone.
                write_atomic(self.jwt_key, os.urandom(48).hex(), mode=0o600)
            write_atomic(self.slurm_conf, self._render_conf(state, self.extra_conf))
            from slurm_hooks_lab import reboot as lab_reboot

            lab_reboot.install(b)
            if self.topology_conf:
                write_atomic(self.slurm_conf.parent / "topology.conf", self.topology_conf)
            if self.gpus:
                write_atomic(self.slurm_conf.parent / "gres.conf", self._gres_conf(names))
            cgroup = cgroup_conf(version)
            if cgroup is not None:  # slurmd reads cgroup.conf beside slurm.conf
                write_atomic(self.slurm_conf.parent / "cgroup.conf", cgroup)
            self._write_state(state)
            try:
                self._start_daemons(state, names)
            except BaseException:
                with contextlib.suppress(Exception):
                    self.down()
                raise
        state["startup_seconds"] = round(time.monotonic() - t0, 3)
        self._write_state(state)
        log.info("lab up base=%s nodes=%d seconds=%.2f", b, len(names), state["startup_seconds"])
        return float(state["startup_seconds"])

    def _gres_conf(self, names: Sequence[str]) -> str:
        """gres.conf for ``self.gpus`` GPUs a node: each node's own character
        devices (``dev/<node>/nvidia<i>``, major 195, minor i, as the
        driver's), since every slurmd of the lab runs on this one host."""
        lines = []
        last = self.gpus - 1
        for name in names:
            d = self.base_dir / "dev" / name
            d.mkdir(parents=True, exist_ok=True)
            for i in range(self.gpus):
                dev = d / f"nvidia{i}"
                if not dev.exists():
                    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(195, i))
            files = f"{d}/nvidia[0-{last}]" if last else f"{d}/nvidia0"
            lines.append(f"NodeName={name} Name=gpu File={files}")
            if self.shards:
                lines.append(f"NodeName={name} Name=shard Count={self.shards} File={files}")
        return "\n".join(lines) + "\n"

    def _check_reachable(self) -> None:
        """munged runs as user munge and must reach its socket under the base
        dir; a parent it cannot enter (a ``tempfile.mkdtemp`` directory is
        0700) would make the lab fail later with an obscure munge error."""
        closed = closed_parent(self.base_dir, "munge")
        if closed is not None:
            mode = stat.S_IMODE(closed.stat().st_mode)
            raise LabError(
                f"user munge cannot enter {closed} (mode {mode:04o}), a parent of the lab "
                f"directory {self.base_dir}: munged could not reach its socket there. "
                f"Run 'chmod o+x {closed}' or choose a lab directory under an open parent "
                f"(e.g. {DEFAULT_DIR})"
            )

    def _start_daemons(self, state: dict[str, Any], names: list[str]) -> None:
        b = self.base_dir
        sock = b / "munge" / "munge.socket.2"
        state["pids"]["munged"] = self._spawn(
            "munged",
            [
                "setpriv",
                "--reuid=munge",
                "--regid=munge",
                "--init-groups",
                "munged",
                "-F",
                f"--socket={sock}",
                f"--pid-file={b}/munge/munged.pid",
                f"--log-file={b}/munge/munged.log",
                f"--seed-file={b}/munge/munged.seed",
            ],
        )
        self._write_state(state)
        self.wait_for(lambda: sock.exists(), 10, what="munged socket", state=state)
        state["pids"]["slurmctld"] = self._spawn(
            "slurmctld", ["slurmctld", "-D", "-f", str(self.slurm_conf)]
        )
        self._write_state(state)
        client = self.client(retries=0, timeout=5)
        self.wait_for(client.ping, 30, what="slurmctld to answer", state=state)
        config = client.show_config()
        if config.get("MULTIPLE_SLURMD", "Yes").lower() not in ("yes", "1", "true"):
            raise LabError(
                "this Slurm was built without multiple-slurmd support "
                "(scontrol show config: MULTIPLE_SLURMD = "
                f"{config.get('MULTIPLE_SLURMD')}); the lab would need one network "
                "namespace per slurmd, which it does not implement"
            )
        for name in names:
            state["pids"][f"slurmd-{name}"] = self._spawn(f"slurmd-{name}", self._slurmd_argv(name))
        self._write_state(state)
        self.wait_idle(timeout=self.timeout, _state=state)

    def _cancel_all_jobs(self, timeout: float = 30.0) -> None:
        client = self.client(retries=0, timeout=5)
        try:
            jobs = client.list_jobs()
        except SlurmError as exc:
            log.warning("lab down: cannot list jobs: %s", exc)
            return
        if not jobs:
            return
        for job in jobs:
            with contextlib.suppress(SlurmError):
                client.cancel(job.job_id)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if not client.list_jobs():
                    return
            except SlurmError:
                return
            time.sleep(0.2)
        log.warning("lab down: jobs still listed after %.0fs", timeout)

    def _stop(self, pids: Mapping[str, int], grace: float = 5.0) -> None:
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(pid_alive(p) for p in pids.values()):
            time.sleep(0.05)
        killed = []
        for name, pid in pids.items():
            if pid_alive(pid):
                log.warning("lab down: %s (pid %d) ignored SIGTERM, killing", name, pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        # Until the kernel has ended them (a zombie no longer reads as ours):
        # a daemon started again at once found the old one still "running"
        # and started nothing (a CI run: the new slurmd never came up).
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and any(self._ours(p) for p in killed):
            time.sleep(0.05)

    def down(self) -> bool:
        """Stop what ``up`` started; True if anything was running.  Jobs are
        cancelled first so no slurmstepd outlives its slurmd; then the slurmd
        daemons and slurmctld, then munged.  Safe to call again."""
        state = self._read_state()
        live = self._live_pids(state)
        if not live:
            if state:
                state["pids"] = {}
                self._write_state(state)
            return False
        if "slurmctld" in live and any(k.startswith("slurmd-") for k in live):
            self._cancel_all_jobs()
        if "slurmrestd" in live:
            self._stop({"slurmrestd": live.pop("slurmrestd")})
        daemons = {k: v for k, v in live.items() if k != "munged"}
        self._stop(daemons)
        if "munged" in live:
            self._stop({"munged": live["munged"]})
        state["pids"] = {}
        state.pop("rest_socket", None)
        self._write_state(state)
        log.info("lab down base=%s", self.base_dir)
        return True

    # -- waiting --------------------------------------------------------------------

    def wait_for(
        self,
        predicate: Callable[[], Any],
        timeout: float,
        *,
        interval: float = 0.1,
        what: str = "condition",
        state: Mapping[str, Any] | None = None,
    ) -> Any:
        """Poll ``predicate`` until it returns something truthy (returned);
        LabError after ``timeout`` seconds, with the daemon logs attached when
        the lab is starting (``state``) and a daemon died."""
        deadline = time.monotonic() + timeout
        last_exc: Exception | None = None
        while True:
            try:
                value = predicate()
                if value:
                    return value
            except (SlurmError, CommandError) as exc:
                last_exc = exc
            if state is not None:
                self._check_alive(state)
            if time.monotonic() >= deadline:
                extra = f" (last error: {last_exc})" if last_exc else ""
                raise LabError(f"timed out after {timeout:g}s waiting for {what}{extra}")
            time.sleep(interval)

    def nodes_state(self) -> list[NodeState]:
        return self.client(retries=0, timeout=5).list_nodes()

    def wait_for_nodes(
        self,
        predicate: Callable[[NodeState], bool],
        names: Iterable[str] | None = None,
        *,
        timeout: float = 30.0,
        what: str = "node state",
        _state: Mapping[str, Any] | None = None,
    ) -> list[NodeState]:
        """Wait until ``predicate`` holds for every named node (all by default);
        returns those nodes."""
        wanted = list(names) if names is not None else None

        def check() -> list[NodeState] | None:
            nodes = self.nodes_state()
            if wanted is not None:
                nodes = [n for n in nodes if n.name in wanted]
                if len(nodes) != len(wanted):
                    return None
            return nodes if nodes and all(predicate(n) for n in nodes) else None

        return self.wait_for(check, timeout, interval=0.1, what=what, state=_state)  # type: ignore[no-any-return]

    def wait_node(
        self, name: str, predicate: Callable[[NodeState], bool], *, timeout: float = 30.0
    ) -> NodeState:
        return self.wait_for_nodes(predicate, [name], timeout=timeout, what=f"node {name}")[0]

    def wait_idle(
        self,
        names: Iterable[str] | None = None,
        *,
        timeout: float = 30.0,
        _state: Mapping[str, Any] | None = None,
    ) -> list[NodeState]:
        """Plain ``idle``: no DRAIN, not ``idle*`` (right after start or resume
        a node shows ``idle*`` until slurmctld's next ping).  Node records
        (``extra_records``) never come up: only the lab's own nodes count."""
        state = _state if _state is not None else self._read_state()
        if names is None and state.get("extra_records"):
            names = list(state.get("nodes") or [])
        return self.wait_for_nodes(
            lambda n: n.state == "idle" and not n.flags,
            names,
            timeout=timeout,
            what="nodes idle",
            _state=_state,
        )

    def wait_job(
        self, job_id: str, predicate: Callable[[Any], bool], *, timeout: float = 60.0
    ) -> Any:
        """Wait until ``predicate(JobInfo)`` holds for a job; returns the JobInfo."""
        client = self.client(retries=0, timeout=5)

        def check() -> Any:
            job = client.get_job(job_id)
            return job if predicate(job) else None

        return self.wait_for(check, timeout, interval=0.2, what=f"job {job_id}")

    # -- changes while running ----------------------------------------------------------

    def reconfigure(self, extra_conf: str = "", *, timeout: float = 30.0) -> None:
        """Replace the extra part of slurm.conf and apply it with ``scontrol
        reconfigure``; then wait until every slurmd has re-read the file and
        every node responds again.

        slurmd 22.05 logs nothing that names the reconfiguration, but it
        reloads its plugins and logs that (``Node reconfigured ...``, plugin
        messages); so "its log grew" is the sign, with a short soft limit
        for a quiet slurmd."""
        state = self._read_state()
        if not self._live_pids(state):
            raise LabError(f"no lab running in {self.base_dir}")
        self.extra_conf = extra_conf
        state["extra_conf"] = extra_conf
        write_atomic(self.slurm_conf, self._render_conf(state, extra_conf))
        self._write_state(state)
        marks = {n: self._log_size(n) for n in state["nodes"]}
        # From 24.11 slurmctld answers a reconfigure only once the process it
        # re-execs is up, which on a loaded 2-core CI machine (three labs at
        # once) took more than the client's 10 s three times in a row: one
        # patient ask, not three hasty ones (each retry is another restart).
        self.client(timeout=max(timeout, 60.0), retries=1).reconfigure()
        try:
            self.wait_for(
                lambda: all(self._log_size(n) > marks[n] for n in state["nodes"]),
                min(timeout, 5.0),
                interval=0.05,
                what="slurmd daemons to re-read slurm.conf",
            )
        except LabError as exc:
            log.warning("lab reconfigure: %s; going on", exc)
        self.wait_for_nodes(
            lambda n: "NOT_RESPONDING" not in n.flags and n.state != "unknown",
            timeout=timeout,
            what="nodes to respond after reconfigure",
        )

    def _slurmd_log(self, name: str) -> Path:
        return self.log_dir / f"slurmd-{name}.log"

    def _log_size(self, name: str) -> int:
        try:
            return self._slurmd_log(name).stat().st_size
        except OSError:
            return 0

    def reset(self, extra_conf: str = "", *, timeout: float = 60.0) -> None:
        """Put a running lab back to "fresh" between tests: cancel every job,
        undo every drain and down (whoever set it - this is a test harness,
        not remediation), restore ``extra_conf`` and wait for all nodes idle."""
        state = self._read_state()
        if not self._live_pids(state):
            raise LabError(f"no lab running in {self.base_dir}")
        self._cancel_all_jobs(timeout=timeout)
        if extra_conf != state.get("extra_conf", ""):
            self.reconfigure(extra_conf)
        client = self.client()
        for node in client.list_nodes():
            if node.drained or node.down or "FAIL" in node.flags:
                client.resume(node.name)
            if node.comment:  # held marks (slurm-hooks/1 HELD ...) latch the breaker
                client.set_node_comment(node.name, "")
        # The RebootProgram's per-node logs and pending boot plans
        # (slurm_hooks_lab.reboot): tests count reboots from 0 after a reset.
        rd = self.base_dir / "reboot"
        for pattern in ("*.log", "*.on-boot.json"):
            for path in rd.glob(pattern):
                path.unlink(missing_ok=True)
        self.wait_idle(timeout=timeout)

    def stop_slurmd(self, name: str, grace: float = 5.0) -> bool:
        """Stop node ``name``'s slurmd (a slurmd pod going away); False when
        it was not running.  slurmctld keeps the node (it stops responding)."""
        state = self._read_state()
        pid = state.get("pids", {}).get(f"slurmd-{name}")
        if pid is None or not self._ours(int(pid)):
            return False
        self._stop({f"slurmd-{name}": int(pid)}, grace)
        return True

    def start_slurmd(self, name: str, *, boot_now: bool = False) -> int:
        """Start node ``name``'s slurmd again (a new slurmd pod); its PID.
        Registration with slurmctld follows within a second or so."""
        if name not in self.node_names:
            raise LabError(f"{name} is not a node of this lab")
        state = self._read_state()
        pid = state.get("pids", {}).get(f"slurmd-{name}")
        if pid is not None and self._ours(int(pid)):
            return int(pid)
        new = self._spawn(f"slurmd-{name}", self._slurmd_argv(name, boot_now=boot_now))
        state = self._read_state()
        state.setdefault("pids", {})[f"slurmd-{name}"] = new
        self._write_state(state)
        return new

    def slurmd_pid(self, name: str) -> int:
        pid = self._read_state().get("pids", {}).get(f"slurmd-{name}")
        if pid is None or not self._ours(int(pid)):
            raise LabError(f"slurmd for {name} is not running")
        return int(pid)

    def run_on_node(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        check: bool = False,
    ) -> CommandResult:
        """Run ``argv`` "on" a node the way slurmd runs HealthCheckProgram:
        inside that slurmd's UTS namespace (``hostname`` is the node name),
        as root, cwd /, with an environment of only SLURMD_NODENAME (plus
        ``env``) - in particular no PATH and no SLURM_CONF."""
        pid = self.slurmd_pid(name)
        base_env = {"SLURMD_NODENAME": name, **(env or {})}
        wrapped = [
            "nsenter",
            f"--target={pid}",
            "--uts",
            "--",
            "env",
            "-i",
            *[f"{k}={v}" for k, v in base_env.items()],
            *argv,
        ]
        return run(wrapped, timeout=timeout, check=check, cwd="/")

    # -- slurmrestd ------------------------------------------------------------------------

    def start_rest(self, *, timeout: float = 15.0) -> str:
        """Start slurmrestd on a unix socket under the base dir and return the
        socket path.  With JWT (:func:`rest_auth`, from 24.11) it runs as the
        unprivileged :data:`REST_USER` with ``rest_auth/jwt``, as a site runs
        it, and clients send a token (:meth:`rest_token`, :meth:`rest_client`).
        Before that it runs as root with ``rest_auth/local`` and
        SLURMRESTD_SECURITY=disable_user_check (slurmrestd refuses root
        otherwise), so root clients authenticate by their socket uid."""
        state = self._read_state()
        live = self._live_pids(state)
        if "slurmctld" not in live:
            raise LabError(f"no lab running in {self.base_dir}")
        if "slurmrestd" in live and state.get("rest_socket"):
            return str(state["rest_socket"])
        if shutil.which("slurmrestd", path=_path()) is None:
            raise LabError("slurmrestd is not installed (apt-get install slurmrestd)")
        rest_dir = self.base_dir / "rest"
        rest_dir.mkdir(exist_ok=True)
        sock = rest_dir / "rest.sock"
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()
        version = parse.parse_version(state.get("slurm_version", "22.05"))
        plugin = rest_plugin(version)
        if state.get("rest_auth") == "jwt":
            user = ensure_user(REST_USER)
            os.chown(rest_dir, user.pw_uid, user.pw_gid)  # where it creates the socket
            # SLURM_JWT=daemon: slurmrestd talks to slurmctld with auth/jwt,
            # passing each client's token on (Slurm's jwt.html, slurmrestd).
            argv = ["env", "SLURM_JWT=daemon", "setpriv"]
            argv += [f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}"]
            argv += ["--init-groups", "slurmrestd", "-f", str(self.slurm_conf)]
            argv += ["-a", "rest_auth/jwt"]
        elif (int(version[0]), int(version[1])) >= (26, 5):
            raise LabError(
                f"slurmrestd {state.get('slurm_version')} refuses to run as root: the lab "
                "runs it with JWT, which needs auth_jwt.so (apt-get install slurm-wlm-jwt-plugin, "
                "then restart the lab)"
            )
        else:
            argv = ["env", "SLURMRESTD_SECURITY=disable_user_check", "slurmrestd"]
            argv += ["-f", str(self.slurm_conf), "-a", "rest_auth/local"]
        # Only the slurmctld part: the accounting plugin (dbv0.0.38 on 22.05)
        # aborts or fails without a slurmdbd, which the lab does not run.
        argv += ["-s", plugin]
        argv.append(f"unix:{sock}")
        state["pids"]["slurmrestd"] = self._spawn("slurmrestd", argv)
        state["rest_socket"] = str(sock)
        self._write_state(state)
        self.wait_for(lambda: sock.exists(), timeout, what="slurmrestd socket", state=state)
        return str(sock)

    def rest_token(self, *, user: str = "root", lifespan: int = 3600) -> str | None:
        """A JWT for ``user`` from ``scontrol token`` (what an admin hands a
        REST client, e.g. in ``SLURM_JWT``); None when this lab's slurmrestd
        uses local auth and needs none."""
        state = self._read_state()
        if state.get("rest_auth") != "jwt":
            return None
        try:
            res = run(
                ["scontrol", "token", f"username={user}", f"lifespan={int(lifespan)}"],
                timeout=15,
                env=self.env(),
                check=True,
            )
        except CommandError as exc:
            raise LabError(f"scontrol token failed: {exc}") from exc
        for line in res.stdout.splitlines():
            key, sep, value = line.strip().partition("=")
            if sep and key == "SLURM_JWT" and value:
                return value
        raise LabError(f"scontrol token printed no SLURM_JWT= line: {res.stdout!r}")

    def rest_client(self, **opts: Any):  # type: ignore[no-untyped-def]
        """A RestClient on this lab's slurmrestd (started if needed), with a
        root token where the lab uses JWT; ``opts`` go to RestClient."""
        from slurm_hooks.slurm.rest_backend import RestClient

        sock = self.start_rest()
        token = self.rest_token()
        if token:
            opts.setdefault("user", "root")
            opts.setdefault("token", token)
        return RestClient(socket=sock, **opts)

    # -- status ------------------------------------------------------------------------------

    def status(self) -> LabStatus:
        state = self._read_state()
        processes = {
            name: (int(pid), self._ours(int(pid)))
            for name, pid in (state.get("pids") or {}).items()
        }
        running = any(alive for _, alive in processes.values())
        nodes: tuple[NodeState, ...] = ()
        error = None
        if running and processes.get("slurmctld", (0, False))[1]:
            try:
                nodes = tuple(self.nodes_state())
            except SlurmError as exc:
                error = str(exc)
        return LabStatus(
            base_dir=str(self.base_dir),
            running=running,
            slurm_conf=str(self.slurm_conf),
            slurm_version=state.get("slurm_version"),
            ctld_port=state.get("ctld_port"),
            node_ports=dict(state.get("node_ports") or {}),
            processes=processes,
            nodes=nodes,
            startup_seconds=state.get("startup_seconds"),
            rest_socket=state.get("rest_socket") if running else None,
            error=error,
        )

    def __enter__(self) -> Lab:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def __repr__(self) -> str:
        return f"Lab({str(self.base_dir)!r}, nodes={self.nodes})"
