"""Whether a job's GPUs are shared with other jobs (``gres/shard``,
``gres/mps``), asked of Slurm.

The prolog's environment cannot say: measured on 22.05.8, 24.11.5 and
26.05.5 (``tests/test_gres_lab.py``), a ``--gres=shard:2`` job's prolog gets
``SLURM_JOB_GPUS=0`` and ``CUDA_VISIBLE_DEVICES=0``, the variables of a job
holding GPU 0 whole.  A burn-in there takes the GPU from the other jobs on
it and measures their load: a drain any user could ask for by sharing a GPU.
Where a site shares GPUs (``[prolog] gpu_sharing = true``) the prolog asks
Slurm what the job asked for, one ``scontrol show job`` a GPU job.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def shared_gpus_reason(cfg: Any, job_id: str) -> str | None:
    """Why the job's GPUs are not the prolog's to burn in (it shares them,
    or Slurm could not say), or None when it holds them whole."""
    from slurm_hooks.core.errors import SlurmHooksError
    from slurm_hooks.slurm.factory import client_from_config
    from slurm_hooks.slurm.gres import shares_gpus

    try:
        job = client_from_config(cfg).get_job(job_id)
    except SlurmHooksError as exc:
        # Not knowing is not a licence to burn a GPU other jobs may share.
        log.warning("prolog: cannot tell whether job %s shares its GPUs: %s", job_id, exc)
        return (
            f"gpu_sharing = true and Slurm did not say what job {job_id} asked for: not burned in"
        )
    if shares_gpus(job.tres_per):
        return f"job {job_id} shares its GPUs ({job.tres_per}): not burned in"
    return None
