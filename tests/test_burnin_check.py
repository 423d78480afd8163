"""BurninCheck / NcclCheck / DcgmCheck wiring: engine choice, budget, fake engines."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from slurm_hooks.core.errors import ConfigError
from slurm_hooks.core.model import Phase
from slurm_hooks.detect.checks.base import CheckContext
from slurm_hooks.detect.checks.burnin import BurninCheck, choose_engine, load_settings
from slurm_hooks.detect.checks.dcgm import DcgmCheck
from slurm_hooks.detect.checks.nccl import NcclCheck
from slurm_hooks.detect.engines.burnin.budget import (
    Skipped,
    budget_shortfall,
    command_timeout,
    time_left,
)
from slurm_hooks.detect.probes.commands import CommandResult

DATA = Path(__file__).parent / "data"
H100 = {"gpu_count": 8, "burnin_min_tflops": 45.0, "nccl_min_busbw_gbps": 400.0}


@pytest.fixture
def no_scenarios(monkeypatch, tmp_path):
    """The environment variables that once switched the product to the fakes,
    set to a valid scenario: the product must ignore them (fakes by name only)."""
    nv = tmp_path / "env-nvml.toml"
    nv.write_text('preset = "h100-sxm5-80gb"\ngpu_count = 8\n')
    monkeypatch.setenv("SLURM_HOOKS_NVML_SCENARIO", str(nv))
    monkeypatch.setenv("SLURM_HOOKS_ENGINE_SCENARIO", str(nv))


def fake_nvml(path):
    """The run's NVML session on the lab's fake backend, as runner.setup builds it."""
    from slurm_hooks.detect.probes.nvml import NvmlSession

    return NvmlSession(backend="lab:fake", scenario=str(path))


def ctx(phase=Phase.PROLOG, profile=H100, settings=None, services=None):
    return CheckContext(
        node="n1", phase=phase, profile=profile, settings=settings or {}, services=services or {}
    )


def run_check(check, c):
    return check.judge(check.gather(c), c)


def test_budget_helpers():
    assert time_left(ctx()) is None
    now = time.monotonic()
    c = ctx(services={"deadline": now + 5})
    assert time_left(c, now=now) == pytest.approx(5)
    assert budget_shortfall(c, 4, now=now) is None
    assert "skipped: budget (5.0s left, needs 12.0s)" == budget_shortfall(c, 12, now=now)
    assert time_left(ctx(services={"deadline": lambda: 3.0})) == 3.0

    class Budget:
        def remaining(self):
            return 7.5

    assert time_left(ctx(settings={"deadline": Budget()})) == 7.5
    assert command_timeout(ctx(), 100) == 100
    assert command_timeout(ctx(settings={"timeout_s": 60}), 100) == 58
    assert (
        command_timeout(ctx(services={"deadline": Budget()}, settings={"timeout_s": 60}), 100)
        == 5.5
    )


def test_burnin_skips_when_budget_too_short(no_scenarios):
    c = ctx(settings={"engine": "gpu_burn", "deadline": time.monotonic() + 3})
    data = BurninCheck().gather(c)
    assert isinstance(data, Skipped)
    (f,) = BurninCheck().judge(data, c)
    assert (f.status.value, f.code) == ("UNKNOWN", "CHECK_SKIPPED")
    assert f.message.startswith("skipped: budget")


def test_burnin_gpu_burn_engine_through_commands(no_scenarios):
    text = (DATA / "gpu_burn" / "slow_gpu5.txt").read_text()
    seen = {}

    def fake_run(argv, **kw):
        seen["argv"], seen["kw"] = argv, kw
        return CommandResult(tuple(argv), 0, text, "", 10.0)

    c = ctx(
        settings={
            "engine": "gpu_burn",
            "gpu_burn": "/opt/gpu_burn",
            "gpu_burn_args": ["-tc"],
            "duration_s": 10,
        },
        services={"run": fake_run},
    )
    fs = run_check(BurninCheck(), c)
    assert seen["argv"] == ["/opt/gpu_burn", "-tc", "10"]
    assert seen["kw"]["timeout"] == pytest.approx(10 + 6 + 30)
    assert [(f.code, f.status.value, f.component.short()) for f in fs] == [
        ("BURNIN_SLOW", "FAIL", "gpu5")
    ]


def test_gpu_burn_runs_where_its_binary_is_never_where_the_caller_is(no_scenarios, tmp_path,
                                                                       monkeypatch):  # fmt: skip
    """gpu_burn reads ``compare.ptx`` from its working directory: root's
    run must never start where a user could have left one (/tmp)."""
    text = (DATA / "gpu_burn" / "faulty_gpu3_errors.txt").read_text()
    bindir = tmp_path / "opt" / "gpu-burn"
    bindir.mkdir(parents=True)
    (bindir / "gpu_burn").write_text("#!/bin/sh\n")
    (bindir / "gpu_burn").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    seen = []

    def fake_run(argv, **kw):
        seen.append(kw["cwd"])
        return CommandResult(tuple(argv), 0, text, "", 10.0)

    run_check(BurninCheck(), ctx(settings={"engine": "gpu_burn"}, services={"run": fake_run}))
    run_check(BurninCheck(), ctx(settings={"engine": "gpu_burn", "gpu_burn_dir": "/srv/gb"},
                                 services={"run": fake_run}))  # fmt: skip
    assert seen == [str(bindir), "/srv/gb"]


def test_burnin_devices_remap_indices(no_scenarios):
    text = (DATA / "gpu_burn" / "faulty_gpu3_errors.txt").read_text()

    def fake_run(argv, **kw):
        assert kw["env"] == {
            "CUDA_VISIBLE_DEVICES": "8,9,10,11,12,13,14,15",
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        }  # Slurm's numbers: PCI order
        return CommandResult(tuple(argv), 0, text, "", 10.0)

    c = ctx(
        profile={},
        settings={"engine": "gpu_burn", "devices": list(range(8, 16))},
        services={"run": fake_run},
    )
    fs = run_check(BurninCheck(), c)
    assert [(f.code, f.component.short()) for f in fs] == [("BURNIN_ERRORS", "gpu11")]


def test_every_engine_command_numbers_gpus_in_pci_bus_order(no_scenarios):
    """Without ``devices`` too (the health check's and acceptance's run on
    every GPU): CUDA's default order is fastest first and otherwise
    unpromised, so gpu_burn's "GPU 3" must be told to be NVML's GPU 3, the
    one a drain names and a repair resets."""
    text = (DATA / "gpu_burn" / "faulty_gpu3_errors.txt").read_text()
    nccl = (DATA / "nccl" / "h100_8gpu_ok.txt").read_text()
    envs = []

    def fake_run(argv, **kw):
        envs.append(kw.get("env"))
        return CommandResult(
            tuple(argv), 0, nccl if "all_reduce_perf" in argv[0] else text, "", 10.0
        )

    fs = run_check(BurninCheck(), ctx(settings={"engine": "gpu_burn"}, services={"run": fake_run}))
    assert [(f.code, f.component.short()) for f in fs] == [("BURNIN_ERRORS", "gpu3")]
    run_check(NcclCheck(), ctx(settings={"engine": "nccl-tests"}, services={"run": fake_run}))
    assert envs == [{"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}] * 2


def test_burnin_settings_are_validated(no_scenarios):
    with pytest.raises(ConfigError, match="checks.burnin.engin"):
        load_settings(ctx(settings={"engin": "x"}), "burnin")
    with pytest.raises(ConfigError, match="unknown backend 'cuda' .known: auto, gpu_burn, lab"):
        load_settings(ctx(settings={"engine": "cuda"}), "burnin")
    s = load_settings(ctx(settings={"enabled": True, "timeout_s": 30, "deadline": 1.0}), "burnin")
    assert s.engine == "auto"


def test_no_gpu_profile_is_not_applicable(no_scenarios):
    for check in (BurninCheck(), NcclCheck(), DcgmCheck()):
        c = ctx(phase=Phase.ACCEPTANCE, profile={"gpu_count": 0})
        (f,) = run_check(check, c)
        assert f.status.value == "OK" and "not applicable" in f.message


def test_a_mig_node_gets_no_whole_gpu_engine(no_scenarios, tmp_path):
    """MIG on GPU 5 (NVML's mode, root's setting): gpu_burn, nccl-tests and
    dcgmi are not started on the node (they would judge a slice against a
    whole GPU's figures); a GPU whose MIG mode NVML cannot give (NotSupported
    before Ampere, a lost GPU) is no MIG GPU, so there they run as before."""
    text = (DATA / "gpu_burn" / "slow_gpu5.txt").read_text()
    started = []

    def fake_run(argv, **kw):
        started.append(argv)
        return CommandResult(tuple(argv), 0, text, "", 10.0)

    scenario = tmp_path / "mig.toml"
    scenario.write_text('preset = "h100-sxm5-80gb"\ngpu_count = 8\n[gpu.5]\nmig = true\n')
    checks = ((BurninCheck(), {"engine": "gpu_burn"}), (NcclCheck(), {"engine": "nccl-tests"}),
              (DcgmCheck(), {"dcgmi": "/opt/dcgmi"}))  # fmt: skip
    for check, settings in checks:
        c = ctx(phase=Phase.ACCEPTANCE, settings=settings,
                services={"run": fake_run, "nvml": fake_nvml(scenario)})  # fmt: skip
        (f,) = run_check(check, c)
        assert f.status.value == "OK" and "MIG enabled on GPU 5" in f.message, f
    assert started == []
    scenario.write_text(
        'preset = "h100-sxm5-80gb"\ngpu_count = 8\n[defaults]\nmig = "not_supported"\n'
        "[gpu.1]\nlost = true\n"
    )
    c = ctx(settings={"engine": "gpu_burn", "gpu_burn": "/opt/gpu_burn"},
            services={"run": fake_run, "nvml": fake_nvml(scenario)})  # fmt: skip
    assert fake_nvml(scenario).mig_enabled() == ()
    assert [f.code for f in run_check(BurninCheck(), c)] == ["BURNIN_SLOW"] and started


def test_auto_engine_choice_never_picks_a_fake(no_scenarios, tmp_path):
    """auto: gpu_burn, else torch, else None; a configured scenario (and the
    old environment variables, set by the fixture) do not make it a fake."""
    (tmp_path / "x.toml").write_text("")
    c = ctx(
        settings={"gpu_burn": "definitely-not-installed-xyz", "scenario": str(tmp_path / "x.toml")},
        services={"nvml": fake_nvml(DATA / "nvml" / "h100_healthy.toml")},
    )
    s = load_settings(c, "burnin")
    assert choose_engine(s, c) in (None, "torch")
    fake_bin = tmp_path / "gpu_burn"
    fake_bin.write_text("#!/bin/sh\n")
    fake_bin.chmod(0o755)
    s2 = load_settings(ctx(settings={"gpu_burn": str(fake_bin)}), "burnin")
    assert choose_engine(s2) == "gpu_burn"


def test_unknown_engine_name_is_a_config_error():
    from slurm_hooks.detect.checks import nccl

    for check, load in (("burnin", load_settings), ("nccl", nccl.load_settings)):
        with pytest.raises(ConfigError, match=f"checks.{check}.engine.*'fake'.*auto.*lab:fake"):
            load(ctx(settings={"engine": "fake"}), check)


NVML_SCENARIO = """
preset = "h100-sxm5-80gb"
gpu_count = 8
[gpu.6]
lost = true
"""


def test_fake_engines_follow_the_nvml_scenario(tmp_path):
    nv = tmp_path / "nvml.toml"
    nv.write_text(NVML_SCENARIO)
    svc = {"nvml": fake_nvml(nv)}
    fake = {"engine": "lab:fake"}
    fs = run_check(BurninCheck(), ctx(settings=fake, services=svc))
    assert [(f.code, f.status.value, f.component.short()) for f in fs] == [
        ("BURNIN_FAILED", "FAIL", "gpu6")
    ]
    assert "CUDA_ERROR_UNKNOWN" in fs[0].message
    (n,) = run_check(NcclCheck(), ctx(settings=fake, services=svc))
    assert (n.code, n.status.value) == ("NCCL_FAILED", "FAIL")


def test_a_plugin_engine_runs_on_the_jobs_gpus_only(tmp_path):
    """A prolog on a shared node restricts the checks to the job's GPUs
    (``devices``): a plug-in engine is told them, and another job's lost
    GPU (6) neither fails this job's burn-in nor its all-reduce; a fault on
    the job's own GPU 3 is reported as gpu3, the node's index."""
    nv = tmp_path / "nvml.toml"
    nv.write_text(NVML_SCENARIO)
    svc = {"nvml": fake_nvml(nv)}
    mine = {"engine": "lab:fake", "devices": [2, 3]}
    fs = run_check(BurninCheck(), ctx(settings=mine, services=svc))
    assert [(f.code, f.status.value) for f in fs] == [("OK", "OK")], fs
    (n,) = run_check(NcclCheck(), ctx(settings=mine, services=svc))
    assert (n.code, n.status.value) == ("OK", "OK"), n
    run = BurninCheck().gather(ctx(settings=mine, services=svc))
    assert [g.index for g in run.gpus] == [2, 3]
    sc = tmp_path / "engine.toml"
    sc.write_text("[burnin.gpu.3]\nerrors = 40\n")
    fs = run_check(BurninCheck(), ctx(settings={**mine, "scenario": str(sc)}, services=svc))
    assert [(f.code, f.component.short()) for f in fs] == [("BURNIN_ERRORS", "gpu3")]
    theirs = {"engine": "lab:fake", "devices": [5, 6]}
    fs = run_check(BurninCheck(), ctx(settings=theirs, services=svc))
    assert [(f.code, f.component.short()) for f in fs] == [("BURNIN_FAILED", "gpu6")]


def test_a_plugin_that_ignores_devices_has_no_say_on_other_gpus(monkeypatch, caplog):
    """A site's engine that burns every GPU whatever it is told: what it
    reports of GPUs not given to it (another job's, busy and failing) is left
    out, and the site is told in the log."""
    from slurm_hooks.detect.engines import registry
    from slurm_hooks.detect.engines.burnin.gpu_burn import parse_gpu_burn

    text = (DATA / "gpu_burn" / "slow_gpu5.txt").read_text()
    asked = []

    class Careless:
        def burnin(self, req, duration_s):
            asked.append(req)
            return parse_gpu_burn(text)

    monkeypatch.setattr(registry, "backend", lambda *a, **k: Careless())
    c = ctx(settings={"engine": "site:careless", "devices": [0, 1]})
    run = BurninCheck().gather(c)
    assert asked[0].devices == (0, 1) and asked[0].gpu_count == 2
    assert [g.index for g in run.gpus] == [0, 1]
    assert "reported GPUs [2, 3, 4, 5, 6, 7], not given to it" in caplog.text
    slow = {f.component.short() for f in BurninCheck().judge(run, c) if f.code != "OK"}
    assert "gpu5" not in slow
    everyone = BurninCheck().gather(ctx(settings={"engine": "site:careless"}))
    assert asked[1].devices is None and len(everyone.gpus) == 8
    assert any(f.component.short() == "gpu5" for f in BurninCheck().judge(everyone, c))


def test_fake_engine_scenario_file(tmp_path):
    sc = tmp_path / "engines.json"
    sc.write_text(
        json.dumps(
            {"burnin": {"gflops": 50000, "gpu": {"2": {"errors": 40}}}, "nccl": {"busbw_gbps": 250}}
        )
    )
    fake = {"engine": "lab:fake", "scenario": str(sc)}
    fs = run_check(BurninCheck(), ctx(settings=fake))
    assert [(f.code, f.component.short()) for f in fs] == [("BURNIN_ERRORS", "gpu2")]
    (n,) = run_check(NcclCheck(), ctx(phase=Phase.ACCEPTANCE, settings=fake))
    assert (n.code, n.status.value) == ("NCCL_SLOW", "FAIL")
    sc.write_text(json.dumps({"nccl": {"fail": "hang"}}))
    (n,) = run_check(NcclCheck(), ctx(settings=fake))
    assert n.code == "NCCL_FAILED" and "no final summary" in n.message


def test_nccl_check_nccl_tests_engine(no_scenarios):
    text = (DATA / "nccl" / "h100_8gpu_ok.txt").read_text()
    seen = {}

    def fake_run(argv, **kw):
        seen["argv"] = argv
        return CommandResult(tuple(argv), 0, text, "", 10.0)

    c = ctx(settings={"engine": "nccl-tests", "max_bytes": "8G"}, services={"run": fake_run})
    (f,) = run_check(NcclCheck(), c)
    assert f.code == "OK" and f.values["busbw_gbps"] == pytest.approx(487.01, abs=0.01)
    assert seen["argv"][:7] == ["all_reduce_perf", "-b", "32M", "-e", "8G", "-f", "2"]
    assert seen["argv"][seen["argv"].index("-g") + 1] == "8"


def test_nccl_check_budget(no_scenarios):
    c = ctx(settings={"engine": "nccl-tests", "deadline": time.monotonic() + 2})
    (f,) = run_check(NcclCheck(), c)
    assert f.code == "CHECK_SKIPPED"


@pytest.mark.parametrize("how", ["killed", "its_own_timeout"])
def test_an_nccl_run_the_phases_time_cut_short_is_not_judged(no_scenarios, how):
    """The checks before it took the time (a node's users can stretch them):
    a run stopped by what the phase had left, before its own limit (three
    times expected_s), is no NCCL failure of the node.  With the whole limit
    given, a run that does not end is one."""
    from slurm_hooks.core.errors import CommandTimeout

    def fake_run(argv, **kw):
        if how == "killed":
            raise CommandTimeout(argv, kw["timeout"])
        limit = argv[argv.index("-T") + 1]
        out = f"#  Rank  0 Group  0 Pid 1 on n1 device  0 [0x1b] NVIDIA H100\n Test timeout ({limit}s)\n"
        return CommandResult(tuple(argv), 1, out, "", kw["timeout"])

    cut = ctx(settings={"engine": "nccl-tests", "deadline": time.monotonic() + 17},
              services={"run": fake_run})  # fmt: skip
    (f,) = run_check(NcclCheck(), cut)
    assert (f.code, f.status.value) == ("CHECK_SKIPPED", "UNKNOWN"), f
    assert "not judged" in f.message
    whole = ctx(settings={"engine": "nccl-tests"}, services={"run": fake_run})
    f = run_check(NcclCheck(), whole)[0]
    assert (f.code, f.status.value) == ("NCCL_FAILED", "FAIL")


def test_dcgm_check(no_scenarios):
    text = (DATA / "dcgmi" / "fail_gpu_memory_gpu5.json").read_text()

    def fake_run(argv, **kw):
        assert argv == ["dcgmi", "diag", "-r", "3", "-j"]
        return CommandResult(tuple(argv), 226, text, "", 200.0)

    c = ctx(phase=Phase.ACCEPTANCE, settings={"level": 3}, services={"run": fake_run})
    (f,) = run_check(DcgmCheck(), c)
    assert (f.code, f.component.short()) == ("DCGM_FAIL", "gpu5")
    assert DcgmCheck.phases == frozenset({Phase.ACCEPTANCE})


def test_dcgm_not_installed_is_not_applicable(no_scenarios, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    c = ctx(phase=Phase.ACCEPTANCE, settings={"dcgmi": "dcgmi-not-here"})
    (f,) = run_check(DcgmCheck(), c)
    assert f.status.value == "OK" and "not installed" in f.message


def test_fakes_named_in_the_config_read_its_scenarios(no_scenarios, tmp_path):
    """``nvml = "lab:fake"`` + ``nvml_scenario`` (what runner.setup hands the
    checks as the NVML session) and ``engine = "lab:fake"``: the fake engines
    read that NVML scenario and ``scenario``, relative to the config file."""
    from slurm_hooks.core.config import parse
    from slurm_hooks.detect import runner

    (tmp_path / "nvml.toml").write_text(NVML_SCENARIO)
    (tmp_path / "engine.toml").write_text("[nccl]\nbusbw_gbps = 250\n")
    text = (
        f'[general]\nstate_dir = "{tmp_path / "state"}"\n'
        '[checks]\nnvml = "lab:fake"\nnvml_scenario = "nvml.toml"\n'
        '[checks.burnin]\nengine = "lab:fake"\n'
        '[checks.nccl]\nengine = "lab:fake"\nscenario = "engine.toml"\n'
    )
    cfg = parse(text, path=str(tmp_path / "cfg.toml"), validate=False)
    res = runner.run_phase("acceptance", cfg=cfg, node="n1", only=["burnin", "nccl"])
    got = {(f.check, f.code, f.component.short()) for f in res.findings}
    assert ("burnin", "BURNIN_FAILED", "gpu6") in got, res.findings  # the lost GPU of the scenario
    assert all("no burn-in engine" not in f.message for f in res.findings)
    (tmp_path / "nvml.toml").write_text('preset = "h100-sxm5-80gb"\ngpu_count = 8\n')
    res = runner.run_phase("acceptance", cfg=cfg, node="n1", only=["nccl"])
    (n,) = res.findings
    assert n.values["busbw_gbps"] == pytest.approx(250, rel=0.02)  # from engine.toml, not 480


@pytest.mark.parametrize(("duration", "whole"), [(0.5, "1"), (2.01, "3"), (3, "3")])
def test_fractional_duration_is_rounded_up_for_gpu_burn(no_scenarios, duration, whole):
    """gpu_burn takes whole seconds: 0.5 must burn 1 s, not 0 (int() truncated)."""
    text = (DATA / "gpu_burn" / "slow_gpu5.txt").read_text()
    seen = {}

    def fake_run(argv, **kw):
        seen["argv"], seen["kw"] = argv, kw
        return CommandResult(tuple(argv), 0, text, "", 10.0)

    c = ctx(settings={"engine": "gpu_burn", "duration_s": duration}, services={"run": fake_run})
    BurninCheck().gather(c)
    assert seen["argv"][-1] == whole
    assert seen["kw"]["timeout"] == pytest.approx(int(whole) + 6 + 30)
    # the budget is asked for the rounded burn: 1 + 6 s overhead does not fit in 6.8 s
    short = ctx(
        settings={"engine": "gpu_burn", "duration_s": 0.5, "deadline": time.monotonic() + 6.8},
        services={"run": fake_run},
    )
    assert isinstance(BurninCheck().gather(short), Skipped)


def test_fractional_duration_is_rounded_up_for_a_plugin_engine(tmp_path):
    sc = tmp_path / "engines.json"
    sc.write_text(json.dumps({"burnin": {"gflops": 50000}}))
    settings = {"engine": "lab:fake", "scenario": str(sc), "duration_s": 0.5}
    run = BurninCheck().gather(ctx(settings=settings))
    assert run.duration_s == 1.0
