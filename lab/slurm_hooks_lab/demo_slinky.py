"""``slurm-hooks demo --slinky``: the platform's scenario, Slurm on Kubernetes under Slinky.

The Slurm nodes are NodeSet pods (``gpu-0``, ``gpu-1``, ...) on Kubernetes
machines ``m1``..``mN`` of the API stand-in, plus spare machines with no
pod.  The lab's NodeSet controller (nodeset_controller.py) plays Slinky's
operator against the lab's real Slurm; the bridge runs with
``node_mapping = "slinky"`` and an acceptance runner.  XID 79 under the
2-node job then goes: drain -> signal -> checkpoint -> requeue (the engine,
as in the classic demo) -> the faulty machine cordoned and tainted (with
Slinky's ``node-cordon-reason``) -> once the jobs are settled, the slurmd
pod deleted -> recreated by the NodeSet on the spare machine (new hardware:
healthy GPUs), the same Slurm node's slurmd registers from there -> our
reason reasserted, acceptance on the new machine, resume -> the job runs
again from its checkpoint, on the same Slurm node name.  The faulty machine
stays cordoned for repair and its repair request goes out.

This module holds the scenario (steps, durations, goals) and its parts of
the orchestration (bring-up, observation, the end-state check); demo.py
runs it with the machinery the classic scenario uses.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_hooks_lab.demo import (
    DETECT_TO_DRAIN_LIMIT,
    DURATIONS,
    STEP_BY_KEY,
    DurationSpec,
    Goal,
    Scenario,
    StepSpec,
    TrainingCheck,
    _node_label,
    all_steps_goal,
    audit_time,
    compute_durations,
)

#: What the platform takes to replace a node (the issue's figure).
PLATFORM_REPLACEMENT_S = 300.0
#: The job runs again within this many seconds of the node's return.
RUNNING_AFTER_BACK_LIMIT = 15.0
#: Training downtime stays under the grace plus this.
SLINKY_DOWNTIME_SLACK = 120.0

_C = STEP_BY_KEY

SLINKY_STEPS: tuple[StepSpec, ...] = (
    _C["detected"],
    _C["drained"],
    _C["signalled"],
    _C["checkpoint"],
    StepSpec("cordoned", "machine cordoned", "action", after="drained", timeout_s=15),
    _C["requeued"],
    StepSpec("pod_deleted", "slurmd pod deleted", "action", after="requeued", timeout_s=30),
    StepSpec(
        "slurmd_down",
        "slurmd DOWN (preStop)",
        "info",
        after="pod_deleted",
        timeout_s=15,
        required=False,
    ),
    StepSpec("pod_on_spare", "pod on spare machine", "action", after="pod_deleted", timeout_s=30),
    StepSpec(
        "slurmd_registered", "slurmd up on spare", "recover", after="pod_on_spare", timeout_s=30
    ),
    StepSpec("reasserted", "our reason back", "action", after="slurmd_registered", timeout_s=30),
    StepSpec("accepted", "acceptance passed", "recover", after="slurmd_registered", timeout_s=90),
    StepSpec("node_back", "same Slurm node back", "recover", after="accepted", timeout_s=30),
    StepSpec("running_again", "running again", "recover", after="node_back", timeout_s=45),
    _C["resumed"],
    _C["training_continues"],
    StepSpec(
        "replacement_requested", "repair requested", "info", after="pod_deleted", timeout_s=45
    ),
)

_D = {d.key: d for d in DURATIONS}

SLINKY_DURATIONS: tuple[DurationSpec, ...] = (
    _D["fault_to_detect"],
    _D["detect_to_drain"],
    _D["drain_to_signal"],
    _D["signal_to_checkpoint"],
    _D["grace"],
    DurationSpec(
        "fault_to_cordon", "fault -> machine cordoned (+ node-cordon-reason)", "fault", "cordoned"
    ),
    DurationSpec(
        "signal_to_pod_deleted",
        "signal -> slurmd pod deleted (the job off the node)",
        "signalled",
        "pod_deleted",
    ),
    DurationSpec(
        "pod_deleted_to_spare",
        "pod deleted -> recreated on the spare machine",
        "pod_deleted",
        "pod_on_spare",
    ),
    DurationSpec(
        "spare_to_registered",
        "pod on the spare -> its slurmd registered",
        "pod_on_spare",
        "slurmd_registered",
    ),
    DurationSpec(
        "registered_to_accepted",
        "slurmd registered -> acceptance passed",
        "slurmd_registered",
        "accepted",
    ),
    DurationSpec(
        "accepted_to_back",
        "acceptance passed -> Slurm node back in service",
        "accepted",
        "node_back",
    ),
    DurationSpec(
        "fault_to_slurmd_on_spare",
        "fault -> slurmd running on the spare machine",
        "fault",
        "slurmd_registered",
    ),
    DurationSpec(
        "node_replaced",
        "node replaced: fault -> same Slurm node back (platform ~5 min)",
        "fault",
        "node_back",
    ),
    DurationSpec("back_to_running", "node back -> job running again", "node_back", "running_again"),
    _D["requeue_to_running"],
    DurationSpec("fault_to_running", "fault -> job running again", "fault", "running_again"),
    _D["training_downtime"],
    DurationSpec(
        "fault_to_repair",
        "fault -> repair requested for the faulty machine",
        "fault",
        "replacement_requested",
    ),
)

SLINKY_STEP_BY_KEY = {s.key: s for s in SLINKY_STEPS}


def judge_slinky(
    times: Mapping[str, float],
    training: TrainingCheck,
    grace: float,
    *,
    missing: Sequence[str] = (),
    leftovers: Sequence[str] = (),
) -> tuple[Goal, ...]:
    """The Slinky scenario's goals, each with its measured value.
    ``leftovers``: the end-state check's findings (``leftovers()``)."""
    d = compute_durations(times, SLINKY_DURATIONS)

    def under(key: str, text: str, value: float | None, limit: float, strict: bool) -> Goal:
        if value is None:
            return Goal(key, text, False, None, limit, "not measured")
        return Goal(key, text, value < limit if strict else value <= limit, value, limit)

    return (
        all_steps_goal(missing, SLINKY_STEP_BY_KEY),
        under(
            "detect_to_drain",
            f"detection -> drain < {DETECT_TO_DRAIN_LIMIT:g} s",
            d["detect_to_drain"],
            DETECT_TO_DRAIN_LIMIT,
            True,
        ),
        under(
            "node_replaced",
            f"node replaced (fault -> same Slurm node back) < {PLATFORM_REPLACEMENT_S:g} s",
            d["node_replaced"],
            PLATFORM_REPLACEMENT_S,
            True,
        ),
        under(
            "running_after_back",
            f"job running again within {RUNNING_AFTER_BACK_LIMIT:g} s of the node's return",
            d["back_to_running"],
            RUNNING_AFTER_BACK_LIMIT,
            False,
        ),
        under(
            "downtime",
            f"training downtime < grace + {SLINKY_DOWNTIME_SLACK:g} s",
            d["training_downtime"],
            grace + SLINKY_DOWNTIME_SLACK,
            True,
        ),
        Goal(
            "clean",
            "no cordon, mark or operator drain left behind",
            not leftovers,
            detail="; ".join(leftovers),
        ),
        Goal("steps", "no lost or repeated steps", training.ok, detail=training.detail),
    )


SLINKY = Scenario(
    "slinky", SLINKY_STEPS, SLINKY_DURATIONS, judge_slinky, spare_label="spare machine"
)


# =============================================================================
# The orchestration's Slinky parts (``demo`` is a demo.Demo).
# =============================================================================


@dataclass
class SlinkyState:
    """What the Slinky scenario keeps beside the Demo."""

    controller: Any
    cfg: Any
    machines: list[str]
    spares: list[str]
    #: The faulty machine, the pod and its uid when the fault was injected.
    machine: str = ""
    pod: str = ""
    pod_uid: str = ""
    incident: str = ""
    new_machine: str = ""
    acceptance: list[dict[str, Any]] = field(default_factory=list)

    @property
    def keys(self) -> Any:
        from slurm_hooks.bridge.slinky_plan import SlinkyKeys

        return SlinkyKeys(self.cfg.annotation_prefix)


class LabAcceptance:
    """The bridge's acceptance runner: acceptance on the Slurm node's new
    slurmd (the lab's slurmd for that name, restarted by the NodeSet
    controller: its UTS namespace, its config, its GPUs), the verdict
    recorded by the engine without a resume: the bridge resumes."""

    def __init__(self, demo: Any) -> None:
        self.demo = demo

    def __call__(self, slurm_node: str, machine_name: str) -> Any:
        from slurm_hooks.bridge.slinky_exec import Verdict
        from slurm_hooks.core.errors import LabError

        demo = self.demo
        nf = demo.hooks.node(slurm_node)
        argv = [sys.executable, "-m", "slurm_hooks_lab.demo", "acceptance", slurm_node]
        res = demo.lab.run_on_node(
            slurm_node,
            [*argv, "--no-resume"],
            env={"SLURM_HOOKS_CONFIG": str(nf.config), "SLURM_CONF": str(demo.lab.slurm_conf)},
            timeout=600,
        )
        try:
            doc = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise LabError(
                f"acceptance on {slurm_node} printed no result (rc={res.rc}): "
                f"{res.stderr.strip()[-300:]}"
            ) from None
        demo.slinky.acceptance.append(doc)
        demo.event(
            f"bridge: acceptance for {slurm_node} on machine {machine_name} "
            f"{'passed' if doc.get('passed') else 'FAILED'} in {doc.get('seconds', 0):.1f} s",
            "info",
        )
        return Verdict(bool(doc.get("passed")), str(doc.get("detail") or ""))


def bring_up(demo: Any) -> None:
    """The machines and NodeSet pods in the stand-in, the NodeSet
    controller, the bridge with the Slinky mapping."""
    import threading

    from slurm_hooks.bridge.service import Bridge
    from slurm_hooks.bridge.settings import BridgeConfig
    from slurm_hooks.k8s.client import KubeClient
    from slurm_hooks_lab.k8s_standin import StandinServer
    from slurm_hooks_lab.nodeset_controller import NodeSetController, machine

    o = demo.o
    names = demo.lab.node_names
    machines = [f"m{i}" for i in range(1, len(names) + o.spare_machines + 1)]
    spares = machines[len(names) :]
    demo.spare = ",".join(spares)
    demo.api = api = StandinServer().start()
    api.add("namespaces", {"metadata": {"name": "slurm-hooks"}})
    for m in machines:
        api.add("nodes", machine(m, **{"nvidia.com/gpu.present": "true"}))

    def on_start(host: str, target: str) -> None:
        # A new machine: its GPUs are healthy (the fault stays with the old one).
        demo.hooks.heal_gpus(host)
        demo.event(f"NodeSet: {host}'s slurmd starts on {target} (healthy GPUs)", "info")

    ctl = NodeSetController(api, demo.lab, names, on_start=on_start)
    ctl.seed(machines[: len(names)])
    cfg = BridgeConfig(
        node_mapping="slinky",
        interval=o.bridge_interval,
        replacement="crd",
        leader_election=False,
        max_cordoned_fraction=0.5,
        api_timeout=5.0,
        api_retries=2,
    )
    cfg.validate()
    demo.slinky = SlinkyState(ctl, cfg, machines, spares)
    ctl.start(interval=0.5)
    bridge = Bridge(
        demo.lab.client(),
        KubeClient(api.url, timeout=5.0, retries=2),
        cfg,
        identity="slurm-hooks-demo",
        acceptor=LabAcceptance(demo),
    )
    demo.bridge_thread = threading.Thread(
        target=bridge.run, args=(demo.bridge_stop,), name="demo-bridge", daemon=True
    )
    demo.bridge_thread.start()
    pods = ", ".join(f"{ctl.name}-{i}={h}@{machines[i]}" for i, h in enumerate(names))
    demo.setup_line(
        f"Kubernetes API stand-in at {api.url}: machines {', '.join(machines)}; NodeSet "
        f"{ctl.namespace}/{ctl.name} pods {pods}; spare machine(s) {', '.join(spares)}"
    )
    demo.setup_line(
        f"NodeSet controller (Slinky's behaviour) every 0.5 s; bridge every "
        f"{o.bridge_interval:g} s (node_mapping = slinky, acceptance on the new machine)"
    )


def _pods_of(api: Any, host: str) -> list[dict[str, Any]]:
    return [p for p in api.items("pods") if (p.get("spec") or {}).get("hostname") == host]


def _ready(pod: Mapping[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _ctl_time(sk: SlinkyState, host: str, what: str, since: float) -> float | None:
    """When the NodeSet controller did ``what`` for ``host`` (its own log)."""
    for t, h, w in list(sk.controller.events):
        if h == host and w == what and t >= since:
            return float(t)
    return None


def _machine_label(m: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> str:
    name = m["metadata"]["name"]
    here = [p for p in pods if (p.get("spec") or {}).get("nodeName") == name]
    cordoned = bool((m.get("spec") or {}).get("unschedulable"))
    if here:
        host = here[0]["spec"].get("hostname", "?")
        return f"cordoned, slurmd {host}" if cordoned else f"slurmd {host}"
    return "cordoned" if cordoned else "spare"


def note_machines(demo: Any, now: float) -> None:
    """The machines' lanes in the timeline: which slurmd runs there, cordoned or not."""
    all_pods = demo.api.items("pods")
    for m in demo.api.items("nodes"):
        demo.node_states.note(f"machine {m['metadata']['name']}", now, _machine_label(m, all_pods))


def poll(demo: Any, client: Any, now: float, nodes: Mapping[str, Any], job: Any) -> None:
    """The Slinky steps of one poll (demo._poll_once has done the
    evacuation steps, through ``requeued``)."""
    from slurm_hooks.bridge import slinky_plan as sp

    sk: SlinkyState = demo.slinky
    keys = sk.keys
    api = demo.api
    have = demo.records
    fault = demo.fault_t
    note_machines(demo, now)
    pods = _pods_of(api, demo.node)
    if not sk.machine:
        cur = next((p for p in pods if not p["metadata"].get("deletionTimestamp")), None)
        if cur is None:
            return
        md = cur["metadata"]
        sk.machine, sk.pod_uid = cur["spec"]["nodeName"], str(md.get("uid") or "")
        sk.pod = f"{md.get('namespace')}/{md['name']}"
    f = api.get("nodes", sk.machine) or {}
    spec = f.get("spec") or {}
    ann = (f.get("metadata") or {}).get("annotations") or {}
    taints = [t for t in spec.get("taints") or [] if t.get("key") == sk.cfg.taint_key]
    node = nodes.get(demo.node)

    if ("cordoned" not in have and "drained" in have and spec.get("unschedulable") and taints
            and ann.get(sp.NODE_CORDON_REASON)):  # fmt: skip
        sk.incident = str(ann.get(keys.incident) or "")
        t0 = taints[0]
        demo._record("cordoned", now,
                     f"Node {sk.machine}: unschedulable, taint {t0['key']}={t0.get('value')}:"
                     f"{t0.get('effect')}, node-cordon-reason "
                     f"{ann[sp.NODE_CORDON_REASON][:48]!r}...", "stand-in Node", now)  # fmt: skip
    old = [p for p in pods if str(p["metadata"].get("uid") or "") == sk.pod_uid]
    if "pod_deleted" not in have and "cordoned" in have and not old:
        # The job may have ended (TERM) a moment before its requeue shows:
        # the bridge moves the pod once Slurm runs nothing there.  The
        # operator's preStop follows the delete, so it bounds its time.
        stopped = _ctl_time(sk, demo.node, "slurmd stopped", fault or 0.0)
        t = min(now, stopped) if stopped is not None else now
        moved = ann.get(keys.moved_uid)
        demo._record("pod_deleted", t,
                     f"{sk.pod} on {sk.machine} deleted by the bridge (uid {moved} journalled "
                     f"first; no job on {demo.node})", "stand-in pods + Node journal", now)  # fmt: skip
    if ("slurmd_down" not in have and "pod_deleted" in have and node is not None and node.down
            and (node.reason or "").startswith(sp.OPERATOR_PREFIX)):  # fmt: skip
        t = _ctl_time(sk, demo.node, "slurmd stopped", fault or 0.0) or now
        demo._record("slurmd_down", t, f"sinfo -R: {demo._sinfo_line(client)}", "sinfo -R", now)
    new = next(
        (p for p in pods if str(p["metadata"].get("uid") or "") != sk.pod_uid
         and not p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName")),
        None,
    )  # fmt: skip
    if "pod_on_spare" not in have and "pod_deleted" in have and new is not None:
        target = new["spec"]["nodeName"]
        if target in sk.spares:
            sk.new_machine = target
            t = _ctl_time(sk, demo.node, f"pod on {target}", fault or 0.0) or now
            demo._record("pod_on_spare", t,
                         f"{new['metadata']['namespace']}/{new['metadata']['name']} recreated by "
                         f"the NodeSet on {target} ({sk.machine} is cordoned and tainted)",
                         "stand-in pods + NodeSet controller", now)  # fmt: skip
    if ("slurmd_registered" not in have and "pod_on_spare" in have and new is not None
            and _ready(new) and node is not None and "NOT_RESPONDING" not in node.flags):  # fmt: skip
        t = _ctl_time(sk, demo.node, "slurmd registered", fault or 0.0) or now
        demo._record("slurmd_registered", t,
                     f"slurmd {demo.node} registered from {sk.new_machine} (pod Ready); "
                     f"{_node_label(node)} {node.reason or ''}".rstrip(),
                     "stand-in pod + scontrol", now)  # fmt: skip
    if ("reasserted" not in have and "slurmd_registered" in have and sk.incident
            and ann.get(keys.reasserted) == sk.incident):  # fmt: skip
        demo._record("reasserted", now,
                     f"bridge: slurm-hooks/1 reason back over the operator's (incident "
                     f"{sk.incident}); pod mark removed before any resume",
                     "stand-in Node journal", now)  # fmt: skip
    if "accepted" not in have and "slurmd_registered" in have:
        e = demo._audit_find(
            lambda e: e.get("action") == "acceptance" and e.get("node") == demo.node
            and e.get("outcome") == "passed"
        )  # fmt: skip
        if e:
            demo._record("accepted", audit_time(e) or now,
                         f"on {sk.new_machine}: {e.get('why', '')}", "audit log", now)  # fmt: skip
    if ("node_back" not in have and "accepted" in have and node is not None and not node.drained
            and not node.down and sk.incident and ann.get(keys.done) == sk.incident):  # fmt: skip
        demo._record("node_back", now,
                     f"{demo.node}: {_node_label(node)}, slurmd on {sk.new_machine} (was "
                     f"{sk.machine}, which stays cordoned for repair)",
                     "scontrol + stand-in Node journal", now)  # fmt: skip
    demo._poll_training(now, job, "node_back", "the same Slurm node")
    if "replacement_requested" not in have and "pod_deleted" in have:
        for obj in api.items("nodereplacements"):
            s = obj.get("spec") or {}
            if s.get("slurmNode") == demo.node:
                md = obj["metadata"]
                demo._record("replacement_requested", now,
                             f"NodeReplacement {md.get('namespace')}/{md['name']} for machine "
                             f"{s.get('nodeName')} (incident {s.get('incident')})",
                             "stand-in", now)  # fmt: skip
                break


def leftovers(demo: Any) -> list[str]:
    """The end state the scenario promises, as a list of what is wrong:
    the Slurm node in service with no reason, no ``slurm-operator:`` drain
    anywhere, no mark on the new pod, nothing of ours on any machine but
    the faulty one, which stays cordoned and tainted for repair."""
    from slurm_hooks.bridge import slinky_plan as sp

    sk: SlinkyState = demo.slinky
    if "node_back" not in demo.records:
        return [f"{demo.node} never came back"]
    out: list[str] = []
    client = demo.lab.client(retries=1, timeout=5)
    for n in client.list_nodes():
        if (n.reason or "").startswith(sp.OPERATOR_PREFIX):
            out.append(f"{n.name}: operator drain left: {n.reason!r}")
        elif n.name == demo.node and (n.drained or n.down or n.reason):
            out.append(f"{n.name} not in service: {_node_label(n)} {n.reason!r}")
    prefix = sk.cfg.annotation_prefix + "/"
    for p in _pods_of(demo.api, demo.node):
        ann = p["metadata"].get("annotations") or {}
        marks = [k for k in ann if k == sp.POD_CORDON or k.startswith(prefix)]
        if marks:
            out.append(f"pod {p['metadata']['name']} still marked: {', '.join(sorted(marks))}")
    for m in demo.api.items("nodes"):
        name = m["metadata"]["name"]
        spec = m.get("spec") or {}
        ann = m["metadata"].get("annotations") or {}
        ours = [k for k in ann if k.startswith(prefix) or k == sp.NODE_CORDON_REASON]
        tainted = any(t.get("key") == sk.cfg.taint_key for t in spec.get("taints") or [])
        if name == sk.machine:
            if not spec.get("unschedulable") or not tainted:
                out.append(f"faulty machine {name} not held for repair")
        elif spec.get("unschedulable") or tainted or ours:
            out.append(f"machine {name} left cordoned, tainted or annotated")
    return out
