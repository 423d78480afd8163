"""fleet: grouping of out-of-service nodes, table-driven."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from slurm_hooks.cli import fleet
from slurm_hooks.core.model import NodeState, ReasonOwner

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def node(name, state="idle", flags=("DRAIN",), reason=None, user="root", ago=None, parts=("gpu",)):
    return NodeState(
        name=name,
        state=state,
        flags=frozenset(flags),
        reason=reason,
        reason_user=user,
        reason_time=None if ago is None else NOW - timedelta(seconds=ago),
        partitions=parts,
    )


OURS_79 = "slurm-hooks/1 XID79 gpu3 inc=7f3a2c1b :: GPU has fallen off the bus"
OURS_79_REPL = "slurm-hooks/1 XID79 gpu1 inc=0badc0de repl=requested :: GPU has fallen off the bus"
OURS_DBE = "slurm-hooks/1 ECC_DBE gpu0 inc=11112222 :: double-bit ECC error"
LEND = "slurm-hooks/1 LEND inc=aa55aa55 :: lent to inference"


@pytest.mark.parametrize(
    ("n", "owner", "code", "incident", "component", "repl", "lent"),
    [
        (
            node("a", reason=OURS_79, ago=60),
            ReasonOwner.OURS,
            "XID79",
            "7f3a2c1b",
            "gpu3",
            None,
            False,
        ),
        (
            node("a", reason=OURS_79_REPL),
            ReasonOwner.OURS,
            "XID79",
            "0badc0de",
            "gpu1",
            "requested",
            False,
        ),
        (node("a", reason=LEND), ReasonOwner.OURS, "LEND", "aa55aa55", None, None, True),
        (
            node("a", reason="NHC: check_hw_ib: No IB port"),
            ReasonOwner.NHC,
            "NHC",
            None,
            None,
            None,
            False,
        ),
        (
            node("a", reason="slurm-operator: node draining"),
            ReasonOwner.OPERATOR,
            "slurm-operator",
            None,
            None,
            None,
            False,
        ),
        (
            node("a", reason="Prolog error"),
            ReasonOwner.SLURM,
            "Prolog error",
            None,
            None,
            None,
            False,
        ),
        (
            node("a", state="down", flags=("NOT_RESPONDING",), reason="Not responding"),
            ReasonOwner.SLURM,
            "Not responding",
            None,
            None,
            None,
            False,
        ),
        (node("a", reason="rack 12 maintenance"), ReasonOwner.ADMIN, "-", None, None, None, False),
        # Looks like ours but does not parse: an admin's, never ours.
        (
            node("a", reason="slurm-hooks/1 XID79 gpu3 no separator"),
            ReasonOwner.ADMIN,
            "-",
            None,
            None,
            None,
            False,
        ),
        (
            node("a", state="down", flags=(), reason=None),
            ReasonOwner.NONE,
            "-",
            None,
            None,
            None,
            False,
        ),
    ],
)
def test_classify(n, owner, code, incident, component, repl, lent):
    row = fleet.classify(n, NOW)
    assert row is not None
    assert (row.owner, row.code, row.incident, row.component, row.replacement, row.lent) == (
        owner,
        code,
        incident,
        component,
        repl,
        lent,
    )


@pytest.mark.parametrize(
    "n",
    [
        node("a", flags=()),
        node("a", state="allocated", flags=()),
        node("a", state="mixed", flags=("COMPLETING",)),
    ],
)
def test_in_service_nodes_have_no_row(n):
    assert fleet.classify(n, NOW) is None


def test_summary_groups_by_owner_then_code_and_folds_hostlists():
    nodes = [
        node("gpu017", reason=OURS_79_REPL, ago=7200),
        node("gpu003", reason=OURS_79, ago=600),
        node("gpu018", reason="slurm-hooks/1 XID79 gpu7 inc=33334444 :: x", ago=30),
        node("gpu004", reason=OURS_DBE, ago=5),
        node("gpu020", reason="rack 12 maintenance", ago=86400 * 3),
        node("gpu021", reason="rack 12 maintenance", ago=86400),
        node("gpu022", reason="bad fan", ago=100),
        node("gpu030", reason="NHC: check_fs_mount: /scratch not mounted", ago=50),
        node("gpu040", reason=LEND, ago=900),
        node("gpu041", reason=LEND, ago=100),
        node("gpu050", flags=()),
        node("gpu051", state="allocated", flags=()),
    ]
    s = fleet.summarize(nodes, NOW, breaker="armed")
    keys = [(g.owner, g.code, g.nodes, len(g.rows)) for g in s.groups]
    assert keys == [
        (ReasonOwner.OURS, "ECC_DBE", "gpu004", 1),
        (ReasonOwner.OURS, "XID79", "gpu[003,017-018]", 3),
        (ReasonOwner.NHC, "NHC", "gpu030", 1),
        (ReasonOwner.ADMIN, "-", "gpu022", 1),
        (ReasonOwner.ADMIN, "-", "gpu[020-021]", 2),
    ]
    xid = s.groups[1]
    assert [r.name for r in xid.rows] == ["gpu003", "gpu017", "gpu018"]
    assert xid.oldest_age_s == 7200
    assert [r.replacement_requested for r in xid.rows] == [False, True, False]
    assert s.groups[4].text == "rack 12 maintenance"
    assert [r.name for r in s.lent] == ["gpu040", "gpu041"]
    assert s.counts == {"total": 12, "in_service": 2, "drained": 8, "down": 0, "lent": 2}
    assert s.needs_attention
    doc = s.to_dict()
    assert doc["lent_nodes"] == "gpu[040-041]"
    assert doc["groups"][1]["members"][1]["incident"] == "0badc0de"


def test_replacement_marker_from_outside_the_reason():
    s = fleet.summarize(
        [node("a", reason=OURS_79), node("b", reason=OURS_79_REPL)],
        NOW,
        replacements={"a": "requested", "b": "ignored-ours-wins"},
    )
    rows = {r.name: r for r in s.out_of_service}
    assert rows["a"].replacement == "requested"
    assert rows["b"].replacement == "requested"


@pytest.mark.parametrize(
    ("groups", "breaker", "attention"),
    [
        ([], "armed", False),
        ([], "tripped", True),
        ([node("a", reason="maint")], "armed", True),
    ],
)
def test_needs_attention(groups, breaker, attention):
    s = fleet.summarize([node("z", flags=()), *groups], NOW, breaker=breaker)
    assert s.needs_attention is attention


def test_only_lent_nodes_need_no_attention():
    assert not fleet.summarize([node("a", reason=LEND)], NOW).needs_attention


@pytest.mark.parametrize(
    ("secs", "text"),
    [
        (None, "?"),
        (0, "0s"),
        (59, "59s"),
        (60, "1m"),
        (3599, "59m"),
        (3600, "1h"),
        (7980, "2h13m"),
        (86400, "1d"),
        (86400 * 3 + 4 * 3600, "3d4h"),
    ],
)
def test_format_age(secs, text):
    assert fleet.format_age(secs) == text


def test_naive_reason_time_is_local_time():
    local_now = datetime.now().replace(microsecond=0)
    n = NodeState("a", "idle", frozenset({"DRAIN"}), "x", "root", local_now - timedelta(hours=2))
    row = fleet.classify(n, local_now.astimezone(UTC))
    assert row is not None and row.age_s == pytest.approx(7200, abs=1)


def test_render_fits_80_columns_and_names_everything():
    long_reason = "disk replaced, waiting for vendor to confirm the firmware " * 3
    nodes = [
        node("gpu-very-long-node-name-0001", reason=OURS_79_REPL, ago=7980),
        node("gpu003", reason=long_reason, user="alice", ago=90000),
        node("gpu040", reason=LEND, ago=60),
    ]
    lines = [line.text for line in fleet.render(fleet.summarize(nodes, NOW, breaker="armed"))]
    assert all(len(line) <= 80 for line in lines), lines
    text = "\n".join(lines)
    for needle in (
        "XID79",
        "gpu1",
        "inc=0badc0de",
        "2h13m",
        "repl=requested",
        "alice",
        "lent to inference",
        "gpu040",
        "breaker: armed",
        "admin:",
    ):
        assert needle in text


def test_render_all_in_service():
    lines = fleet.render(fleet.summarize([node("a", flags=())], NOW))
    assert lines[-1].text == "all nodes in service"


def test_another_writers_reason_reaches_the_terminal_as_one_printable_line():
    """An NHC note or a site script's reason may quote what a user wrote."""
    n = NodeState("n1", "IDLE", frozenset({"DRAIN"}),
                  reason="NHC: bad proc \x1b]52;c;cm0gLXJmIH4=\x07\nFAKE all good",
                  reason_time=NOW)  # fmt: skip
    row = fleet.classify(n, NOW)
    assert row is not None and row.reason is not None
    assert row.reason.isprintable() and "FAKE all good" in row.reason
