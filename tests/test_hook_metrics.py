"""``[metrics] textfile_dir``: the real hook process writes
``slurm_hooks_<phase>.prom`` for node_exporter, atomically, and a node
without node_exporter's directory pays nothing for it.

Before this was wired, no hook wrote the file (``write_textfile`` had no
caller) while README, docs/configuration.md and the runbook's alerts read it.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hook_config import write_config
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]


#: The hook's own entry, in-process, reporting its exit code and whether
#: prometheus_client was imported.
PROBE = """
import json, sys
from slurm_hooks.agent import hook
code = hook.main(sys.argv[1:])
print(json.dumps({"code": code, "prom": "prometheus_client" in sys.modules}))
"""


def _config(tmp_path: Path, metrics: str) -> Path:
    return write_config(tmp_path, metrics + "\n")


def _hook(cfg: Path, phase: str, *, probe: bool = False) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "SLURM_HOOKS_CONFIG": str(cfg),
        "SLURMD_NODENAME": "cpu01",
        "SLURM_HOOKS_LOG_LEVEL": "WARNING",
    }
    argv = [sys.executable, "-c", PROBE, phase] if probe else [
        sys.executable, "-m", "slurm_hooks", "hook", phase
    ]  # fmt: skip
    return subprocess.run(
        argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )


def _samples(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(path.read_text()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.mark.parametrize("phase", ["healthcheck", "epilog"])
def test_real_hook_writes_a_parseable_textfile(tmp_path: Path, phase: str) -> None:
    prom = tmp_path / "node-exporter"
    prom.mkdir()
    cfg = _config(tmp_path, f'[metrics]\ntextfile_dir = "{prom}"\nwatch_port = 0\n')
    res = _hook(cfg, phase)
    assert res.returncode == 0, res.stderr
    path = prom / f"slurm_hooks_{phase}.prom"
    assert path.is_file(), (list(prom.iterdir()), res.stderr)
    # Nothing but the file itself: the temp file was renamed over it.
    assert [p.name for p in prom.iterdir()] == [path.name]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # node_exporter is another user
    samples = _samples(path)
    ts = samples[("slurm_hooks_last_check_timestamp_seconds", (("phase", phase),))]
    assert abs(ts - path.stat().st_mtime) < 60
    assert samples[("slurm_hooks_phase_duration_seconds", (("phase", phase),))] > 0
    statuses = {
        dict(labels)["check"]: v
        for (name, labels), v in samples.items()
        if name == "slurm_hooks_check_status"
    }
    assert statuses and set(statuses.values()) == {0.0}  # healthy: every check OK
    assert "mounts" in statuses and "gpu_lost" in statuses  # checks of both phases
    # The next run replaces the file (one file per phase, never appended to).
    first = path.read_text()
    assert _hook(cfg, phase).returncode == 0
    assert path.read_text() != first and len(list(prom.iterdir())) == 1


def test_missing_or_disabled_textfile_dir_costs_no_import(tmp_path: Path) -> None:
    """No node_exporter directory (the default one absent) or ``enabled =
    false``: no file, and prometheus_client is never imported on the hook path."""
    missing = tmp_path / "nope"
    for metrics in (
        f'[metrics]\ntextfile_dir = "{missing}"\n',
        f'[metrics]\nenabled = false\ntextfile_dir = "{tmp_path}"\n',
    ):
        res = _hook(_config(tmp_path, metrics), "healthcheck", probe=True)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout.strip().splitlines()[-1])
        assert out == {"code": 0, "prom": False}, res.stderr
        assert not missing.exists() and not list(tmp_path.glob("*.prom"))
    # A directory that was configured but does not exist is said, not created.
    res = _hook(_config(tmp_path, f'[metrics]\ntextfile_dir = "{missing}"\n'), "healthcheck")
    assert "not a directory" in res.stderr and not missing.exists()


def test_unwritable_textfile_dir_never_fails_the_hook(tmp_path: Path) -> None:
    """A textfile directory that is a file (or full, read-only): logged, exit 0."""
    notdir = tmp_path / "file"
    notdir.write_text("")
    res = _hook(_config(tmp_path, f'[metrics]\ntextfile_dir = "{notdir}"\n'), "healthcheck")
    assert res.returncode == 0, res.stderr
    assert "metrics textfile not written" in res.stderr
