"""A job's progress directory made safe for it before it starts (the prolog).

Job ids are handed out in order, and the progress directory (1777, like
/tmp) lets any user make ``<dir>/<id>`` for an id a job of someone else's
will get.  The job's own records then cannot go there (a directory of
another owner), or its writer waits for ever (a FIFO in ``rank0.log``'s
place), or its user's records are theirs to read and remove.  Root, before
the job starts, moves anything under the job's id that is not a real
directory of the job's user aside (kept for an admin to read; a name that is
no job's), so the job makes its own.  A mount a user put there (FUSE: a
stopped daemon holds whoever looks, the job's own writer too) is detached
first, never looked into.  Standard library only: the prolog imports it on
every job start.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import time
from collections.abc import Mapping

from slurm_hooks.detect.progress.beneath import (
    MAX_DETACH,
    AnotherMount,
    detach,
    open_dir,
    stat_beneath,
)

#: ``[progress] dir``'s default (``slurm_hooks.jobside.progress`` keeps its
#: own copy: what training jobs import imports nothing else of ours).
DEFAULT_DIR = "/dev/shm/slurm-hooks-progress"

log = logging.getLogger(__name__)


def progress_dir(section: object) -> str | None:
    """The ``[progress]`` directory from the raw section (the prolog keeps
    its start-up light: no typed config of the watcher's), None when
    progress is off or the value is not an absolute path."""
    raw = section if isinstance(section, Mapping) else {}
    if raw.get("enabled", True) is False:
        return None
    value = raw.get("dir", DEFAULT_DIR)
    return value if isinstance(value, str) and value.startswith("/") else None


def claim_job_dir(base: str, job: str, uid: int) -> str | None:
    """Move ``<base>/<job>`` aside unless it is a real directory of ``uid``
    that no one else may write; the path it went to (None: nothing moved).
    Only under a ``base`` root owns (a user's could be renamed under us)."""
    if not job.isdigit():
        return None
    path = os.path.join(base, job)
    try:
        bfd = open_dir(base, follow=False)  # one look at base, a user's FUSE refused
    except OSError:
        return None
    try:
        top = os.fstat(bfd)
        if top.st_uid != 0:
            return None
        st = _look(bfd, path)
    except OSError:  # no directory yet (the usual case), or none we may look at
        return None
    finally:
        os.close(bfd)
    mode = st.st_mode
    if stat.S_ISDIR(mode) and st.st_uid == uid and not mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    aside = os.path.join(base, f".untrusted-{job}-{time.time_ns()}")
    try:
        os.rename(path, aside)
    except OSError as exc:
        log.error("progress: cannot move %s (owner uid %d) aside: %s", path, st.st_uid, exc)
        return None
    log.warning("progress: %s was not job %s's (owner uid %d, mode %o): moved aside to %s",
                path, job, st.st_uid, mode, aside)  # fmt: skip
    return aside


def _look(bfd: int, path: str) -> os.stat_result:
    """``lstat`` of ``path``, a name in the directory ``bfd``, detaching any
    mount a user put there first (it is not looked into: a stopped FUSE
    daemon would hold us).  One look in the usual case (no mount): the
    prolog runs on every job."""
    name = os.path.basename(path)
    for _ in range(MAX_DETACH + 1):
        try:
            return stat_beneath(name, dir_fd=bfd)
        except AnotherMount:
            detach(path)
    raise OSError(errno.EBUSY, f"more than {MAX_DETACH} mounts stacked", path)
