"""Our reason grammar: round trips, hostile text, owners; and what the real
slurmctld keeps of our longest reasons."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_hooks.core.errors import ReasonFormatError
from slurm_hooks.core.model import ReasonOwner
from slurm_hooks.core.reason import (
    MAX_REASON_LEN,
    DrainReason,
    classify_owner,
    format_reason,
    is_ours,
    new_incident_id,
    parse_reason,
    sanitize_text,
    try_parse_reason,
)
from slurm_hooks.detect.probes.commands import run

HOSTILE = [
    "plain text",
    "quotes ' \" and `backticks` $(rm -rf /) ; | & > <",
    "tab\there and\ttwo",
    "new\nline\r\nand CR",
    "ünïcödé ✓ 漢字 — emoji 🚒",
    "looks :: like our separator :: twice",
    "key=value inc=ffffffff slurm-hooks/1 X",
    "[root@2024-01-01T00:00:00] fake user stamp",
    "  leading and trailing blanks  ",
    "nul\x00byte and \x1b[31mansi\x1b[0m and \u2028 sep",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_round_trip_hostile_text(text: str) -> None:
    r = DrainReason(code="XID79", incident="7f3a2c1b", text=text, component="gpu3")
    raw = format_reason(r)
    assert "\n" not in raw and "\r" not in raw and "\t" not in raw and "\x00" not in raw
    assert parse_reason(raw) == r
    assert r.text == sanitize_text(text)
    assert classify_owner(raw) == ReasonOwner.OURS


def test_round_trip_with_extra_fields() -> None:
    r = DrainReason("ECC_DBE", new_incident_id(), "double-bit", "gpu0", {"repl": "requested"})
    raw = format_reason(r)
    assert raw.startswith("slurm-hooks/1 ECC_DBE gpu0 inc=")
    assert parse_reason(raw) == r
    assert parse_reason(format_reason(r.with_extra(k8s="cordoned"))).extra == {
        "repl": "requested",
        "k8s": "cordoned",
    }


def test_over_long_text_is_cut_head_intact() -> None:
    r = DrainReason("XID79", "7f3a2c1b", "x" * 5000, "gpu3")
    raw = format_reason(r)
    assert len(raw) == MAX_REASON_LEN and raw.endswith("...")
    back = parse_reason(raw)
    assert (back.code, back.incident, back.component) == ("XID79", "7f3a2c1b", "gpu3")
    assert back.text == "x" * (len(back.text) - 3) + "..."


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_round_trip_any_text(text: str) -> None:
    r = DrainReason("GPU_LOST", "abcd1234", text)
    raw = format_reason(r)
    assert len(raw) <= MAX_REASON_LEN and "\n" not in raw
    back = parse_reason(raw)
    assert (back.code, back.incident) == ("GPU_LOST", "abcd1234")
    if len(raw) < MAX_REASON_LEN:
        assert back == r


@pytest.mark.parametrize(
    ("raw", "owner"),
    [
        ("slurm-hooks/1 XID79 gpu3 inc=7f3a2c1b :: GPU has fallen off the bus", ReasonOwner.OURS),
        ("NHC: check_hw_ib: no active port", ReasonOwner.NHC),
        ("nhc: lower case", ReasonOwner.NHC),
        ("slurm-operator: scaling down", ReasonOwner.OPERATOR),
        ("Prolog error", ReasonOwner.SLURM),
        ("Not responding", ReasonOwner.SLURM),
        ("Kill task failed", ReasonOwner.SLURM),
        ("admin: PSU swap", ReasonOwner.ADMIN),
        ("slurm-hooks/1 broken reason", ReasonOwner.ADMIN),
        ("slurm-hooks/2 XID79 inc=1 :: future version", ReasonOwner.ADMIN),
        (" slurm-hooks/1 XID79 inc=1 :: padded ", ReasonOwner.OURS),
        ("", ReasonOwner.NONE),
        ("   ", ReasonOwner.NONE),
        (None, ReasonOwner.NONE),
    ],
)
def test_classify_owner(raw: str | None, owner: ReasonOwner) -> None:
    assert classify_owner(raw) == owner
    assert is_ours(raw) == (owner == ReasonOwner.OURS)


@pytest.mark.parametrize(
    "raw",
    [
        "slurm-hooks/1 XID79 gpu3 :: no incident",
        "slurm-hooks/1 XID79 inc=1 inc=2 :: dup",
        "slurm-hooks/1 xid79 inc=1 :: lower-case code",
        "slurm-hooks/1 XID79 inc=1 no separator",
        "slurm-hooks/1 XID79 a b inc=1 :: two components",
    ],
)
def test_malformed_ours_is_rejected(raw: str) -> None:
    with pytest.raises(ReasonFormatError):
        parse_reason(raw)
    assert try_parse_reason(raw) is None


@pytest.mark.parametrize("bad", [{"code": "x"}, {"incident": "a b"}, {"component": "a=b"}])
def test_invalid_fields_refused(bad: dict[str, str]) -> None:
    args = {"code": "XID79", "incident": "1", "text": "t", **bad}
    with pytest.raises(ReasonFormatError):
        DrainReason(**args)


# -- on the real lab: what slurmctld keeps --------------------------------------


def _sinfo_json_reason(lab, node: str) -> str:  # type: ignore[no-untyped-def]
    """The reason as Slurm's own JSON says it: 22.05's ``sinfo --json`` lists
    ``nodes``; from 23.02 it lists ``sinfo`` records, and the node objects
    (with ``reason`` a plain string) come from ``scontrol --json show node``."""
    if lab.client().version() >= (23, 2, 0):
        argv = ["scontrol", "--json", "show", "node", node]
    else:
        argv = ["sinfo", "--json"]
    doc = json.loads(run(argv, timeout=20, env=lab.env()).stdout)
    return next(n["reason"] for n in doc["nodes"] if n["name"] == node)


@pytest.mark.slurm
def test_lab_max_length_reason_survives(fresh_lab) -> None:  # type: ignore[no-untyped-def]
    text = "ünïcödé ✓ 漢字 'q' \"dq\" $x `y` %n = ; [] {} " * 20
    raw = format_reason(DrainReason("XID79", "7f3a2c1b", text, "gpu3"))
    assert len(raw) == MAX_REASON_LEN
    c = fresh_lab.client()
    c.drain("n1", raw)
    assert c.get_node("n1").reason == raw  # scontrol -o show node
    assert fresh_lab.client(node_source="json").get_node("n1").reason == raw
    assert _sinfo_json_reason(fresh_lab, "n1") == raw
    assert parse_reason(c.get_node("n1").reason).text == parse_reason(raw).text


@pytest.mark.slurm
@pytest.mark.parametrize("length", [1024, 4096, 65536])
def test_lab_slurm_has_no_reason_length_limit(fresh_lab, length: int) -> None:  # type: ignore[no-untyped-def]
    # Measured, not our limit: slurmctld stores and returns these intact
    # (the OS caps one argv string at 128 KiB).
    raw = ("0123456789abcdef" * (length // 16 + 1))[:length]
    c = fresh_lab.client()
    c.drain("n2", raw)
    assert c.get_node("n2").reason == raw
    assert _sinfo_json_reason(fresh_lab, "n2") == raw
