"""Helpers the pure judges (burn-in, NCCL, DCGM) share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurm_hooks.core.model import Action, Component, Finding, Status


def expected_gpus(profile: Mapping[str, Any], settings: Mapping[str, Any]) -> int | None:
    """How many GPUs a run must cover: the check's ``devices`` when it is
    limited to some (the prolog's run on the job's GPUs: on a shared node the
    others belong to other users' jobs), else the profile's ``gpu_count``."""
    devices = settings.get("devices")
    if devices:
        return len(devices)
    count = profile.get("gpu_count")
    return None if count is None else int(count)


def finding(
    status: Status,
    code: str,
    message: str,
    component: Component,
    action: Action,
    check: str,
    **values: Any,
) -> Finding:
    """A Finding whose ``values`` leave out the figures a run did not give
    (None), so reports and JSON carry only what was measured."""
    return Finding(
        check=check,
        status=status,
        code=code,
        message=message,
        component=component,
        action=action,
        values={k: v for k, v in values.items() if v is not None},
    )
