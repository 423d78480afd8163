"""The registry lists every check lazily and agrees with the classes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from slurm_hooks.core.errors import CheckNotInstalled
from slurm_hooks.core.model import Phase
from slurm_hooks.detect import checks
from slurm_hooks.detect.checks import registry
from slurm_hooks.detect.checks.base import Problem
from slurm_hooks.detect.checks.registry import CHECKS, CheckSpec, for_phase, load, load_class


@pytest.mark.parametrize("name", list(CHECKS))
def test_registry_phases_match_the_class(name: str) -> None:
    spec = CHECKS[name]
    try:
        cls = load_class(spec)
    except CheckNotInstalled:
        pytest.skip(f"{name} not installed yet")
    assert cls.name == name
    assert frozenset(cls.phases) == spec.phases, name


def _documented_problems() -> set[tuple[str, str, str, str]]:
    """(check, status, code, action) of each row of the table in the
    package's docstring, the runner's own rows left out; a row such as
    ``FAIL/WARN ... drain/none`` stands for two."""
    table = checks.__doc__.split("=\n", 2)[2].split("\n=")[0]
    rows = set()
    for line in table.splitlines():
        check, status, code, action, _ = line.split(None, 4)
        if check != "(runner)":
            for st, act in zip(status.split("/"), action.split("/"), strict=True):
                rows.add((check, st, code, act))
    return rows


def test_documented_codes_are_the_declared_problems() -> None:
    declared = set()
    for spec in CHECKS.values():
        module = sys.modules[load_class(spec).__module__]
        for problem in vars(module).values():
            if isinstance(problem, Problem):
                row = (spec.name, str(problem.status), problem.code, str(problem.action))
                declared.add(row)
    assert declared == _documented_problems()


def test_others_checks_are_registered() -> None:
    assert CHECKS["xid"].target == "slurm_hooks.detect.checks.xid:XidCheck"
    assert CHECKS["burnin"].target == "slurm_hooks.detect.checks.burnin:BurninCheck"
    assert CHECKS["nccl"].target == "slurm_hooks.detect.checks.nccl:NcclCheck"


def test_missing_module_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    ghost = CheckSpec(
        "ghost", "slurm_hooks.detect.checks.ghost:GhostCheck", frozenset({Phase.PROLOG}), ""
    )
    monkeypatch.setitem(registry.CHECKS, "ghost", ghost)
    with pytest.raises(CheckNotInstalled, match="not installed"):
        load("ghost")
    wrong = CheckSpec(
        "wrong", "slurm_hooks.detect.checks.ecc:NoSuchCheck", frozenset({Phase.PROLOG}), ""
    )
    monkeypatch.setitem(registry.CHECKS, "wrong", wrong)
    with pytest.raises(CheckNotInstalled, match="has no NoSuchCheck"):
        load("wrong")
    assert importlib.util.find_spec("slurm_hooks.detect.checks.ghost") is None


def test_for_phase_orders_and_filters() -> None:
    hc = [s.name for s in for_phase("healthcheck")]
    assert hc[0] == "gpu_count" and "burnin" not in hc and "xid" in hc
    assert {s.name for s in for_phase(Phase.PROLOG)} >= {"burnin", "nccl", "gpu_lost", "ecc"}


def test_registry_imports_no_check_module() -> None:
    code = (
        "import sys; import slurm_hooks.detect.checks.registry as r; r.for_phase('healthcheck');"
        "print(sorted(m for m in sys.modules if m.startswith('slurm_hooks.detect.checks.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "['slurm_hooks.detect.checks.registry']"
