"""install --check says when the XID check reads a file users can write to."""

from __future__ import annotations

import pytest

from slurm_hooks.cli.xid_advice import advice


@pytest.mark.parametrize(
    ("table", "warned"),
    [
        ('source = "file"\npath = "/var/log/kern.log"\n', True),
        ('path = "/var/log/syslog"\n', True),  # auto with a path reads the file
        ('source = "kmsg"\n', False),
        ('source = "journal"\n', False),
        ('enabled = false\nsource = "file"\npath = "/var/log/kern.log"\n', False),
        ("", False),  # auto without a path: /dev/kmsg or the journal
    ],
)
def test_install_says_when_the_xid_check_reads_a_file_users_can_write(tmp_path, table, warned):
    conf = tmp_path / "config.toml"
    conf.write_text("[checks.xid]\n" + table)
    tips = advice(str(conf))
    assert bool(tips) is warned
    if warned:
        (tip,) = tips
        assert "logger -t kernel" in tip and 'source = "kmsg"' in tip


def test_an_unreadable_config_gives_no_advice(tmp_path):
    conf = tmp_path / "config.toml"
    conf.write_text("[checks.xid]\nsource = 7\n")
    assert advice(str(conf)) == []
    assert advice(str(tmp_path / "missing.toml")) == []
