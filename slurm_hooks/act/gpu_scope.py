"""The GPU-scoped evacuation (``[policy] evacuate = "gpu"``).

A drain for a fault on one GPU moves only the jobs given that GPU; the
jobs on the node's other GPUs are *spared*: they run on under the drain
(no new job starts there) to their own end.  The repair (a GPU reset, a
reboot, acceptance's burn-in on every GPU) must not run under them, so it
waits until every spared job has left the node.

* ``spare``: at the evacuation's listing, takes the spared jobs out of the
  jobs to signal and journals them (``scope``, ``spared``), with one audit
  line (``job_spared``) each;
* ``struck``: a later fault on the node (another GPU, or the node's own)
  names the spared jobs it concerns; the evacuation takes them back
  (``evacuate.take_back``) and moves them like the first ones;
* ``waiting``: before the repair starts, whether a spared job still runs
  there; each run that rolls the incident forward (health check, epilog,
  watcher) asks again.

Which jobs are spared is ``decide/scope.py``'s rule; the facts come from
Slurm (``JobGpus``), never from a file a user writes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from slurm_hooks.act.context import Context
from slurm_hooks.core.errors import SlurmError
from slurm_hooks.decide.decision import Decision
from slurm_hooks.decide.scope import fault_gpu, spared, struck
from slurm_hooks.detect.probes.driver_gpus import PROC_GPUS
from slurm_hooks.slurm.base import JobGpus
from slurm_hooks.slurm.gpu_order import gpu_order
from slurm_hooks.slurm.gres import gpu_count, gpus_on
from slurm_hooks.store.state import iso, parse_time

log = logging.getLogger(__name__)

#: The driver's GPU list, read where the evacuation runs (the node itself).
PROC_ROOT = PROC_GPUS
#: slurmd's gres.conf; None: found as ``gpu_order.find_gres_conf`` does.
GRES_CONF: Path | None = None
#: Seconds between two looks at the spared jobs: one ``scontrol show job``
#: each, where the watcher would ask every poll (10 s) on every such node.
CHECK_S = 30.0


def spare(ctx: Context, doc: dict[str, Any], jobs: dict[str, Any]) -> None:
    """Move the jobs the fault's GPU does not concern from ``jobs`` into
    ``doc["spared"]`` (called under the incident lock, before any signal)."""
    node = doc["node"]
    if ctx.policy.evacuate != "gpu" or not jobs:
        return
    client = ctx.slurm
    try:
        node_gpus = gpu_count(client.get_node(node).gres)
    except SlurmError as exc:
        log.warning("%s: its GPUs not known (%s); every job moves", node, exc)
        return
    gpu = fault_gpu(ctx.policy.evacuate, doc.get("component"), node_gpus)
    if gpu is None:
        log.info("%s: %s is not one of its %d GRES GPUs; every job moves", node,
                 doc.get("component"), node_gpus)  # fmt: skip
        return
    order = gpu_order(node, gres_conf=GRES_CONF, proc_root=PROC_ROOT)
    if not order.known:
        log.warning("%s: Slurm's GPU numbers cannot be matched to NVML's (%s); every job "
                    "moves", node, order.why)  # fmt: skip
        return
    if not isinstance(client, JobGpus):
        log.info("%s: this Slurm client cannot say which GPUs a job has; every job moves", node)
        return
    kept: dict[str, Any] = {}
    for job_id, rec in list(jobs.items()):
        try:
            slurm_idx = gpus_on(client.job_gpu_detail(job_id), node)
        except SlurmError as exc:  # JobGone included: the evacuation settles it
            log.warning("GPUs of job %s on %s not known (%s): it moves", job_id, node, exc)
            continue
        # Slurm's indices in NVML's numbering, the fault's: one numbering
        # from here on (the journal's ``gpus`` included).
        nvml = None if slurm_idx is None else order.nvml(slurm_idx)
        gpus = None if nvml is None else frozenset(nvml)
        if not spared(gpu, gpus):
            continue
        assert gpus is not None
        kept[job_id] = {"user": rec.get("user"), "name": rec.get("name"),
                        "gpus": sorted(gpus), "ended_at": None}  # fmt: skip
        del jobs[job_id]
    doc.update(scope=f"gpu{gpu}", spared=kept, node_gpus=node_gpus)
    for job_id, rec in kept.items():
        ctx.audit.record(
            "job_spared", node=node, job=job_id, incident=doc["incident"], user=rec["user"],
            code=doc.get("code"), why=f"on GPUs {rec['gpus']}, not gpu{gpu}: runs on under "
            "the drain", actor=ctx.actor,
        )  # fmt: skip


def struck_jobs(ctx: Context, incident: str, decisions: Sequence[Decision]) -> list[str]:
    """The jobs the open ``incident`` spared that a fault decided on now
    concerns (one that would drain and move jobs): they must leave too."""
    doc = ctx.journal.read_doc(incident) or {}
    live = _not_seen_gone(doc)
    hit: set[str] = set()
    for d in decisions:
        if live and d.kind.drains and d.evacuate and not d.observe_only:
            gpu = fault_gpu("gpu", d.component, int(doc.get("node_gpus") or 0))
            hit |= {j for j, r in live.items() if struck(gpu, r.get("gpus") or [])}
    return sorted(hit)


def waiting(ctx: Context, incident: str) -> bool:
    """True while a job the evacuation spared still holds the node: the
    repair waits.  Slurm is asked at most every ``CHECK_S`` (the watcher
    rolls the incident forward every poll); each spared job found gone is
    journalled once."""
    doc = ctx.journal.read_doc(incident) or {}
    live = list(_not_seen_gone(doc))
    if not live:
        return False
    now = ctx.clock()
    checked = doc.get("spared_checked_at")
    if checked and timedelta(0) <= now - parse_time(checked) < timedelta(seconds=CHECK_S):
        return True
    node = doc["node"]
    ended = [j for j in live if not ctx.job_running(j, node)]  # COMPLETING runs
    first = not any(s.get("step") == "waiting_for_spared" for s in doc.get("steps") or ())

    def change(d: dict[str, Any]) -> None:
        d["spared_checked_at"] = iso(now)
        for job_id in ended:
            d["spared"][job_id]["ended_at"] = iso(now)
        if first:
            d.setdefault("steps", []).append({"step": "waiting_for_spared", "at": iso(now)})

    ctx.journal.update(incident, change)
    still = len(live) - len(ended)
    if still:
        log.info("repair of %s waits for %d spared job(s) to end", node, still)
    return bool(still)


def _not_seen_gone(doc: dict[str, Any]) -> dict[str, Any]:
    """The spared jobs of the journal ``doc`` not yet seen gone."""
    return {j: r for j, r in (doc.get("spared") or {}).items() if not (r or {}).get("ended_at")}
