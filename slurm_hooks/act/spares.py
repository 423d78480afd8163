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

Power saving: a spare that Slurm powered down (``IDLE+DRAIN+POWERED_DOWN``,
``drained~`` in sinfo) is still a spare.  Resuming it lifts our drain and
leaves it powered down: it is then ``idle~``, schedulable, and Slurm's own
ResumeProgram powers it up when the requeued job is placed there.  Slurm
22.05 refuses ``State=POWER_UP`` where power saving is not configured
("Invalid node state specified", measured on the lab), and where it is, the
scheduler already powers the node up on demand: there is nothing more for
us to ask.  A warm spare is preferred within a topology group (no boot to
wait for).  A powered-down node that carries no reason of ours is not a
spare: it is in service already and Slurm will use it by itself.

The running config's ``SLURM_CONF`` (``scontrol show config``) says where
topology.conf lives; the process's own ``SLURM_CONF`` comes second: a node
whose shim fell back to /etc/slurm/slurm.conf while slurmctld reads another
file would otherwise look in the wrong place and silently see no topology.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from slurm_hooks.core import hostlist
from slurm_hooks.core.errors import ConfigError, ForeignReasonError, SlurmError
from slurm_hooks.core.incident import Outcome
from slurm_hooks.core.model import NodeState
from slurm_hooks.core.ownership import our_reason
from slurm_hooks.core.topology import FLAT, Topology, parse_topology_conf, parse_topology_yaml
from slurm_hooks.slurm.conf_files import conf_dir

if TYPE_CHECKING:
    from slurm_hooks.act.context import Context

log = logging.getLogger(__name__)


#: TopologyPlugin values that say "no topology": topology.conf is not read
#: (22.05 default: none; 23.11+: flat).
FLAT_PLUGINS = frozenset({"topology/none", "topology/flat"})
#: Values under which a missing topology file is no surprise (unset, unread
#: config, 24.11's default, which topology.yaml configures when present).
_NO_FILE_EXPECTED = FLAT_PLUGINS | {"", "(null)", "topology/default"}
#: Node flags of a node that power saving has powered down or is powering down.
COLD_FLAGS = frozenset({"POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN"})


def load_topology(ctx: Context) -> Topology:
    """The cluster's topology; FLAT when none is configured or it cannot be
    read.  A TopologyPlugin that needs a file, with no file found: FLAT and a
    warning (spares are then picked without regard to switches)."""
    try:
        config = ctx.slurm.show_config()
    except (SlurmError, NotImplementedError, AttributeError):
        config = {}
    plugin = (config.get("TopologyPlugin") or "").strip().lower()
    d = conf_dir(config)
    yaml_path, conf_path = d / "topology.yaml", d / "topology.conf"
    try:
        if yaml_path.exists():
            return parse_topology_yaml(yaml_path.read_text(), source=str(yaml_path))
        if conf_path.exists() and plugin not in FLAT_PLUGINS:
            return parse_topology_conf(conf_path.read_text(), source=str(conf_path))
    except (OSError, ConfigError) as exc:
        log.warning("topology not read (%s): any spare will do", exc)
        return FLAT
    if plugin not in _NO_FILE_EXPECTED:
        log.warning(
            "TopologyPlugin=%s but no topology.yaml or topology.conf in %s: spares are "
            "picked without topology", plugin, d,
        )  # fmt: skip
    return FLAT


def spare_nodes(ctx: Context) -> list[NodeState]:
    """Our SPARE nodes held out of service (drained or down), powered
    down ones included (``cold``)."""
    out = []
    for n in ctx.slurm.list_nodes():
        ours = our_reason(n)
        if ours is not None and ours.code == "SPARE" and (n.drained or n.down):
            out.append(n)
    return out


def cold(node: NodeState) -> bool:
    """Powered down (or on its way) by Slurm's power saving."""
    return bool(node.flags & COLD_FLAGS)


def spare_names(ctx: Context) -> list[str]:
    return [n.name for n in spare_nodes(ctx)]


def resume_spares(ctx: Context, incident: str) -> dict[str, str]:
    """For each requeued job of ``incident``, resume one spare (journalled).
    Returns job -> spare resumed (or already chosen)."""
    inc = ctx.journal.read(incident)
    if inc is None or not inc.jobs_done:
        return {}
    chosen: dict[str, str] = dict(inc.spares or {})
    todo = [
        (rec.job_id, rec) for rec in inc.job_records()
        if rec.outcome is Outcome.REQUEUED and rec.job_id not in chosen
    ]  # fmt: skip
    if todo and not ctx.observe_only:
        pool = [n for n in spare_nodes(ctx) if n.name not in chosen.values()]
        spares = [n.name for n in pool]
        powered_down = {n.name for n in pool if cold(n)}
        topo = load_topology(ctx) if spares else FLAT
        for job_id, rec in todo:
            try:
                job_nodes = hostlist.expand(rec.nodes or inc.node)
            except Exception:  # noqa: BLE001 - a malformed list: no topology preference
                job_nodes = [inc.node]
            from slurm_hooks.core.topology import pick_spare

            spare = pick_spare(job_nodes, inc.node, spares, topo, cold=powered_down)
            if spare is None:
                break
            spares.remove(spare)
            chosen[job_id] = spare

            def change(d: dict[str, Any], job_id: str = job_id, spare: str = spare) -> None:
                d.setdefault("spares", {})[job_id] = spare

            ctx.journal.step(incident, "spare_intent", edit=change)
    done = dict(inc.spares_done or {})
    for job_id, spare in chosen.items():
        if done.get(job_id):
            continue

        def mark(d: dict[str, Any], job_id: str = job_id) -> None:
            d.setdefault("spares_done", {})[job_id] = True

        try:
            # Under the incident lock, and only if no other run (the grace
            # worker and a hook both finish the jobs) resumed it meanwhile:
            # one resume and one audit line per job.
            with ctx.journal.lock(incident):
                now = ctx.journal.read(incident)
                if now is not None and (now.spares_done or {}).get(job_id):
                    continue
                ctx.door.resume(spare, owned=lambda r: r.code == "SPARE")
                ctx.journal.update(incident, mark)
        except (ForeignReasonError, SlurmError) as exc:
            log.warning("spare %s for job %s not resumed: %s", spare, job_id, exc)
            continue
        ctx.audit.record(
            "spare", node=inc.node, incident=incident, job=job_id, spare=spare,
            why=f"spare resumed for job {job_id} requeued off {inc.node}",
        )  # fmt: skip
    return chosen


__all__ = ["cold", "conf_dir", "load_topology", "resume_spares", "spare_names", "spare_nodes"]
