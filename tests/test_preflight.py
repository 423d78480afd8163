"""Multi-node preflight: the pure pairing/blame logic (table-driven, every
culprit position for 2..9 nodes), the run with the fake engine (real
nccl-tests output format, real parser) and the srun engine's argv/parsing."""

from __future__ import annotations

import itertools

import pytest
from slurm_hooks_lab.fake_engines import FakeNcclEngine

from slurm_hooks.agent.preflight import (
    ROUNDS,
    Measurement,
    PreflightConfig,
    SrunNcclEngine,
    allocation_nodes,
    culprits,
    known_good,
    pair,
    plan_pairs,
    run_preflight,
    suspects,
)
from slurm_hooks.detect.probes.commands import CommandResult


def test_first_round_is_disjoint_pairs():
    assert plan_pairs(["a", "b", "c", "d"]) == [("a", "b"), ("c", "d")]
    assert plan_pairs(["a", "b", "c"]) == [("a", "b"), ("a", "c")]
    assert plan_pairs(["a"]) == [] and plan_pairs([]) == []
    assert plan_pairs(["b", "a", "b"]) == [("a", "b")]  # duplicates dropped, canonical order


def test_second_round_pairs_suspects_with_good_nodes():
    r1 = {("a", "b"): False, ("c", "d"): True, ("e", "f"): False}
    assert known_good(r1) == {"a", "b", "e", "f"} and suspects(r1) == {"c", "d"}
    assert plan_pairs(list("abcdef"), r1) == [("a", "c"), ("b", "d")]
    assert culprits(r1) == set()  # nobody next to a good node yet


def test_no_good_node_tries_new_pairs_then_gives_up():
    r = {("a", "b"): True, ("c", "d"): True}
    assert plan_pairs(list("abcd"), r) == [("a", "c"), ("b", "d")] and culprits(r) == set()
    r.update({("a", "c"): True, ("b", "d"): True, ("a", "d"): True, ("b", "c"): True})
    assert plan_pairs(list("abcd"), r) == []


def test_culprits_only_next_to_good_nodes():
    r = {("a", "b"): False, ("c", "d"): True, ("a", "c"): True, ("b", "d"): False}
    assert culprits(r) == {"c"} and suspects(r) == {"c"}


def simulate(nodes, bad, floor=40.0):
    def slow(p):
        return any(n in bad for n in p)

    results = {}
    for _ in range(ROUNDS):
        todo = [p for p in plan_pairs(nodes, results) if p not in results]
        for p in todo:
            results[p] = slow(p)
    return culprits(results), results


@pytest.mark.parametrize("n", range(3, 10))
def test_one_bad_node_is_always_found_alone(n):
    nodes = [f"n{i}" for i in range(1, n + 1)]
    for bad in nodes:
        found, results = simulate(nodes, {bad})
        assert found == {bad}, (bad, results)
        assert len(results) <= (n + 1) // 2 + 3  # round 1 + a few


@pytest.mark.parametrize("n", range(4, 9))
def test_two_bad_nodes_never_blame_a_good_one(n):
    nodes = [f"n{i}" for i in range(1, n + 1)]
    for bad in itertools.combinations(nodes, 2):
        found, _ = simulate(nodes, set(bad))
        assert found == set(bad), bad


def test_two_nodes_cannot_be_told_apart():
    found, _ = simulate(["n1", "n2"], {"n1"})
    assert found == set()


# -- the run with the fake engine ------------------------------------------------------


@pytest.fixture
def scenarios(tmp_path):
    for i in range(1, 5):
        (tmp_path / f"n{i}.toml").write_text("[nccl]\nbusbw_gbps = 48\n")
    return tmp_path


def test_fast_allocation_measured_once(scenarios):
    eng = FakeNcclEngine(str(scenarios / "{node}.toml"))
    res = run_preflight(["n1", "n2", "n3", "n4"], eng, PreflightConfig())
    assert res.ok and res.exit_code == 0 and eng.calls == [("n1", "n2", "n3", "n4")]
    assert res.whole is not None and 40 < res.whole.busbw_gbps < 50


def test_slow_node_found_and_drained(scenarios):
    (scenarios / "n3.toml").write_text("[nccl]\nbusbw_gbps = 12\n")
    eng = FakeNcclEngine(str(scenarios / "{node}.toml"))
    drained = []
    res = run_preflight(
        ["n1", "n2", "n3", "n4"], eng, PreflightConfig(),
        drain=lambda n, f: drained.append((n, f)) or True,
    )  # fmt: skip
    assert not res.ok and res.exit_code == 1
    assert res.culprits == ("n3",) and res.drained == ("n3",)
    ((node, finding),) = drained
    assert node == "n3" and finding.code == "NCCL_INTERNODE_SLOW" and finding.status == "FAIL"
    assert finding.action == "drain" and finding.values["busbw_gbps"] < 13
    assert len(eng.calls) == 1 + 2 + 2  # whole, round 1, two suspects next to good nodes


def test_internode_key_is_the_link_speed(scenarios):
    (scenarios / "n2.toml").write_text("[nccl]\nbusbw_gbps = 480\n[internode]\nbusbw_gbps = 7\n")
    res = run_preflight(["n1", "n2", "n3", "n4"], FakeNcclEngine(str(scenarios / "{node}.toml")),
                        PreflightConfig())  # fmt: skip
    assert res.culprits == ("n2",)


def test_nccl_failure_counts_as_slow(scenarios):
    (scenarios / "n2.toml").write_text('[nccl]\nfail = "nccl"\n')
    res = run_preflight(["n1", "n2", "n3", "n4"], FakeNcclEngine(str(scenarios / "{node}.toml")),
                        PreflightConfig(drain=False), drain=lambda n, f: True)  # fmt: skip
    assert res.culprits == ("n2",) and res.drained == ()
    assert res.whole.busbw_gbps is None and "NCCL failure" in (res.whole.error or "")


def test_everything_slow_blames_nobody(scenarios):
    for i in range(1, 5):
        (scenarios / f"n{i}.toml").write_text("[nccl]\nbusbw_gbps = 5\n")
    res = run_preflight(["n1", "n2", "n3", "n4"], FakeNcclEngine(str(scenarios / "{node}.toml")),
                        PreflightConfig(), drain=lambda n, f: pytest.fail("must not drain"))  # fmt: skip
    assert not res.ok and res.culprits == () and "fabric" in res.why


def test_single_node_allocation():
    res = run_preflight(["n1"], FakeNcclEngine("/nonexistent/{node}"), PreflightConfig())
    assert res.ok and res.whole is None


# -- the srun engine -----------------------------------------------------------------------


def test_srun_engine_argv_and_parse(scenarios):
    from slurm_hooks_lab.fake_engines import FakeGpu, all_reduce_perf_output, load_scenario

    sc = load_scenario(str(scenarios / "n1.toml"), gpu_count=2)
    sc = sc.__class__(**{**sc.__dict__, "gpus": (FakeGpu(0), FakeGpu(1))})
    text = all_reduce_perf_output(sc, min_bytes=256 * 1024**2, max_bytes=1024**3)
    calls = []

    def run(argv, **kw):
        calls.append((argv, kw))
        return CommandResult(tuple(argv), 0, text, "", 1.0)

    eng = SrunNcclEngine(PreflightConfig(), gpus_per_node=1, run=run)
    m = eng.measure(["n1", "n2"])
    assert calls[0][0] == ["srun", "--mpi=list"]  # mpi = "auto" asks first
    argv, kw = calls[1]
    assert argv[:4] == ["srun", "--overlap", "--nodes=2", "--nodelist=n[1-2]"]
    assert "all_reduce_perf" in argv and kw["timeout"] == 120.0
    assert m.busbw_gbps is not None and m.busbw_gbps > 40 and m.error is None

    def failing(argv, **kw):
        return CommandResult(tuple(argv), 1, "", "srun: error: Unable to create step", 0.1)

    bad = SrunNcclEngine(PreflightConfig(), run=failing).measure(["n1", "n2"])
    assert bad.busbw_gbps is None and bad.slow(40.0)


def test_measurement_slow():
    assert Measurement(("a",), None).slow(1.0)
    assert Measurement(("a",), 39.9).slow(40.0) and not Measurement(("a",), 40.0).slow(40.0)


def test_allocation_nodes():
    assert allocation_nodes({"SLURM_JOB_NODELIST": "n[1-3],x"}) == ["n1", "n2", "n3", "x"]
    assert allocation_nodes({}) == []
    assert pair("b", "a") == ("a", "b")


# -- engine selection by name ---------------------------------------------------------------


def test_auto_is_the_srun_engine_never_the_fake(tmp_path):
    """auto means nccl-tests over srun, even with a scenario configured."""
    from slurm_hooks.agent.preflight import make_engine

    eng = make_engine(PreflightConfig(scenario=str(tmp_path / "{node}.toml")))
    assert isinstance(eng, SrunNcclEngine)


def test_lab_fake_by_name(scenarios):
    """engine = "lab:fake" resolves through the slurm_hooks.engines entry point."""
    from slurm_hooks.agent.preflight import make_engine

    cfg = PreflightConfig(engine="lab:fake", scenario=str(scenarios / "{node}.toml"))
    eng = make_engine(cfg, gpus_per_node=2)
    assert isinstance(eng, FakeNcclEngine) and eng.gpus_per_node == 2


def test_unknown_engine_name_is_a_config_error():
    from slurm_hooks.core.errors import ConfigError

    with pytest.raises(ConfigError, match="no-such-engine.*lab:fake"):
        PreflightConfig(engine="no-such-engine").validate()


# -- srun's MPI plug-in (mpi = "auto") --------------------------------------------------

#: ``srun --mpi=list`` as printed by Debian's Slurm in the lab (captured 2026-12-03):
#: 22.05.8 has pmix; 26.05.5 (forky) ships no mpi_pmix.so.
MPI_LIST_2205 = (
    "MPI plugin types are...\n\tpmix\n\tnone\n\tcray_shasta\n\tpmi2\n"
    "specific pmix plugin versions available: pmix_v4\n"
)
MPI_LIST_2605 = "MPI plugin types are...\n\tnone\n\tcray_shasta\n\tpmi2\n"


def test_mpi_plugins_parsed_from_srun_list():
    from slurm_hooks.agent.preflight import mpi_plugins

    assert mpi_plugins(MPI_LIST_2205) == {"pmix", "none", "cray_shasta", "pmi2", "pmix_v4"}
    assert mpi_plugins(MPI_LIST_2605) == {"none", "cray_shasta", "pmi2"}
    assert mpi_plugins("srun: error: Unable to establish controller\n") == set()


@pytest.mark.parametrize(
    ("setting", "listing", "expected"),
    [
        ("auto", MPI_LIST_2205, ["--mpi=pmix"]),
        ("auto", MPI_LIST_2605, ["--mpi=pmi2"]),  # no pmix: never name a missing plug-in
        ("auto", "", []),  # srun could not say: the cluster's MpiDefault
        ("none", MPI_LIST_2205, []),
        ("pmix_v4", MPI_LIST_2605, ["--mpi=pmix_v4"]),  # the admin's word goes
    ],
)
def test_srun_engine_picks_the_mpi_plugin_this_slurm_has(setting, listing, expected):
    from slurm_hooks.agent.preflight import PreflightConfig, SrunNcclEngine
    from slurm_hooks.detect.probes.commands import CommandResult

    calls: list[list[str]] = []

    def fake_run(argv, **_kw):
        calls.append(list(argv))
        return CommandResult(tuple(argv), 0, listing, "", 0.0)

    engine = SrunNcclEngine(PreflightConfig(mpi=setting), run=fake_run)
    argv = engine.argv(["n1", "n2"])
    engine.argv(["n1", "n2"])
    assert [a for a in argv if a.startswith("--mpi")] == expected
    # asked once per engine, and only for auto
    assert calls.count(["srun", "--mpi=list"]) == (1 if setting == "auto" else 0)


@pytest.mark.parametrize("bad", ["", "pmix;rm", "--mpi=x", "a b"])
def test_mpi_setting_refuses_anything_but_a_plugin_name(bad):
    from slurm_hooks.agent.preflight import PreflightConfig

    with pytest.raises(ValueError):
        PreflightConfig(mpi=bad).validate()
