"""core.hostlist: Slurm's hostlist grammar only, never ClusterShell's groups."""

from __future__ import annotations

import pytest

from slurm_hooks.core import hostlist
from slurm_hooks.core.errors import ConfigError


def test_ranges_expand_and_fold_like_slurm() -> None:
    assert hostlist.expand("gpu[001-003],gpu200") == ["gpu001", "gpu002", "gpu003", "gpu200"]
    assert hostlist.fold(["gpu003", "gpu017", "gpu018"]) == "gpu[003,017-018]"
    assert hostlist.contains("n[1-4]", "n3")
    assert not hostlist.contains("n[1-4]", "n5")


@pytest.mark.parametrize("spec", ["*", "@gpus", "gpu[1-4]&gpu1", "gpu[1-4]!gpu2", "a^b"])
def test_clustershell_extensions_are_a_config_error(spec: str) -> None:
    # "*" used to escape as ClusterShell's GroupResolverSourceError (a
    # traceback out of a profile's `nodes`), and "@group" would run the
    # host's groups.conf upcalls inside a root hook.
    with pytest.raises(ConfigError, match="not Slurm hostlist syntax"):
        hostlist.expand(spec)
    with pytest.raises(ConfigError):
        hostlist.fold(["gpu1", spec])


def test_a_profile_with_a_wildcard_node_list_is_refused_by_name(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.detect.profiles import load_profiles

    path = tmp_path / "config.toml"
    path.write_text('[profiles.here]\nnodes = "*"\ngpu_count = 1\n')
    with pytest.raises(ConfigError) as info:
        load_profiles(config_mod.load(str(path), validate=False))
    assert "profiles.here" in str(info.value)
