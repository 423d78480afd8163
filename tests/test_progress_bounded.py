"""Parsers of user-written files under hard limits (issue #27): every bomb is a
``Rejected`` with its reason, found before the memory or the time is spent;
plain values still come out as ``pickle``/``json`` would give them, and
random bytes never raise (hypothesis)."""

from __future__ import annotations

import json
import pickle
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slurm_hooks_lab.hostile import hash_bomb, nested_json, string_bomb

from slurm_hooks.detect.progress.bounded import Limits, Rejected, load_json, load_pickle
from slurm_hooks.detect.progress.external import (
    parse_ras,
    read_flight_recorder,
    safe_unpickle,
)
from slurm_hooks.detect.progress.records import parse_line

FUZZ = settings(max_examples=200, deadline=None)


# -- the bombs -------------------------------------------------------------------------------


def test_the_issue_bombs_are_rejected_with_a_reason():
    assert "nested more than 64 deep" in str(read_flight_recorder(nested_json()))
    # Keys that all hash alike: past 64 bits refused as integers, below as keys.
    assert "an integer of 65 bits" in str(read_flight_recorder(hash_bomb(2000)))
    assert "dict key of type int" in str(read_flight_recorder(hash_bomb(8)))
    assert "2147483648 bytes" in str(read_flight_recorder(string_bomb()))
    assert parse_ras("{" + '"c":' + nested_json().decode() + "}").rejected
    assert parse_line("P1 " + "[" * 100_000) is None


@pytest.mark.parametrize(
    ("blob", "why"),
    [
        (b"\x80\x05\x96" + struct.pack("<Q", 1 << 40) + b"x.", "bytearray8"),  # BYTEARRAY8
        (b"\x80\x04\x8d" + struct.pack("<Q", 1 << 40) + b"x.", "unicodestring8"),
        (b"\x80\x02N" + b"r" + struct.pack("<I", 1 << 31) + b"0" * 0 + b".", ""),  # LONG_BINPUT
        (b"cos\nsystem\n(S'true'\ntR.", "GLOBAL refused"),
        (b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94\x93.", "STACK_GLOBAL"),
        (b"(I1\nI2\nl.", ""),  # plain protocol 0 list: fine
    ],
)
def test_pickle_lengths_memo_and_globals(blob, why):
    out = load_pickle(blob)
    if why:
        assert isinstance(out, Rejected) and why in out.why, out
    else:
        assert not isinstance(out, Rejected) or "memo" not in out.why


def test_memo_entries_strings_items_and_depth_are_capped():
    lim = Limits(max_memo=10, max_str=100, max_items=1000, max_depth=8)
    memo = pickle.dumps([str(i) for i in range(50)], protocol=2)
    assert "memo entries" in load_pickle(memo, lim).why
    assert "characters" in load_pickle(pickle.dumps("x" * 101), lim).why
    assert "opcodes" in load_pickle(pickle.dumps(list(range(2000)), protocol=2), lim).why
    deep: list = []
    cur = deep
    for _ in range(20):
        cur.append([])
        cur = cur[0]
    shallow = Limits(max_depth=8)
    assert "nested" in load_pickle(pickle.dumps(deep), shallow).why
    assert "nested" in load_json(json.dumps(deep), shallow).why
    assert load_pickle(pickle.dumps(deep)) == deep == load_json(json.dumps(deep))
    assert "values" in load_json(json.dumps(list(range(2000))), lim).why
    assert "bytes" in load_json(b" " * 2000, Limits(max_bytes=1000)).why


def test_a_list_appended_to_itself_is_refused_not_walked():
    # ]q\x00 (h\x00 ... e : a list that holds itself, many times over
    blob = b"\x80\x02]q\x00(" + b"h\x00" * 100 + b"e" + b"h\x00a" * 100 + b"."
    assert "nested" in load_pickle(blob).why


def test_cpu_limit():
    blob = pickle.dumps(list(range(100_000)), protocol=2)
    assert "CPU" in load_pickle(blob, Limits(max_cpu_s=0.0)).why


def test_real_dumps_still_parse():
    from pathlib import Path

    fr = Path(__file__).parent / "data" / "flight_recorder"
    for p in sorted(fr.glob("*.json")):
        doc = json.loads(p.read_bytes())
        dump = read_flight_recorder(p.read_bytes())
        assert not isinstance(dump, Rejected), (p, dump)
        for proto in range(6):
            assert read_flight_recorder(pickle.dumps(doc, protocol=proto)) == dump
        assert safe_unpickle(pickle.dumps(doc, protocol=4)) == doc


# -- property tests ---------------------------------------------------------------------------

_keys = st.one_of(st.text(max_size=20), st.integers(-(2**31) + 1, 2**31 - 1))
_plain = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**64) + 1, 2**64 - 1),
              st.floats(allow_nan=False),
              st.text(max_size=50)),
    lambda inner: st.one_of(st.lists(inner, max_size=6), st.tuples(inner, inner),
                            st.dictionaries(_keys, inner, max_size=6)),
    max_leaves=40,
)  # fmt: skip


@FUZZ
@given(_plain, st.integers(0, 5))
def test_plain_values_come_out_as_pickle_gives_them(value, proto):
    assert load_pickle(pickle.dumps(value, protocol=proto)) == pickle.loads(
        pickle.dumps(value, protocol=proto)
    )


@FUZZ
@given(st.integers(65, 20_000), st.booleans(), st.integers(2, 5))
def test_integers_past_64_bits_are_refused(bits, negative, proto):
    """``str()`` of an int over 4,300 digits raises: a dump never gets to
    hold one (a sequence id or a pid is far below 64 bits)."""
    value = (-1 if negative else 1) * (1 << (bits - 1))
    got = load_pickle(pickle.dumps({"version": value}, protocol=proto))
    assert isinstance(got, Rejected) and "bits" in got.why
    assert isinstance(read_flight_recorder(pickle.dumps({"version": value}, protocol=proto)),
                      Rejected)  # fmt: skip


@FUZZ
@given(st.binary(max_size=200), st.integers(3, 5))
def test_bytes_come_out_as_pickle_gives_them(value, proto):
    assert load_pickle(pickle.dumps([value], protocol=proto)) == [value]
    assert load_pickle(pickle.dumps(bytearray(value), protocol=5)) == value  # BYTEARRAY8


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_never_raise(blob):
    for out in (load_pickle(blob), load_json(blob), read_flight_recorder(blob)):
        assert out is not None or out is None  # returned, whatever it is
    assert isinstance(parse_ras(blob.decode("latin-1")).suspects, tuple)


@FUZZ
@given(st.binary(max_size=300), st.integers(0, 5), _plain)
def test_mutated_pickles_never_raise(noise, proto, value):
    blob = bytearray(pickle.dumps({"version": "2.5", "entries": [value]}, protocol=proto))
    for i, b in enumerate(noise[: len(blob)]):
        if b % 3 == 0:
            blob[(i * 7919) % len(blob)] = b
    out = read_flight_recorder(bytes(blob))
    assert out is not None


_ras_words = st.sampled_from(
    ["DEAD", "INCOMPLETE", "MISMATCH", "  Process 12 on node n1 managing GPU 0",
     "  Rank 3 -- GPU 1 managed by process 99 on node n2", "  7 ranks have launched up to "
     "operation 5", "  Rank 2 has launched up to operation 3 -- [process information not found]",
     "#0-1 (00ab) INCOMPLETE", "  The missing ranks: 1,2,3", "{", "[", '"communicators":', "\n"]
)  # fmt: skip


@FUZZ
@given(st.lists(st.one_of(_ras_words, st.text(max_size=30)), max_size=60))
def test_ras_parser_never_raises(parts):
    rep = parse_ras("\n".join(parts))
    assert len(rep.suspects) <= 4096


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(["P1", "job=1", "rank=0", "node=n1", "pid=5",
                                           "step=3", "time=1e9", "restart=0", "busy=0.1",
                                           "time=nan", "pid=0", "[" * 50]),
                          st.text(max_size=20)), max_size=14))  # fmt: skip
def test_record_parser_never_raises(tokens):
    rec = parse_line(" ".join(tokens))
    assert rec is None or rec.pid >= 1


def test_an_unchanged_evidence_file_is_parsed_once(tmp_path, monkeypatch):
    from slurm_hooks.detect.progress import gather

    calls = []
    real = gather.read_flight_recorder

    def counting(data: bytes):  # type: ignore[no-untyped-def]
        calls.append(len(data))
        return real(data)

    monkeypatch.setattr(gather, "read_flight_recorder", counting)
    d = tmp_path / "55"
    d.mkdir()
    (d / "fr_0.json").write_bytes(nested_json())
    pattern = f"{tmp_path}/{{job}}/fr_*"
    for _ in range(3):
        budget = gather.Budget()
        with gather.metering(budget):
            assert gather.read_hints("", pattern, "55", uid=None) == []
        assert [w for _, w in budget.rejected] == ["rejected: nested more than 64 deep"]
    assert len(calls) == 1, "parsed once, reported every pass"
    (d / "fr_0.json").write_bytes(nested_json(10))  # changed: read again
    gather.read_hints("", pattern, "55", uid=None)
    assert len(calls) == 2
