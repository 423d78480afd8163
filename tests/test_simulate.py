"""slurm-hooks simulate: the replay runs the product's own decision code, its
simulated Slurm obeys the door's rules, and a lab audit log replays to the
decisions it recorded."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hooks.cli import main
from slurm_hooks.core.held import parse_mark
from slurm_hooks.core.reason import try_parse_reason
from slurm_hooks.decide import PolicyConfig
from slurm_hooks.detect.xid.catalogue import parse_catalogue
from slurm_hooks.simulate.cluster import US
from slurm_hooks.simulate.evidence import Evidence, findings
from slurm_hooks.simulate.history import replay_history
from slurm_hooks.simulate.params import SimParams
from slurm_hooks.simulate.replay import Baseline, Replay, run_all
from slurm_hooks.simulate.trace import Fault, Trace, expected_faults, generate, read_history

DATA = Path(__file__).parent / "data" / "simulate"
DEMO_AUDIT = DATA / "demo-audit.jsonl"
MASS_AUDIT = DATA / "mass-audit.jsonl"
SMALL = SimParams(nodes=128, days=20, spares=8)


def _trace(*faults: Fault) -> Trace:
    return Trace("test", "test", tuple(faults))


def test_generated_trace_is_deterministic_and_follows_the_published_rate():
    a = generate("llama3", nodes=2048, days=54, seed=7)
    b = generate("llama3", nodes=2048, days=54, seed=7)
    c = generate("llama3", nodes=2048, days=54, seed=8)
    assert a == b and a != c
    events = len({f.t for f in a.faults})  # a switch's nodes fail together: one event
    assert abs(events - expected_faults("llama3", 2048, 54)) < 4 * 419**0.5
    assert {f.cause for f in a.faults} >= {"faulty_gpu", "gpu_hbm3", "software_bug"}


@pytest.mark.parametrize(
    ("code", "action"),
    [("XID79", "reboot"), ("XID48", "reset_gpu"), ("GPU_LOST", "reboot"),
     ("GPU_RESET_REQUIRED", "reset_gpu"), ("ECC_DBE", "reset_gpu"), ("IB_PORT_DOWN", "drain"),
     ("HANG", "drain"), ("GPU_TEMP", "drain")],
)  # fmt: skip
def test_a_logged_code_becomes_evidence_the_product_judges_the_same(code, action):
    ev = Evidence.from_code(code)
    assert ev is not None
    found, _ = findings(ev, node="n1", gpu=2, now=1e9)
    assert [(f.code, str(f.action)) for f in found] == [(code, action)]


def test_replay_is_deterministic_for_a_seed():
    tr = generate("llama3", nodes=SMALL.nodes, days=SMALL.days, seed=3)
    first = {k: v.to_dict() for k, v in run_all(tr, SMALL).items()}
    again = {k: v.to_dict() for k, v in run_all(tr, SMALL).items()}
    assert first == again
    assert set(first) == {"manual", "nhc", "slurm-hooks"}


def test_the_xid_catalogue_drives_the_replay():
    """Change the catalogue's action for XID 79 and the replay's outcome changes."""
    faults = [Fault(3600.0 * (i + 1), i, "faulty_gpu", gpu=i % 8) for i in range(20)]
    tr = _trace(*faults)
    stock_r = Replay(tr, SMALL, Baseline.HOOKS)
    stock = stock_r.run()
    data = json.loads((resources.files("slurm_hooks") / "data" / "xid_catalogue.json").read_text())
    for row in data["xids"]:
        if row["xid"] == 79:
            row["bucket"] = "IGNORE"
    ign_r = Replay(tr, SMALL, Baseline.HOOKS, catalogue=parse_catalogue(data))
    ignoring = ign_r.run()
    assert stock.decisions["drain"] == 20
    assert ignoring.decisions["drain"] == 0  # nothing to decide: people find the nodes
    assert {w.by for w in stock_r.slurm.writes if w.op == "requeue"} == {US}
    assert {w.by for w in ign_r.slurm.writes if w.op == "requeue"} == {"admin"}
    assert ignoring.ettr < stock.ettr


def test_a_foreign_reason_is_never_taken():
    """A node an admin drained gets a GPU fault: slurm-hooks writes nothing
    to it (the door refuses), the job is still moved, the reason stays."""
    r = Replay(_trace(Fault(600.0, 5, "faulty_gpu")), SMALL, Baseline.HOOKS)
    with r.slurm.as_actor("admin"):
        r.slurm.drain("gpu0005", "admin: bad fan, ticket 1234")
    fig = r.run()
    node = r.slurm.nodes["gpu0005"]
    assert node.reason == "admin: bad fan, ticket 1234" and node.drained
    ours = [w for w in r.slurm.writes if w.target == "gpu0005" and w.by == US]
    assert ours == []
    assert fig.decisions["foreign_reason"] == 1
    assert r.slurm.requeues["1"] == 1  # its job was evacuated all the same


def test_every_write_of_ours_carries_our_reason_and_never_lifts_a_foreign_one():
    tr = generate("llama3", nodes=SMALL.nodes, days=SMALL.days, seed=5)
    r = Replay(tr, SMALL, Baseline.HOOKS)
    r.run()
    held_by: dict[str, str] = {}
    for w in r.slurm.writes:
        if w.op in ("drain", "down", "update_reason"):
            if w.by == US:
                assert try_parse_reason(w.value) is not None, w
                assert held_by.get(w.target, US) == US, w
            held_by[w.target] = w.by
        elif w.op == "resume":
            if w.by == US:  # only ever a drain of ours (people resume what they and Slurm set)
                assert held_by.get(w.target, US) == US, w
            held_by.pop(w.target, None)


def test_a_job_is_requeued_exactly_once_when_two_of_its_nodes_fail_together():
    r = Replay(_trace(Fault(600.0, 3, "faulty_gpu"), Fault(601.0, 9, "gpu_hbm3")), SMALL,
               Baseline.HOOKS)  # fmt: skip
    fig = r.run()
    assert fig.drains == 2
    assert r.slurm.requeues == {"1": 1}
    assert [w.op for w in r.slurm.writes if w.target == "1"].count("requeue") == 1


def test_the_breaker_holds_a_mass_failure_at_its_cap():
    """The lab's mass-failure case (tests/test_breaker_mass_lab.py): 64 XID 79
    at once on 256 nodes, default breaker: each node claims, ranks its claim
    (rank_claim), 20 confirmed, 44 taken back and held (marked in Slurm)."""
    p = SimParams(nodes=256, days=0.03, spares=0)  # over before anyone resets the breaker
    tr = _trace(*(Fault(100.0, i * 4, "faulty_gpu") for i in range(64)))
    r = Replay(tr, p, Baseline.HOOKS)
    fig = r.run()
    assert fig.decisions["drain"] == 20 and fig.drains == 20
    assert fig.decisions["breaker_tripped"] == 44 and fig.breaker_trips == 1
    marked = [n for n, s in r.slurm.nodes.items() if parse_mark(s.comment)]
    assert len(marked) == 44 and not any(r.slurm.nodes[n].drained for n in marked)


def test_a_person_resetting_the_breaker_lets_the_held_faults_drain_at_the_cap():
    p = SimParams(nodes=256, days=1, spares=0)
    tr = _trace(*(Fault(100.0, i * 4, "faulty_gpu") for i in range(64)))
    fig = Replay(tr, p, Baseline.HOOKS).run()
    assert fig.decisions["drain"] == 64  # every fault drained in the end, 20 an hour at most
    assert fig.breaker_trips >= 3


def test_slurm_hooks_keeps_more_training_time_than_people_alone():
    tr = generate("llama3", nodes=SMALL.nodes, days=SMALL.days, seed=2)
    res = run_all(tr, dataclasses.replace(SMALL, days=SMALL.days))
    assert res["slurm-hooks"].ettr > res["manual"].ettr
    assert res["manual"].decisions == {} and res["slurm-hooks"].decisions["drain"] > 0


def test_the_lab_audit_log_replays_to_its_decisions():
    """tests/data/simulate/demo-audit.jsonl: a real run of the demo (XID 79
    under a 2-node job on a 5-node lab; grace 10 s; breaker_max_share 0.5)."""
    tr = read_history([DEMO_AUDIT])
    rows = replay_history(tr, PolicyConfig(breaker_max_share=0.5), nodes=5)
    assert [(r.code, r.logged) for r in rows] == [
        ("XID79", "drain"), ("GPU_LOST", "already_handled"), ("XID79", "claim confirmed"),
        ("XID79", "resume"),
    ]  # fmt: skip
    assert all(r.match for r in rows), rows


def test_the_lab_mass_failure_replays_to_its_claims():
    """tests/data/simulate/mass-audit.jsonl: a real run of the mass-failure
    test's first round (256 nodes, 64 XID 79 at once): 64 drain decisions,
    20 claims confirmed, 44 taken back, node for node."""
    tr = read_history([MASS_AUDIT])
    rows = replay_history(tr, PolicyConfig(breaker_max_share=0.5), nodes=256)
    assert len(rows) == 128 and all(r.match for r in rows), [r for r in rows if not r.match]
    claims = Counter(r.replayed for r in rows if r.replayed.startswith("claim"))
    assert claims == {"claim confirmed": 20, "claim taken_back": 44}
    # The cap is the policy's: a site with a cap of 10 would have held 54.
    tighter = replay_history(tr, PolicyConfig(breaker_max_nodes=10), nodes=256)
    assert Counter(r.replayed for r in tighter)["claim confirmed"] == 10


def test_the_history_json_replays_like_the_audit_log(tmp_path):
    out = CliRunner().invoke(main, ["history", "--audit-log", str(DEMO_AUDIT), "--json"])
    assert out.exit_code == 0, out.output
    doc = tmp_path / "history.json"
    doc.write_text(out.output)
    rows = replay_history(read_history([doc]), PolicyConfig(breaker_max_share=0.5), nodes=5)
    assert [r.logged for r in rows] == ["drain", "already_handled", "claim confirmed", "resume"]
    assert all(r.match for r in rows), rows


def test_cli_json_maps_each_baseline_to_its_figures():
    out = CliRunner().invoke(
        main, ["simulate", "--nodes", "64", "--days", "5", "--set", "spares=4", "--json"]
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert set(doc["baselines"]) == {"manual", "nhc", "slurm-hooks"}
    assert all(0 <= b["ettr"] <= 1 for b in doc["baselines"].values())


def test_cli_sweep_replays_once_per_value():
    out = CliRunner().invoke(
        main, ["simulate", "--nodes", "64", "--days", "5", "--sweep", "spares=0,4", "--json"]
    )
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)["sweep"]["rows"]
    assert [r["value"] for r in rows] == ["0", "4"]


def test_cli_history_exit_status_says_whether_every_decision_was_reproduced():
    ok = CliRunner().invoke(main, ["simulate", "--trace", str(DEMO_AUDIT), "--nodes", "5"])
    assert ok.exit_code == 0, ok.output
    assert "4 reproduced" in ok.output


def test_cli_names_the_published_traces_for_an_unknown_one(tmp_path):
    out = CliRunner().invoke(main, ["simulate", "--trace", str(tmp_path / "nosuch")])
    assert out.exit_code == 2 and "llama3, rsc1, rsc2" in out.output


@pytest.mark.parametrize("bad", ["nosuch=1", "spares=-1"])
def test_cli_rejects_unknown_or_invalid_parameters(bad):
    out = CliRunner().invoke(main, ["simulate", "--nodes", "16", "--days", "1", "--set", bad])
    assert out.exit_code == 2
