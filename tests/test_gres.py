"""A node's GRES string as Slurm prints it -> its GPU count, and the
acceptance job that asks for them (the real allocation: tests/test_gres_lab.py)."""

from __future__ import annotations

import pytest

from slurm_hooks.agent.acceptance import AcceptanceConfig, srun_argv
from slurm_hooks.slurm.gres import gpu_count


@pytest.mark.parametrize(
    ("gres", "want"),
    [
        ("gpu:4", 4),
        ("gpu:h100:8", 8),
        ("gpu:h100:8(S:0-1)", 8),
        ("gpu:h100:4(S:0,2),gpu:h100:4(S:1,3)", 8),  # a binding holds commas
        ("gpu:a100:4,gpu:v100:2", 6),
        ("gpu:4,nic:1", 4),
        ("nic:1,gpu:2(S:0)", 2),
        ("gpu:1g.10gb:7", 7),  # MIG slices
        ("gpu", 1),
        ("shard:8,mps:400", 0),  # sharing GRES: no whole GPU to ask for
        ("gpu:h100:lots", 0),
        ("(null)", 0),
        ("", 0),
        (None, 0),
    ],
)
def test_gpu_count(gres, want):
    assert gpu_count(gres) == want


def test_the_acceptance_job_asks_for_every_gpu_where_they_are_gres():
    ac = AcceptanceConfig(python="/usr/bin/python3")
    argv = srun_argv(ac, "n2", "r1", gpus=8)
    assert "--gres=gpu:8" in argv and argv.index("--gres=gpu:8") < argv.index("/usr/bin/python3")
    assert not [a for a in srun_argv(ac, "n2", "r1") if a.startswith("--gres")]  # no GRES: none


def test_install_says_when_the_prologs_gres_gpus_does_not_fit_slurm():
    """Recorded ``scontrol show config`` of each release (no GPU GRES there):
    the default ``gres_gpus = true`` would take every job for a CPU job."""
    from pathlib import Path

    from slurm_hooks.cli.gres_advice import advice
    from slurm_hooks.slurm.parse_config import parse_show_config

    for name in ("22.05", "24.11", "26.05"):
        text = (Path(__file__).parent / "data" / "slurm" / f"{name}-show_config.txt").read_text()
        running = parse_show_config(text)
        tip = advice(running.get("GresTypes"), gres_gpus=True)
        assert tip is not None and "Set [prolog] gres_gpus = false." in tip, name
        assert advice(running.get("GresTypes"), gres_gpus=False) is None
        assert advice(running.get("GresTypes"), gres_gpus=True, gpu_jobs_only=False) is None
    assert "Set [prolog] gres_gpus = true." in advice("gpu,mps", gres_gpus=False)
    assert advice("gpu,mps", gres_gpus=True) is None
    assert advice(None, gres_gpus=True) is not None  # 24.11 leaves unset keys out
