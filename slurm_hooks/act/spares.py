"""Resume a spare for each job requeued off a failed node (plain Slurm, no bridge).

Opt-in (``[repair] resume_spares``).  A spare is a node we hold out of
service with our ``SPARE`` reason (the bridge's standby pool uses the same
code).  The spare is picked (``core/topology.pick_spare``, pure) from the
topology block or leaf switch most of the job's other nodes are in, where
``topology.yaml`` (24.11+, wins) or ``topology.conf`` beside slurm.conf says
so, else any spare: a requeued 2-node job whose nodes sit on one switch gets
its replacement node on that switch, where Slurm's topology plugin will want
to place it.

Exactly once per job: the chosen spare is journalled in the incident
(``spares``) before the resume; a restart resumes that same spare (the door
answers False when it is in service already), never a second one.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_hooks.core import hostlist
from slurm_hooks.core.errors import ConfigError, ForeignReasonError, SlurmError
from slurm_hooks.core.incident import Outcome
from slurm_hooks.core.ownership import our_reason
from slurm_hooks.core.topology import FLAT, Topology, parse_topology_conf, parse_topology_yaml
from slurm_hooks.store.state import iso

if TYPE_CHECKING:
    from slurm_hooks.act.engine import Engine

log = logging.getLogger(__name__)


def conf_dir(config: dict[str, str] | None = None) -> Path:
    """Where slurm.conf (and so topology.conf) lives."""
    conf = (
        os.environ.get("SLURM_CONF") or (config or {}).get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    )
    return Path(conf).parent


def load_topology(engine: Engine) -> Topology:
    """The cluster's topology; FLAT when none is configured or it cannot be read."""
    try:
        config = engine.slurm.show_config()
    except (SlurmError, NotImplementedError, AttributeError):
        config = {}
    plugin = (config.get("TopologyPlugin") or "").lower()
    d = conf_dir(config)
    try:
        if (d / "topology.yaml").exists():
            return parse_topology_yaml(
                (d / "topology.yaml").read_text(), source=str(d / "topology.yaml")
            )
        if (d / "topology.conf").exists() and plugin not in ("topology/flat", "topology/none"):
            return parse_topology_conf(
                (d / "topology.conf").read_text(), source=str(d / "topology.conf")
            )
    except (OSError, ConfigError) as exc:
        log.warning("topology not read (%s): any spare will do", exc)
    return FLAT


def spare_names(engine: Engine) -> list[str]:
    out = []
    for n in engine.slurm.list_nodes():
        ours = our_reason(n)
        if ours is not None and ours.code == "SPARE" and (n.drained or n.down):
            out.append(n.name)
    return out


def resume_spares(engine: Engine, incident: str) -> dict[str, str]:
    """For each requeued job of ``incident``, resume one spare (journalled).
    Returns job -> spare resumed (or already chosen)."""
    doc = engine.state.read_incident(incident)
    if not doc or not doc.get("jobs_done"):
        return {}
    chosen: dict[str, str] = dict(doc.get("spares") or {})
    todo = [
        (job_id, rec) for job_id, rec in (doc.get("jobs") or {}).items()
        if Outcome.parse(rec.get("outcome")) is Outcome.REQUEUED and job_id not in chosen
    ]  # fmt: skip
    if todo and not engine.observe_only:
        spares = [s for s in spare_names(engine) if s not in chosen.values()]
        topo = load_topology(engine) if spares else FLAT
        for job_id, rec in todo:
            try:
                job_nodes = hostlist.expand(rec.get("nodes") or doc["node"])
            except Exception:  # noqa: BLE001 - a malformed list: no topology preference
                job_nodes = [doc["node"]]
            from slurm_hooks.core.topology import pick_spare

            spare = pick_spare(job_nodes, doc["node"], spares, topo)
            if spare is None:
                break
            spares.remove(spare)
            chosen[job_id] = spare

            def change(d: dict[str, Any], job_id: str = job_id, spare: str = spare) -> None:
                d.setdefault("spares", {})[job_id] = spare
                d.setdefault("steps", []).append(
                    {"step": "spare_intent", "at": iso(engine.clock())}
                )

            with engine.state.incident_lock(incident):
                engine.state.update_incident(incident, change)
    done = dict(doc.get("spares_done") or {})
    for job_id, spare in chosen.items():
        if done.get(job_id):
            continue
        try:
            engine.door.resume(spare, owned=lambda r: r.code == "SPARE")
        except (ForeignReasonError, SlurmError) as exc:
            log.warning("spare %s for job %s not resumed: %s", spare, job_id, exc)
            continue

        def mark(d: dict[str, Any], job_id: str = job_id) -> None:
            d.setdefault("spares_done", {})[job_id] = True

        with engine.state.incident_lock(incident):
            engine.state.update_incident(incident, mark)
        engine.audit.record(
            "spare", node=doc["node"], incident=incident, job=job_id, spare=spare,
            why=f"spare resumed for job {job_id} requeued off {doc['node']}", actor=engine.actor,
        )  # fmt: skip
    return chosen


__all__ = ["load_topology", "resume_spares", "spare_names"]
