"""bridge/slinky_exec.py: a call on a slurmd pod that the NodeSet replaced
or deleted meanwhile ends the step as the caller says; anything else raises."""

from __future__ import annotations

import pytest

from slurm_hooks.bridge._exec import StepResult
from slurm_hooks.bridge.slinky_exec import _on_pod
from slurm_hooks.core.errors import ConflictError, KubernetesError

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
