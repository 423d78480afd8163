"""Which *.nhc a site function needs sourced (detect/site/nhc_scripts.py),
and that leaving the others out changes no verdict."""

from __future__ import annotations

from slurm_hooks.detect.site.nhc_scripts import needed, read_script

SITE = """\
SITE_VMSTAT="${SITE_VMSTAT:-/proc/vmstat}"
function check_site_oom() {
    local MAX="${1:-0}" COUNT=0
    [[ $COUNT -gt $MAX ]] && { die 1 "$FUNCNAME:  $COUNT kills"; return 1; }
    site_helper
    return 0
}
"""
HELPER = 'function site_helper() {\n    log "$HELPER_TEXT"\n}\n'
DEFAULTS = 'HELPER_TEXT="hello"\n'
UNUSED = 'UNUSED_DEFAULT=1\nfunction check_other() {\n    eval "$1"\n}\n'
NOISY = "modprobe something\nfunction check_noisy() { :; }\n"


def _scripts(**texts: str) -> list:
    return [read_script(f"{name}.nhc", text) for name, text in sorted(texts.items())]


def test_only_the_files_the_function_reaches_are_sourced() -> None:
    s = _scripts(a_site=SITE, b_helper=HELPER, c_defaults=DEFAULTS, d_unused=UNUSED)
    assert needed(s, "check_site_oom", ["1000"]) == {"a_site.nhc", "b_helper.nhc", "c_defaults.nhc"}


def test_a_file_with_top_level_commands_is_always_sourced() -> None:
    s = _scripts(a_site=SITE, b_helper=HELPER, c_defaults=DEFAULTS, e_noisy=NOISY)
    assert "e_noisy.nhc" in (needed(s, "check_site_oom", []) or set())


def test_an_exported_environment_variable_is_always_sourced() -> None:
    s = _scripts(a_site=SITE, b_helper=HELPER, c_defaults=DEFAULTS, f_path="PATH=/opt/x:$PATH\n")
    assert "f_path.nhc" in (needed(s, "check_site_oom", []) or set())


def test_a_function_exported_to_programs_is_always_sourced() -> None:
    s = _scripts(a_site=SITE, b_helper=HELPER, c_defaults=DEFAULTS, h_exp="export -f site_x\n")
    assert "h_exp.nhc" in (needed(s, "check_site_oom", []) or set())


def test_a_redefinition_in_another_file_is_sourced_too() -> None:
    s = _scripts(
        a_site=SITE, b_helper=HELPER, c_defaults=DEFAULTS, z_over="function die() { :; }\n"
    )
    assert "z_over.nhc" in (needed(s, "check_site_oom", []) or set())


def test_names_made_at_run_time_source_everything() -> None:
    dyn = "function check_dyn() {\n    check_$1\n}\n"
    s = _scripts(a_dyn=dyn, d_unused=UNUSED)
    assert needed(s, "check_dyn", []) is None
    assert needed(s, "check_other", []) is None  # eval
    assert needed(s, "check_nowhere", []) is None  # defined nowhere: NHC's message


def test_a_word_of_the_arguments_pulls_in_its_definer() -> None:
    call = 'function check_call() {\n    "$1"\n}\n'
    s = _scripts(a_call=call, b_helper=HELPER, c_defaults=DEFAULTS)
    assert needed(s, "check_call", []) == {"a_call.nhc"}
    assert needed(s, "check_call", ["site_helper"]) == {
        "a_call.nhc",
        "b_helper.nhc",
        "c_defaults.nhc",
    }


def test_unbalanced_braces_keep_a_file() -> None:
    s = _scripts(a_site=SITE, b_helper=HELPER, c_defaults=DEFAULTS, g_odd="}\nX=1\n")
    assert "g_odd.nhc" in (needed(s, "check_site_oom", []) or set())


def test_a_run_sources_what_the_function_needs_and_remembers_it(tmp_path) -> None:
    import os
    from pathlib import Path

    from slurm_hooks.detect.site.args import NhcFunction
    from slurm_hooks.detect.site.gather import Facts
    from slurm_hooks.detect.site.nhc_function import MEMO, gather

    scripts = tmp_path / "scripts"
    scripts.mkdir()
    site = Path(__file__).parent / "data" / "nhc" / "scripts" / "site_checks.nhc"
    (scripts / "site_checks.nhc").write_text(site.read_text())
    (scripts / "unused.nhc").write_text(UNUSED)
    state = tmp_path / "state"
    state.mkdir()
    vmstat = tmp_path / "vmstat"
    vmstat.write_text("oom_kill 5\n")
    a = NhcFunction(function="check_site_oom", args=("1",), scripts_dir=str(scripts),
                    env={"SITE_VMSTAT": str(vmstat)})  # fmt: skip
    first = gather(a, Facts(state_dir=str(state)))
    assert (first.loaded, first.rc) == (1, 1)
    assert first.died is not None and "5 processes killed" in first.died
    assert (state / MEMO).exists()
    assert gather(a, Facts(state_dir=str(state))) == first
    # A file that now does something when loaded is sourced from then on.
    (scripts / "unused.nhc").write_text(NOISY.replace("modprobe something", "true"))
    os.utime(scripts / "unused.nhc", ns=(1, 1))
    again = gather(a, Facts(state_dir=str(state)))
    assert (again.loaded, again.died) == (2, first.died)


def test_a_left_out_default_whose_variable_enters_the_environment_is_sourced(
    tmp_path, monkeypatch
) -> None:
    from pathlib import Path

    from slurm_hooks.detect.site.args import NhcFunction
    from slurm_hooks.detect.site.gather import Facts
    from slurm_hooks.detect.site.nhc_function import gather

    scripts = tmp_path / "scripts"
    scripts.mkdir()
    site = Path(__file__).parent / "data" / "nhc" / "scripts" / "site_checks.nhc"
    (scripts / "site_checks.nhc").write_text(site.read_text())
    (scripts / "zz_default.nhc").write_text("SHK_TEST_ONLY_DEFAULT=1\n")
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.delenv("SHK_TEST_ONLY_DEFAULT", raising=False)
    a = NhcFunction(function="check_site_marker", args=("/",), scripts_dir=str(scripts))
    assert gather(a, Facts(state_dir=str(state))).loaded == 1
    assert gather(a, Facts(state_dir=str(state))).loaded == 1  # remembered
    monkeypatch.setenv("SHK_TEST_ONLY_DEFAULT", "0")  # now the file's line reaches programs
    assert gather(a, Facts(state_dir=str(state))).loaded == 2
