"""``slurm-hooks demo --slinky``: the Slinky scenario's goals and end-state
check, and one end-to-end run on a real lab of its own with a 5 s grace:
XID 79 under the 2-node job -> drain -> signal -> checkpoint -> requeue ->
cordon -> the slurmd pod moved to the spare machine -> the same Slurm node
back -> the job running again from its checkpoint."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from slurm_hooks_lab import demo, demo_slinky
from slurm_hooks_lab.demo import DemoOptions, StepRecord, build_report, check_training
from slurm_hooks_lab.demo_slinky import SLINKY_STEPS, leftovers

from slurm_hooks.core.model import NodeState

FAULT = 1000.0


def metrics(first_run_end: int, resume_from: int, total: int, t0: float = 990.0) -> list[dict]:
    out: list[dict] = []
    t = t0
    for s in range(1, first_run_end + 1):
        t += 0.3
        out.append({"event": "step", "step": s, "loss": 1 / s, "time": t, "restart": 0})
    t += 8
    out.append({"event": "resume", "step": resume_from, "time": t, "restart": 1})
    for s in range(resume_from + 1, total + 1):
        t += 0.3
        out.append({"event": "step", "step": s, "loss": 1 / s, "time": t, "restart": 1})
    return out


OFFSETS = {
    "detected": 0.2, "drained": 0.35, "signalled": 0.7, "checkpoint": 0.75, "cordoned": 0.6,
    "requeued": 2.0, "pod_deleted": 2.0, "slurmd_down": 2.0, "pod_on_spare": 2.1,
    "slurmd_registered": 2.6, "reasserted": 3.1, "accepted": 3.4, "node_back": 3.5,
    "running_again": 7.7, "resumed": 8.0, "training_continues": 8.1,
    "replacement_requested": 2.1,
}  # fmt: skip


def steps(offsets=OFFSETS) -> list[StepRecord]:
    return [StepRecord(s.key, s.title, FAULT + offsets[s.key], "", "t") for s in SLINKY_STEPS]


def report(step_list, *, missing=(), leftovers_=()):
    return build_report(grace=5, node="n2", job="1", spare="m3", steps=step_list, fault_t=FAULT,
                        missing=list(missing), training=check_training(metrics(33, 33, 40), FAULT),
                        scenario="slinky", leftovers=list(leftovers_))  # fmt: skip


def test_every_step_observed_and_clean_is_pass():
    r = report(steps())
    assert r.passed, [g for g in r.goals if not g.ok]
    doc = r.to_dict()
    assert doc["scenario"] == "slinky"
    assert {s["key"] for s in doc["steps"]} == {s.key for s in SLINKY_STEPS}
    assert doc["durations"]["node_replaced"]["seconds"] == pytest.approx(3.5)
    assert doc["durations"]["fault_to_slurmd_on_spare"]["seconds"] == pytest.approx(2.6)
    assert doc["durations"]["back_to_running"]["seconds"] == pytest.approx(4.2)
    table = demo.summary_table(r)
    assert "spare machine m3" in table and "node replaced" in table and "verdict: PASS" in table
    json.dumps(doc)


def test_replacement_slower_than_the_platform_fails():
    late = dict(OFFSETS, node_back=301.0, running_again=302.0, resumed=302.2,
                training_continues=302.3)  # fmt: skip
    goals = {g.key: g for g in report(steps(late)).goals}
    assert not goals["node_replaced"].ok and goals["node_replaced"].limit == 300


def test_job_slow_to_return_after_the_node_fails():
    late = dict(OFFSETS, running_again=OFFSETS["node_back"] + 16)
    goals = {g.key: g for g in report(steps(late)).goals}
    assert not goals["running_after_back"].ok


def test_leftovers_fail_the_verdict_and_are_listed():
    r = report(steps(), leftovers_=["machine m3 left cordoned, tainted or annotated"])
    goals = {g.key: g for g in r.goals}
    assert not r.passed and not goals["clean"].ok and "m3 left cordoned" in goals["clean"].detail


def test_missing_move_step_fails_optional_prestop_does_not():
    keep = [s for s in steps() if s.key != "slurmd_down"]
    assert report(keep, missing=["slurmd_down"]).passed
    no_move = [s for s in steps() if s.key not in ("pod_on_spare", "slurmd_registered")]
    r = report(no_move, missing=["pod_on_spare", "slurmd_registered"])
    goals = {g.key: g for g in r.goals}
    assert not r.passed and "pod_on_spare" in goals["all_steps"].detail


def test_classic_report_unchanged_by_the_scenario_field():
    assert demo.scenario_for("classic").steps == demo.STEPS
    with pytest.raises(ValueError):
        demo.scenario_for("nope")


# -- the end-state check against a stand-in -------------------------------------------


class _Slurm:
    def __init__(self, nodes):
        self.nodes = nodes

    def list_nodes(self):
        return self.nodes


def _fake_demo(api, slurm_nodes):
    from slurm_hooks.bridge.settings import BridgeConfig

    cfg = BridgeConfig(node_mapping="slinky")
    sk = demo_slinky.SlinkyState(None, cfg, ["m1", "m2", "m3"], ["m3"], machine="m2")
    return SimpleNamespace(
        slinky=sk,
        api=api,
        node="n2",
        records={"node_back": object()},
        lab=SimpleNamespace(client=lambda **kw: _Slurm(slurm_nodes)),
    ), cfg


def _world(api, cfg, *, faulty_held=True, spare_tainted=False, pod_marked=False):
    from slurm_hooks_lab.nodeset_controller import machine

    from slurm_hooks.bridge import slinky_plan as sp

    taint = {"key": cfg.taint_key, "value": "XID79", "effect": "NoSchedule"}
    for name in ("m1", "m2", "m3"):
        m = machine(name)
        if name == "m2" and faulty_held:
            m["spec"] = {"unschedulable": True, "taints": [taint]}
        if name == "m3" and spare_tainted:
            m["spec"] = {"taints": [taint]}
        api.add("nodes", m)
    ann = {sp.POD_CORDON: "true"} if pod_marked else {}
    api.add("pods", {"metadata": {"name": "gpu-1", "namespace": "slurm", "annotations": ann},
                     "spec": {"nodeName": "m3", "hostname": "n2"}})  # fmt: skip


def test_leftovers_clean_world_is_empty():
    from slurm_hooks_lab.k8s_standin import StandinServer

    with StandinServer() as api:
        d, cfg = _fake_demo(api, [NodeState("n1", "idle"), NodeState("n2", "mixed")])
        _world(api, cfg)
        assert leftovers(d) == []


@pytest.mark.parametrize(
    "world, slurm, expect",
    [
        ({"spare_tainted": True}, {}, "machine m3 left"),
        ({"faulty_held": False}, {}, "faulty machine m2 not held"),
        ({"pod_marked": True}, {}, "pod gpu-1 still marked"),
        ({}, {"n1": "slurm-operator: Pod (slurm/gpu-0) was cordoned"}, "n1: operator drain left"),
        ({}, {"n2": "slurm-hooks/1 XID79 inc=ab :: x"}, "n2 not in service"),
    ],
)
def test_leftovers_each_fault_is_found(world, slurm, expect):
    from slurm_hooks_lab.k8s_standin import StandinServer

    nodes = [
        NodeState(n, "idle", frozenset({"DRAIN"}) if n in slurm else frozenset(), slurm.get(n))
        for n in ("n1", "n2")
    ]
    with StandinServer() as api:
        d, cfg = _fake_demo(api, nodes)
        _world(api, cfg, **world)
        found = leftovers(d)
    assert any(expect in x for x in found), found


def test_leftovers_before_the_node_came_back():
    d = SimpleNamespace(slinky=None, records={}, node="n2")
    assert leftovers(d) == ["n2 never came back"]


def test_cli_slinky_options_and_classic_node_floor():
    from click.testing import CliRunner
    from slurm_hooks_lab.cli_demo import command

    res = CliRunner().invoke(command, ["--help"])
    assert res.exit_code == 0 and "--slinky" in res.output and "--spare-machines" in res.output
    res = CliRunner().invoke(command, ["--nodes", "3"])
    assert res.exit_code == 2 and "at least 4" in res.output


# -- end to end on a real lab ----------------------------------------------------------


@pytest.mark.slurm
@pytest.mark.slow
def test_slinky_demo_end_to_end_short_grace(tmp_path):
    """The platform's scenario on a lab of its own: every step observed, in
    order; the slurmd pod on the spare machine and the same Slurm node name
    back; the job resumed from its last step with no step lost or repeated;
    nothing left behind; verdict pass; the lab down afterwards."""
    from conftest import lab_unavailable
    from slurm_hooks_lab.lab import Lab, missing_prerequisites

    problems = missing_prerequisites()
    if problems:
        lab_unavailable("; ".join(problems))
    base = Path(tempfile.mkdtemp(prefix="slurm-hooks-test-slinky-"))
    base.chmod(0o755)  # munged (user munge) and the job user must reach the lab
    lines: list[str] = []
    opts = DemoOptions(grace=5, nodes=2, slinky=True, base_dir=base / "lab",
                       json_path=tmp_path / "report.json")  # fmt: skip
    r = demo.run_demo(opts, echo=lines.append)
    text = "\n".join(lines)
    # Timed goals are bench/bench_demo.py's; here each must be measured.
    assert r.behaved, demo.summary_table(r) + "\n" + text
    assert {s.key for s in SLINKY_STEPS if s.required} <= {s.key for s in r.steps}
    t = r.times
    # The pod moves once Slurm runs nothing on n2: after the job ended on
    # TERM, possibly a moment before its requeue shows.
    # Each of these is stamped when the observer's poll sees it; the job's
    # first step after the restart carries the job's own time, which may
    # come before the poll that sees the node back and the job running.
    order = ["fault", "drained", "signalled", "pod_deleted", "pod_on_spare",
             "slurmd_registered", "node_back", "running_again"]  # fmt: skip
    assert [t[k] for k in order] == sorted(t[k] for k in order), {k: t[k] for k in order}
    assert t["signalled"] < t["requeued"] < t["running_again"]
    assert t["pod_deleted"] < t["training_continues"], t
    # The machine is not the Slurm node: the pod moved m2 -> m3, n2 came back.
    by_key = {s.key: s for s in r.steps}
    assert "on m3" in by_key["pod_on_spare"].detail and "(was m2" in by_key["node_back"].detail
    assert (
        "n2" in by_key["running_again"].detail
        and "same Slurm node" in by_key["running_again"].detail
    )
    assert "for machine m2" in by_key["replacement_requested"].detail
    goals = {g.key: g for g in r.goals}
    assert goals["clean"].ok and goals["node_replaced"].value < 300
    tc = r.training
    assert tc.ok and tc.resumed_from == tc.last_step_first_run
    assert tc.first_step_after_resume == tc.resumed_from + 1
    assert not tc.lost and not tc.repeated
    # The metrics file says the same, read independently.
    ckpt = base / "lab" / "shared" / "train" / "runs" / r.job
    recs = [json.loads(x) for x in (ckpt / "metrics.rank0.jsonl").read_text().splitlines()]
    numbers = [x["step"] for x in recs if x["event"] == "step"]
    assert numbers == list(range(1, max(numbers) + 1))
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["verdict"] == r.verdict and doc["scenario"] == "slinky"  # timed goals: bench's
    assert Path(doc["files"]["plot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "slurm-operator: Pod is terminating" in text or "slurmd_down" in r.missing
    assert not Lab(base / "lab").is_running()
    # Passed: nothing of it is left in /tmp (a failure keeps it to look at).
    shutil.rmtree(base, ignore_errors=True)
