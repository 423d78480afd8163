"""The prolog budget manager without Slurm: GPU-job detection, cache
validity and invalidation, budget stepping (clock injected), the run's
verdicts with a fake engine and fake NVML/engines (no GPU here)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from slurm_hooks.agent.hook import EXIT_REJECT
from slurm_hooks.agent.prolog import (
    Budget,
    CachedPass,
    NodeFacts,
    PassCache,
    PrologConfig,
    cache_verdict,
    job_gpus,
    parse_devices,
    run_prolog,
    xid_mark,
)
from slurm_hooks.agent.prolog_cache import CACHE_FILE, still_good, widened
from slurm_hooks.core.config import parse
from slurm_hooks.core.errors import ConfigError
from slurm_hooks.core.model import Status


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


# -- which jobs get GPU work ------------------------------------------------------------

GRES = PrologConfig()
NO_GRES = PrologConfig(gres_gpus=False)


@pytest.mark.parametrize(
    ("env", "cfg", "count", "gpus", "devices"),
    [
        ({"SLURM_JOB_GPUS": "0,1"}, GRES, 8, True, (0, 1)),  # what 22.05 sets (measured)
        ({"SLURM_JOB_GPUS": "3", "CUDA_VISIBLE_DEVICES": "0"}, GRES, 8, True, (3,)),
        # Without SLURM_JOB_GPUS: GPUs shared with other jobs (gres/mps,
        # gres/shard): never burned in, whatever the rest of the config says.
        ({"CUDA_VISIBLE_DEVICES": "3"}, GRES, 8, False, None),
        ({"GPU_DEVICE_ORDINAL": "2,0"}, GRES, 8, False, None),
        ({"CUDA_VISIBLE_DEVICES": "GPU-aaaa"}, GRES, 8, False, None),
        ({"CUDA_VISIBLE_DEVICES": "3"}, PrologConfig(gpu_jobs_only=False), 8, False, None),
        ({"SLURM_JOB_GPUS": "GPU-aaaa"}, GRES, 8, True, None),  # UUIDs: all GPUs
        ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, GRES, 8, False, None),
        ({}, GRES, 8, False, None),  # GRES cluster, no GPU vars: CPU-only job
        ({}, NO_GRES, 8, True, None),  # no GRES: cannot tell, test all
        ({}, NO_GRES, None, True, None),
        ({}, PrologConfig(gpu_jobs_only=False), 8, True, None),
        ({"SLURM_JOB_GPUS": "0"}, GRES, 0, False, None),  # profile: no GPUs at all
        ({}, NO_GRES, 0, False, None),
    ],
)
def test_job_gpus(env, cfg, count, gpus, devices):
    use = job_gpus(env, cfg, count)
    assert (use.gpus, use.devices) == (gpus, devices), use.why


@pytest.mark.parametrize(
    ("slurm", "places", "known", "devices"),
    [
        ((2, 3), None, True, (2, 3)),  # the usual node: nothing to rename
        ((0,), {0: 3, 1: 2, 2: 1, 3: 0}, True, (3,)),  # Slurm's GPU 0 is NVML's 3
        ((0, 1), {0: 3, 1: 2, 2: 1, 3: 0}, True, (2, 3)),
        ((7,), {0: 1, 1: 0}, True, None),  # an index Slurm's list lacks: no guess
        ((0,), None, False, None),  # the order unknown: no guess
    ],
)
def test_a_jobs_gpus_are_renamed_from_slurms_numbers_to_nvmls(slurm, places, known, devices):
    """slurmd names the job's GPUs by its own index, the engines run in PCI
    bus order: on a node where the two differ, Slurm's read as NVML's would
    be another job's GPUs; where which is which cannot be told, the job gets
    no GPU work rather than a guess."""
    from slurm_hooks.agent.prolog_gpus import in_nvml_order
    from slurm_hooks.slurm.gpu_order import GpuOrder

    use = job_gpus({"SLURM_JOB_GPUS": ",".join(map(str, slurm))}, GRES, 8)
    renamed = in_nvml_order(use, GpuOrder(places, known, "the node's order"))
    assert renamed.devices == devices and renamed.gpus is (devices is not None)
    assert ("NVML's" in renamed.why) is (devices not in (None, slurm))
    assert ("cannot be told" in renamed.why) is (devices is None)


def test_parse_devices():
    assert parse_devices("0, 2,2") == (0, 2)
    assert parse_devices("") is None
    assert parse_devices("MIG-1") is None


def test_config_validation():
    cfg = parse("[prolog]\nbudget_s = 20\nvalidity_s = 60\ngres_gpus = false\n", validate=False)
    pc = cfg.section("prolog", PrologConfig)
    assert (pc.budget_s, pc.validity_s, pc.gres_gpus) == (20.0, 60.0, False)
    with pytest.raises(ConfigError, match="prolog"):
        parse("[prolog]\nbudget_s = 0\n", validate=False).section("prolog", PrologConfig)
    with pytest.raises(ConfigError, match="prolog.budget"):
        parse("[prolog]\nbudget = 3\n", validate=False).section("prolog", PrologConfig)


# -- budget ----------------------------------------------------------------------------------


def test_budget_steps_with_injected_clock():
    clock = Clock(50.0)
    b = Budget(30.0, clock)
    assert b.left() == 30.0 and b.allows(30.0)
    clock.t += 12.5
    assert b.spent() == 12.5 and b.left() == 17.5
    assert b.allows(17.5) and not b.allows(17.6)
    clock.t += 20
    assert b.left() < 0 and not b.allows(0.0)


# -- cache validity ----------------------------------------------------------------------------

PASS = CachedPass(node="n1", passed_at=10_000.0, devices=None, boot_id="b1", xid_mark="m1")


def facts(**kw):
    base = dict(node="n1", now=10_100.0, boot_id="b1", xid_mark="m1", last_fault_at=None)
    base.update(kw)
    return NodeFacts(**base)


@pytest.mark.parametrize(
    ("entry", "f", "devices", "fresh", "why"),
    [
        (PASS, facts(), None, True, "passed 100s ago"),
        (None, facts(), None, False, "no cached pass"),
        (PASS, facts(node="n2"), None, False, "not n2"),
        (PASS, facts(now=10_000.0 + 1800), None, False, "1800s old"),
        (PASS, facts(now=10_000.0 + 1799), None, True, "passed"),
        (PASS, facts(now=9_000.0), None, False, "future"),
        (PASS, facts(boot_id="b2"), None, False, "rebooted"),
        (PASS, facts(xid_mark="m2"), None, False, "XID"),
        (PASS, facts(last_fault_at=10_050.0), None, False, "fault"),
        (PASS, facts(last_fault_at=9_000.0), None, True, "passed"),
        (PASS, facts(), (0, 1), True, "passed"),  # an all-GPU pass covers any job
        (CachedPass("n1", 10_000.0, (0, 1), "b1", "m1"), facts(), (1,), True, "passed"),
        (CachedPass("n1", 10_000.0, (0, 1), "b1", "m1"), facts(), (1, 2), False, "GPUs"),
        (CachedPass("n1", 10_000.0, (0, 1), "b1", "m1"), facts(), None, False, "GPUs"),
    ],
)
def test_cache_verdict(entry, f, devices, fresh, why):
    ok, text = cache_verdict(entry, f, devices, 1800.0)
    assert ok is fresh and why in text


def test_pass_cache_roundtrip_and_corrupt_file(tmp_path):
    cache = PassCache(tmp_path / "prolog" / "pass.json")
    assert cache.read() is None and not cache.invalidate("nothing")
    cache.write(CachedPass("n1", 5.0, (0, 3), "b", None, "17", 1.25))
    assert cache.read() == CachedPass("n1", 5.0, (0, 3), "b", None, "17", 1.25)
    assert cache.invalidate("test") and cache.read() is None
    cache.path.write_text("{not json")
    assert cache.read() is None  # moved aside by read_json, counts as no pass
    cache.path.write_text(json.dumps({"node": "n1"}))  # missing fields
    assert cache.read() is None


def test_xid_mark_changes_when_history_is_rewritten(tmp_path):
    from slurm_hooks.detect.xid.history import save_history

    assert xid_mark(str(tmp_path)) is None
    save_history(str(tmp_path), [])
    m1 = xid_mark(str(tmp_path))
    assert m1 is not None
    (tmp_path / "xid" / "history.json").write_text('{"version": 1, "incidents": [1]}\n')
    assert xid_mark(str(tmp_path)) != m1


# -- the run (fake NVML + fake engines, fake Slurm engine) ------------------------------------


class FakeSlurm:
    def __init__(self):
        self.reason = None
        self.requeued = []

    def get_node(self, node):
        from slurm_hooks.core.model import NodeState

        flags = frozenset({"DRAIN"}) if self.reason else frozenset()
        return NodeState(node, "idle", flags, self.reason)

    def get_job(self, job_id):
        from slurm_hooks.core.model import JobInfo

        return JobInfo(job_id, "u", "RUNNING", "n1", restart_count=len(self.requeued))

    def requeue(self, job_id):
        self.requeued.append(job_id)


class FakeEngine:
    """Stands in for actions.Engine: drains (writes one of our reasons)
    when handed a FAIL, like the real policy would."""

    def __init__(self, drains=True):
        from slurm_hooks.store.audit import AuditLog

        self.slurm = FakeSlurm()
        self.handled = []
        self.drains = drains
        self.audit = AuditLog("/dev/null")

    @property
    def context(self):
        """The ports the prolog's requeue uses (act/evacuate.py): door, audit."""
        from types import SimpleNamespace

        from slurm_hooks.act.context import Audit
        from slurm_hooks.slurm.door import SlurmDoor

        return SimpleNamespace(
            door=SlurmDoor(self.slurm), audit=Audit(self.audit, "slurm-hooks"), actor="slurm-hooks"
        )

    def handle(self, node, findings):
        from slurm_hooks.decide.decision import Decision, DecisionKind

        self.handled.append(list(findings))
        bad = [f for f in findings if f.status is Status.FAIL]
        if not bad:
            return []
        if self.drains:
            self.slurm.reason = f"slurm-hooks/1 {bad[0].code} inc=0000abcd :: {bad[0].message}"
            return [Decision(DecisionKind.DRAIN, node, bad[0].code, "test")]
        return [Decision(DecisionKind.BREAKER_TRIPPED, node, bad[0].code, "breaker")]


@pytest.fixture
def node_files(tmp_path, monkeypatch):
    """A node's files; the config alone names the fake GPUs and engines (no
    environment), as on a lab node."""
    gpus = tmp_path / "gpus.json"
    gpus.write_text(json.dumps({"preset": "h100-sxm5-80gb", "gpu_count": 4, "gpu": {}}))
    engine = tmp_path / "engine.toml"
    engine.write_text("[burnin]\ngflops = 51000\n")
    kern = tmp_path / "kern.log"
    kern.write_text("")
    return tmp_path


def config(d: Path, extra: str = "") -> object:
    text = f"""
[general]
state_dir = "{d / "state"}"
[checks]
nvml = "lab:fake"
nvml_scenario = "{d / "gpus.json"}"
[checks.xid]
source = "file"
path = "{d / "kern.log"}"
[checks.burnin]
engine = "lab:fake"
scenario = "engine.toml"
[checks.nccl]
engine = "lab:fake"
scenario = "engine.toml"
[prolog]
gres_gpus = false
{extra}
"""
    return parse(text, path=str(d / "cfg.toml"), validate=False)


XID79 = (
    "Nov 29 11:00:13 n1 kernel: [ 5123.456789] NVRM: Xid (PCI:0000:18:00): 79, "
    "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
)


def test_full_run_then_cached_then_invalidated_by_xid(node_files):
    cfg = config(node_files)
    eng = FakeEngine()
    env = {"SLURM_JOB_ID": "7"}
    first = run_prolog(env, cfg, node="n1", engine_factory=lambda c: eng)
    assert first.verdict == "passed" and first.exit_code == 0, first.why
    assert {f.check for f in first.findings} >= {"burnin", "nccl", "xid", "gpu_lost"}
    second = run_prolog(env, cfg, node="n1", engine_factory=lambda c: eng)
    assert second.verdict == "cached" and second.exit_code == 0
    assert {f.check for f in second.findings} == {"xid"}  # only the warm check ran
    assert eng.handled == []
    with open(node_files / "kern.log", "a") as fh:
        fh.write(XID79)
    third = run_prolog(env, cfg, node="n1", engine_factory=lambda c: eng)
    assert third.verdict == "failed" and third.drained
    assert eng.handled and eng.handled[0][0].code.startswith("XID")
    assert third.exit_code == 0 and eng.slurm.requeued == ["7"]  # we requeued: exit 0
    assert PassCache(node_files / "state" / "prolog" / "pass.json").read() is None


def test_xid_seen_by_someone_else_voids_the_cache(node_files):
    """The health check scanned the new XID first (cursor moved past it): the
    history file changed, so the prolog does not trust its pass."""
    from slurm_hooks.detect.xid.history import save_history

    cfg = config(node_files)
    eng = FakeEngine()
    assert run_prolog({}, cfg, node="n1", engine_factory=lambda c: eng).verdict == "passed"
    save_history(str(node_files / "state"), [])  # another process recorded XID events
    out = run_prolog({}, cfg, node="n1", engine_factory=lambda c: eng)
    assert out.verdict == "passed"  # a full run again, not "cached"
    assert "burnin" in {f.check for f in out.findings}


def test_recorded_fault_voids_the_cache(node_files):
    from datetime import UTC, datetime

    from slurm_hooks.core.history import FaultEvent
    from slurm_hooks.store.state import StateStore

    cfg = config(node_files)
    eng = FakeEngine()
    assert run_prolog({}, cfg, node="n1", engine_factory=lambda c: eng).verdict == "passed"
    store = StateStore(node_files / "state")
    store.record_faults("n1", [FaultEvent(datetime.now(UTC), "X", None, "log", None)])
    assert run_prolog({}, cfg, node="n1", engine_factory=lambda c: eng).verdict == "cached"
    store.record_faults("n1", [FaultEvent(datetime.now(UTC), "ECC_DBE", "gpu1", "drain", "i")])
    assert run_prolog({}, cfg, node="n1", engine_factory=lambda c: eng).verdict == "passed"


def test_bad_gpu_in_burnin_drains_and_requeues(node_files):
    (node_files / "engine.toml").write_text("[burnin.gpu.2]\nerrors = 40\n")
    cfg = config(node_files)
    eng = FakeEngine()
    out = run_prolog({"SLURM_JOB_ID": "9"}, cfg, node="n1", engine_factory=lambda c: eng)
    assert out.verdict == "failed" and out.drained and out.exit_code == 0
    assert eng.slurm.requeued == ["9"]
    burn = [f for f in out.findings if f.check == "burnin" and f.status is Status.FAIL]
    assert burn and burn[0].component.index == 2
    # Without our own requeue: reject (the shim exits 1: Slurm's prolog-failure path requeues).
    eng2 = FakeEngine()
    cfg2 = config(node_files, "requeue_on_fail = false")
    out2 = run_prolog({"SLURM_JOB_ID": "9"}, cfg2, node="n1", engine_factory=lambda c: eng2)
    assert out2.exit_code == EXIT_REJECT and eng2.slurm.requeued == []


def test_a_mig_node_is_not_burned_in_whole_nor_drained_for_it(node_files):
    """MIG on GPUs 2 and 3 (root's setting, read through NVML): whole-GPU
    engines do not run there (a run would judge a slice against a whole
    GPU's figures).  The engine here would report GPU 2 failing, as a
    burn-in of a 1g slice would run slow: the prolog neither runs it nor
    drains; the NVML checks still run."""
    (node_files / "engine.toml").write_text("[burnin.gpu.2]\nerrors = 40\n")
    scenario = {"preset": "h100-sxm5-80gb", "gpu_count": 4,
                "gpu": {"2": {"mig": True}, "3": {"mig": True}}}  # fmt: skip
    (node_files / "gpus.json").write_text(json.dumps(scenario))
    eng = FakeEngine()
    out = run_prolog({"SLURM_JOB_ID": "9"}, config(node_files), node="n1",
                     engine_factory=lambda c: eng)  # fmt: skip
    assert out.verdict == "passed" and not out.drained and eng.slurm.requeued == []
    by_check = {f.check: f for f in out.findings}
    for check in ("burnin", "nccl"):
        assert by_check[check].status is Status.OK
        assert "MIG enabled on GPU 2,3" in by_check[check].message
    assert by_check["gpu_lost"].status is Status.OK  # NVML's checks ran
    assert not any(f.status is Status.FAIL for batch in eng.handled for f in batch)
    # The same node with MIG off (turning it off resets the GPU: a new pass),
    # the engine runs and GPU 2 fails.
    scenario["gpu"] = {}
    (node_files / "gpus.json").write_text(json.dumps(scenario))
    (node_files / "state" / "prolog" / "pass.json").unlink()
    out = run_prolog({"SLURM_JOB_ID": "10"}, config(node_files), node="n1",
                     engine_factory=lambda c: FakeEngine())  # fmt: skip
    assert out.verdict == "failed" and out.drained


def test_policy_declines_drain_job_runs(node_files):
    (node_files / "engine.toml").write_text("[burnin.gpu.0]\nerrors = 40\n")
    eng = FakeEngine(drains=False)
    out = run_prolog({"SLURM_JOB_ID": "9"}, config(node_files), node="n1",
                     engine_factory=lambda c: eng)  # fmt: skip
    assert out.verdict == "failed" and not out.drained and out.exit_code == 0
    assert "policy declined" in out.why and eng.slurm.requeued == []


def test_cpu_only_job_skips_gpu_work(node_files):
    base = config(node_files)
    cfg = base.__class__(path=base.path, data={**base.data, "prolog": {}})
    eng = FakeEngine()
    out = run_prolog({"SLURM_JOB_ID": "3"}, cfg, node="n1", engine_factory=lambda c: eng)
    assert out.verdict == "cpu_only" and out.exit_code == 0
    assert {f.check for f in out.findings} == {"xid"}
    gpu_job = run_prolog({"SLURM_JOB_GPUS": "0,1"}, cfg, node="n1", engine_factory=lambda c: eng)
    assert gpu_job.verdict == "passed"
    # The pass covered GPUs 0,1 only: a job on GPU 3 gets a full run, one on GPU 1 the cache.
    assert run_prolog({"SLURM_JOB_GPUS": "1"}, cfg, node="n1").verdict == "cached"
    assert run_prolog({"SLURM_JOB_GPUS": "3"}, cfg, node="n1").verdict == "passed"
    # ... and that run widened the pass: GPUs 0, 1 and 3 are all still good
    # (before, it replaced the pass, and the next job on GPU 1 paid again).
    assert run_prolog({"SLURM_JOB_GPUS": "1"}, cfg, node="n1").verdict == "cached"
    assert run_prolog({"SLURM_JOB_GPUS": "3"}, cfg, node="n1").verdict == "cached"


def test_packed_one_gpu_jobs_pay_the_full_run_once_per_gpu_per_validity(node_files):
    """A 1-GPU job on each of the node's four GPUs, then four more on the
    same GPUs: the second round is cached (before: every job paid again)."""
    cfg = config(node_files)
    first = [run_prolog({"SLURM_JOB_GPUS": str(g)}, cfg, node="n1").verdict for g in range(4)]
    again = [run_prolog({"SLURM_JOB_GPUS": str(g)}, cfg, node="n1").verdict for g in range(4)]
    assert first == ["passed"] * 4 and again == ["cached"] * 4
    entry = PassCache(node_files / "state" / CACHE_FILE).read()
    assert entry is not None and entry.devices == (0, 1, 2, 3)


def test_another_jobs_bad_gpu_neither_fails_nor_is_burned_by_this_jobs_prolog(node_files):
    """A node shared by whole GPUs: the prolog of a job given GPUs 2 and 3
    burns in those two only (the plug-in engine is told them), so GPU 0's
    fault, on another user's job, neither fails this job nor drains the
    node from it; the prolog of a job given GPU 0 finds it."""
    (node_files / "engine.toml").write_text("[burnin.gpu.0]\nerrors = 40\n")
    cfg = config(node_files)
    eng = FakeEngine()
    out = run_prolog({"SLURM_JOB_ID": "11", "SLURM_JOB_GPUS": "2,3"}, cfg, node="n1",
                     engine_factory=lambda c: eng)  # fmt: skip
    assert out.verdict == "passed" and eng.handled == [], out.why
    burnin = [f for f in out.findings if f.check == "burnin"]
    assert burnin and all(f.status is Status.OK for f in burnin), burnin
    out = run_prolog({"SLURM_JOB_ID": "12", "SLURM_JOB_GPUS": "0"}, cfg, node="n1",
                     engine_factory=lambda c: eng)  # fmt: skip
    assert out.verdict == "failed" and eng.handled
    bad = [f for f in out.findings if f.check == "burnin" and f.status is Status.FAIL]
    assert [f.component.index for f in bad] == [0]


def test_a_widening_run_that_finds_a_bad_gpu_drops_the_pass(node_files):
    """A pass kept for GPU 0 while a job on GPU 1 runs the full checks is
    dropped when that run fails: the next job on GPU 0 is tested again."""
    engine = node_files / "engine.toml"
    good = engine.read_text()
    cfg = config(node_files)
    assert run_prolog({"SLURM_JOB_GPUS": "0"}, cfg, node="n1").verdict == "passed"
    engine.write_text(good + "[burnin.gpu.1]\nerrors = 40\n")
    eng = FakeEngine(drains=False)
    out = run_prolog({"SLURM_JOB_GPUS": "1"}, cfg, node="n1", engine_factory=lambda c: eng)
    assert out.verdict == "failed"
    assert PassCache(node_files / "state" / CACHE_FILE).read() is None
    engine.write_text(good)
    assert run_prolog({"SLURM_JOB_GPUS": "0"}, cfg, node="n1").verdict == "passed"


def test_still_good_and_widened_are_what_the_cache_keeps():
    two = CachedPass("n1", 10_000.0, (0, 1), "b1", "m1")
    assert still_good(two, facts(), 1800.0) == two
    assert still_good(two, facts(xid_mark="m2"), 1800.0) is None  # new XIDs: nothing holds
    assert still_good(two, facts(now=12_000.0), 1800.0) is None  # expired
    assert still_good(PASS, facts(xid_mark="m2"), 1800.0) is None  # an all-GPU pass
    new = CachedPass("n1", 10_500.0, (3,), "b1", "m1", "7", 2.0)
    assert widened(two, new) == CachedPass("n1", 10_000.0, (0, 1, 3), "b1", "m1", "7", 2.0)
    assert widened(None, new) == new
    assert widened(two, CachedPass("n1", 10_500.0, None, "b1", "m1")).devices is None


def test_budget_too_small_for_full_run_is_incomplete_not_a_fault(node_files):
    clock = Clock(0.0)

    def slow_run(phase, **kw):
        from slurm_hooks.detect.runner import run_phase

        clock.t += 29.0  # the warm check "took" 29 s of the 30
        return run_phase(phase, **kw)

    eng = FakeEngine()
    out = run_prolog({}, config(node_files, "budget_s = 30"), node="n1", clock=clock,
                     run_phase=slow_run, engine_factory=lambda c: eng)  # fmt: skip
    assert out.verdict == "incomplete" and out.exit_code == 0
    assert "no budget left" in out.why and eng.handled == []


def test_budget_passed_to_the_full_run(node_files):
    seen = []

    def spy(phase, **kw):
        from slurm_hooks.detect.runner import run_phase

        seen.append((kw.get("only"), kw["budget_s"]))
        return run_phase(phase, **kw)

    run_prolog({}, config(node_files, "budget_s = 20\nengine_reserve_s = 4"), node="n1",
               run_phase=spy, engine_factory=lambda c: FakeEngine())  # fmt: skip
    (warm_only, warm_budget), (full_only, full_budget) = seen
    assert warm_only == ["xid"] and warm_budget <= 20
    # The warm xid scan is not repeated (it ran under the detect lock).
    assert "xid" not in full_only and {"burnin", "nccl", "gpu_lost"} <= set(full_only)
    assert full_budget <= 16.0


def test_unknown_check_means_no_cache(node_files):
    """A burn-in that cannot run is not a pass (and not a fault)."""
    cfg = config(node_files, "")
    data = dict(cfg.data)
    data["checks"] = {**data["checks"], "burnin": {"engine": "gpu_burn", "gpu_burn": "/nope"}}
    cfg = cfg.__class__(path=cfg.path, data=data)
    out = run_prolog({}, cfg, node="n1", engine_factory=lambda c: FakeEngine())
    assert out.verdict == "incomplete" and "burnin" in out.why and out.exit_code == 0
    assert PassCache(node_files / "state" / "prolog" / "pass.json").read() is None


def test_hook_main_never_fails_the_job_on_our_own_errors(monkeypatch, tmp_path):
    from slurm_hooks.agent import prolog

    bad = tmp_path / "bad.toml"
    bad.write_text("[prolog]\nbudget_s = -1\n")
    monkeypatch.setenv("SLURM_HOOKS_CONFIG", str(bad))
    assert prolog.hook_main() == 0


# -- the config alone picks the fake engines ---------------------------------------------


def test_configured_scenario_is_enough_without_environment(node_files):
    """The fakes named in the config (nvml = "lab:fake" + nvml_scenario,
    engine = "lab:fake") are enough: nothing in the environment.  With
    engine "auto" instead, the fake is never chosen."""
    (node_files / "gpus.json").write_text(
        json.dumps({"preset": "h100-sxm5-80gb", "gpu_count": 4, "gpu": {"3": {"lost": True}}})
    )
    cfg = config(node_files)
    eng = FakeEngine()
    out = run_prolog({"SLURM_JOB_ID": "5"}, cfg, node="n1", engine_factory=lambda c: eng)
    burn = [f for f in out.findings if f.check == "burnin" and f.status is Status.FAIL]
    assert burn and burn[0].component.index == 3, out.findings  # the configured lost GPU
    assert "no burn-in engine" not in out.why
    assert out.verdict == "failed" and out.drained
    # engine = "auto" with the same scenarios: never the fake (no gpu_burn here).
    data = dict(cfg.data)
    auto = {"engine": "auto", "gpu_burn": "/nonexistent/gpu_burn"}
    data["checks"] = {**data["checks"], "burnin": auto, "nccl": {"engine": "auto"}}
    cfg = cfg.__class__(path=cfg.path, data=data)
    out = run_prolog({"SLURM_JOB_ID": "6"}, cfg, node="n1", engine_factory=lambda c: FakeEngine())
    burn = [f for f in out.findings if f.check == "burnin"]
    assert not any(f.status is Status.FAIL and f.component.index == 3 for f in burn), burn


# -- the default budget ------------------------------------------------------------------------

#: Assumed wall times on a real 8-GPU H100 node (CUDA context and NCCL
#: communicator set-up on 8 GPUs dominate; the sweeps themselves take well
#: under a second): gpu_burn start-up and teardown, all_reduce_perf -g 8.
GPU_BURN_START_S = 5.0
ALL_REDUCE_PERF_S = 8.0


def test_default_prolog_fits_its_budget_on_an_8_gpu_node(tmp_path, monkeypatch):
    """With every default (budget, burn-in duration, NCCL sweep), a cold
    prolog on an 8-GPU node runs burn-in AND NCCL and caches the pass.  The
    real engines are used with a clock that advances as long as they would
    take; their outputs are recorded real ones."""
    from slurm_hooks.detect.engines.nccl.engines import parse_size
    from slurm_hooks.detect.probes.commands import CommandResult

    gpus = tmp_path / "gpus.json"
    gpus.write_text(json.dumps({"preset": "h100-sxm5-80gb", "gpu_count": 8, "gpu": {}}))
    (tmp_path / "kern.log").write_text("")
    nccl_text = (Path(__file__).parent / "data" / "nccl" / "h100_8gpu_ok.txt").read_text()
    from slurm_hooks_lab.fake_engines import gpu_burn_output, load_scenario

    clock = Clock(0.0)
    ran = []

    def real_node_run(argv, **kw):
        tool = Path(argv[0]).name
        ran.append(tool)
        if tool == "gpu_burn":
            duration = int(argv[-1])
            clock.t += duration + GPU_BURN_START_S
            out = gpu_burn_output(load_scenario(None, str(gpus)), duration)
        else:
            clock.t += ALL_REDUCE_PERF_S
            # the prolog sweep stops at its max_bytes: keep the recorded rows up to it
            top = parse_size(argv[argv.index("-e") + 1])
            out = "\n".join(
                line for line in nccl_text.splitlines()
                if not line.strip() or line.lstrip().startswith("#")
                or not line.split()[0].isdigit() or int(line.split()[0]) <= top
            ) + "\n"  # fmt: skip
        return CommandResult(tuple(argv), 0, out, "", 1.0)

    text = f"""
[general]
state_dir = "{tmp_path / "state"}"
[checks]
nvml = "lab:fake"
nvml_scenario = "{gpus}"
[checks.xid]
source = "file"
path = "{tmp_path / "kern.log"}"
[checks.burnin]
engine = "gpu_burn"
[checks.nccl]
engine = "nccl-tests"
[prolog]
gres_gpus = false
"""
    cfg = parse(text, path=str(tmp_path / "cfg.toml"), validate=False)
    out = run_prolog({"SLURM_JOB_ID": "1"}, cfg, node="n1", clock=clock,
                     services={"run": real_node_run}, engine_factory=lambda c: FakeEngine())  # fmt: skip
    assert ran == ["gpu_burn", "all_reduce_perf"], out.findings
    assert out.verdict == "passed", out.why
    pc = PrologConfig()
    assert out.seconds <= pc.budget_s - pc.engine_reserve_s - 10  # with margin
    assert PassCache(tmp_path / "state" / "prolog" / "pass.json").read() is not None


# -- the detect lock ------------------------------------------------------------------------


def test_xid_scan_and_act_hold_the_detect_lock_not_the_burnin(node_files):
    """The warm xid scan and the engine call on it run under the node's
    detect lock; the burn-in and NCCL run without it."""
    import fcntl

    from slurm_hooks.store.state import DETECT_LOCK, StateStore

    lock_file = node_files / "state" / "locks" / f"{DETECT_LOCK}.lock"

    def held() -> bool:
        StateStore(node_files / "state")  # the prolog creates the lock file
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)
        return False

    lock_file.parent.mkdir(parents=True)
    seen = []

    def spy(phase, **kw):
        from slurm_hooks.detect.runner import run_phase

        seen.append((tuple(kw.get("only") or ()), held()))
        return run_phase(phase, **kw)

    class LockSpyEngine(FakeEngine):
        def handle(self, node, findings):
            seen.append(("engine", held()))
            return super().handle(node, findings)

    with open(node_files / "kern.log", "a") as fh:
        fh.write(XID79)
    out = run_prolog({}, config(node_files, "requeue_on_fail = false"), node="n1",
                     run_phase=spy, engine_factory=lambda c: LockSpyEngine())  # fmt: skip
    assert out.verdict == "failed"
    assert seen == [(("xid",), True), ("engine", True)]
    seen.clear()
    assert run_prolog({}, config(node_files), node="n1", run_phase=spy,
                      engine_factory=lambda c: LockSpyEngine()).verdict == "passed"  # fmt: skip
    (warm, warm_held), (full, full_held) = seen
    assert warm == ("xid",) and warm_held
    assert "burnin" in full and "xid" not in full and not full_held


def test_busy_detect_lock_skips_the_xid_part(node_files, caplog):
    """While the watcher holds the detect lock, the prolog waits about
    detect_lock_wait_s, then skips the xid scan (the watcher is handling it),
    says so in the log, and still does its GPU work."""
    import logging
    import threading
    import time

    from slurm_hooks.store.state import DETECT_LOCK, StateStore

    held, release = threading.Event(), threading.Event()

    def watcher():
        with StateStore(node_files / "state").lock(DETECT_LOCK):
            held.set()
            release.wait(10)

    with open(node_files / "kern.log", "a") as fh:
        fh.write(XID79)
    t = threading.Thread(target=watcher)
    t.start()
    eng = FakeEngine()
    try:
        held.wait(5)
        t0 = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="slurm_hooks.agent.prolog"):
            out = run_prolog({}, config(node_files, "detect_lock_wait_s = 0.3"), node="n1",
                             engine_factory=lambda c: eng)  # fmt: skip
        waited = time.monotonic() - t0
    finally:
        release.set()
        t.join()
    assert waited >= 0.3
    assert "xid" not in {f.check for f in out.findings}  # not scanned: the XID is still unread
    assert out.verdict == "passed" and eng.handled == []
    assert "XID scan skipped" in caplog.text and "detect lock busy" in caplog.text
    # Next time the lock is free: the XID is found and acted on.
    out = run_prolog({}, config(node_files), node="n1", engine_factory=lambda c: eng)
    assert out.verdict == "failed" and eng.handled[0][0].code.startswith("XID")


def test_hook_main_applies_the_config_log_level(monkeypatch, tmp_path):
    import logging

    from slurm_hooks.agent import prolog

    conf = tmp_path / "c.toml"
    conf.write_text('[general]\nlog_level = "ERROR"\n')
    monkeypatch.setenv("SLURM_HOOKS_CONFIG", str(conf))
    monkeypatch.delenv("SLURM_HOOKS_LOG_LEVEL", raising=False)
    seen = []

    class Outcome:
        exit_code = 0
        findings = ()
        seconds = 0.0

    monkeypatch.setattr(prolog, "run_prolog", lambda cfg=None: seen.append(cfg) or Outcome())
    root = logging.getLogger()
    old = root.level
    try:
        root.setLevel(5)
        assert prolog.hook_main() == 0
        assert root.level == logging.ERROR
        assert seen[0].path == str(conf)  # the config read once, handed on
    finally:
        root.setLevel(old)


def test_slow_report_since_the_pass_voids_the_cache_once(node_files):
    """A straggler the default policy only reported (SLOW, severity log): the
    next prolog runs the full check, not the cached pass; then caches again."""
    from datetime import UTC, datetime, timedelta

    from slurm_hooks.core.history import FaultEvent
    from slurm_hooks.store.state import StateStore

    cfg = config(node_files)
    eng = FakeEngine()
    assert run_prolog({}, cfg, node="n1", engine_factory=lambda c: eng).verdict == "passed"
    store = StateStore(node_files / "state")
    old = datetime.now(UTC) - timedelta(days=30)  # outside [progress] slow_history_s
    store.record_faults("n1", [FaultEvent(old, "SLOW", "job:7/rank1", "log", None)])
    assert run_prolog({}, cfg, node="n1", engine_factory=lambda c: eng).verdict == "cached"
    store.record_faults("n1", [FaultEvent(datetime.now(UTC), "SLOW", "job:8/rank1", "log", None)])
    out = run_prolog({}, cfg, node="n1", engine_factory=lambda c: eng)
    assert out.verdict == "passed"
    assert run_prolog({}, cfg, node="n1", engine_factory=lambda c: eng).verdict == "cached"
    f = facts(last_slow_at=10_050.0)
    ok, why = cache_verdict(PASS, f, None, 1800.0)
    assert not ok and why == "the node was reported SLOW since the pass"
