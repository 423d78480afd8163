"""A FAIL among many UNKNOWNs is drained as fast as the FAIL alone.

A lost GPU makes every other per-GPU check report "could not run on gpuN"
(UNKNOWN, a log-only decision each; detect/fold.py folds them, but an NVML
error on another GPU, or a check the fold does not know, is never folded).
Each log-only decision used to do its own locked state write, before the
drain, waiting the store's full lock timeout (20 s) when a stuck process
held the node's lock: 1 FAIL + 9 UNKNOWN waited 220 s before the drain,
past the 60 s slurmd gives a health check, so no run ever drained the node
(the FAIL alone: 40 s, drained).  Now the log-only bookkeeping is one
write per run with a short wait, and every line is still audited when it
fails.  The held lock is simulated: every wait on it is recorded and ends
at once in LockTimeout, as the real wait would, so nothing sleeps here.
No lab: test_actions' fake Slurm."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_actions import Clock, FakeSlurm

from slurm_hooks.act import repeats
from slurm_hooks.act.engine import Engine
from slurm_hooks.act.notify import Notifier
from slurm_hooks.agent.hook import ENGINE_MIN_S, HEALTHCHECK_LIMIT_S
from slurm_hooks.core.model import Action, Component, Finding, Status
from slurm_hooks.decide import PolicyConfig
from slurm_hooks.store import state as state_mod
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import LockTimeout, StateStore

GPU1, GPU5 = Component("gpu", 1), Component("gpu", 5)
LOST = Finding("gpu_lost", Status.FAIL, "GPU_LOST", "gpu1 lost", GPU1, Action.REBOOT,
               values={"nvml_error": "GPU_IS_LOST"})  # fmt: skip
BLIND = ("ecc", "retired_pages", "row_remap", "fabric", "nvlink", "pcie", "throttle", "gpu_temp",
         "persistence")  # fmt: skip


def unknowns(comp: Component = GPU5) -> list[Finding]:
    return [
        Finding(
            c,
            Status.UNKNOWN,
            "CHECK_UNKNOWN",
            f"could not run on {comp.short()}",
            comp,
            values={"nvml_error": "UNKNOWN"},
        )  # fmt: skip
        for c in BLIND
    ]


@pytest.fixture
def stuck_node_lock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The node's state lock is held by a stuck process: every wait for it
    times out.  Returns the list of the waits (seconds) the code asked for."""
    waits: list[float] = []
    real = state_mod.locked

    @contextlib.contextmanager
    def locked(path: Path, timeout: float, mode: int = 0o600) -> Iterator[None]:
        if path.name == "node-n1.lock":
            waits.append(timeout)
            raise LockTimeout(f"timed out after {timeout:g}s waiting for lock {path}")
        with real(path, timeout, mode):
            yield

    monkeypatch.setattr(state_mod, "locked", locked)
    return waits


def _engine(tmp_path: Path, slurm: FakeSlurm) -> Engine:
    return Engine(
        slurm, PolicyConfig(grace_seconds=60), StateStore(tmp_path / "state"),
        AuditLog(tmp_path / "audit.jsonl"), Notifier(), clock=Clock(), spawn=None,
    )  # fmt: skip


@pytest.mark.parametrize("blind_gpu", [GPU5, GPU1], ids=["other_gpu", "lost_gpu_unfolded"])
def test_unknowns_add_one_short_wait_before_the_drain(tmp_path, stuck_node_lock, blind_gpu):
    alone = FakeSlurm()
    _engine(tmp_path / "alone", alone).handle("n1", [LOST])
    waited_alone = sum(stuck_node_lock)
    stuck_node_lock.clear()

    slurm = FakeSlurm()
    _engine(tmp_path / "many", slurm).handle("n1", [LOST, *unknowns(blind_gpu)])
    waited = sum(stuck_node_lock)

    assert alone.count("drain") == 1 and slurm.count("drain") == 1
    # Nine log-only decisions cost one short wait, not nine full ones ...
    assert waited == pytest.approx(waited_alone + repeats.LOG_LOCK_WAIT_S), stuck_node_lock
    # ... so the drain lands within what slurmd gives a health check (before: 220 s).
    assert waited < HEALTHCHECK_LIMIT_S - ENGINE_MIN_S
    # Nothing is lost from the audit: the uncounted log-only lines are all written.
    entries = list(AuditLog(tmp_path / "many" / "audit.jsonl").entries())
    logged = [e for e in entries if e["action"] == "decision" and e["decision"] == "log"]
    assert len(logged) == len(BLIND)
    assert [e["action"] for e in entries if e.get("code") == "GPU_LOST"][:1] == ["decision"]


def test_log_only_lines_of_one_run_are_one_write_and_still_summarised(tmp_path):
    """Without a stuck lock: the 9 UNKNOWNs are one audit line per code and
    period (the rest counted), in one state write per run."""
    slurm, writes = FakeSlurm(), []
    eng = _engine(tmp_path, slurm)
    real = eng.state.update_node

    def counting(node, change, **kw):  # type: ignore[no-untyped-def]
        writes.append(kw.get("timeout"))
        return real(node, change, **kw)

    eng.state.update_node = counting  # type: ignore[method-assign]
    eng.handle("n1", [LOST, *unknowns()])
    assert slurm.count("drain") == 1
    assert writes.count(repeats.LOG_LOCK_WAIT_S) == 1
    entries = list(AuditLog(tmp_path / "audit.jsonl").entries())
    assert len([e for e in entries if e.get("code") == "CHECK_UNKNOWN"]) == 1
    got = repeats.absorb_logs(eng.state, "n1", ["CHECK_UNKNOWN", "X", "X"], eng.clock(),
                              timeout=None)  # fmt: skip
    assert got == [(True, 0), (False, 0), (True, 0)]


def test_a_stuck_node_lock_costs_the_drain_only_short_waits(tmp_path, stuck_node_lock):
    """The fault history and the open-incident mark are bookkeeping: with a
    stuck holder of the node's lock they wait BOOKKEEPING_WAIT_S each, not the
    store's 20 s lock timeout, and the drain still goes out."""
    from slurm_hooks.act import engine as engine_mod

    slurm = FakeSlurm()
    _engine(tmp_path, slurm).handle("n1", [LOST])
    assert slurm.count("drain") == 1
    assert stuck_node_lock, "the node lock was never asked for"
    assert max(stuck_node_lock) <= engine_mod.BOOKKEEPING_WAIT_S, stuck_node_lock
    assert sum(stuck_node_lock) <= 3 * engine_mod.BOOKKEEPING_WAIT_S, stuck_node_lock
