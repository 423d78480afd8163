"""pyslurm is optional: refused clearly when absent or built for another
Slurm; exercised for real only where a matching pyslurm is installed."""

from __future__ import annotations

import importlib.util
import types

import pytest

from slurm_hooks.core.errors import SlurmError
from slurm_hooks.slurm.pyslurm_backend import (
    PyslurmClient,
    check_versions,
    load_pyslurm,
    pyslurm_version,
)

HAVE_PYSLURM = importlib.util.find_spec("pyslurm") is not None


def test_version_match_rules() -> None:
    check_versions((22, 5), (22, 5, 8))
    with pytest.raises(SlurmError, match="pyslurm 25.11 does not match the running Slurm 22.05"):
        check_versions((25, 11), (22, 5, 8))
    assert pyslurm_version(types.SimpleNamespace(__version__="22.5.3")) == (22, 5)


def test_mismatched_module_refused() -> None:
    fake = types.SimpleNamespace(__version__="25.11.2")

    class Fixed(PyslurmClient):
        def version(self):  # type: ignore[no-untyped-def]
            return (22, 5, 8)

    with pytest.raises(SlurmError, match="does not match"):
        Fixed(module=fake)  # type: ignore[arg-type]


@pytest.mark.skipif(HAVE_PYSLURM, reason="pyslurm is installed here")
def test_absent_pyslurm_is_a_clear_error() -> None:
    with pytest.raises(SlurmError, match="pyslurm is not installed"):
        load_pyslurm()


@pytest.mark.slurm
@pytest.mark.skipif(
    not HAVE_PYSLURM,
    reason="pyslurm not installed: PyPI has no release for Slurm 22.05/24.11 "
    "(it must be built from the matching GitHub tag)",
)
def test_pyslurm_lists_nodes(fresh_lab) -> None:  # type: ignore[no-untyped-def]
    c = PyslurmClient(slurm_conf=str(fresh_lab.slurm_conf))
    assert sorted(n.name for n in c.list_nodes()) == fresh_lab.node_names
