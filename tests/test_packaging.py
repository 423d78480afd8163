"""Packaging: ``pip install .`` into a clean virtualenv ships the product and
no lab; ``pip install '.[lab]'`` adds the lab (demo, fakes, training
example as package data), found by name from any directory.

Non-editable installs, a plain venv (no system site-packages), pip's
configured index (offline here).  Slow (a minute): marked ``slow``.  The full
demo (~20 s on the lab plus installs) is run by hand from such a venv, not
here: ``slurm-hooks demo --help`` and the package data prove what the
editable install cannot (that the files are inside the wheel).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

#: setuptools' warning for a folder of package data that is not declared as a
#: package (train/, data/): the wall of warnings a set-up printed (#28).
NOT_A_PACKAGE = "is absent from the `packages` configuration"


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600):
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    if shutil.which("python3") is None:
        pytest.skip("no python3")
    d = tmp_path_factory.mktemp("pkg") / "venv"
    r = _run([sys.executable, "-m", "venv", str(d)], cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return d


def _clean_env(elsewhere: Path) -> dict[str, str]:
    """No PYTHONPATH (nothing from the checkout leaks in), no SLURM_HOOKS_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_HOOKS_", "PYTHON"))}
    env["HOME"] = str(elsewhere)
    return env


def test_product_alone_then_with_the_lab(venv: Path, tmp_path: Path) -> None:
    py, bin_ = venv / "bin" / "python", venv / "bin"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _clean_env(elsewhere)

    r = _run([str(py), "-m", "pip", "install", "-q", str(ROOT)], cwd=elsewhere, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert NOT_A_PACKAGE not in r.stderr, r.stderr  # data folders declared as packages
    # The product: CLI, hook entry, no lab code.
    r = _run([str(bin_ / "slurm-hooks"), "--help"], cwd=elsewhere, env=env)
    assert r.returncode == 0 and "bridge" in r.stdout, r.stderr
    assert "demo" not in r.stdout.split("Commands:")[-1]
    r = _run([str(py), "-c", "import slurm_hooks_lab"], cwd=elsewhere, env=env)
    assert r.returncode != 0 and "No module named 'slurm_hooks_lab'" in r.stderr
    r = _run(
        [str(py), "-c", "import slurm_hooks, sys; print(slurm_hooks.__file__)"],
        cwd=elsewhere,
        env=env,
    )
    assert str(venv) in r.stdout, r.stdout  # the installed copy, not the checkout
    # Package data the product runs: the shim of the nhc_function site checks.
    r = _run(
        [str(py), "-c", "import os; from slurm_hooks.detect.site.nhc_function import shim_path; "
         "p = shim_path(); print(os.path.isfile(p), p)"],
        cwd=elsewhere,
        env=env,
    )  # fmt: skip
    assert r.stdout.startswith("True ") and str(venv) in r.stdout, r.stdout + r.stderr
    (elsewhere / "kern.log").write_text("")
    cfg = elsewhere / "config.toml"
    cfg.write_text(
        f'[general]\nstate_dir = "{elsewhere / "state"}"\n'
        f'[checks.xid]\nsource = "file"\npath = "{elsewhere / "kern.log"}"\n'
        '[profiles.cpu]\nbase = "cpu"\nnodes = "cpu[01-02]"\nmemory_gb = 0.1\nmounts = ["/dev/shm"]\n'
    )
    hook_env = {**env, "SLURM_HOOKS_CONFIG": str(cfg), "SLURMD_NODENAME": "cpu01"}
    r = _run([str(py), "-m", "slurm_hooks", "hook", "healthcheck"], cwd=elsewhere, env=hook_env)
    assert r.returncode == 0, r.stdout + r.stderr
    # The fake NVML is not there by name either: the config error says what is known.
    cfg.write_text(
        cfg.read_text().replace("[checks.xid]", '[checks]\nnvml = "lab:fake"\n[checks.xid]')
    )
    r = _run(
        [
            str(py),
            "-m",
            "slurm_hooks",
            "check",
            "--only",
            "gpu_count",
            "--profile",
            "h100-sxm5-80gb",
        ],
        cwd=elsewhere,
        env=hook_env,
    )
    assert r.returncode == 2 and "lab:fake" in r.stdout + r.stderr, r.stdout + r.stderr

    # With the lab: the demo command, the fakes by name, the training example as data.
    r = _run([str(py), "-m", "pip", "install", "-q", f"{ROOT}[lab]"], cwd=elsewhere, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert NOT_A_PACKAGE not in r.stderr, r.stderr
    r = _run([str(bin_ / "slurm-hooks"), "demo", "--help"], cwd=elsewhere, env=env)
    assert r.returncode == 0 and "--grace" in r.stdout, r.stderr
    r = _run([str(bin_ / "slurm-hooks"), "lab", "k8s-standin", "--help"], cwd=elsewhere, env=env)
    assert r.returncode == 0, r.stderr
    probe = (
        "import importlib.resources as r, slurm_hooks_lab\n"
        "t = r.files('slurm_hooks_lab') / 'train'\n"
        "assert (t / 'train.py').is_file() and (t / 'train.sbatch').is_file(), t\n"
        "from slurm_hooks.detect.probes.nvml import load_nvml\n"
        "from slurm_hooks.detect.engines.registry import backend\n"
        f"n = load_nvml('lab:fake', {str(ROOT / 'tests' / 'data' / 'nvml' / 'h100_healthy.toml')!r})\n"
        "n.nvmlInit(); print(n.nvmlDeviceGetCount())\n"
        "print(type(backend('lab:fake', key='k')).__name__)\n"
        "print(slurm_hooks_lab.__file__)\n"
    )
    r = _run([str(py), "-c", probe], cwd=elsewhere, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    count, kind, where = r.stdout.split()
    assert (count, kind) == ("8", "FakeEngines") and where.startswith(str(venv))
