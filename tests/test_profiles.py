"""Profiles: loading, validation errors naming file and key, selection."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hooks.core import config
from slurm_hooks.core.errors import ConfigError
from slurm_hooks.detect.checks.settings import load_checks_config
from slurm_hooks.detect.profiles import EMPTY, Profile, builtin_names, load_builtin, load_profiles

GOOD = """
[profiles.h100]
base = "h100-sxm5-80gb"
nodes = "gpu[001-128]"
driver_version = "550.54.15"
mounts = ["/home", "/scratch"]
scratch_path = "/scratch"
scratch_min_free_gb = 500
[profiles.h100.ib]
device_pattern = "mlx5_[0-7]"

[profiles.login]
base = "cpu"
nodes = "login1,login2"
memory_gb = 512

[profiles.default]
gpu_count = 0
"""


def write(tmp_path: Path, text: str) -> config.Config:
    p = tmp_path / "config.toml"
    p.write_text(text)
    return config.load(p, validate=False)


def test_shipped_examples_are_valid() -> None:
    names = builtin_names()
    assert {"a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "cpu"} <= set(names)
    for name in names:
        prof = load_builtin(name)
        assert prof.name == name
    a100 = load_builtin("a100-sxm4-80gb")
    assert (a100.gpu_count, a100.pcie_gen, a100.pcie_width, a100.nvlinks_per_gpu) == (8, 4, 16, 12)
    h100 = load_builtin("h100-sxm5-80gb")
    assert (h100.pcie_gen, h100.nvlinks_per_gpu, h100.fabric_manager) == (5, 18, True)
    assert load_builtin("h200-sxm-141gb").gpu_model == "H200"
    assert load_builtin("cpu").gpu_count == 0


def test_base_merges_and_overrides(tmp_path: Path) -> None:
    profiles = load_profiles(write(tmp_path, GOOD))
    h100 = profiles.profiles["h100"]
    assert h100.gpu_count == 8 and h100.nvlinks_per_gpu == 18  # from the example
    assert h100.driver_version == "550.54.15"  # own key
    assert (
        h100.ib is not None and h100.ib.rate_gbps == 400 and h100.ib.device_pattern == "mlx5_[0-7]"
    )
    assert h100.mounts == ("/home", "/scratch")
    assert profiles.profiles["login"].gpu_count == 0
    # The profile reads as the plain mapping CheckContext promises.
    assert h100.get("burnin_min_tflops") == 45.0 and h100["gpu_count"] == 8


def test_selection_order(tmp_path: Path) -> None:
    profiles = load_profiles(write(tmp_path, GOOD))
    assert profiles.select("gpu017").name == "h100"
    assert profiles.select("login2").name == "login"
    assert profiles.select("weird9").name == "default"
    assert profiles.select("gpu017", "login").name == "login"
    assert profiles.select("x", "a100-sxm4-80gb").gpu_model == "A100-SXM4-80GB"  # shipped
    with pytest.raises(ConfigError, match=r"config.toml:profiles.nope: no such profile"):
        profiles.select("gpu017", "nope")
    assert load_profiles(write(tmp_path, "")).select("gpu017") is EMPTY


def test_first_match_wins(tmp_path: Path) -> None:
    text = '[profiles.a]\nnodes = "gpu[001-010]"\n[profiles.b]\nnodes = "gpu[005-020]"\n'
    profiles = load_profiles(write(tmp_path, text))
    assert profiles.select("gpu007").name == "a"
    assert profiles.select("gpu015").name == "b"


@pytest.mark.parametrize(
    "text, key, words",
    [
        ("[profiles.x]\ngpu_cuont = 8\n", "profiles.x.gpu_cuont", "unknown key"),
        ('[profiles.x]\ngpu_count = "eight"\n', "profiles.x.gpu_count", "eight"),
        (
            "[profiles.x]\ngpu_temp_warn_c = 95\ngpu_temp_fail_c = 90\n",
            "profiles.x",
            "gpu_temp_warn_c",
        ),
        ('[profiles.x]\nnodes = "gpu[001-"\n', "profiles.x", "invalid hostlist"),
        ('[profiles.x]\nbase = "b300"\n', "profiles.x.base", "no such profile"),
        ('[profiles.x]\nbase = "y"\n[profiles.y]\nbase = "x"\n', "profiles.y.base", "loops"),
        ('[profiles.x.ib]\nrate_gbps = "fast"\n', "profiles.x.ib.rate_gbps", "fast"),
        ('[profiles.x]\nmounts = ["home"]\n', "profiles.x", "absolute"),
        ("[profiles.x]\nscratch_min_free_gb = 5\n", "profiles.x", "scratch_path"),
        ('[profiles.x]\ndriver_version = "r550"\n', "profiles.x", "dotted version"),
        ("[profiles]\nx = 3\n", "profiles.x", "expected a table"),
    ],
)
def test_bad_profiles_name_file_and_key(tmp_path: Path, text: str, key: str, words: str) -> None:
    cfg = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_profiles(cfg)
    msg = str(info.value)
    assert msg.startswith(f"{tmp_path / 'config.toml'}:{key}"), msg
    assert words in msg
    assert info.value.path == str(tmp_path / "config.toml")


@pytest.mark.parametrize(
    "text, key",
    [
        ("[checks.gpu_tmep]\nenabled = false\n", "checks.gpu_tmep"),
        ('[checks.ecc]\nenabled = "no"\n', "checks.ecc.enabled"),
        ("[checks.pcie]\ntimeout_s = -1\n", "checks.pcie.timeout_s"),
        ('[checks.pcie]\nphases = ["prologue"]\n', "checks.pcie.phases"),
        ("[checks.gpu_temp]\nwarn_c = 95\nfail_c = 90\n", "checks.gpu_temp"),
        ("[checks.gpu_temp]\nwarn = 95\n", "checks.gpu_temp.warn"),
        ("[checks.driver]\nversion = 1\n", "checks.driver.version"),
        ("[checks]\nbudget_s = { healthcheck = 0 }\n", "checks.budget_s.healthcheck"),
        ("[checks]\nbudget_s = { lunch = 5 }\n", "checks.budget_s.lunch"),
        ('[checks.throttle]\nfail_reasons = ["hot"]\n', "checks.throttle"),
    ],
)
def test_bad_checks_section_names_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    cfg = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_checks_config(cfg, deep=True)
    assert str(info.value).startswith(f"{tmp_path / 'config.toml'}:{key}"), str(info.value)


def test_checks_section_values(tmp_path: Path) -> None:
    cfg = write(
        tmp_path,
        "[checks]\ntimeout_s = 3\nbudget_s = { prolog = 40 }\n"
        '[checks.pcie]\nenabled = false\n[checks.ecc]\ntimeout_s = 1.5\nphases = ["healthcheck"]\n'
        "[checks.xid]\nrepeat_count = 4\n",
    )
    cc = load_checks_config(cfg, deep=True)
    assert cc.timeout("gpu_temp") == 3 and cc.timeout("ecc") == 1.5 and cc.timeout("mounts") == 15.0
    assert cc.budget("prolog") == 40 and cc.budget("healthcheck") == 30
    assert not cc.enabled("pcie") and cc.enabled("ecc")
    assert [str(p) for p in cc.phases("ecc")] == ["healthcheck"]
    # A typo in a check's own table is refused on load, naming the key.
    bad = write(tmp_path, "[checks.xid]\nanything = 1\n")
    with pytest.raises(ConfigError, match="checks.xid.anything"):
        load_checks_config(bad, deep=True)


def test_as_section_class_with_proposed_config_hook(tmp_path: Path) -> None:
    """What config.Config.section() will do once SECTIONS has our lines and
    from_mapping honours ``from_section`` (see the report)."""
    from slurm_hooks.detect.checks.settings import ChecksConfig
    from slurm_hooks.detect.profiles import Profiles

    cfg = write(tmp_path, GOOD + "[checks.ecc]\nenabled = false\n")
    p = Profiles.from_section(cfg.data["profiles"], path=cfg.path, prefix="profiles")
    assert isinstance(p.profiles["h100"], Profile)
    c = ChecksConfig.from_section(cfg.data["checks"], path=cfg.path, prefix="checks")
    assert not c.enabled("ecc")
