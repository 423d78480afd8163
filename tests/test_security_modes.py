"""File modes of everything slurm-hooks creates (docs/security.md): state,
locks, audit, the installed config.  Under the umask slurmd may hand its
children (0), nothing is world-writable and nothing holding state or
credentials is world-readable; a config anyone can write is refused."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurm_hooks.core.errors import ConfigError
from slurm_hooks.core.history import FaultEvent


@pytest.fixture
def umask0():
    old = os.umask(0)
    yield
    os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def _tree(root: Path) -> list[Path]:
    return [root, *root.rglob("*")]


def test_state_and_locks_are_private_under_umask_0(tmp_path, umask0):
    from slurm_hooks.store.state import StateStore

    root = tmp_path / "a" / "b" / "state"
    st = StateStore(root)
    st.record_faults("n1", [FaultEvent(datetime.now(UTC), "XID79", "gpu0", "drain")])
    st.write_incident({"incident": "0a1b2c3d", "node": "n1"})
    made = [p for p in _tree(tmp_path / "a")]
    assert made, "nothing created"
    for p in made:
        m = _mode(p)
        assert not m & 0o002, (p, oct(m))  # nobody else writes
        if p.is_file():
            assert m & 0o077 == 0, (p, oct(m))  # state and locks: root only
    assert _mode(root / "locks") == 0o700


def test_audit_is_not_world_readable_nor_its_directory_writable(tmp_path, umask0):
    from slurm_hooks.store.audit import AuditLog

    path = tmp_path / "x" / "y" / "audit.jsonl"
    AuditLog(path).record("decision", node="n1", why="test")
    assert _mode(path) == 0o640
    for d in (tmp_path / "x", tmp_path / "x" / "y"):
        assert _mode(d) == 0o755, d


def test_installed_config_is_not_world_readable(tmp_path, umask0):
    from slurm_hooks.cli.installer import install_config

    path = tmp_path / "etc" / "config.toml"
    install_config(path, '[notify]\nwebhook_url = "https://hooks.example.org/T0/B0/secret"\n')
    assert _mode(path) == 0o640
    assert _mode(path.parent) == 0o755


def test_a_world_writable_config_is_refused(tmp_path):
    from slurm_hooks.core import config

    path = tmp_path / "config.toml"
    path.write_text('[notify]\nmail_argv = ["/bin/sh", "-c", "id > /tmp/owned"]\n')
    path.chmod(0o646)
    with pytest.raises(ConfigError, match="world-writable"):
        config.load(path)
    path.chmod(0o640)
    assert config.load(path, validate=False).path == str(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="the ownership rule is root's")
def test_root_refuses_a_config_another_user_owns(tmp_path):
    from slurm_hooks.core import config

    path = tmp_path / "config.toml"
    path.write_text("[general]\n")
    os.chown(path, 65534, 65534)
    with pytest.raises(ConfigError, match="not root"):
        config.load(path)
