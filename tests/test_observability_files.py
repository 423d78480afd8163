"""The Grafana dashboard and the Prometheus alert rules in deploy/ name only
metrics the code exports, and have the shapes Grafana and Prometheus load.

The metric names are not grepped from the source (the node metrics are
built as ``f"{NAMESPACE}_..."``): they are the families the code really
registers - a hook run's textfile collector and the bridge's registry -
expanded with the sample suffixes Prometheus sees (``_total``, ``_bucket``
...).  promtool, when installed (Debian's ``prometheus`` package), checks
the rule file too.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurm_hooks.act.metrics import PhaseRun, build_registry
from slurm_hooks.bridge.metrics import BridgeMetrics
from slurm_hooks.core.model import Component, Finding, Status

ROOT = Path(__file__).resolve().parents[1]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "slurm-hooks.json"
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created"),
}
_METRIC = re.compile(r"\bslurm_hooks_[a-z0-9_]+")


def exported_metrics() -> set[str]:
    run = PhaseRun(
        "healthcheck",
        [Finding("ecc", Status.FAIL, "ECC_DBE", "x", Component("gpu", 1))],
        timestamp=1.0,
        duration_s=1.0,
        check_durations={"ecc": 0.1},
        xid_counts={79: 1},
        state_failures={"journal": 1},
        repeats={"XID79": 1},
    )
    names: set[str] = set()
    for registry in (build_registry(run), BridgeMetrics().registry):
        for family in registry.collect():
            names.add(family.name)
            names.update(family.name + s for s in _SUFFIXES.get(family.type, ()))
            names.update(s.name for s in family.samples)
    return names


def rule_exprs() -> list[str]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [r["expr"] for g in doc["groups"] for r in g["rules"]]


def dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in doc["panels"] for t in p["targets"]]


def test_exported_metrics_are_found() -> None:
    names = exported_metrics()
    # the derivation itself works (a family of each kind, both sources)
    assert {"slurm_hooks_findings", "slurm_hooks_xid_events_total"} <= names
    assert "slurm_hooks_bridge_drain_to_back_seconds_bucket" in names


@pytest.mark.parametrize("source", ["alerts", "dashboard"])
def test_every_referenced_metric_exists(source: str) -> None:
    exprs = rule_exprs() if source == "alerts" else dashboard_exprs()
    used = {m for e in exprs for m in _METRIC.findall(e)}
    assert used, "no slurm_hooks_ metric referenced"
    assert used - exported_metrics() == set()


def test_alert_rules_shape() -> None:
    doc = yaml.safe_load(ALERTS.read_text())
    assert set(doc) == {"groups"} and doc["groups"]
    names = set()
    for group in doc["groups"]:
        assert isinstance(group["name"], str) and group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}
            assert {"alert", "expr", "for", "labels", "annotations"} <= set(rule), rule
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule["alert"])
            assert re.fullmatch(r"\d+[smhdwy]", rule["for"]), rule["for"]
            assert rule["labels"]["severity"] in {"info", "warning", "critical"}
            assert {"summary", "description"} <= set(rule["annotations"])
            assert rule["expr"].count("(") == rule["expr"].count(")")
            names.add(rule["alert"])
    assert len(names) == sum(len(g["rules"]) for g in doc["groups"])


def promtool() -> str | None:
    """promtool on PATH or beside this Python (tools/bootstrap.sh puts
    Debian's into the virtualenv)."""
    beside = Path(sys.executable).parent / "promtool"
    return shutil.which("promtool") or (str(beside) if beside.is_file() else None)


@pytest.mark.skipif(
    promtool() is None, reason="promtool not installed (tools/bootstrap.sh installs it)"
)
def test_promtool_checks_rules() -> None:
    r = subprocess.run(
        [str(promtool()), "check", "rules", str(ALERTS)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr


def test_dashboard_shape() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["title"] and doc["uid"] and isinstance(doc["schemaVersion"], int)
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)) and ids
    for p in doc["panels"]:
        assert p["type"] in {"timeseries", "stat", "table", "gauge", "bargauge"}
        assert {"h", "w", "x", "y"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"][
            "w"
        ] <= 24
        assert p["targets"] and all(t["expr"] and t["refId"] for t in p["targets"])
        assert all(t["expr"].count("(") == t["expr"].count(")") for t in p["targets"])
