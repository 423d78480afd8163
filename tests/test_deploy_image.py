"""deploy/Containerfile: the image deploy/deployment.yaml names is built
from this repository (before: nothing built it).

The file is parsed instruction by instruction (every COPY source exists,
the base is a slim Debian Python, the user is the Deployment's non-root
uid, the entry point is ``slurm-hooks``).  The slow test builds it with a
container engine when one works here; otherwise it builds the same root
the Containerfile does, ``pip wheel --no-deps .`` and a fresh venv that
installs that wheel, and runs the entry point ``slurm-hooks bridge run --help``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONTAINERFILE = ROOT / "deploy" / "Containerfile"
DEPLOYMENT = ROOT / "deploy" / "deployment.yaml"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    assert not buf, f"dangling continuation: {buf!r}"
    return out


def _deployment() -> dict:
    return yaml.safe_load(DEPLOYMENT.read_text())


def test_containerfile_parses_and_copies_what_exists() -> None:
    ins = instructions(CONTAINERFILE.read_text())
    known = {"FROM", "WORKDIR", "COPY", "RUN", "ENV", "USER", "EXPOSE", "ENTRYPOINT", "CMD"}
    assert {w for w, _ in ins} <= known, ins
    froms = [a for w, a in ins if w == "FROM"]
    assert froms and all(
        a.split()[0].split("/")[-1] in ("python:3.11-slim-bookworm", "python:3.11-slim")
        for a in froms
    ), froms
    stages = {a.split()[-1] for a in froms if " AS " in a.upper()}
    for w, a in ins:
        if w != "COPY":
            continue
        args = shlex.split(a)
        if any(x.startswith("--from=") for x in args):
            assert args[0].split("=", 1)[1] in stages
            continue
        *sources, _dest = args
        for src in sources:
            assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
    # The product only: the lab distribution never goes into the image.
    assert not [a for w, a in ins if w == "COPY" and "lab" in shlex.split(a)[:-1]]
    entry = json.loads(next(a for w, a in ins if w == "ENTRYPOINT"))
    assert entry == ["slurm-hooks"]
    # The Deployment's args run on that entry point, as the image's user.
    (container,) = _deployment()["spec"]["template"]["spec"]["containers"]
    assert container["args"][:2] == ["bridge", "run"]
    sc = _deployment()["spec"]["template"]["spec"]["securityContext"]
    user = next(a for w, a in ins if w == "USER")
    assert user == f"{sc['runAsUser']}:{sc['runAsGroup']}"
    port = container["ports"][0]["containerPort"]
    assert str(port) in [a for w, a in ins if w == "EXPOSE"]


def _engine() -> str | None:
    for name in ("docker", "podman", "buildah"):
        exe = shutil.which(name)
        if exe is None:
            continue
        probe = [exe, "info"]
        res = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False)
        if res.returncode == 0:
            return exe
    return None


@pytest.mark.slow
def test_image_root_builds_and_the_entry_point_runs(tmp_path: Path) -> None:
    engine = _engine()
    if engine is not None:
        tag = "localhost/slurm-hooks-test:ci"
        build = [engine, "build" if not engine.endswith("buildah") else "bud", "-f",
                 str(CONTAINERFILE), "-t", tag, str(ROOT)]  # fmt: skip
        res = subprocess.run(build, capture_output=True, text=True, timeout=900, check=False)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        if engine.endswith("buildah"):
            return
        run = [engine, "run", "--rm", tag, "bridge", "run", "--help"]
        res = subprocess.run(run, capture_output=True, text=True, timeout=120, check=False)
        assert res.returncode == 0 and "Usage" in res.stdout, res.stderr
        return
    # No container engine here: the Containerfile's two stages by hand.
    src = tmp_path / "src"
    src.mkdir()
    for w, a in instructions(CONTAINERFILE.read_text()):
        if w == "COPY" and not a.startswith("--from="):
            *sources, _ = shlex.split(a)
            for s in sources:
                p = ROOT / s
                if p.is_dir():
                    shutil.copytree(p, src / s, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy2(p, src / s)
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip"]
    res = subprocess.run(
        [*pip, "wheel", "--no-deps", "--wheel-dir", str(wheels), "."],
        cwd=src, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    (wheel,) = wheels.glob("slurm_hooks-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    res = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--no-cache-dir", str(wheel)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    res = subprocess.run(
        [str(venv / "bin" / "slurm-hooks"), "bridge", "run", "--help"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env, check=False,
    )  # fmt: skip
    assert res.returncode == 0 and "Usage" in res.stdout, res.stderr
    # The product only: no lab code and nothing importable from this checkout.
    res = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import importlib.util as u, slurm_hooks; "
         "print(u.find_spec('slurm_hooks_lab') is None, slurm_hooks.__file__)"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env, check=True,
    )  # fmt: skip
    absent, where = res.stdout.split()
    assert absent == "True" and where.startswith(str(venv)), res.stdout
