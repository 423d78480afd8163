"""Pick a Slurm backend by name (``[general] slurm_backend`` in the config).

Backends are imported here, on demand, so that a hook that never touches
Slurm does not import requests or pyslurm.
"""

from __future__ import annotations

from typing import Any

from ..errors import SlurmError
from .base import SlurmClient

BACKENDS = ("cli", "rest", "pyslurm")


def get_client(backend: str = "cli", **opts: Any) -> SlurmClient:
    """``cli`` (default: scontrol/sinfo/squeue/scancel), ``rest`` (slurmrestd;
    ``socket=`` or ``url=`` plus ``user=``/``token=``) or ``pyslurm``.
    ``opts`` go to the backend's constructor."""
    if backend == "cli":
        from .cli_backend import CliClient

        return CliClient(**opts)
    if backend == "rest":
        from .rest_backend import RestClient

        return RestClient(**opts)
    if backend == "pyslurm":
        from .pyslurm_backend import PyslurmClient

        return PyslurmClient(**opts)
    raise SlurmError(f"unknown slurm backend {backend!r} (one of: {', '.join(BACKENDS)})")
