"""Maintenance reservations: the one place that writes them (``scontrol``).

The acceptance job form (``slurm-hooks acceptance NODE``) runs the
re-check as a job on a node still in service, inside a MAINT reservation
that keeps other jobs off (``flags=maint,ignore_jobs``: made even while
jobs run; ours waits for them), deleted after.  Every backend's cluster has
``scontrol``, and no REST or pyslurm call we use creates reservations, so
the argv is built here and run by ``SlurmDoor`` through the one subprocess
site, like every other write of ours.
"""

from __future__ import annotations


def create_argv(name: str, node: str, minutes: int) -> list[str]:
    """``scontrol create reservation`` for ``node``, ``minutes`` long."""
    return [
        "scontrol", "create", "reservation",
        f"reservationname={name}",
        "starttime=now",
        f"duration={int(minutes)}",
        "flags=maint,ignore_jobs",
        f"nodes={node}",
        "users=root",
    ]  # fmt: skip


def delete_argv(name: str) -> list[str]:
    return ["scontrol", "delete", f"reservation={name}"]
