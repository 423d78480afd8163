"""NCCL RAS output and flight-recorder dumps as evidence for the hang judge:
parsers on recorded samples (tests/data/nccl_ras, tests/data/flight_recorder),
hostile input, the judge's use of the hints and the watcher pass reading them."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from slurm_hooks.detect.progress.external import (
    Suspect,
    fr_waited_for,
    parse_flight_recorder,
    parse_ras,
    resolve,
    safe_unpickle,
)
from slurm_hooks.detect.progress.gather import read_hints
from slurm_hooks.detect.progress.judge import HangSettings, ProcState, Verdict, judge_hang
from slurm_hooks.detect.progress.records import RankView

DATA = Path(__file__).parent / "data"
RAS = DATA / "nccl_ras"
FR = DATA / "flight_recorder"


def _ras(name: str):
    return parse_ras((RAS / name).read_text())


# -- NCCL RAS --------------------------------------------------------------------------------


def test_ras_224_dead_process_and_missing_rank_number():
    rep = _ras("2.24_dead_and_missing_rank.txt")
    assert rep.version == "2.24.3 compiled with CUDA 12.6"
    dead = [s for s in rep.suspects if s.why == "dead"]
    assert [(s.pid, s.host, s.rank) for s in dead] == [(4242, "10.0.0.12", None)]
    missing = [s for s in rep.suspects if s.why == "no response"]
    assert [(s.rank, s.pid, s.comm_size) for s in missing] == [(1, None, 4)]
    # The RAS network section's "The missing process" list is not the Errors one.
    assert len(rep.suspects) == 2
    assert rep.flagged == ("#0-0 (9a3f2c1e7b5d4a60) INCOMPLETE",)


def test_ras_mismatch_names_the_one_rank_behind():
    rep = _ras("2.26_mismatch_one_rank_behind.txt")
    assert [(s.why, s.rank, s.pid, s.host) for s in rep.suspects] == [
        ("behind", 1, 4242, "10.0.0.12")
    ]


def test_ras_incomplete_rank_with_its_process():
    rep = _ras("2.26_incomplete_rank_with_process.txt")
    assert {(s.why, s.pid) for s in rep.suspects} == {("no response", 4242)}
    assert any(s.rank == 1 and s.comm_size == 2 for s in rep.suspects)


def test_ras_healthy_output_has_no_suspect():
    assert _ras("2.26_healthy.txt").suspects == ()


def test_ras_json_missing_rank():
    rep = _ras("2.29_json_missing_rank.json")
    assert rep.version == "2.29.2"
    assert [(s.why, s.rank, s.pid, s.host, s.comm_size) for s in rep.suspects] == [
        ("no response", 1, 4242, "10.0.0.12", 2)
    ]


def test_ras_mismatch_with_two_ranks_behind_names_nobody():
    text = (
        "#0-0 (00000000000000aa) MISMATCH\n"
        "  Communicator ranks have different AllReduce operation counts\n"
        "  6 ranks have launched up to operation 881\n"
        "  2 ranks have launched up to operation 880\n"
        "  Rank 1 -- GPU 0 managed by process 11 on node 10.0.0.2\n"
        "  Rank 5 -- GPU 0 managed by process 15 on node 10.0.0.6\n"
    )
    assert parse_ras(text).suspects == ()


def test_ras_a_rank_ahead_is_not_behind():
    text = (
        "#0-0 (00000000000000aa) MISMATCH\n"
        "  Communicator ranks have different AllReduce operation counts\n"
        "  3 ranks have launched up to operation 880\n"
        "  Rank 2 has launched up to operation 881 -- GPU 0 managed by process 12 on node h\n"
    )
    assert parse_ras(text).suspects == ()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\x00" * 1000,
        "DEAD\n  Process 99999999999 on node x managing GPU 0\n",  # pid too long
        "DEAD\n  Process 12 on node $(reboot) managing GPU 0\n" * 3,
        "#0-0 (zz) MISMATCH\n  Rank x has launched up to operation y -- GPU 0\n",
        "{not json",
        '{"communicators": [{"missing_ranks": [{"rank": "1; rm -rf /"}]}, 7, null]}',
    ],
)
def test_ras_hostile_text_never_raises_and_stays_clean(text):
    rep = parse_ras(text)
    for s in rep.suspects:
        assert "$" not in (s.host or "") and "$" not in s.detail


# -- flight recorder -------------------------------------------------------------------------


def _dumps():
    return {
        int(p.stem.rsplit("_", 1)[1]): parse_flight_recorder(p.read_bytes())
        for p in sorted(FR.glob("nccl_trace_rank_*.json"))
    }


def test_flight_recorder_tutorial_sample_parses():
    d = parse_flight_recorder((FR / "tutorial_2.5_one_entry.json").read_bytes())
    assert d is not None and d.version == "2.5"
    assert d.pg_status == {"0": (2, -1, 2)}
    assert d.last_entry == {"0": (1, "nccl:all_reduce", "completed")}


def test_flight_recorder_names_the_rank_that_never_entered_the_collective():
    hint = fr_waited_for(_dumps())
    assert hint is not None and (hint.rank, hint.why, hint.source) == (
        2,
        "behind",
        "flight_recorder",
    )
    assert "#880" in hint.detail and "#881" in hint.detail


def test_flight_recorder_pickle_form_parses_like_json():
    for p in sorted(FR.glob("nccl_trace_rank_*.json")):
        doc = json.loads(p.read_text())
        for e in doc["entries"]:
            e["process_group"] = tuple(e["process_group"])
            e["input_sizes"] = tuple(tuple(x) for x in e["input_sizes"])
        doc["pg_status"] = {k: {kk: int(vv) for kk, vv in v.items()}
                            for k, v in doc["pg_status"].items()}  # fmt: skip
        assert parse_flight_recorder(pickle.dumps(doc, protocol=2)) == parse_flight_recorder(
            p.read_bytes()
        )


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/slurm-hooks-pwned",))


@pytest.mark.parametrize(
    "blob",
    [
        pickle.dumps(_Evil(), protocol=2),
        pickle.dumps({"version": "2.5", "x": _Evil()}, protocol=4),
        pickle.dumps({"version": "2.5", "e": Suspect("a", "b")}, protocol=2),  # any class
        b"cos\nsystem\n(S'touch /tmp/slurm-hooks-pwned'\ntR.",  # protocol 0 GLOBAL + REDUCE
        b"\x80\x02garbage",
        b"",
    ],
)
def test_hostile_pickles_are_refused_and_nothing_runs(blob):
    Path("/tmp/slurm-hooks-pwned").unlink(missing_ok=True)
    assert parse_flight_recorder(blob) is None
    with pytest.raises(ValueError):
        safe_unpickle(blob)
    assert not Path("/tmp/slurm-hooks-pwned").exists()


def test_flight_recorder_needs_two_ranks_and_one_alone_behind():
    d = _dumps()
    assert fr_waited_for({0: d[0]}) is None
    assert fr_waited_for({0: d[0], 1: d[1], 3: d[3]}) is None  # all at #881


# -- the judge with hints --------------------------------------------------------------------


def _view(rank, node, pid, step, last=1000.0):
    return RankView(rank, node, pid, 0, 900.0, step, last, 901.0, ())


def test_hint_names_the_culprit_when_proc_states_and_steps_cannot():
    ranks = {0: _view(0, "a", 100, 50), 1: _view(1, "b", 4242, 50)}
    procs = {0: ProcState.SLEEPING, 1: ProcState.REMOTE}
    s = HangSettings(10.0, 1.0)
    assert judge_hang("7", ranks, procs, 1100.0, s).verdict is Verdict.STALLED
    hints = _ras("2.26_mismatch_one_rank_behind.txt").suspects
    v = judge_hang("7", ranks, procs, 1100.0, s, hints)
    assert v.verdict is Verdict.HANG and (v.rank, v.node) == (1, "b")
    assert v.cause == "ras: behind" and "NCCL RAS names rank 1" in v.explanation
    # The process evidence of this node still comes first.
    procs[0] = ProcState.STOPPED
    assert judge_hang("7", ranks, procs, 1100.0, s, hints).rank == 0


def test_hint_never_judges_a_progressing_job_or_names_a_stranger():
    ranks = {0: _view(0, "a", 100, 50, last=1099.0), 1: _view(1, "b", 4242, 50, last=1099.0)}
    hints = _ras("2.26_mismatch_one_rank_behind.txt").suspects
    s = HangSettings(10.0, 1.0)
    assert judge_hang("7", ranks, {}, 1100.0, s, hints).verdict is Verdict.HEALTHY
    stranger = [Suspect("ras", "dead", None, 999, "10.9.9.9")]
    assert judge_hang("7", ranks, {}, 1200.0, s, stranger).verdict is Verdict.STALLED


def test_resolve_rules():
    ranks = {0: _view(0, "a", 10, 5), 1: _view(1, "b", 10, 5), 2: _view(2, "c", 30, 5)}
    assert resolve([Suspect("ras", "dead", None, 10)], ranks) is None  # pid on two nodes
    assert resolve([Suspect("ras", "dead", None, 30)], ranks)[0] == 2
    # A communicator rank is the global one only in a communicator of every rank.
    assert resolve([Suspect("ras", "no response", 1, comm_size=2)], ranks) is None
    assert resolve([Suspect("ras", "no response", 1, comm_size=3)], ranks)[0] == 1
    assert resolve([Suspect("flight_recorder", "behind", 2)], ranks)[0] == 2


# -- reading the files -----------------------------------------------------------------------


def test_read_hints_globs_per_job_and_trusts_only_the_owners_regular_files(tmp_path):
    job = tmp_path / "55"
    job.mkdir()
    for p in FR.glob("nccl_trace_rank_*.json"):
        (job / p.name).write_bytes(p.read_bytes())
    (job / "ras.txt").write_text((RAS / "2.26_mismatch_one_rank_behind.txt").read_text())
    ras, fr = f"{tmp_path}/{{job}}/ras*.txt", f"{tmp_path}/{{job}}/nccl_trace_rank_*"
    hints = read_hints(ras, fr, "55", uid=os.getuid())
    assert [(h.source, h.rank) for h in hints] == [("ras", 1), ("flight_recorder", 2)]
    assert read_hints(ras, fr, "56", uid=os.getuid()) == []
    assert read_hints(ras, fr, "55", uid=os.getuid() + 1) == []  # another owner's files
    assert read_hints("", "", "55", uid=None) == []
    # A symlink to someone else's file is not followed.
    (job / "ras.txt").unlink()
    (job / "ras.txt").symlink_to(RAS / "2.26_mismatch_one_rank_behind.txt")
    assert [h.source for h in read_hints(ras, "", "55", uid=None)] == []
