"""atomicfile: the one way slurm-hooks replaces a file."""

from __future__ import annotations

import os
import stat

import pytest

from slurm_hooks.store.atomicfile import write_atomic


def test_writes_creates_directories_and_sets_the_mode(tmp_path):
    path = tmp_path / "a" / "b" / "state.json"
    write_atomic(path, "one\n", mode=0o600)
    assert path.read_text() == "one\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    write_atomic(path, "two\n", mode=0o755, durable=False)
    assert path.read_text() == "two\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    assert os.listdir(path.parent) == ["state.json"]  # no temp file left behind


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "cursor.json"
    write_atomic(path, "old")

    def refuse(*_a):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space"):
        write_atomic(path, "new")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["cursor.json"]
