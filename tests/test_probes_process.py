"""probes.process: is a process we started still there?"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from slurm_hooks.detect.probes.process import pid_alive


def test_running_exited_and_zombie():
    assert pid_alive(os.getpid())
    assert not pid_alive(None) and not pid_alive(0)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    # Not reaped yet: a zombie, which counts as gone.
    for _ in range(200):
        with open(f"/proc/{child.pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[-1].split()[0] == "Z":
                break
        time.sleep(0.01)
    assert not pid_alive(child.pid)
    child.wait()
    assert not pid_alive(child.pid)
