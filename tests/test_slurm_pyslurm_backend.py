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
    needed_pyslurm,
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
    with pytest.raises(SlurmError, match=r"Slurm 24\.11 needs pyslurm 24\.11\.x, which PyPI"):
        load_pyslurm((24, 11, 5))


@pytest.mark.parametrize(
    ("slurm", "says"),
    [
        ((25, 11, 3), "pyslurm 25.11.x (pip install pyslurm==25.11.2"),
        ((22, 5, 8), "pyslurm 22.5.x, which PyPI does not have (it has 25.11.x only)"),
        ((24, 11, 5), "pyslurm 24.11.x, which PyPI does not have"),
        ((26, 5, 5), "v26.5.x tag of github.com/PySlurm/pyslurm"),
    ],
)
def test_needed_pyslurm_names_the_release(slurm, says) -> None:  # type: ignore[no-untyped-def]
    assert says in needed_pyslurm(slurm)


@pytest.mark.slurm
def test_pyslurm_lists_nodes(fresh_lab) -> None:  # type: ignore[no-untyped-def]
    version = fresh_lab.client().version()
    if not HAVE_PYSLURM:
        found = ".".join(map(str, version))
        pytest.skip(f"pyslurm not installed: Slurm {found} needs {needed_pyslurm(version)}")
    c = PyslurmClient(slurm_conf=str(fresh_lab.slurm_conf))
    assert sorted(n.name for n in c.list_nodes()) == fresh_lab.node_names
