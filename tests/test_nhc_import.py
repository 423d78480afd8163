"""``slurm-hooks nhc import`` on real nhc.conf files (tests/data/nhc/SOURCES.md).

Every line NHC would read ends up translated, as a setting, or listed with
the reason it was not translated: nothing is dropped.  What comes out is a
valid config whose site checks load.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hooks.cli import main
from slurm_hooks.core import config
from slurm_hooks.detect.site.nhc_checks import NOT_CARRIED, TRANSLATORS
from slurm_hooks.detect.site.nhc_conf import read_conf
from slurm_hooks.detect.site.nhc_import import (
    SYSCONFIG_GIVEN,
    import_conf,
    read_sysconfig,
    to_json,
    to_toml,
)
from slurm_hooks.detect.site.spec import load_site_checks

DATA = Path(__file__).parent / "data" / "nhc"
CONFS = sorted(DATA.glob("*.conf"))


def imported(path: Path):
    variables = {}
    if path.name.startswith("vub-hpc"):
        variables = read_sysconfig((DATA / "vub-hpc-sysconfig.example").read_text())
        variables[SYSCONFIG_GIVEN] = "1"
    return import_conf(path.read_text(), variables=variables)


@pytest.mark.parametrize("path", CONFS, ids=lambda p: p.name)
def test_every_line_is_accounted_for(path):
    imp = imported(path)
    lines = read_conf(path.read_text())
    seen = sorted(
        [t.line.lineno for t in imp.translated]
        + [u.line.lineno for u in imp.untranslated]
        + [s.line.lineno for s in imp.settings]
    )
    assert seen == sorted(x.lineno for x in lines)
    for u in imp.untranslated:
        assert u.reason, u
    print(f"{path.name}: {len(imp.translated)}/{imp.check_lines} check lines translated")
    for u in imp.untranslated:
        print(f"  line {u.line.lineno}: {u.line.text}\n    {u.reason}")


@pytest.mark.parametrize("path", CONFS, ids=lambda p: p.name)
def test_the_output_is_a_valid_config_whose_checks_load(path, tmp_path):
    imp = imported(path)
    text = to_toml(imp, source=path.name)
    cfg = config.parse(text, path=str(tmp_path / "c.toml"))  # validates every section
    assert len(load_site_checks(cfg).checks) == len(imp.rows)
    assert tomllib.loads(text).get("site_checks", []) == [
        {k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items()} for r in imp.rows
    ]


def _nhc_own(line_text: str) -> bool:
    """Whether the line calls a check NHC itself ships (not a site's own function)."""
    check = line_text.partition("||")[2].split()
    fn = check[0] if check else ""
    own = set(TRANSLATORS) | set(NOT_CARRIED) | {"check_nv_healthmon", "check_nvsmi_healthmon"}
    return fn in own or not fn.startswith("check_")  # an `if ...` line runs one of them


def test_translation_rate_across_the_real_configurations():
    translated = untranslated = own_total = own_translated = 0
    for path in CONFS:
        imp = imported(path)
        translated += len(imp.translated)
        untranslated += len(imp.untranslated)
        for t in imp.translated:
            if _nhc_own(t.line.text):
                own_total += 1
                own_translated += 1
        own_total += sum(1 for u in imp.untranslated if _nhc_own(u.line.text))
    total = translated + untranslated
    print(f"all check lines: {translated}/{total} = {translated / total:.1%}; "
          f"lines calling NHC's own checks: {own_translated}/{own_total} = {own_translated / own_total:.1%}")  # fmt: skip
    # The other lines call the sites' own functions (their code is not in
    # nhc.conf), which keep running through the nhc_function kind.
    assert own_translated / own_total >= 0.95
    assert translated / total >= 0.95


def test_site_functions_keep_running_through_nhc_function_and_say_so(tmp_path):
    text = (
        "* || export TIMEOUT=20\n* || SITE_LIMIT=$NHC_MAX\n* || export PATH=/opt/site/bin:$PATH\n"
        "gpu* || check_gpu_topo -n 8 'NV18'\n* || site_helper 1\n"
    )
    imp = import_conf(text, variables={"NHC_MAX": "4", "INCDIR": "/opt/nhc/scripts"})
    (t,) = imp.translated
    assert t.checks == (
        {"kind": "nhc_function", "function": "check_gpu_topo", "args": ["-n", "8", "NV18"],
         "scripts_dir": "/opt/nhc/scripts", "env": {"NHC_MAX": "4", "SITE_LIMIT": "4"},
         "hosts": "gpu*", "origin": "nhc.conf:4: gpu* || check_gpu_topo -n 8 'NV18'",
         "name": "nhc-function-l4"},
    )  # fmt: skip
    assert t.site_functions == ("check_gpu_topo",)
    assert "runs the site's own NHC function check_gpu_topo" in t.notes[0]
    assert any(n.startswith("$PATH is not passed") for n in t.notes)  # $PATH: unknown here
    # Not a check_* name: not taken for an NHC function (it could be anything).
    (u,) = imp.untranslated
    assert "site_helper is not an NHC check function" in u.reason
    doc = to_json(imp)
    assert doc["site_functions"] == ["check_gpu_topo"]
    assert [x["runs_site_code"] for x in doc["translated"]] == [True]
    toml = to_toml(imp)
    assert "run the site's own NHC functions, not a translation of them" in toml
    assert config.parse(toml).data["site_checks"][0]["env"] == {"NHC_MAX": "4", "SITE_LIMIT": "4"}
    # NHC's INCDIR defaults to $CONFDIR/scripts.
    row = import_conf("* || check_x", variables={"CONFDIR": "/srv/nhc"}).rows[0]
    assert row["scripts_dir"] == "/srv/nhc/scripts"
    conf = tmp_path / "nhc.conf"
    conf.write_text("* || check_oom 8g\n")
    r = CliRunner().invoke(main, ["nhc", "import", str(conf)])
    assert r.exit_code == 0
    assert "the site's own NHC functions keep running (kind nhc_function" in r.stderr
    assert "check_oom" in r.stderr.splitlines()[1]


def test_settings_map_to_sections_and_every_other_setting_is_listed():
    imp = import_conf(
        "* || export TIMEOUT=15\n* || export MARK_OFFLINE=0\n* || export NHC_RM=pbs\n"
        "* || DEBUG=1\n* || MAX_SYS_UID=499\n* || check_ps_unauth_users\n"
    )
    assert imp.extra == {
        "checks": {"budget_s": {"healthcheck": 15.0}},
        "general": {"observe_only": True},
    }
    effects = {s.name: s.effect for s in imp.settings}
    assert "Slurm only" in effects["NHC_RM"] and "no effect" in effects["DEBUG"]
    assert imp.rows[0]["max_sys_uid"] == 499


def test_read_as_nhc_reads_it():
    text = (
        "# comment\n   # indented comment\n\n"
        "n0* || check_file_contents /etc/passwd \\\n    '/^root:/'\n"  # a continuation
        "* || check_fs_mount_rw -f /scratch # a trailing shell comment is not special to NHC\n"
        "no separator here\n"
    )
    imp = import_conf(text)
    (t, *_rest) = imp.translated
    assert t.checks[0]["matches"] == ["/^root:/"] and t.checks[0]["hosts"] == "n0*"
    assert [s.effect.startswith("ignored") for s in imp.settings] == [True]


def test_node_groups_become_hostlists_or_features():
    line = "@gpu || check_hw_eth ib0\n"
    bare = import_conf(line)
    assert "--group gpu=" in bare.untranslated[0].reason
    assert import_conf(line, groups={"gpu": "g[01-16]"}).rows[0]["hosts"] == "{g[01-16]}"
    assert import_conf(line, groups={"gpu": "feature:a100"}).rows[0]["feature"] == "a100"


def test_nhc_actions_are_listed_as_notes_not_carried_silently():
    imp = import_conf(
        "* || check_ps_service -u root -r trqauthd\n* || check_fs_mount -r -f /home\n"
    )
    notes = [n for t in imp.translated for n in t.notes]
    assert any("restart" in n for n in notes) and any("remount" in n for n in notes)
    assert all("restart" not in r or r["restart"] is False for r in imp.rows)


def test_cli_prints_toml_lists_untranslated_and_exit_status(tmp_path):
    good = tmp_path / "good.conf"
    good.write_text("* || check_fs_mount_rw -f /\n")
    bad = tmp_path / "bad.conf"
    bad.write_text("* || check_fs_mount_rw -f /\n* || check_moab_rm -t 10\n")
    runner = CliRunner()
    r = runner.invoke(main, ["nhc", "import", str(good)])
    assert r.exit_code == 0, r.output
    assert tomllib.loads(r.stdout)["site_checks"][0]["kind"] == "fs_mount"
    r = runner.invoke(main, ["nhc", "import", str(bad)])
    assert r.exit_code == 1
    assert "line 2: * || check_moab_rm -t 10" in r.stderr and "Moab is not Slurm" in r.stderr
    r = runner.invoke(main, ["nhc", "import", "--json", str(bad)])
    doc = json.loads(r.stdout)
    assert (doc["check_lines"], doc["translated_lines"], doc["complete"]) == (2, 1, False)
    assert doc["untranslated"][0]["line"] == 2
    r = runner.invoke(main, ["nhc", "import", str(tmp_path / "missing.conf")])
    assert r.exit_code == 2


def test_cli_sysconfig_values(tmp_path):
    conf = DATA / "vub-hpc-nhc.conf"
    runner = CliRunner()
    without = json.loads(runner.invoke(main, ["nhc", "import", "--json", str(conf)]).stdout)
    with_values = json.loads(
        runner.invoke(
            main,
            [
                "nhc",
                "import",
                "--json",
                "--sysconfig",
                str(DATA / "vub-hpc-sysconfig.example"),
                str(conf),
            ],
        ).stdout
    )
    assert with_values["translated_lines"] > without["translated_lines"]
    assert to_json(imported(conf))["translated_lines"] == with_values["translated_lines"]


def test_cli_warns_of_a_site_function_this_hosts_scripts_do_not_define(tmp_path):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "site.nhc").write_text(
        "function check_a() {\n  return 0\n}\ncheck_b2 () { :; }\n# check_c() in a comment\n"
    )
    conf = tmp_path / "nhc.conf"
    conf.write_text("* || check_a\n* || check_b2 x\n* || check_c\n")
    runner = CliRunner()
    r = runner.invoke(main, ["nhc", "import", "--var", f"INCDIR={scripts}", str(conf)])
    assert r.exit_code == 0  # translated: the warning is about this host
    warned = [ln for ln in r.stderr.splitlines() if "warning:" in ln]
    assert warned == [
        f"  warning: check_c: no *.nhc in {scripts} on this host defines it; "
        "where that holds on a node, the check fails there"
    ]
    # Not an NHC host (no such directory here): nothing to say.
    r = runner.invoke(main, ["nhc", "import", "--var", f"INCDIR={tmp_path / 'no'}", str(conf)])
    assert r.exit_code == 0 and "warning:" not in r.stderr


@pytest.mark.parametrize("path", CONFS, ids=lambda p: p.name)
def test_config_show_keeps_the_imported_site_checks(path, tmp_path):
    imp = imported(path)
    f = tmp_path / "c.toml"
    f.write_text(to_toml(imp))
    r = CliRunner().invoke(main, ["config", "show", "-c", str(f)])
    assert r.exit_code == 0, r.output
    shown = config.parse(r.stdout)
    assert len(load_site_checks(shown).checks) == len(imp.rows)
    assert shown.data["site_checks"] == tomllib.loads(f.read_text())["site_checks"]
