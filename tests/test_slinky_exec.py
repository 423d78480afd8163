"""bridge/slinky_exec.py: a call on a slurmd pod that the NodeSet replaced
or deleted meanwhile ends the step as the caller says; anything else raises.
The reservation before a move is made once, and a refusal never stops it."""

from __future__ import annotations

import pytest

from slurm_hooks.bridge import slinky_plan as sp
from slurm_hooks.bridge._exec import StepResult
from slurm_hooks.bridge.slinky_exec import HOLD_MINUTES, _on_pod, _reserve
from slurm_hooks.core.errors import ConflictError, KubernetesError, SlurmError
from slurm_hooks.slurm.door import SlurmDoor

REPLACED = StepResult("step", "skipped", "the pod was replaced meanwhile")
GONE = StepResult("step", "skipped", "the pod is gone")


def _raises(exc: Exception):
    def call() -> None:
        raise exc

    return call


def test_a_call_that_goes_through_ends_nothing() -> None:
    calls = []
    assert _on_pod(lambda: calls.append(1), REPLACED, GONE) is None
    assert calls == [1]


def test_a_replaced_pod_and_a_gone_pod_end_the_step() -> None:
    assert _on_pod(_raises(ConflictError("changed", status=409)), REPLACED, GONE) is REPLACED
    assert _on_pod(_raises(KubernetesError("not found", status=404)), REPLACED, GONE) is GONE


def test_any_other_api_error_is_raised() -> None:
    with pytest.raises(KubernetesError) as caught:
        _on_pod(_raises(KubernetesError("boom", status=500)), REPLACED, GONE)
    assert caught.value.status == 500


class _Reservations:
    """A client with Slurm's reservation calls (slurm.base.Reservations)."""

    def __init__(self, refuse: bool = False) -> None:
        self.names: set[str] = set()
        self.refuse = refuse
        self.created: list[tuple[str, str, int]] = []

    def reservation_names(self) -> set[str]:
        return set(self.names)

    def create_reservation(self, name: str, node: str, minutes: int) -> None:
        if self.refuse:
            raise SlurmError("Access/permission denied")
        self.created.append((name, node, minutes))
        self.names.add(name)

    def delete_reservation(self, name: str) -> None:
        self.names.remove(name)


class _Bridge:
    def __init__(self, slurm: _Reservations) -> None:
        self.slurm = slurm
        self.patched: list[dict] = []

    def _rmw(self, name, current, make_patch):
        body = make_patch(current[name])
        self.patched.append(body["metadata"]["annotations"])
        return current[name]


def _step() -> sp.Reserve:
    return sp.Reserve("m1", "n1", "aa000001", sp.hold_name("n1", "aa000001"))


def test_the_reservation_is_made_once_and_journalled() -> None:
    slurm = _Reservations()
    bridge = _Bridge(slurm)
    keys = sp.SlinkyKeys("slurm-hooks.io")
    current = {"m1": {"metadata": {"name": "m1", "resourceVersion": "1", "annotations": {}}}}
    for _ in range(2):  # repeated after a crash before the journal: made once
        res = _reserve(bridge, _step(), current, keys)  # type: ignore[arg-type]
        assert res.outcome == "done"
    assert slurm.created == [(_step().name, "n1", HOLD_MINUTES)]
    assert bridge.patched == [{keys.reserved: "aa000001"}] * 2
    assert SlurmDoor(slurm).drop_reservation(_step().name) is True  # type: ignore[arg-type]
    assert SlurmDoor(slurm).drop_reservation(_step().name) is False  # type: ignore[arg-type]


def test_a_refused_reservation_is_journalled_and_the_move_goes_on() -> None:
    """Never ``failed``: a failed step would stop the node's later steps (the
    move) in this pass, and the planner asks only once per incident."""
    bridge = _Bridge(_Reservations(refuse=True))
    keys = sp.SlinkyKeys("slurm-hooks.io")
    current = {"m1": {"metadata": {"name": "m1", "resourceVersion": "1", "annotations": {}}}}
    res = _reserve(bridge, _step(), current, keys)  # type: ignore[arg-type]
    assert res.outcome == "skipped" and "permission denied" in res.detail
    assert bridge.patched == [{keys.reserve_failed: "aa000001"}]


def test_a_client_without_reservation_calls_falls_back_to_scontrol(monkeypatch, tmp_path) -> None:
    """REST and pyslurm clients make no reservations themselves: the door asks
    ``scontrol`` as the process finds it, and its absence is a SlurmError
    (which the Reserve step journals, moving on without the hold)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmError, match="list reservations"):
        SlurmDoor(object()).ensure_reservation("r1", "n1", 5)  # type: ignore[arg-type]
