"""The TaskProlog ``slurm-hooks install`` writes: PyTorch's flight recorder, on for every job.

slurmstepd runs slurm.conf's ``TaskProlog`` as the job's user before each
task, in the task's environment, and sets what it prints as
``export NAME=value`` for the task (Slurm's prolog_epilog documentation).
Ours makes every PyTorch job that uses NCCL keep its flight recorder
and dump it on a collective timeout, one file per rank, into the job's own
directory under ``[progress] dir``, where the watcher reads it
(``[progress] flight_recorder_path``; docs/progress.md): no change to the job.

It is plain ``sh``, not Python: it runs once per task on the job's start
path and must cost a shell's start, nothing more.  What it never does:
override a variable the job set itself, follow a symlink, use a directory
another user made (``-O``: owned by the task's user), or print anything
but ``export`` lines.  ``SLURM_HOOKS_WATCH=0`` in the job's environment
(``sbatch --export=ALL,SLURM_HOOKS_WATCH=0``) and it prints nothing.
``--comment slurm-hooks:no-watch`` cannot reach it: Slurm gives the job's
comment to Prolog and Epilog only; the watcher honours that token itself.

NCCL's RAS (2.24+) is on by default (``NCCL_RAS_ENABLE``): nothing to set.
"""

from __future__ import annotations

import os
from pathlib import Path

from slurm_hooks.detect.progress.settings import ProgressConfig

#: (directory under the install prefix, file name); slurm.conf ``TaskProlog=``.
TASK_PROLOG_PATH = ("task-prolog", "slurm-hooks-task-prolog")
#: File name prefix of the dumps (the global rank is appended by PyTorch).
DUMP_PREFIX = "nccl_trace_rank_"
#: Entries of the flight recorder's ring buffer (the PyTorch tutorial's value:
#: a few MB of host memory per rank, written only on a timeout).
TRACE_BUFFER = 2000
#: Each variable under its older (PyTorch <= 2.5) and newer name.
BUFFER_VARS = ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE")
DUMP_FILE_VARS = ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE")
DUMP_ON_TIMEOUT = "TORCH_NCCL_DUMP_ON_TIMEOUT"


def task_prolog_path(prefix: str | os.PathLike[str]) -> Path:
    sub, name = TASK_PROLOG_PATH
    return Path(prefix) / sub / name


def _unset_all(names: tuple[str, ...]) -> str:
    return '[ -z "' + "".join(f"${{{n}:-}}" for n in names) + '" ]'


def render_task_prolog(
    progress_dir: str = ProgressConfig.dir, *, buffer: int = TRACE_BUFFER
) -> str:
    """The TaskProlog for a watcher reading ``progress_dir``."""
    if not progress_dir.startswith("/") or any(ch in progress_dir for ch in "\"$`\\\n' \t"):
        raise ValueError(f"progress dir not allowed in the task prolog: {progress_dir!r}")
    buffer = int(buffer)
    exports_buffer = " ".join(f"{n}={buffer}" for n in BUFFER_VARS)
    exports_file = " ".join(f"{n}=$dir/{DUMP_PREFIX}" for n in DUMP_FILE_VARS)
    return (
        "#!/bin/sh\n"
        "# slurm-hooks TaskProlog ('slurm-hooks install' puts it in place; slurm.conf TaskProlog=).\n"
        "# Runs as the job's user before each task; Slurm sets what it prints as\n"
        "# 'export NAME=value' for the task. It makes PyTorch dump its flight recorder on a\n"
        "# collective timeout into the job's directory the watcher reads (docs/progress.md).\n"
        "# Opt out: SLURM_HOOKS_WATCH=0 in the job's environment.\n"
        'case "${SLURM_HOOKS_WATCH:-1}" in 0|no|false|off) exit 0 ;; esac\n'
        'case "${SLURM_JOB_ID:-}" in ""|*[!0-9]*) exit 0 ;; esac\n'
        f'dir="{progress_dir}/$SLURM_JOB_ID"\n'
        'mkdir -m 0755 "$dir" 2>/dev/null\n'
        '[ -d "$dir" ] && [ ! -L "$dir" ] && [ -O "$dir" ] || exit 0\n'
        f'{_unset_all(BUFFER_VARS)} && for v in {exports_buffer}; do echo "export $v"; done\n'
        f'[ -z "${{{DUMP_ON_TIMEOUT}:-}}" ] && echo "export {DUMP_ON_TIMEOUT}=1"\n'
        f'{_unset_all(DUMP_FILE_VARS)} && for v in {exports_file}; do echo "export $v"; done\n'
        "exit 0\n"
    )
