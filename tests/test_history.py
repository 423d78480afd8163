"""history: incident timelines from the audit log (written by audit.AuditLog)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from slurm_hooks.cli import history_report as hist
from slurm_hooks.store.audit import AuditLog

T0 = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> datetime:
        return self.t

    def at(self, seconds: float) -> Clock:
        self.t = T0 + timedelta(seconds=seconds)
        return self


def write_log(path):
    """A real audit log, appended through the project's AuditLog."""
    clock = Clock()
    log = AuditLog(path, actor="slurm-hooks/healthcheck", clock=clock)
    clock.at(0)
    log.record("detect", node="gpu003", incident="inc1", code="XID79", why="XID79 gpu3")
    clock.at(2)
    log.record("drain", node="gpu003", incident="inc1", code="XID79", why="XID79 gpu3")
    clock.at(3)
    log.record("signal", node="gpu003", incident="inc1", job="1234", why="USR1 for checkpoint")
    clock.at(123)
    log.record("requeue", node="gpu003", incident="inc1", job="1234")
    clock.at(130)
    log.record("request_replacement", node="gpu003", incident="inc1")
    clock.at(3600)
    log.record("resume", node="gpu003", incident="inc1", actor="alice")
    # A second, still open incident on another node, with a refused step.
    clock.at(4000)
    log.record("detect", node="gpu017", incident="inc2", code="ECC_DBE")
    clock.at(4001)
    log.record("drain", node="gpu017", incident="inc2", outcome="refused", why="breaker open")
    clock.at(4002)
    log.record("breaker_trip", why="partition gpu 3/3")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("{not json\n")
        fh.write(json.dumps({"action": "drain"}) + "\n")  # no ts
        fh.write("\n")


def test_timelines_and_durations(tmp_path):
    path = tmp_path / "audit.jsonl"
    write_log(path)
    events, skipped = hist.read_records(path)
    h = hist.build_incidents(events, skipped)
    assert skipped == 2
    assert [i.incident for i in h.incidents] == ["inc1", "inc2"]
    inc1, inc2 = h.incidents
    assert inc1.nodes == ("gpu003",) and inc1.code == "XID79"
    assert [e.stage for e in inc1.events] == list(hist.STAGES)
    assert inc1.milestones() == {
        "detected": 0,
        "drained": 2,
        "signalled": 3,
        "requeued": 123,
        "replacement_requested": 130,
        "resumed": 3600,
    }
    assert inc1.jobs == ("1234",)
    now = T0 + timedelta(hours=5)
    assert inc1.duration_s(now) == 3600
    assert inc1.events[-1].actor == "alice"
    # The refused drain does not count as drained; the incident is open.
    assert inc2.reached("drained") is None and inc2.resolved is None
    assert inc2.duration_s(now) == 5 * 3600 - 4000
    assert [e.action for e in h.loose] == ["breaker_trip"]
    doc = inc1.to_dict(now)
    assert doc["open"] is False and doc["milestones_s"]["resumed"] == 3600


def test_select_by_node_and_since(tmp_path):
    path = tmp_path / "audit.jsonl"
    write_log(path)
    h = hist.build_incidents(*hist.read_records(path))
    assert [i.incident for i in hist.select(h, node="gpu017").incidents] == ["inc2"]
    # inc1 ended at +3600; inc2 is open, so any since keeps it.
    late = T0 + timedelta(seconds=3700)
    assert [i.incident for i in hist.select(h, since=late).incidents] == ["inc2"]
    early = T0 + timedelta(seconds=3599)
    assert [i.incident for i in hist.select(h, since=early).incidents] == ["inc1", "inc2"]


def test_rotated_logs_are_read_oldest_first(tmp_path):
    base = tmp_path / "audit.jsonl"
    rec = lambda ts, action: json.dumps({"ts": ts, "action": action, "incident": "x"}) + "\n"  # noqa: E731
    (tmp_path / "audit.jsonl.2").write_text(rec("2024-05-01T10:00:00Z", "detect"))
    (tmp_path / "audit.jsonl.1").write_text(rec("2024-05-01T10:00:05Z", "drain"))
    base.write_text(rec("2024-05-01T11:00:00Z", "resume"))
    (tmp_path / "audit.jsonl.3.gz").write_bytes(b"\x1f\x8b")
    files = hist.audit_files(base)
    assert [f.name for f in files] == ["audit.jsonl.2", "audit.jsonl.1", "audit.jsonl"]
    (inc,) = hist.build_incidents(hist.read_records(base)[0]).incidents
    assert inc.milestones() == {"detected": 0, "drained": 5, "resumed": 3600}


def test_missing_log_is_an_error(tmp_path):
    with pytest.raises(hist.HistoryError):
        hist.read_records(tmp_path / "nope.jsonl")


NOW = datetime(2024, 5, 10, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2h", NOW - timedelta(hours=2)),
        ("3d", NOW - timedelta(days=3)),
        ("90s", NOW - timedelta(seconds=90)),
        ("1h30m", NOW - timedelta(minutes=90)),
        ("1w", NOW - timedelta(days=7)),
        ("2024-05-01T10:00:00Z", datetime(2024, 5, 1, 10, 0, tzinfo=UTC)),
        ("2024-05-01T10:00:00+02:00", datetime(2024, 5, 1, 8, 0, tzinfo=UTC)),
    ],
)
def test_parse_since(text, expected):
    assert hist.parse_since(text, NOW) == expected


def test_parse_since_naive_iso_is_local():
    got = hist.parse_since("2024-05-01T10:00", NOW)
    assert got == datetime(2024, 5, 1, 10, 0).astimezone()


@pytest.mark.parametrize("bad", ["", "2x", "h2", "yesterday", "2h junk", "2024-13-01"])
def test_parse_since_rejects(bad):
    with pytest.raises(hist.HistoryError):
        hist.parse_since(bad, NOW)


def test_text_output_fits_80_columns(tmp_path):
    path = tmp_path / "audit.jsonl"
    write_log(path)
    h = hist.build_incidents(*hist.read_records(path))
    lines = list(hist.iter_lines(h, T0 + timedelta(hours=5)))
    assert all(len(line) <= 80 for line in lines)
    text = "\n".join(lines)
    assert "incident inc1  XID79  gpu003  resolved, 1h" in text
    assert "[refused]" in text and "job=1234" in text


def test_users_words_in_the_log_reach_the_terminal_without_control_characters(tmp_path):
    """The audit log quotes what users wrote (a process's arguments in a
    site check's finding): ``slurm-hooks history`` prints it without escape
    sequences or line breaks, so it cannot drive the admin's terminal or
    fake a line of the report."""
    from click.testing import CliRunner

    from slurm_hooks.cli import main

    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, actor="slurm-hooks/healthcheck", clock=Clock())
    why = "unauthorised user: mallory process 600 (/tmp/x \x1b]52;c;cm0gLXJm\x07\nFAKE resumed)"
    log.record("drain", node="gpu003", incident="inc9", code="PS_USERS", why=why)
    # An action of no stage we know is shown as it is: a forged line's too.
    log.record("\x1b[2J\x1b]52;c;cm0gLXJm\x07odd\nFAKE resumed", node="gpu003", incident="inc9")
    out = CliRunner().invoke(main, ["history", "--audit-log", str(path)])
    assert out.exit_code == 0, out.output
    assert "\x1b" not in out.output and "\x07" not in out.output
    assert not any(line.startswith("FAKE") for line in out.output.splitlines())
