"""``simulate --scope``: the same failures under evacuate = "node" and "gpu".

The node replay is checked by hand on one node of 4 GPUs with a fixed
queue; the fleet comparison on what must hold whatever the draws: the same
seed gives the same figures, whole-node jobs make the two scopes equal,
and "gpu" never loses more work than "node".
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from slurm_hooks.simulate.scope import ScopeParams, compare, drains, replay_node

H = 3600.0
P = ScopeParams(gpus_per_node=4, checkpoint_s=2 * H, restart_s=300.0, repair_s=720.0)


def queue(*jobs: tuple[int, float]) -> object:
    """The jobs the scheduler starts, in order (size, hours); then 1-GPU
    jobs that outlast any horizon."""
    it: Iterator[tuple[int, float]] = iter(jobs)

    def draw(free: int) -> tuple[int, float]:
        size, hours = next(it, (1, 1000.0))
        assert size <= free, "the test's queue must fit"
        return size, hours * H

    return draw


def test_a_gpu_fault_moves_every_job_under_node_and_its_gpus_jobs_under_gpu() -> None:
    # GPUs 0 and 1: 1-GPU jobs of 10 h and 20 h; GPUs 2-3: a 2-GPU job of 30 h.
    jobs = ((1, 10.0), (1, 20.0), (2, 30.0))
    fault = [(1 * H, [1])]  # an hour in, a fault on GPU 1
    node = replay_node(P, "node", queue(*jobs), fault, 40 * H)  # type: ignore[arg-type]
    # Every job loses its hour since the start (no checkpoint yet) and a restart.
    assert node.moved == 3 and node.spared == 0 and node.drains == 1
    assert node.lost_h == pytest.approx(4 * (3600 + 300) / H)
    assert node.waiting_h == 0 and node.repair_h == pytest.approx(4 * 720 / H)

    gpu = replay_node(P, "gpu", queue(*jobs), fault, 40 * H)  # type: ignore[arg-type]
    assert gpu.moved == 1 and gpu.spared == 2
    assert gpu.lost_h == pytest.approx(1 * (3600 + 300) / H)
    # GPU 1 waits from 1 h, GPU 0 too once its job ends at 10 h, until the
    # 2-GPU job, the last, ends at 30 h: then the repair.
    assert gpu.waiting_h == pytest.approx(1 * 9 + 2 * 20)
    assert gpu.repair_h == pytest.approx(4 * 720 / H)


def test_a_later_fault_on_a_spared_jobs_gpu_moves_it_and_a_node_fault_moves_all() -> None:
    jobs = ((1, 10.0), (1, 20.0), (2, 30.0))
    later = [(1 * H, [1]), (3 * H, [2])]  # then a fault on GPU 2, the 2-GPU job's
    gpu = replay_node(P, "gpu", queue(*jobs), later, 40 * H)  # type: ignore[arg-type]
    assert gpu.moved == 2 and gpu.drains == 1
    # The 2-GPU job ran 3 h: checkpointed at 2 h, so it loses 1 h and a restart.
    assert gpu.lost_h == pytest.approx((3600 + 300) / H + 2 * (3600 + 300) / H)
    # GPU 1 waits from 1 h, GPUs 1-3 from 3 h until the job on GPU 0, the last, ends at 10 h.
    assert gpu.waiting_h == pytest.approx(1 * 2 + 3 * 7)

    node_wide = [(1 * H, [1]), (3 * H, [None])]
    gpu = replay_node(P, "gpu", queue(*jobs), node_wide, 40 * H)  # type: ignore[arg-type]
    assert gpu.moved == 3 and gpu.waiting_h == pytest.approx(1 * 2)


def test_faults_are_judged_and_decided_by_the_product() -> None:
    """An XID 79 drains for its GPU, a user's XID 13 drains nothing, a node
    that stops answering takes every job."""
    from slurm_hooks.simulate.trace import Fault

    got = drains([Fault(10.0, 0, "faulty_gpu", gpu=3), Fault(20.0, 0, "software_bug", gpu=1),
                  Fault(30.0, 1, "power_supply")])  # fmt: skip
    assert got == {0: [(10.0, [3])], 1: [(30.0, [None])]}


def test_the_fleet_comparison() -> None:
    small = ScopeParams(nodes=16, days=30.0)
    node, gpu = compare(small, 7)
    assert (node.to_dict(), gpu.to_dict()) == tuple(f.to_dict() for f in compare(small, 7))
    assert node.drains == gpu.drains > 0
    assert gpu.lost_h <= node.lost_h and node.waiting_h == 0
    assert gpu.spared > 0 and node.spared == 0
    whole = ScopeParams(nodes=16, days=30.0, mix=((1, 0.0001), (8, 1.0)))
    n8, g8 = compare(whole, 7)
    assert n8.lost_h == pytest.approx(g8.lost_h, rel=0.05)


def test_the_command(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from slurm_hooks.cli.simulate import command

    argv = ["--scope", "--nodes", "8", "--days", "10", "--set", "checkpoint_s=0"]
    r = CliRunner().invoke(command, [*argv, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["params"]["checkpoint_s"] == 0 and set(doc) == {"params", "seed", "node", "gpu"}
    r = CliRunner().invoke(command, argv)
    assert r.exit_code == 0 and "GPU-hours idle under a drain" in r.output
    r = CliRunner().invoke(command, ["--scope", "--set", "mix=1:x"])
    assert r.exit_code == 2 and "mix wants GPUS:SHARE" in r.output
