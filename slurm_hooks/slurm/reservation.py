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

import re

from slurm_hooks.core.errors import ConfigError

#: What a reservation name of ours may hold (Slurm's names are free text;
#: ours are built from node names and incident ids, checked before use).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_name(name: str) -> str:
    """``name`` if it is a safe reservation name, else ConfigError."""
    if not _NAME.fullmatch(name):
        raise ConfigError(f"not a reservation name: {name!r}")
    return name


def list_argv() -> list[str]:
    """Every reservation, one per line (``scontrol -o show reservation``)."""
    return ["scontrol", "-o", "show", "reservation"]


def names_in(text: str) -> set[str]:
    """The reservation names in ``scontrol -o show reservation`` output
    ("No reservations in the system" lists none)."""
    out = set()
    for line in text.splitlines():
        head = line.split(" ", 1)[0]
        if head.startswith("ReservationName="):
            out.add(head.removeprefix("ReservationName="))
    return out


def create_argv(name: str, node: str, minutes: int) -> list[str]:
    """``scontrol create reservation`` for ``node``, ``minutes`` long."""
    return [
        "scontrol", "create", "reservation",
        f"reservationname={check_name(name)}",
        "starttime=now",
        f"duration={int(minutes)}",
        "flags=maint,ignore_jobs",
        f"nodes={check_name(node)}",
        "users=root",
    ]  # fmt: skip


def delete_argv(name: str) -> list[str]:
    return ["scontrol", "delete", f"reservation={check_name(name)}"]
