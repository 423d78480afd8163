"""Whether the prolog's idea of a GPU job fits the running Slurm.

The prolog takes a job's GPUs from ``SLURM_JOB_GPUS``, which Slurm sets only
where GPUs are GRES (``GresTypes=gpu``); ``[prolog] gres_gpus`` says which
kind of cluster this is (docs/prolog.md).  Either mismatch is silent on the
nodes, so ``slurm-hooks install --check`` says it:

* ``gres_gpus = true`` (the default) without GPU GRES: no job ever has
  ``SLURM_JOB_GPUS``, every job is taken for a CPU job and the prolog never
  tests a GPU;
* ``gres_gpus = false`` with GPU GRES: every job's prolog tests every GPU of
  the node, other jobs' on a shared node included;
* ``gpu_sharing = false`` with ``gres/shard`` or ``gres/mps``: a job's share
  of a GPU looks whole in its prolog's environment, so the prolog burns in a
  GPU other jobs use (``agent/prolog_sharing.py``).

And for ``[policy] evacuate = "gpu"`` (``evacuate_advice``): without GPU
GRES it spares no one (every job moves, as with "node"); without
``ConstrainDevices=yes`` a job is spared on what Slurm gave it, though it
can open any GPU of the node.
"""

from __future__ import annotations

from typing import Any

from slurm_hooks.slurm.gres import types_named


def prolog_gpu_settings(cfg: Any = None) -> Any:
    """``[prolog]`` of ``cfg`` (a Config, a path, or None for the hooks'
    config: ``slurm_settings.hooks_config``); its defaults when it cannot be
    read (install reports an unreadable config on its own)."""
    from slurm_hooks.agent.prolog import PrologConfig
    from slurm_hooks.cli.slurm_settings import hooks_config
    from slurm_hooks.core.errors import SlurmHooksError

    try:
        return hooks_config(cfg).section("prolog", PrologConfig)
    except SlurmHooksError:
        return PrologConfig()


def advice(
    gres_types: str | None,
    *,
    gres_gpus: bool,
    gpu_jobs_only: bool = True,
    gpu_sharing: bool = False,
) -> list[str]:
    """What to change in ``[prolog]`` for a Slurm whose ``GresTypes`` is
    ``gres_types``; empty when it fits (or every job gets the GPU checks
    anyway: ``gpu_jobs_only = false``)."""
    if not gpu_jobs_only:
        return []
    shown = gres_types or "(not set)"
    named = types_named(gres_types)
    gpus, shared = "gpu" in named, bool(named & {"shard", "mps"})
    out = []
    if gres_gpus and not gpus:
        out.append(
            f"GresTypes = {shown}: GPUs are not GRES here, so no job has SLURM_JOB_GPUS and "
            "with [prolog] gres_gpus = true every job is taken for a CPU job (the prolog "
            "never tests a GPU). Set [prolog] gres_gpus = false."
        )
    if not gres_gpus and gpus:
        out.append(
            f"GresTypes = {shown}: GPUs are GRES here, but [prolog] gres_gpus = false makes "
            "every job's prolog test every GPU of the node, other jobs' on a shared node "
            "included. Set [prolog] gres_gpus = true."
        )
    if not gpu_sharing and shared:
        out.append(
            f"GresTypes = {shown}: jobs share GPUs here, and a shared GPU looks whole in the "
            "prolog's environment (SLURM_JOB_GPUS), so its prolog would burn in a GPU other "
            "jobs use. Set [prolog] gpu_sharing = true (the prolog then asks Slurm)."
        )
    return out


def evacuate_advice(running: dict[str, str], cfg: Any = None) -> list[str]:
    """What ``[policy] evacuate = "gpu"`` (in ``cfg``: a Config, a path, or
    None for the hooks' config) cannot do on a Slurm whose ``scontrol show
    config`` is ``running``; empty for "node" or when it fits."""
    from slurm_hooks.cli.slurm_settings import hooks_config
    from slurm_hooks.core.errors import SlurmHooksError
    from slurm_hooks.decide.config import PolicyConfig

    try:
        evacuate = hooks_config(cfg).section("policy", PolicyConfig).evacuate
    except SlurmHooksError:
        return []
    if evacuate != "gpu":
        return []
    if "gpu" not in types_named(running.get("GresTypes")):
        return [
            f"GresTypes = {running.get('GresTypes') or '(not set)'}: GPUs are not GRES here, "
            'so [policy] evacuate = "gpu" cannot tell which GPU a job holds and moves every '
            'job, as "node" does.'
        ]
    if (running.get("ConstrainDevices") or "").lower() != "yes":
        return [
            'ConstrainDevices is not yes (cgroup.conf): with [policy] evacuate = "gpu" a job '
            "is spared on the GPUs Slurm gave it, but it can open the faulty one too."
        ]
    return []


def numbering_advice(
    running: dict[str, str], *, node: str | None = None, proc_root: str | None = None
) -> list[str]:
    """What this host's GPU numbering costs, when Slurm's GPU indices cannot
    be matched to NVML's here (``slurm/gpu_order.py``): its prolog then
    gives GPU jobs no GPU work, and a GPU-scoped drain moves every job.
    ``running``'s ``SLURM_CONF`` says where slurmd's gres.conf is.  Empty on
    a host without the NVIDIA driver (a head node) or where they match."""
    from slurm_hooks.detect.probes.driver_gpus import PROC_GPUS
    from slurm_hooks.detect.runner import node_name
    from slurm_hooks.slurm.gpu_order import find_gres_conf, gpu_order

    where = find_gres_conf(running)
    order = gpu_order(node or node_name(), gres_conf=where, proc_root=proc_root or PROC_GPUS)
    if order.known:
        return []
    return [
        f"this node's GPU numbers: {order.why}. Its prolog gives GPU jobs no GPU work (a "
        "guess could burn in another job's GPU) and a GPU-scoped drain moves every job. "
        "Set AutoDetect=nvml or nvidia in gres.conf, or list the GPUs with File= lines."
    ]
