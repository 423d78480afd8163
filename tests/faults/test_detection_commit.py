"""Detection state committed only after the act (no lab needed).

* the prolog's warm XID scan: an engine that cannot act (slurmctld
  unreachable) leaves the kernel-log cursor where it was, so the next
  prolog finds the XID again and drains;
* a truncated or corrupt cursor is rebuilt safely (``detect.xid.cursor``):
  events already handled are not acted on again, new ones are.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_prolog import XID79, FakeEngine, config, node_files  # noqa: F401 - the fixture

from slurm_hooks.agent.prolog import run_prolog
from slurm_hooks.core.errors import SlurmUnavailable


class StalledEngine(FakeEngine):
    def handle(self, node, findings):  # type: ignore[no-untyped-def]
        self.handled.append(list(findings))
        raise SlurmUnavailable("slurmctld not answering (test)")


def test_prolog_keeps_the_xid_when_the_engine_cannot_act(node_files):  # noqa: F811
    cfg = config(node_files)
    (node_files / "kern.log").write_text(XID79)
    stalled = StalledEngine()
    first = run_prolog({"SLURM_JOB_ID": "7"}, cfg, node="n1", engine_factory=lambda c: stalled)
    assert stalled.handled and stalled.handled[0][0].code == "XID79"
    assert not first.drained
    eng = FakeEngine()
    second = run_prolog({"SLURM_JOB_ID": "8"}, cfg, node="n1", engine_factory=lambda c: eng)
    assert eng.handled and eng.handled[0][0].code == "XID79", "the XID was lost"
    assert second.drained and eng.slurm.requeued == ["8"]
    # Committed now: a third prolog does not see it again.
    third_eng = FakeEngine()
    run_prolog({"SLURM_JOB_ID": "9"}, cfg, node="n1", engine_factory=lambda c: third_eng)
    assert not any(f.code == "XID79" for fs in third_eng.handled for f in fs)


# -- a truncated or corrupt cursor -------------------------------------------------


def _line(t: datetime, xid: int = 79) -> str:
    return (
        f"{t:%b} {t.day:2d} {t:%H:%M:%S} n1 kernel: [ 5123.456789] NVRM: Xid "
        f"(PCI:0000:18:00): {xid}, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    )


def _scan(log: Path, state: Path) -> list[str]:
    """A hook's scan: cursor and history committed after 'acting'."""
    from slurm_hooks.detect.xid.commit import deferred
    from slurm_hooks.detect.xid.history import load_history, save_history
    from slurm_hooks.detect.xid.rules import update_history
    from slurm_hooks.detect.xid.settings import XidSettings
    from slurm_hooks.detect.xid.source import FileSource, scan_new

    with deferred() as pending:
        scan = scan_new(FileSource(str(log)), str(state), year=datetime.now().year)
        hist = load_history(str(state))
        save_history(str(state), update_history(hist, scan.aggregates, time.time(), XidSettings()))
        pending.commit()
    return [a.code for a in scan.aggregates]


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty-object-list"])
def test_corrupt_cursor_does_not_reread_a_repaired_fault(tmp_path, damage):
    from slurm_hooks.detect.xid.cursor import state_path
    from slurm_hooks.detect.xid.source import FileSource
    from slurm_hooks.store.state import StateStore

    state, log = tmp_path / "state", tmp_path / "kern.log"
    log.write_text(_line(datetime.now() - timedelta(seconds=30)))
    assert _scan(log, state) == ["XID79"]  # the fault, handled
    # Repaired: acceptance passed and the node resumed after the fault.
    StateStore(state).record_acceptance("n1", datetime.now(UTC) - timedelta(seconds=10), True)
    StateStore(state).record_resume("n1", datetime.now(UTC) - timedelta(seconds=5))
    cursor = Path(state_path(str(state), "cursor-" + FileSource(str(log)).name))
    assert cursor.exists()
    cursor.write_text(
        {"truncated": '{"offs', "garbage": "\x00\x00", "empty-object-list": "[]"}[damage]
    )
    assert _scan(log, state) == [], "the repaired fault was read again"
    with open(log, "a") as fh:
        fh.write(_line(datetime.now() + timedelta(seconds=2)))
    assert _scan(log, state) == ["XID79"], "a new fault after the resume was missed"
    assert _scan(log, state) == []


def test_corrupt_cursor_with_nothing_known_reads_everything(tmp_path):
    """No history and no resume: every event counts (a fault is never dropped
    on a guess; the engine skips a node still drained by us for the code)."""
    from slurm_hooks.detect.xid.cursor import state_path
    from slurm_hooks.detect.xid.source import FileSource

    state, log = tmp_path / "state", tmp_path / "kern.log"
    log.write_text(_line(datetime.now() - timedelta(seconds=30), xid=43))
    assert _scan(log, state) == ["XID43"]
    (state / "xid" / "history.json").unlink()
    Path(state_path(str(state), "cursor-" + FileSource(str(log)).name)).write_text("")
    assert _scan(log, state) == ["XID43"]
