"""metrics: textfiles that node_exporter (and prometheus_client's parser) accept."""

from __future__ import annotations

import os
import urllib.request

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from slurm_hooks.act import metrics
from slurm_hooks.core.model import Action, Component, Finding, Status


def findings():
    gpu3 = Component("gpu", 3)
    return [
        Finding("gpu_presence", Status.OK, "OK", "8 GPUs"),
        Finding("xid", Status.FAIL, "XID79", "fallen off the bus", gpu3, Action.DRAIN),
        Finding("xid", Status.FAIL, "XID79", "again", Component("gpu", 5), Action.DRAIN),
        Finding("ecc", Status.WARN, "ECC_SBE_RATE", "sbe rising", gpu3),
        Finding("nccl", Status.UNKNOWN, "CHECK_UNKNOWN", "could not run"),
    ]


def run():
    return metrics.PhaseRun(
        phase="healthcheck",
        findings=findings(),
        timestamp=1714557600.5,
        duration_s=2.25,
        check_durations={"xid": 0.01, "nccl": 1.5},
        xid_counts={79: 2, "13": 5},
    )


def samples(text):
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out, {fam.name: fam.type for fam in text_string_to_metric_families(text)}


def test_textfile_is_written_atomically_and_parses(tmp_path):
    path = metrics.write_textfile(tmp_path, run())
    assert path == tmp_path / "slurm_hooks_healthcheck.prom"
    assert os.listdir(tmp_path) == [path.name]  # no temp file left behind
    values, types = samples(path.read_text())
    ph = ("phase", "healthcheck")
    assert (
        values[
            ("slurm_hooks_findings", (("check", "xid"), ("code", "XID79"), ph, ("status", "FAIL")))
        ]
        == 2
    )
    assert (
        values[
            (
                "slurm_hooks_findings",
                (("check", "gpu_presence"), ("code", "OK"), ph, ("status", "OK")),
            )
        ]
        == 1
    )
    assert values[("slurm_hooks_check_status", (("check", "ecc"), ph))] == Status.WARN.rank
    assert values[("slurm_hooks_check_status", (("check", "nccl"), ph))] == Status.UNKNOWN.rank
    assert values[("slurm_hooks_last_check_timestamp_seconds", (ph,))] == 1714557600.5
    assert values[("slurm_hooks_phase_duration_seconds", (ph,))] == 2.25
    assert values[("slurm_hooks_check_duration_seconds", (("check", "nccl"), ph))] == 1.5
    assert values[("slurm_hooks_xid_events_total", (("xid", "79"),))] == 2
    assert values[("slurm_hooks_xid_events_total", (("xid", "13"),))] == 5
    assert types["slurm_hooks_xid_events"] == "counter"
    assert types["slurm_hooks_findings"] == "gauge"
    # No _created sample: the count is the watcher's, not this process's.
    assert not any(name.endswith("_created") for name, _ in values)


def test_rewrite_replaces_old_numbers(tmp_path):
    metrics.write_textfile(tmp_path, run())
    healthy = metrics.PhaseRun("healthcheck", [Finding("xid", Status.OK, "OK", "ok")], 1.0, 0.1)
    path = metrics.write_textfile(tmp_path, healthy)
    values, _ = samples(path.read_text())
    assert not any(k[0] == "slurm_hooks_xid_events_total" for k in values)
    assert (
        "slurm_hooks_findings",
        (("check", "xid"), ("code", "OK"), ("phase", "healthcheck"), ("status", "OK")),
    ) in values


def test_phases_write_separate_files(tmp_path):
    metrics.write_textfile(tmp_path, run())
    metrics.write_textfile(tmp_path, metrics.PhaseRun("prolog", [], 2.0, 0.5))
    assert sorted(os.listdir(tmp_path)) == [
        "slurm_hooks_healthcheck.prom",
        "slurm_hooks_prolog.prom",
    ]


def test_unwritable_dir_does_not_raise_on_the_hook_path(tmp_path):
    assert metrics.try_write_textfile(tmp_path / "missing" / "dir", run()) is None


def test_serve_exposes_a_registry():
    reg = CollectorRegistry()
    c = Counter("slurm_hooks_bridge_passes", "Reconcile passes.", registry=reg)
    c.inc(3)
    server, thread = metrics.serve(0, "127.0.0.1", reg)
    try:
        port = server.server_port
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
        server.server_close()
    values, _ = samples(body)
    assert values[("slurm_hooks_bridge_passes_total", ())] == 3


def test_config_section_validates():
    import pytest

    from slurm_hooks.core import config
    from slurm_hooks.core.errors import ConfigError

    cfg = config.parse('[metrics]\ntextfile_dir = "/x"\nwatch_port = 0\n', validate=False)
    assert cfg.section("metrics", metrics.MetricsConfig).textfile_dir == "/x"
    bad = config.parse("[metrics]\nwatch_port = 70000\n", path="c.toml", validate=False)
    with pytest.raises(ConfigError, match="c.toml:metrics"):
        bad.section("metrics", metrics.MetricsConfig)


def test_bridge_port_is_gone_the_bridge_has_its_own_key():
    """``[metrics] bridge_port`` was never read; a config that sets it is
    refused by name rather than silently ignored (the bridge's port is
    ``[bridge] metrics_port``)."""
    import pytest

    from slurm_hooks.bridge.settings import BridgeConfig
    from slurm_hooks.core import config
    from slurm_hooks.core.errors import ConfigError

    bad = config.parse("[metrics]\nbridge_port = 9840\n", path="c.toml", validate=False)
    with pytest.raises(ConfigError, match="metrics.bridge_port"):
        bad.section("metrics", metrics.MetricsConfig)
    cfg = config.parse("[bridge]\nmetrics_port = 9840\n", validate=False)
    assert cfg.section("bridge", BridgeConfig).metrics_port == 9840
