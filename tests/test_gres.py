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
        (tip,) = advice(running.get("GresTypes"), gres_gpus=True)
        assert "Set [prolog] gres_gpus = false." in tip, name
        assert advice(running.get("GresTypes"), gres_gpus=False) == []
        assert advice(running.get("GresTypes"), gres_gpus=True, gpu_jobs_only=False) == []
    (tip,) = advice("gpu,mps", gres_gpus=False, gpu_sharing=True)
    assert "Set [prolog] gres_gpus = true." in tip
    assert advice("gpu,mps", gres_gpus=True, gpu_sharing=True) == []
    (tip,) = advice("gpu,shard", gres_gpus=True)
    assert "Set [prolog] gpu_sharing = true" in tip
    assert len(advice(None, gres_gpus=True)) == 1  # 24.11 leaves unset keys out


@pytest.mark.parametrize(
    ("tres_per", "shares"),
    [
        ("gres:shard:2", True),  # 22.05
        ("gres/shard:2", True),  # 24.11, 26.05
        ("gres/mps:50", True),
        ("gres/gpu:2,gres/shard:1", True),
        ("gres:gpu:2", False),
        ("gres/gpu:h100:8", False),
        ("gres/gpu:sharding:1", False),  # a GPU type that merely contains the word
        ("cpu=4", False),
        (None, False),
    ],
)
def test_shares_gpus(tres_per, shares):
    from slurm_hooks.slurm.gres import shares_gpus

    assert shares_gpus(tres_per) is shares


def test_what_a_job_asked_for_is_read_from_scontrol_and_rest():
    from slurm_hooks.slurm.parse import job_from_fields
    from slurm_hooks.slurm.rest_backend import job_from_json

    fields = {"JobId": "7", "JobState": "RUNNING", "TresPerNode": "gres/shard:2",
              "TresPerJob": "(null)", "TresPerTask": "cpu=1"}  # fmt: skip
    assert job_from_fields(fields).tres_per == "gres/shard:2,cpu=1"
    assert job_from_fields({"JobId": "7", "JobState": "RUNNING"}).tres_per is None
    rest = job_from_json({"job_id": 7, "job_state": ["RUNNING"], "tres_per_node": "gres/mps:50",
                          "tres_per_job": ""})  # fmt: skip
    assert rest.tres_per == "gres/mps:50"
    assert job_from_json({"job_id": 7, "job_state": ["RUNNING"]}).tres_per is None


def test_the_prolog_asks_slurm_only_where_gpus_are_shared_and_believes_no_silence(monkeypatch):
    from slurm_hooks.agent import prolog_sharing
    from slurm_hooks.core.errors import SlurmError
    from slurm_hooks.core.slurm_model import JobInfo
    from slurm_hooks.slurm import factory

    class Client:
        def __init__(self, job):
            self.job = job

        def get_job(self, job_id):
            if isinstance(self.job, Exception):
                raise self.job
            return self.job

    def with_job(job):
        monkeypatch.setattr(factory, "client_from_config", lambda cfg: Client(job))

    with_job(JobInfo("7", "u", "RUNNING", "n1", tres_per="gres:shard:2"))
    assert "shares its GPUs (gres:shard:2)" in prolog_sharing.shared_gpus_reason(None, "7")
    with_job(JobInfo("7", "u", "RUNNING", "n1", tres_per="gres/gpu:2"))
    assert prolog_sharing.shared_gpus_reason(None, "7") is None
    with_job(SlurmError("slurmctld not responding"))
    assert "did not say" in prolog_sharing.shared_gpus_reason(None, "7")


def test_install_says_what_gpu_scoped_evacuation_cannot_do_here(tmp_path):
    """``[policy] evacuate = "gpu"`` needs GPUs as GRES, and spares a job on
    its allocation: ``ConstrainDevices=yes`` makes that all it can open.
    ``scontrol show config`` prints cgroup.conf's keys under "Cgroup Support
    Configuration:" (``slurm_print_key_pairs``, src/api/config_info.c), as
    ``Key = value`` lines like the rest."""
    from pathlib import Path

    from slurm_hooks.cli.gres_advice import evacuate_advice
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.slurm.parse_config import parse_show_config

    gpu = tmp_path / "gpu.toml"
    gpu.write_text('[policy]\nevacuate = "gpu"\n')
    node = tmp_path / "node.toml"
    node.write_text("[policy]\n")
    recorded = (Path(__file__).parent / "data" / "slurm" / "22.05-show_config.txt").read_text()
    running = parse_show_config(recorded)  # the lab's: no GPU GRES, no cgroup.conf
    (tip,) = evacuate_advice(running, config_mod.load(gpu))
    assert "GPUs are not GRES here" in tip and "moves every job" in tip
    assert evacuate_advice(running, config_mod.load(node)) == []
    running["GresTypes"] = "gpu"
    (tip,) = evacuate_advice(running, config_mod.load(gpu))
    assert tip.startswith("ConstrainDevices is not yes")
    constrained = "\nCgroup Support Configuration:\nConstrainDevices        = yes\n"
    running = parse_show_config(recorded + constrained)
    running["GresTypes"] = "gpu"
    assert evacuate_advice(running, config_mod.load(gpu)) == []


def test_install_says_when_this_nodes_gpu_numbers_cannot_be_matched(tmp_path):
    """A GPU node whose device minors are not in bus order and whose gres.conf
    does not say how slurmd numbers (another autodetect plugin here): its
    prolog would give GPU jobs no GPU work, silently but for this hint."""
    from test_gpu_order import driver_list

    from slurm_hooks.cli.gres_advice import numbering_advice

    proc = driver_list(tmp_path, (1, 0))
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "gres.conf").write_text("AutoDetect=rsmi\n")
    running = {"SLURM_CONF": str(etc / "slurm.conf")}
    (tip,) = numbering_advice(running, node="n1", proc_root=proc)
    assert "not in PCI bus order" in tip and "no GPU work" in tip and "AutoDetect=nvml" in tip
    for told in ("AutoDetect=nvml\n", "AutoDetect=nvidia\n"):
        (etc / "gres.conf").write_text(told)
        assert numbering_advice(running, node="n1", proc_root=proc) == []
    # A host without the NVIDIA driver (a head node): nothing to say.
    assert numbering_advice(running, node="n1", proc_root=str(tmp_path / "none")) == []
