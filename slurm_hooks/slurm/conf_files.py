"""Where Slurm's configuration files are: beside slurm.conf.

Slurm reads topology.conf, gres.conf and cgroup.conf from slurm.conf's
directory.  Which slurm.conf: the running config's ``SLURM_CONF`` (``scontrol
show config``: what the daemons read), else this process's (slurmd hands it
to the prolog; a HealthCheckProgram gets none), else the packages' default.
Stdlib only: the prolog of a GPU job looks for gres.conf here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

#: Default slurm.conf path of Debian's and upstream's packages.
DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
#: A configless slurmd's copy of the files (22.05 on), looked in before the
#: default's directory when no ``SLURM_CONF`` names one.
CONFIGLESS_DIR = "/run/slurm/conf"


def _set(value: str | None) -> str | None:
    return value if value and value.strip() not in ("", "(null)") else None


def named_conf(config: Mapping[str, str] | None = None) -> str | None:
    """The slurm.conf a running config or this process names; None: none."""
    return _set((config or {}).get("SLURM_CONF")) or _set(os.environ.get("SLURM_CONF"))


def conf_dir(config: Mapping[str, str] | None = None) -> Path:
    """Where slurm.conf (and so topology.conf) lives: ``named_conf``'s
    directory, else the packages' default."""
    return Path(named_conf(config) or DEFAULT_SLURM_CONF).parent


def find_conf(name: str, config: Mapping[str, str] | None = None) -> Path | None:
    """The file ``name`` (``gres.conf``) as slurmd finds it: beside the
    named slurm.conf, else in a configless slurmd's copy, else beside the
    default; None where there is none."""
    named = named_conf(config)
    dirs = [Path(named).parent] if named else []
    for d in [*dirs, Path(CONFIGLESS_DIR), Path(DEFAULT_SLURM_CONF).parent]:
        if (d / name).is_file():
            return d / name
    return None
