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
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from slurm_hooks.core.errors import SlurmError
from slurm_hooks.core.model import NodeState
from slurm_hooks.slurm import parse_config, parse_values
from slurm_hooks.slurm.cli_backend import CliClient, check_reason

log = logging.getLogger(__name__)


#: pyslurm releases on PyPI (``pip index versions pyslurm``, checked
#: 2026-12): 25.11.0 and 25.11.2, source only, besides 17.11/18.08 ones for
#: Slurm releases long gone.  Debian 12, 13 and forky/sid carry Slurm 22.05,
#: 24.11 and 26.05: for those pyslurm must be built from its GitHub tag.
PYPI_PYSLURM: Mapping[tuple[int, int], str] = {(25, 11): "25.11.2"}


def needed_pyslurm(slurm: Sequence[int]) -> str:
    """Which pyslurm this Slurm needs, and where it is to be had."""
    mm = (int(slurm[0]), int(slurm[1]))
    want = f"pyslurm {mm[0]}.{mm[1]}.x"
    if mm in PYPI_PYSLURM:
        return f"{want} (pip install pyslurm=={PYPI_PYSLURM[mm]}, built against libslurm-dev)"
    have = ", ".join(f"{a}.{b}.x" for a, b in sorted(PYPI_PYSLURM))
    return (
        f"{want}, which PyPI does not have (it has {have} only): build it from the "
        f"v{mm[0]}.{mm[1]}.x tag of github.com/PySlurm/pyslurm"
    )


def load_pyslurm(slurm: Sequence[int] | None = None) -> ModuleType:
    try:
        return importlib.import_module("pyslurm")
    except ImportError as exc:
        need = (
            f"Slurm {slurm[0]}.{int(slurm[1]):02d} needs {needed_pyslurm(slurm)}"
            if slurm
            else "it must be built for this Slurm's major.minor release"
        )
        raise SlurmError(
            f"pyslurm backend: pyslurm is not installed ({need}): use the cli or rest backend"
        ) from exc


def pyslurm_version(module: ModuleType) -> tuple[int, int]:
    """pyslurm versions follow Slurm's: ``22.5.3`` is for Slurm 22.05."""
    raw = getattr(module, "__version__", None) or getattr(module, "version", lambda: "")()
    major, minor, _ = parse_config.parse_version(str(raw))
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
        self.pyslurm = module or load_pyslurm(self.version())
        check_versions(pyslurm_version(self.pyslurm), self.version())

    def list_nodes(self, names: Sequence[str] | str | None = None) -> list[NodeState]:
        try:
            raw = self.pyslurm.node().get()
        except Exception as exc:  # pyslurm raises its own ValueError/RuntimeError
            raise SlurmError(f"pyslurm node().get() failed: {exc}") from exc
        nodes = []
        for name, info in raw.items():
            state, flags = parse_values.parse_state(str(info.get("state") or "UNKNOWN"))
            nodes.append(
                NodeState(
                    name=str(name),
                    state=state,
                    flags=flags,
                    reason=info.get("reason") or None,
                    reason_user=info.get("reason_uid_name") or None,
                    reason_time=parse_values.json_epoch(info.get("reason_time")),
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
