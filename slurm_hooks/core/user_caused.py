"""Fault codes a node's users can cause by using it.  Pure data.

Root measures these on the node, but any user of it can bring them about:
a full scratch (the ``scratch`` check), a required mount with no space or
inodes left to create a file, or so loaded (a storm of its users' I/O, or
its server's trouble) that root's create-and-remove of a file there times
out (``mounts``), a file system's space or inodes,
the load, free memory, a process left behind (site check kinds
``fs_space``, ``fs_inodes``, ``ps_loadavg``, ``hw_memory_free``,
``ps_users``, and ``ps_service`` with ``running = false`` when a user's
process is the one found; NHC's ``check_fs_*``, ``check_ps_loadavg``,
``check_hw_physmem_free``, ``check_ps_unauth_users``).  Such a failure takes
the node out of service as the site asked, so no new work lands there, but
never moves what runs on it (a user must not get another user's job
signalled or requeued, nor another tenant's pod evicted) and never counts
towards replacing the machine.  The policy (``decide``) and the Kubernetes
bridge both read it here (docs/security.md).
"""

from __future__ import annotations

USERS_CAUSE = frozenset(
    {
        "SCRATCH_FULL",
        "MOUNT_FULL",
        "MOUNT_HUNG",
        "FS_SPACE",
        "FS_INODES",
        "PS_LOADAVG",
        "HW_MEMORY_FREE",
        "PS_USERS",
        "PS_FORBIDDEN_USER",
    }
)
