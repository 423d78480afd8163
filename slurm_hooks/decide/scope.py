"""Which jobs a drain moves: the node's, or only the faulty GPU's.

Pure (the Slurm reads are the caller's, ``act/gpu_scope.py``).  The rule,
for ``[policy] evacuate = "gpu"``:

* the fault must name one GPU (the drain's component is ``gpuN``) that
  Slurm knows as GRES on the node; a fault of the node, an NVSwitch, a
  NIC, memory or a mount moves every job, and so does any fault on a node
  whose GPUs are not GRES;
* a job is spared only when Slurm says which GPUs of this node it has and
  ``N`` is not among them; not knowing (a GPU share, MIG, an old client)
  moves it, as on a whole-node drain.

A later fault on the node while spared jobs run there (``struck``) moves
the ones it concerns: a fault on a GPU they hold, or one of the node.

Both facts are root's: the GPU from the kernel or NVML, the job's GPUs
from Slurm's own allocation.  Nothing a user writes decides who is spared.
"""

from __future__ import annotations

import re

_GPU = re.compile(r"^gpu(\d{1,4})$")


def gpu_of(component: str | None) -> int | None:
    """N of a drain's component ``gpuN`` (``Component.short``); None for
    any other part (the node, an NVSwitch, ``pci:...``)."""
    m = _GPU.match(component or "")
    return int(m.group(1)) if m else None


def fault_gpu(evacuate: str, component: str | None, node_gpus: int) -> int | None:
    """The one GPU a drain's evacuation is scoped to; None: the whole node.
    ``node_gpus``: the GPUs Slurm knows on the node as GRES (``Gres=gpu:8``).
    Where they are not GRES no job's detail names a GPU (every job would
    look like a CPU job), and an index beyond them is not Slurm's: both
    move every job."""
    gpu = gpu_of(component) if evacuate == "gpu" else None
    return gpu if gpu is not None and gpu < node_gpus else None


def spared(gpu: int | None, job_gpus: frozenset[int] | None) -> bool:
    """Whether a job given ``job_gpus`` on the node stays through a drain
    for a fault on ``gpu`` (None for either: it does not)."""
    return gpu is not None and job_gpus is not None and gpu not in job_gpus


def struck(gpu: int | None, job_gpus: frozenset[int] | set[int] | list[int]) -> bool:
    """Whether a later fault (on ``gpu``; None: not one GPU's) concerns a
    job spared by the first, which holds ``job_gpus``."""
    return gpu is None or gpu in job_gpus
