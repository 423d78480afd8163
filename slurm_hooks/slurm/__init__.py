"""Slurm access layer: one interface (``base.SlurmClient``), several backends.

``get_client(backend, **opts)`` returns one; backends are imported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slurm_hooks.slurm.base import SlurmClient


def get_client(backend: str = "cli", **opts: Any) -> SlurmClient:
    """See :func:`slurm_hooks.slurm.factory.get_client`."""
    from slurm_hooks.slurm.factory import get_client as _get_client

    return _get_client(backend, **opts)
