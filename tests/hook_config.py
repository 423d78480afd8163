"""A healthy CPU node's config for the hook-path tests (test_hook_path,
test_hook_metrics, test_import_guard): one profile, a quiet kernel-log file,
a recorded sysfs tree, scratch and one mount that pass on any machine."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).parent / "data"

CONFIG = """
[general]
state_dir = "{state}"
[checks]
sysfs_root = "{sysfs}"
[checks.xid]
source = "file"
path = "{kern}"
[profiles.cpu]
base = "cpu"
nodes = "cpu[01-64]"
memory_gb = 1
scratch_path = "{scratch}"
scratch_min_free_gb = 0.001
mounts = ["/dev/shm"]
"""


def write_config(tmp: Path, extra: str = "") -> Path:
    """``tmp/config.toml`` for node ``cpu01``; ``extra`` (more tables) is appended."""
    (tmp / "scratch").mkdir(exist_ok=True)
    (tmp / "kern.log").write_text("")
    path = tmp / "config.toml"
    path.write_text(
        CONFIG.format(
            state=tmp / "state",
            sysfs=DATA / "sysfs" / "dgx_h100_healthy",
            kern=tmp / "kern.log",
            scratch=tmp / "scratch",
        )
        + extra
    )
    return path
