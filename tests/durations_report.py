"""Where a test run's time goes: a pytest plugin (registered by conftest.py).

Every test's setup, call and teardown time, the fixtures that took long to
set up (a lab's bring-up is the ``lab`` fixture's setup), summed per module
and per kind (lab tests: those marked ``lab``; unit tests: the rest).  With
``SLURM_HOOKS_DURATIONS=PATH`` it writes them to PATH as JSON and prints
the top at the end of the run; ``tools/run-tests`` sets it for the host and
each root and prints one line per Slurm version from the files.

Works under pytest-xdist: the reports (and the fixture timings riding on
them as ``user_properties``) reach the controller, which writes the file.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: A fixture whose setup took at least this long is named in the report.
SLOW_FIXTURE_S = 1.0
#: The key of the fixture timings in a report's user_properties.
FIXTURES_KEY = "slurm_hooks_fixture_setup"
TOP = 15


class DurationsReport:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.t0 = time.time()
        #: nodeid -> phase -> seconds (and "lab": bool, "outcome": str)
        self.tests: dict[str, dict[str, Any]] = {}
        #: (fixture, scope, seconds, nodeid of the test that set it up)
        self.fixtures: list[tuple[str, str, float, str]] = []
        self._pending: list[tuple[str, str, float]] = []
        self._lab_ids: set[str] = set()

    # -- on the process that runs the tests (a worker under xdist) ------------

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(
        self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
    ) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        dt = time.perf_counter() - t0
        if dt >= SLOW_FIXTURE_S:
            self._pending.append((fixturedef.argname, fixturedef.scope, round(dt, 3)))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Iterator[None]:
        outcome = yield
        report = outcome.get_result()
        extra: list[tuple[str, Any]] = []
        if self._pending:
            extra.append((FIXTURES_KEY, self._pending))
            self._pending = []
        if item.get_closest_marker("lab") is not None:
            extra.append(("slurm_hooks_lab", True))
        if extra:
            # A new list: item.user_properties is shared by the three phases.
            report.user_properties = [*report.user_properties, *extra]

    # -- on the controller ------------------------------------------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.tests.setdefault(report.nodeid, {"lab": False, "outcome": ""})
        entry[report.when] = entry.get(report.when, 0.0) + report.duration
        if report.when == "call" or report.outcome != "passed":
            entry["outcome"] = report.outcome
        for key, value in report.user_properties:
            if key == FIXTURES_KEY:
                for name, scope, secs in value:
                    self.fixtures.append((name, scope, float(secs), report.nodeid))
            elif key == "slurm_hooks_lab":
                entry["lab"] = True

    def summary(self) -> dict[str, Any]:
        def total(e: dict[str, Any]) -> float:
            return float(e.get("setup", 0.0) + e.get("call", 0.0) + e.get("teardown", 0.0))

        phases = {
            p: sum(e.get(p, 0.0) for e in self.tests.values())
            for p in ("setup", "call", "teardown")
        }
        kinds: dict[str, dict[str, float]] = {
            k: {"tests": 0, "seconds": 0.0} for k in ("lab", "unit")
        }
        modules: dict[str, dict[str, float]] = defaultdict(lambda: {"tests": 0, "seconds": 0.0})
        for nodeid, e in self.tests.items():
            kind = kinds["lab" if e["lab"] else "unit"]
            kind["tests"] += 1
            kind["seconds"] += total(e)
            mod = modules[nodeid.split("::", 1)[0]]
            mod["tests"] += 1
            mod["seconds"] += total(e)
        fixtures: dict[str, dict[str, float]] = defaultdict(lambda: {"count": 0, "seconds": 0.0})
        for name, scope, secs, _ in self.fixtures:
            f = fixtures[f"{name} ({scope})"]
            f["count"] += 1
            f["seconds"] += secs
        slowest = sorted(self.tests.items(), key=lambda kv: -total(kv[1]))
        return {
            "wall_s": round(time.time() - self.t0, 1),
            "tests": len(self.tests),
            "phases_s": {k: round(v, 1) for k, v in phases.items()},
            "kinds": {
                k: {"tests": v["tests"], "seconds": round(v["seconds"], 1)}
                for k, v in kinds.items()
            },
            "slow_fixtures": sorted(
                (
                    {"fixture": k, "count": v["count"], "seconds": round(v["seconds"], 1)}
                    for k, v in fixtures.items()
                ),
                key=lambda f: -f["seconds"],
            ),
            "modules": sorted(
                (
                    {"module": k, "tests": v["tests"], "seconds": round(v["seconds"], 1)}
                    for k, v in modules.items()
                ),
                key=lambda m: -m["seconds"],
            ),
            "slowest": [
                {
                    "test": k,
                    "seconds": round(total(e), 2),
                    "lab": e["lab"],
                    **{p: round(e.get(p, 0.0), 2) for p in ("setup", "call", "teardown")},
                }
                for k, e in slowest[:200]
            ],
        }

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.path is None or hasattr(terminalreporter.config, "workerinput"):
            return
        data = self.summary()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(data, indent=1) + "\n")
        write = terminalreporter.write_line
        terminalreporter.section("where the time went")
        for line in render(data, top=TOP):
            write(line)
        write(f"(all of it: {self.path})")


def render(data: dict[str, Any], *, top: int = TOP) -> list[str]:
    """The report's top as text (also used by tools/run-tests)."""
    ph, kinds = data["phases_s"], data["kinds"]
    lines = [
        f"wall {data['wall_s']:.0f} s for {data['tests']} tests; summed over tests: "
        f"setup {ph['setup']:.0f} s, call {ph['call']:.0f} s, teardown {ph['teardown']:.0f} s",
        f"lab tests: {kinds['lab']['tests']} in {kinds['lab']['seconds']:.0f} s; "
        f"unit tests: {kinds['unit']['tests']} in {kinds['unit']['seconds']:.0f} s",
    ]
    if data["slow_fixtures"]:
        lines.append("slow fixture set-ups (a lab's bring-up is its fixture's):")
        lines += [
            f"  {f['seconds']:7.1f} s  {f['count']:3d}x  {f['fixture']}"
            for f in data["slow_fixtures"][:8]
        ]
    lines.append("slowest modules:")
    lines += [
        f"  {m['seconds']:7.1f} s  {m['tests']:4d} tests  {m['module']}"
        for m in data["modules"][:top]
    ]
    lines.append("slowest tests (setup + call + teardown):")
    lines += [
        f"  {t['seconds']:7.1f} s  (call {t['call']:.1f})  {t['test']}"
        for t in data["slowest"][:top]
    ]
    return lines


def plugin_from_env() -> DurationsReport:
    path = os.environ.get("SLURM_HOOKS_DURATIONS")
    return DurationsReport(Path(path) if path else None)


def main(argv: list[str]) -> int:
    """``python tests/durations_report.py REPORT.json...``: each run's top
    (tools/run-tests, at the end of the whole run)."""
    for arg in argv:
        path = Path(arg)
        data = json.loads(path.read_text())
        print(f"-- {path.name.removesuffix('.durations.json')}")
        for line in render(data, top=8):
            print(f"   {line}")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
