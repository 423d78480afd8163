"""Helpers the pure judges (burn-in, NCCL, DCGM) share."""

from __future__ import annotations

from typing import Any

from slurm_hooks.core.model import Action, Component, Finding, Status


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
