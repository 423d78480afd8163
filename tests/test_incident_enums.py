"""The incident journal's typed vocabulary keeps the JSON on disk as it was:
old files read back, new files write the same strings."""

from __future__ import annotations

import json

import pytest

from slurm_hooks.core.incident import IncidentStatus, Outcome
from slurm_hooks.store.state import StateStore

#: A journal as releases before the enums wrote it (plain strings).
OLD = {
    "incident": "0badf00d", "node": "n1", "status": "evacuating", "jobs_done": False,
    "jobs": {"101": {"outcome": "requeued"}, "102": {"outcome": None}},
}  # fmt: skip


def test_old_journal_reads_back_typed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = StateStore(tmp_path)
    store.write_incident(dict(OLD))
    doc = store.read_incident("0badf00d")
    assert IncidentStatus.parse(doc["status"]) is IncidentStatus.EVACUATING
    assert Outcome.parse(doc["jobs"]["101"]["outcome"]) is Outcome.REQUEUED
    assert Outcome.parse(doc["jobs"]["102"]["outcome"]) is None
    assert IncidentStatus.parse("something-newer") is None  # unknown stays visible, not guessed


@pytest.mark.parametrize("status", list(IncidentStatus))
def test_enums_write_the_same_strings(tmp_path, status) -> None:  # type: ignore[no-untyped-def]
    store = StateStore(tmp_path)
    store.write_incident({"incident": "0badf00d", "node": "n1", "status": status})
    raw = json.loads(store.incident_path("0badf00d").read_text())
    assert raw["status"] == status.value and type(raw["status"]) is str


def test_outcome_audit_words_unchanged() -> None:
    assert [o.audit_action for o in Outcome] == [
        "requeue", "cancel", "left_running", "finished", "gone",
    ]  # fmt: skip
