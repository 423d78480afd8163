"""What the lab writes per Slurm release (the matrix roots run the lab itself)."""

from __future__ import annotations

from slurm_hooks_lab.lab import cgroup_conf


def test_cgroup_plugin_disabled_where_slurmd_takes_it() -> None:
    # 22.05.8 refuses the value ("cannot find cgroup plugin for disabled",
    # slurmd exits) and needs no cgroup.conf with this lab's plugins; 24.11
    # and 26.05 load a cgroup plugin always and die without a cgroup
    # filesystem unless it is disabled (checked in the trixie/forky roots).
    assert cgroup_conf((22, 5, 8)) is None
    for version in ((23, 11, 0), (24, 11, 5), (26, 5, 5)):
        text = cgroup_conf(version)
        assert text is not None and "CgroupPlugin=disabled" in text.splitlines()
