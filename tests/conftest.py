"""Shared fixtures.  One real Slurm lab per test run (session scope).

The lab needs root and Debian's slurm packages.  Without them the lab tests
are skipped with the reason - unless SLURM_HOOKS_REQUIRE_LAB=1 (CI sets it),
where a missing lab is a failure, so CI can never go green by skipping.

Other test modules reuse ``lab`` (and ``fresh_lab``, which resets it) and
may ``lab.reconfigure(extra_conf)`` it with their hooks; ``fresh_lab``
restores the default configuration before the next test that asks for it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from durations_report import plugin_from_env
from slurm_hooks_lab.lab import TEST_USER, Lab, ensure_user, missing_prerequisites

from slurm_hooks.core.errors import LabError
from slurm_hooks.detect.probes.commands import run

REQUIRE_LAB = os.environ.get("SLURM_HOOKS_REQUIRE_LAB") == "1"
LAB_NODES = 4


def lab_unavailable(reason: str) -> None:
    if REQUIRE_LAB:
        pytest.fail(f"SLURM_HOOKS_REQUIRE_LAB=1 but the Slurm lab cannot run: {reason}", False)
    pytest.skip(f"Slurm lab not available: {reason}")


@contextlib.contextmanager
def own_lab(
    prefix: str, nodes: int, *, users: tuple[str, ...] = (TEST_USER,), **options: Any
) -> Iterator[Lab]:
    """A lab of its own (``Lab(base, nodes, **options)`` in a fresh
    ``prefix`` directory), up for the with-block, down and removed after.
    Skips where no lab can run (fails under SLURM_HOOKS_REQUIRE_LAB=1);
    fails the test when it does not come up."""
    problems = missing_prerequisites()
    if problems:
        lab_unavailable("; ".join(problems))
    base = tempfile.mkdtemp(prefix=prefix)
    for user in users:
        ensure_user(user)
    the_lab = Lab(base, nodes, **options)
    try:
        the_lab.up()
    except LabError as exc:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"the {nodes}-node lab did not come up: {exc}", False)
    try:
        yield the_lab
    finally:
        the_lab.down()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """A running 4-node lab, shared by the whole test run."""
    with own_lab("slurm-hooks-test-lab-", LAB_NODES) as the_lab:
        yield the_lab


@pytest.fixture
def fresh_lab(lab: Lab) -> Lab:
    """The session lab with no jobs, no drains and the default slurm.conf."""
    lab.reset()
    return lab


@pytest.fixture
def job_dir(lab: Lab, request: pytest.FixtureRequest) -> Path:
    """A directory the test user's jobs can write to, one per test."""
    path = lab.shared_dir / request.node.name.replace("[", "_").replace("]", "_")
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    os.chmod(path, 0o1777)
    return path


def submit(lab: Lab, script: Path, *args: str, user: str = TEST_USER) -> str:
    """sbatch ``script`` as ``user``; returns the job id."""
    res = run(
        ["runuser", "-u", user, "--", "sbatch", "--parsable", *args, str(script)],
        timeout=30,
        env=lab.env(),
        cwd=str(script.parent),
    )
    return res.stdout.strip().split(";")[0]


@pytest.fixture
def sbatch(lab: Lab):  # type: ignore[no-untyped-def]
    """``sbatch(script, *args, user='sltest') -> job_id`` on the session lab."""

    def _submit(script: Path, *args: str, user: str = TEST_USER) -> str:
        return submit(lab, script, *args, user=user)

    return _submit


# Fuzz tests search: a fresh seed every run (CI's included), printed at the
# start and the end so a failure can be replayed with --hypothesis-seed=N;
# an example it finds is then kept in the repo as a regular test
# (docs/testing.md).  Under pytest-xdist the controller draws the seed and
# the workers get it with the rest of the options.
HYPOTHESIS_SEED_ENV = "SLURM_HOOKS_HYPOTHESIS_SEED"


def _hypothesis_seed(config: pytest.Config) -> object:
    return getattr(config.option, "hypothesis_seed", None)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "lab: uses a real Slurm lab (set on every test that takes one; -m 'not lab')"
    )
    config.addinivalue_line(
        "markers", "slurm_facing: parses Slurm's output or chooses by its version (no lab)"
    )
    config.addinivalue_line(
        "markers", "one_slurm: a lab test run on the host's Slurm only, not in the roots"
    )
    config.addinivalue_line(
        "markers",
        "soak: a lab test that waits out a default window of the product (minutes to a"
        " quarter of an hour); not in the test command's runs: `bash tools/run-tests -m soak`",
    )
    config.pluginmanager.register(plugin_from_env(), "slurm_hooks_durations")
    if hasattr(config.option, "hypothesis_seed") and config.option.hypothesis_seed is None:
        config.option.hypothesis_seed = int(
            os.environ.get(HYPOTHESIS_SEED_ENV) or secrets.randbelow(2**32)
        )


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = _hypothesis_seed(config)
    return None if seed is None else f"hypothesis seed: {seed} (replay: --hypothesis-seed={seed})"


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    seed = _hypothesis_seed(config)
    if seed is not None:
        terminalreporter.write_line(
            f"hypothesis seed: {seed} (replay a fuzz failure: pytest --hypothesis-seed={seed})"
        )


#: The fixtures that hand a test a real Slurm lab.
LAB_FIXTURES = frozenset({"lab", "fresh_lab", "sbatch", "job_dir"})


#: Modules without lab tests whose subject is Slurm's output or version: their
#: recorded outputs are checked against each release's parsers and version
#: rules, so tools/matrix/root-tests runs them in every release's root
#: (marked ``slurm_facing``; the lab tests run there too).
SLURM_FACING_MODULES = frozenset(
    {
        "test_slurm_parse.py",
        "test_slurm_parse_2411.py",
        "test_fuzz_parsers.py",
        "test_slurm_rest_negotiate.py",
        "test_slurm_refusals.py",
        "test_slurm_factory.py",
        "test_slurm_door.py",
        "test_ownership.py",
        "test_policy_stale_reason.py",
        "test_install_versions.py",
        "test_lab_versions.py",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``lab`` every test that runs on a real Slurm: those marked
    ``slurm`` and those taking a lab fixture, so ``pytest -m 'not lab'`` is
    the whole unit run; and ``slurm_facing`` the tests of the modules above.
    tools/matrix/root-tests runs ``-m 'lab or slurm_facing'`` in each root."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("slurm") is not None or names & LAB_FIXTURES:
            item.add_marker(pytest.mark.lab)
        if item.path.name in SLURM_FACING_MODULES:
            item.add_marker(pytest.mark.slurm_facing)


#: Variables that steer our code and Slurm's commands in every later test and
#: reach lab jobs through ``sbatch --export=ALL`` (a leaked SLURM_HOOKS_CONFIG
#: once made a later lab test's job read another test's config).
_STEERING_ENV = ("SLURM_HOOKS_CONFIG", "SLURM_CONF")


@pytest.fixture(autouse=True)
def _no_steering_env_leaks() -> Iterator[None]:
    before = {k: os.environ.get(k) for k in _STEERING_ENV}
    yield
    after = {k: os.environ.get(k) for k in _STEERING_ENV}
    if after != before:
        for key, value in before.items():  # put it back for the tests after
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        pytest.fail(f"the test left the environment changed: {before} -> {after}")
