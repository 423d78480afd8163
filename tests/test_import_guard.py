"""The import guard: what a healthy hook on a node without GPUs may import.

Every node runs the health check every interval and the prolog and epilog
around every job; each module a feature adds to that path is paid thousands
of times an hour.  This test runs each hook entry (``python -m slurm_hooks
hook prolog|epilog|healthcheck``, as the shims exec it) on a healthy CPU
node under ``python -X importtime`` and fails when it imports:

* a third-party distribution (NVML's ``pynvml``, the Kubernetes client,
  ClusterShell once its answers are remembered, requests, click, ...);
* a module of our own outside :data:`ALLOWED` (the remediation engine, the
  Slurm access layer, ``slurm_hooks.k8s``, the metrics module);
* a standard-library module from :data:`HEAVY_STDLIB` (subprocess,
  importlib.metadata's entry-point scan, tempfile, ``dataclasses`` and the
  ``inspect``/``ast``/``dis`` it imports, ...): the hook path's records are
  ``slurm_hooks.core.record`` records, which compile nothing at start-up.

A module that must join the path is added to :data:`ALLOWED` on purpose,
with the benchmark's figure (``bench/bench_healthcheck.py --hook``) in the
commit.  The benchmark, not this test, holds the time goals.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
from hook_config import write_config

from slurm_hooks.detect.probes import pci

#: Our modules a healthy hook without GPUs may import (any phase).
ALLOWED = frozenset(
    {
        "slurm_hooks",
        "slurm_hooks.__main__",
        "slurm_hooks.agent",
        "slurm_hooks.agent.hook",
        "slurm_hooks.agent.hook_output",
        "slurm_hooks.agent.prolog",
        "slurm_hooks.agent.prolog_cache",
        # The job's GPUs from the prolog's environment: moved out of
        # agent.prolog as it was (it imports only core.record).
        "slurm_hooks.agent.prolog_gpus",
        "slurm_hooks.core",
        "slurm_hooks.core.config",
        "slurm_hooks.core.errors",
        "slurm_hooks.core.exits",
        "slurm_hooks.core.model",
        "slurm_hooks.core.plugins",
        "slurm_hooks.core.record",
        "slurm_hooks.detect",
        "slurm_hooks.detect.checks",
        "slurm_hooks.detect.checks.base",
        "slurm_hooks.detect.checks.ib",
        "slurm_hooks.detect.checks.memory",
        "slurm_hooks.detect.checks.mounts",
        "slurm_hooks.detect.checks.registry",
        "slurm_hooks.detect.checks.scratch",
        "slurm_hooks.detect.checks.settings",
        "slurm_hooks.detect.checks.xid",
        "slurm_hooks.detect.fold",
        "slurm_hooks.detect.outcome",
        # The prolog moves a progress directory another user made under the
        # job's id aside (stdlib only: 0.8 ms of imports in a prolog, `python -X importtime`),
        # never looking into a mount a user put there (beneath).
        "slurm_hooks.detect.progress",
        "slurm_hooks.detect.progress.beneath",
        "slurm_hooks.detect.progress.claim",
        "slurm_hooks.detect.probes",
        "slurm_hooks.detect.probes.host",
        "slurm_hooks.detect.probes.pci",
        "slurm_hooks.detect.profiles",
        "slurm_hooks.detect.runner",
        "slurm_hooks.detect.xid",
        "slurm_hooks.detect.xid.commit",
        "slurm_hooks.detect.xid.cursor",
        "slurm_hooks.detect.xid.history",
        "slurm_hooks.detect.xid.limits",
        "slurm_hooks.detect.xid.scan",
        "slurm_hooks.detect.xid.settings",
        "slurm_hooks.detect.xid.source",
        "slurm_hooks.store",
        "slurm_hooks.store.atomicfile",
        "slurm_hooks.store.state",
    }
)

#: Standard-library modules that cost a hook more than they give it.
HEAVY_STDLIB = frozenset(
    {
        "argparse",
        "ast",
        "asyncio",
        "concurrent",
        "ctypes",
        "dataclasses",
        "decimal",
        "dis",
        "email",
        "hashlib",
        "http",
        "importlib.metadata",
        "importlib.resources",
        "inspect",
        "locale",
        "multiprocessing",
        "pickle",
        "random",
        "shutil",
        "socket",
        "ssl",
        "subprocess",
        "tempfile",
        "urllib.request",
        "uuid",
        "zipfile",
    }
)

#: Named in the issue that asked for this guard: never on a healthy CPU hook.
NEVER = ("pynvml", "slurm_hooks.act.engine", "slurm_hooks.k8s", "kubernetes")


def imported(log: str) -> list[str]:
    """Module names from ``python -X importtime`` output, in import order
    (lines ``import time: <self> | <cumulative> | <indent><name>``; other
    lines, such as the hook's log, are ignored)."""
    out = []
    for line in log.splitlines():
        if not line.startswith("import time:"):
            continue
        fields = line.split("|")
        if len(fields) != 3 or not fields[0].split(":")[1].strip().isdigit():
            continue  # the header line
        out.append(fields[2].strip())
    return out


def _top(name: str) -> str:
    return name.partition(".")[0]


def violations(
    modules: Iterable[str],
    *,
    allowed: frozenset[str] = ALLOWED,
    startup: frozenset[str] = frozenset(),
) -> list[str]:
    """The modules a healthy hook must not import, each with why.
    ``startup``: what ``python -c pass`` imports in the same environment
    (site, .pth hooks, an editable install's finder): not the hook's doing."""
    bad = []
    for name in modules:
        if name in startup:
            continue
        top = _top(name)
        if top == "slurm_hooks":
            if name not in allowed:
                bad.append(f"{name} (not in ALLOWED)")
        elif top in sys.stdlib_module_names or top.startswith("_") or top in {"org"}:
            # "org.python.core" is copy's probe for Jython: a failed import, nothing loaded.
            if any(name == h or name.startswith(h + ".") for h in HEAVY_STDLIB):
                bad.append(f"{name} (heavy standard-library module)")
        else:
            bad.append(f"{name} (third-party)")
    return bad


# -- the guard's own judgement, on crafted logs -------------------------------

LOG = """\
import time: self [us] | cumulative | imported package
import time:       120 |        120 |   slurm_hooks.core.errors
2026-01-01 00:00:00,000 INFO slurm-hooks[healthcheck] run phase=healthcheck
import time:       300 |        420 | slurm_hooks.detect.runner
import time:        90 |         90 |     json.decoder
"""


def test_imported_reads_names_and_skips_other_lines() -> None:
    assert imported(LOG) == ["slurm_hooks.core.errors", "slurm_hooks.detect.runner", "json.decoder"]
    assert violations(imported(LOG)) == []


@pytest.mark.parametrize(
    "module",
    [
        "pynvml",
        "slurm_hooks.act.engine",
        "slurm_hooks.act.metrics",
        "slurm_hooks.k8s.client",
        "kubernetes.client",
        "ClusterShell.NodeSet",
        "subprocess",
        "importlib.metadata",
        "ctypes",
        "dataclasses",
        "inspect",
        "slurm_hooks.core.slurm_model",
    ],
)
def test_the_guard_fails_for_each_forbidden_import(module: str) -> None:
    crafted = LOG + f"import time:       500 |        900 | {module}\n"
    assert [v.split(" ")[0] for v in violations(imported(crafted))] == [module]


# -- the hooks themselves ------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_node(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("guard")
    cfg = write_config(tmp, "[metrics]\nenabled = false\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(
        SLURM_HOOKS_CONFIG=str(cfg),
        SLURMD_NODENAME="cpu01",
        SLURM_JOB_ID="4242",
        SLURM_JOB_USER="sltest",
        SLURM_JOB_UID=str(os.getuid()),
        # No Slurm command may run on a healthy node: none is on PATH.
        PATH=str(tmp),
    )
    return env


@pytest.fixture(scope="module")
def startup(cpu_node: dict[str, str]) -> frozenset[str]:
    """What the interpreter imports by itself here (``python -X importtime -c pass``)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "pass"],
        capture_output=True,
        text=True,
        env=cpu_node,
        timeout=60,
        check=True,
    )
    return frozenset(imported(proc.stderr))


def run_hook(phase: str, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *extra, "-m", "slurm_hooks", "hook", phase],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.skipif(not os.path.ismount("/dev/shm"), reason="no /dev/shm mount to write-test")
@pytest.mark.parametrize("phase", ["healthcheck", "epilog", "prolog"])
def test_a_healthy_cpu_hook_imports_only_what_it_needs(
    phase: str, cpu_node: dict[str, str], startup: frozenset[str]
) -> None:
    # The first run remembers hostlist answers (ClusterShell) as every
    # node's first run does; the guard holds for every run after it.
    first = run_hook(phase, cpu_node)
    assert first.returncode == 0, first.stderr
    proc = run_hook(phase, cpu_node, "-X", "importtime")
    assert proc.returncode == 0, proc.stderr
    modules = imported(proc.stderr)
    assert "slurm_hooks.detect.runner" in modules  # the log was read, the checks ran
    assert "slurm_hooks.detect.checks.xid" in modules
    assert violations(modules, startup=startup) == []
    assert not {m for m in modules if m.startswith(NEVER)}


#: The hook entry with one extra import injected before it runs (as a
#: careless top-level import in any module on the path would do).
INJECTED = (
    "import runpy, sys; import {module}; "
    "sys.argv = ['slurm_hooks', 'hook', 'healthcheck']; "
    "runpy.run_module('slurm_hooks', run_name='__main__', alter_sys=True)"
)


@pytest.mark.skipif(not os.path.ismount("/dev/shm"), reason="no /dev/shm mount to write-test")
@pytest.mark.parametrize(
    "module", ["pynvml", "slurm_hooks.act.engine", "slurm_hooks.k8s.client", "dataclasses"]
)
def test_the_guard_catches_an_injected_import_in_a_real_run(
    module: str, cpu_node: dict[str, str], startup: frozenset[str]
) -> None:
    pytest.importorskip(module)
    run_hook("healthcheck", cpu_node)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", INJECTED.format(module=module)],
        capture_output=True,
        text=True,
        env=cpu_node,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    bad = violations(imported(proc.stderr), startup=startup)
    assert module in [v.split(" ")[0] for v in bad]


@pytest.mark.skipif(
    pci.vendor_present(pci.NVIDIA_VENDOR) is not False,
    reason="needs a host whose PCI bus shows no NVIDIA device",
)
def test_no_profile_on_a_host_without_gpus_stays_as_light(
    tmp_path: Path, cpu_node: dict[str, str], startup: frozenset[str]
) -> None:
    """No profile at all (gpu_count unset): the PCI bus says there is no
    GPU, so neither NVML nor the engine (which a run of UNKNOWN "NVML not
    found" findings used to start) is imported."""
    (tmp_path / "kern.log").write_text("")
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[general]\nstate_dir = "{tmp_path / "state"}"\n[metrics]\nenabled = false\n'
        f'[checks.xid]\nsource = "file"\npath = "{tmp_path / "kern.log"}"\n'
    )
    env = {**cpu_node, "SLURM_HOOKS_CONFIG": str(cfg)}
    assert run_hook("healthcheck", env).returncode == 0
    proc = run_hook("healthcheck", env, "-X", "importtime")
    assert proc.returncode == 0, proc.stderr
    modules = imported(proc.stderr)
    assert violations(modules, startup=startup) == []
    assert not {m for m in modules if m.startswith(NEVER)}
