"""Optional backend through pyslurm (Slurm's C API from Python).

pyslurm builds against exactly one Slurm major release, and PyPI carries
none for Debian's 22.05 or 24.11, so this backend is opt-in: pyslurm is
imported only when the backend is created, and refused with a clear reason
unless its version's major.minor matches the running Slurm's.  Everything
the mapping does not cover is delegated to the cli backend, so the object is
a complete SlurmClient.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from slurm_hooks.core.errors import SlurmError
from slurm_hooks.core.model import NodeState
from slurm_hooks.slurm import parse
from slurm_hooks.slurm.cli_backend import CliClient, check_reason

log = logging.getLogger(__name__)


def load_pyslurm() -> ModuleType:
    try:
        return importlib.import_module("pyslurm")
    except ImportError as exc:
        raise SlurmError(
            "pyslurm backend: pyslurm is not installed (it must be built against this "
            "Slurm's major version; PyPI has none for 22.05/24.11): use the cli or rest backend"
        ) from exc


def pyslurm_version(module: ModuleType) -> tuple[int, int]:
    """pyslurm versions follow Slurm's: ``22.5.3`` is for Slurm 22.05."""
    raw = getattr(module, "__version__", None) or getattr(module, "version", lambda: "")()
    major, minor, _ = parse.parse_version(str(raw))
    return major, minor


def check_versions(pyslurm_mm: tuple[int, int], slurm: tuple[int, int, int]) -> None:
    if (pyslurm_mm[0], pyslurm_mm[1]) != (slurm[0], slurm[1]):
        raise SlurmError(
            f"pyslurm backend: pyslurm {pyslurm_mm[0]}.{pyslurm_mm[1]} does not match the "
            f"running Slurm {slurm[0]}.{slurm[1]:02d}; install the pyslurm release built for "
            "it or use the cli backend"
        )


class PyslurmClient(CliClient):
    """Nodes through pyslurm's node API; jobs and everything else through the
    cli backend (same semantics, one tested code path)."""

    def __init__(self, *, module: ModuleType | None = None, **cli_opts: Any) -> None:
        super().__init__(**cli_opts)
        self.pyslurm = module or load_pyslurm()
        check_versions(pyslurm_version(self.pyslurm), self.version())

    def list_nodes(self, names: Sequence[str] | str | None = None) -> list[NodeState]:
        try:
            raw = self.pyslurm.node().get()
        except Exception as exc:  # pyslurm raises its own ValueError/RuntimeError
            raise SlurmError(f"pyslurm node().get() failed: {exc}") from exc
        nodes = []
        for name, info in raw.items():
            state, flags = parse.parse_state(str(info.get("state") or "UNKNOWN"))
            nodes.append(
                NodeState(
                    name=str(name),
                    state=state,
                    flags=flags,
                    reason=info.get("reason") or None,
                    reason_user=info.get("reason_uid_name") or None,
                    reason_time=parse._epoch(info.get("reason_time")),
                    partitions=tuple(info.get("partitions") or ()),
                    cpus=info.get("cpus"),
                    alloc_cpus=info.get("alloc_cpus"),
                )
            )
        if names is None:
            return nodes
        from slurm_hooks.core import hostlist

        wanted = set(hostlist.expand(names) if isinstance(names, str) else names)
        return [n for n in nodes if n.name in wanted]

    def _pyslurm_update(self, name: str, state: int, reason: str | None) -> None:
        body: dict[str, Any] = {"node_names": name, "node_state": state}
        if reason is not None:
            body["reason"] = check_reason(reason)
        try:
            rc = self.pyslurm.node().update(body)
        except Exception as exc:
            raise SlurmError(f"pyslurm node update of {name} failed: {exc}") from exc
        if rc not in (0, None):
            raise SlurmError(f"pyslurm node update of {name} returned {rc}")

    def drain(self, name: str, reason: str) -> None:
        self._pyslurm_update(name, self.pyslurm.NODE_STATE_DRAIN, reason)

    def resume(self, name: str) -> None:
        self._pyslurm_update(name, self.pyslurm.NODE_RESUME, None)
