"""The durations report (tests/durations_report.py): what tools/run-tests
prints at the end of every run and keeps as JSON beside the logs."""

from __future__ import annotations

import json

from durations_report import DurationsReport, main

pytest_plugins = ["pytester"]

SUITE = """
import time

import pytest

@pytest.fixture(scope="module")
def slow_lab():
    time.sleep(1.2)
    yield "lab"

@pytest.mark.lab
def test_on_the_lab(slow_lab):
    time.sleep(0.3)

def test_unit():
    pass

def test_fails():
    assert False
"""


def test_report_names_the_slow_fixture_and_splits_lab_from_unit(pytester, tmp_path, capsys):
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeini("[pytest]\nmarkers =\n    lab: on a lab\n")
    out = tmp_path / "d.json"
    result = pytester.runpytest("-q", plugins=[DurationsReport(out)])
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*where the time went*", "*slow fixture set-ups*", "*slow_lab*"])
    data = json.loads(out.read_text())
    assert data["tests"] == 3
    assert data["kinds"]["lab"]["tests"] == 1 and data["kinds"]["unit"]["tests"] == 2
    assert data["kinds"]["lab"]["seconds"] >= 1.5  # the fixture's 1.2 s + the test's 0.3 s
    (fixture,) = data["slow_fixtures"]
    assert fixture["fixture"] == "slow_lab (module)" and fixture["count"] == 1
    assert data["slowest"][0]["test"].endswith("test_on_the_lab") and data["slowest"][0]["lab"]
    assert data["modules"][0]["tests"] == 3
    # tools/run-tests prints each run's top from the files.
    assert main([str(out)]) == 0
    assert "slow_lab (module)" in capsys.readouterr().out


def test_no_file_and_no_section_without_a_path(pytester):
    pytester.makepyfile(test_plain="def test_a():\n    pass\n")
    result = pytester.runpytest("-q", plugins=[DurationsReport(None)])
    result.assert_outcomes(passed=1)
    assert "where the time went" not in result.stdout.str()
