"""Is a process we started still there?"""

from __future__ import annotations

import os


def pid_alive(pid: int | None) -> bool:
    """True while ``pid`` runs.  A zombie (a child nobody reaped: PID 1 on
    some machines never does) counts as gone, so callers never wait on, or
    refuse to restart, a process that has already exited."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False  # exited between the two looks
    except (OSError, IndexError):
        return True  # it answered the signal; assume it still runs
