"""``install`` against each Slurm release's ``scontrol show config``.

The captures (tests/data/slurm/<version>-show_config.txt, see its README)
are of a lab set up with the lines ``install`` asks for: every required
line must read ``ok`` on every release, and the optional lines must be the
ones that release knows (a key Slurm does not know stops slurmctld).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hooks.cli import installer as inst
from slurm_hooks.slurm.parse import config_items, parse_show_config

DATA = Path(__file__).parent / "data" / "slurm"
CAPTURES = {
    "24.11": "24.11-show_config.txt",
    "26.05": "26.05-show_config.txt",
}


def running(release: str) -> dict[str, str]:
    return parse_show_config((DATA / CAPTURES[release]).read_text())


def test_indexed_keys_are_collected_in_index_order() -> None:
    conf = parse_show_config(
        "Configuration data as of 2026-12-01T20:00:00\n"
        "Prolog[1]               = /opt/site/prolog.sh\n"
        "Prolog[0]               = /etc/slurm/prolog.d/*\n"
        "PrologFlags             = Alloc\n"
    )
    assert conf["Prolog"] == "/etc/slurm/prolog.d/*,/opt/site/prolog.sh"
    assert "Prolog[0]" not in conf
    assert config_items(conf["Prolog"]) == ["/etc/slurm/prolog.d/*", "/opt/site/prolog.sh"]
    assert config_items(conf.get("Epilog")) == [] == config_items("(null)")


@pytest.mark.parametrize("release", ["24.11", "26.05"])
def test_recorded_indexed_prolog(release: str) -> None:
    conf = running(release)
    assert config_items(conf["Prolog"]) == ["/etc/slurm/prolog.d/*", "/opt/site/prolog.sh"]
    assert conf["Epilog"] == "/etc/slurm/epilog.d/*"
    assert not any("[" in key for key in conf)


@pytest.mark.parametrize("release", ["24.11", "26.05"])
def test_required_lines_ok_on_a_set_up_cluster(release: str) -> None:
    conf = running(release)
    version = inst.running_version(conf)
    assert version is not None and f"{version[0]}.{version[1]:02d}" == release
    settings = inst.recommended_settings("/etc/slurm", hook_budget_s=0, margin_s=0, version=version)
    bad = {d.setting.key: d.verdict for d in inst.compare(settings, conf) if d.setting.required}
    assert set(bad.values()) == {inst.Verdict.OK}, bad


def test_unset_keys_left_out_read_as_missing() -> None:
    # 24.11 prints no line for an unset list key (Prolog, PrologSlurmctld,
    # ...) where 22.05 printed (null)
    old = parse_show_config((DATA / "22.05-show_config.txt").read_text())
    conf = running("24.11")
    assert old["PrologSlurmctld"] == "(null)" and "PrologSlurmctld" not in conf
    assert "HealthCheckTimeout" not in conf  # and 24.11 has no such key
    for have in (old, conf):
        (d,) = inst.compare([inst.Setting("PrologSlurmctld", "/x")], have)
        assert d.verdict is inst.Verdict.MISSING


def _keys(version: tuple[int, int, int] | None) -> list[tuple[str, str]]:
    return [(s.key, s.value) for s in inst.recommended_settings("/p", version=version)]


def test_lines_fit_the_release() -> None:
    old = _keys((22, 5, 8))
    assert old == _keys((24, 11, 5)) == _keys(None)
    assert ("AuthInfo", f"cred_expire={inst.SUGGESTED_CRED_EXPIRE}") in old
    assert not any(k == "HealthCheckTimeout" for k, _ in old)
    new = _keys((26, 5, 5))
    assert ("SchedulerParameters", "requeue_delay=0") in new
    assert ("HealthCheckTimeout", "60") in new  # 30 s health-check budget + 30 s margin
    assert not any(k == "AuthInfo" for k, _ in new)  # requeue_delay replaces cred_expire


def test_health_check_timeout_stays_below_the_interval() -> None:
    s = inst.recommended_settings(
        "/p", version=(25, 11, 0), healthcheck_budget_s=900, healthcheck_interval=300
    )
    assert {x.key: x.value for x in s}["HealthCheckTimeout"] == "299"


def test_two_settings_of_one_key_make_one_merged_line() -> None:
    # SchedulerParameters carries nohold_on_prolog_fail and requeue_delay: a
    # second SchedulerParameters= line would replace the first in slurm.conf.
    settings = inst.recommended_settings("/p", version=(26, 5, 5))
    have = {"SchedulerParameters": "sched_interval=2,requeue_delay=60"}
    snippet = inst.render_snippet(settings, have, version=(26, 5, 5))
    lines = [ln for ln in snippet.splitlines() if ln.startswith("SchedulerParameters=")]
    assert lines == ["SchedulerParameters=sched_interval=2,nohold_on_prolog_fail,requeue_delay=0"]
    assert snippet.startswith("# slurm-hooks (slurm-hooks install, for Slurm 26.05)")
    diffs = {d.setting.value: d for d in inst.compare(settings, have)}
    assert diffs["requeue_delay=0"].verdict is inst.Verdict.DIFFERS
    assert diffs["requeue_delay=0"].suggested == lines[0]
    assert diffs["nohold_on_prolog_fail"].suggested == lines[0]


def test_recorded_2605_hints() -> None:
    conf = running("26.05")
    settings = inst.recommended_settings("/etc/slurm", version=inst.running_version(conf))
    verdicts = {d.setting.key: d.verdict for d in inst.compare(settings, conf)}
    # "HealthCheckTimeout = 0 sec" (unset: slurmd's 60 s) is below what we want
    assert verdicts["HealthCheckTimeout"] is inst.Verdict.DIFFERS
