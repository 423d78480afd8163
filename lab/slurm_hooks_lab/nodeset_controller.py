"""A small Slinky NodeSet controller for the lab: NodeSet pods in the API
stand-in, slurmd processes of the lab's real Slurm.

It follows what SchedMD's slurm-operator does (docs/concepts/nodeset-controller.md,
docs/usage/nodeset-operations.md, internal/controller/nodeset/ of
github.com/SlinkyProject/slurm-operator), as far as the bridge meets it:

* **Pods**: a NodeSet in StatefulSet mode owns pods ``<nodeset>-<i>``; the
  Slurm node name is the pod's ``spec.hostname``.  A missing pod is
  recreated on a schedulable machine (not cordoned, no NoSchedule or
  NoExecute taint, no other NodeSet pod there).
* **Deletion**: the slurmd container's preStop runs
  ``scontrol update nodename=$(hostname) state=down reason='slurm-operator:
  Pod is terminating'``, then the slurmd stops.  The new pod's slurmd is the
  lab's slurmd for the same node name, started again; ``on_start`` lets the
  lab give it healthy GPUs (new hardware).  The pod turns Ready once that
  slurmd has registered (SlurmdStartTime moved).
* **Migration**: a registered pod on another machine than before makes the
  operator set the Slurm node IDLE (slurmcontrol.UpdateNodeWithPodInfo).
  That runs in the status sync at the end of a reconcile (``Sync`` ->
  ``sync`` -> ``syncStatus`` -> ``syncSlurmStatus``), after the cordon sync:
  a drain the pod's cordon asks for comes only with the next reconcile, so
  for one reconcile interval the node is IDLE and Slurm may start jobs on
  it.  The lab keeps that order.
* **Cordon** (syncCordon): a reason not starting ``slurm-operator:`` is
  external and never touched; else a cordoned machine -> ``pod-cordon=true``
  and a drain (the machine's ``node-cordon-reason``, or the default text);
  ``pod-cordon=true`` -> drain; neither -> undrain.  An existing reason is
  kept (overrideReason false).

State lives in the stand-in (the pods, a NodeSet annotation with each pod's
last machine), so a controller restarted mid-way carries on, like the real
one.  ``reconcile_once()`` is one pass; ``start()`` runs passes in a thread.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from slurm_hooks.core.errors import SlurmHooksError
from slurm_hooks.detect.probes.commands import run

log = logging.getLogger(__name__)

GROUP = "slinky.slurm.net"
PREFIX = "slurm-operator: "
POD_CORDON = "nodeset.slinky.slurm.net/pod-cordon"
NODE_CORDON_REASON = "nodeset.slinky.slurm.net/node-cordon-reason"
#: Where the lab keeps each pod's last machine (the real operator keeps it
#: in the Slurm node's Comment, which slurm-hooks uses itself).
LAST_NODES = "lab.slurm-hooks.io/pod-nodes"
_REASON_OK = re.compile(r"[^\x00-\x1f'\"\\]")

Obj = dict[str, Any]


def nodeset(name: str, namespace: str, replicas: int) -> Obj:
    """A NodeSet as the CRD describes it (the fields the lab reads)."""
    return {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "NodeSet",
        "metadata": {"name": name, "namespace": namespace, "annotations": {}},
        "spec": {
            "controllerRef": {"name": "slurm"},
            "replicas": replicas,
            "scalingMode": "StatefulSet",
            "template": {"metadata": {"labels": {}}},
        },
    }


def machine(name: str, **labels: str) -> Obj:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": {},
    }


class NodeSetController:
    """One NodeSet ``name`` whose ordinal ``i`` is Slurm node ``hostnames[i]``."""

    def __init__(
        self,
        api: Any,
        lab: Any,
        hostnames: Sequence[str],
        *,
        name: str = "gpu",
        namespace: str = "slurm",
        on_start: Callable[[str, str], None] | None = None,
        migration_idle: bool = True,
    ) -> None:
        self.api = api
        self.store = api.store
        self.lab = lab
        self.hostnames = list(hostnames)
        self.name = name
        self.namespace = namespace
        self.on_start = on_start
        self.migration_idle = migration_idle
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []
        self.events: list[tuple[float, str, str]] = []  # (time, slurm node, what)
        self._res = {r.plural: r for r in _resources()}

    # -- seeding ------------------------------------------------------------------

    def seed(self, machines: Sequence[str]) -> None:
        """The NodeSet and one pod per Slurm node on ``machines[i]`` (the
        lab's slurmds are running already)."""
        self.api.add("nodesets", nodeset(self.name, self.namespace, len(self.hostnames)), GROUP)
        last = {}
        for i, host in enumerate(self.hostnames):
            pod = self._pod(i, machines[i])
            pod["status"] = _ready_status()
            self.api.add("pods", pod)
            last[str(i)] = {"node": machines[i], "start": self._slurmd_start(host)}
        self._save_last(last)

    # -- a pass -------------------------------------------------------------------

    def reconcile_once(self) -> None:
        pods = {p["metadata"]["name"]: p for p in self._pods()}
        last = self._load_last()
        migrated: list[str] = []
        for i, host in enumerate(self.hostnames):
            pname = f"{self.name}-{i}"
            pod = pods.get(pname)
            if pod is None:
                pod = self._recreate(i, host, last)
                if pod is None:
                    continue
            if self._sync_ready(i, host, pod, last):
                migrated.append(host)
        self._save_last(last)
        for pod in self._pods():
            self._sync_cordon(pod)
        # The status sync, last (UpdateNodeWithPodInfo): the migration IDLE.
        for host in migrated:
            self._scontrol(host, "state=idle")
            self.events.append((time.time(), host, "migration: state=idle"))

    def _recreate(self, i: int, host: str, last: dict[str, Any]) -> Obj | None:
        entry = last.get(str(i)) or {}
        if not entry.get("stopped"):
            # The old container's preStop, then its end.
            self._scontrol(host, "state=down", f"reason={PREFIX}Pod is terminating")
            self.lab.stop_slurmd(host)
            entry["stopped"] = True
            last[str(i)] = entry
            self.events.append((time.time(), host, "slurmd stopped"))
        target = self._schedulable()
        if target is None:
            return None  # Pending: no machine for it
        pod = self._pod(i, target)
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
        created = self.api.add("pods", pod)
        if self.on_start is not None:
            self.on_start(host, target)
        self.lab.start_slurmd(host)
        entry.update({"stopped": False, "pending_node": target})
        last[str(i)] = entry
        self.events.append((time.time(), host, f"pod on {target}"))
        return created

    def _sync_ready(self, i: int, host: str, pod: Obj, last: dict[str, Any]) -> bool:
        """True: the pod's slurmd registered on another machine than before
        (the status sync then sets the node IDLE)."""
        entry = last.get(str(i)) or {}
        conds = (pod.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds):
            return False
        start = self._slurmd_start(host)
        if not start or start == entry.get("start"):
            return False  # not registered yet
        node = pod["spec"]["nodeName"]
        moved = entry.get("node") not in (None, node)
        entry.update({"start": start, "node": node})
        entry.pop("pending_node", None)
        last[str(i)] = entry
        self._patch_pod(pod, {"status": _ready_status()})
        self.events.append((time.time(), host, "slurmd registered"))
        return moved and self.migration_idle

    def _sync_cordon(self, pod: Obj) -> None:
        host = pod["spec"].get("hostname")
        mname = pod["spec"].get("nodeName")
        if not host or not mname:
            return
        m = self.api.get("nodes", mname)
        if m is None:
            return
        state = self.lab.client().get_node(host)
        # A reason on a node in service is what 24.11 leaves behind after a
        # resume (22.05 and 26.05 clear it): it marks nothing, as for the
        # ownership rule (slurm_hooks.core.ownership).
        reason = (state.reason or "") if (state.drained or state.down) else ""
        if reason and not reason.startswith(PREFIX.strip()):
            return  # external: preserved
        if state.down and "NOT_RESPONDING" in state.flags:
            return
        ann = pod["metadata"].get("annotations") or {}
        pref = f"{self.namespace}/{pod['metadata']['name']}"
        if (m.get("spec") or {}).get("unschedulable"):
            if ann.get(POD_CORDON) != "true":
                self._patch_pod(pod, {"metadata": {"annotations": {POD_CORDON: "true"}}})
            why = (m["metadata"].get("annotations") or {}).get(NODE_CORDON_REASON) or (
                f"Node ({mname}) was cordoned, Pod ({pref}) must be cordoned"
            )
            self._drain(host, state, why)
        elif ann.get(POD_CORDON) == "true":
            self._drain(host, state, f"Pod ({pref}) was cordoned")
        elif state.drained:
            self._scontrol(host, "state=undrain")
            self.events.append((time.time(), host, "undrained"))

    def _drain(self, host: str, state: Any, why: str) -> None:
        if state.drained and state.reason:
            return  # an existing reason is kept
        text = "".join(ch if _REASON_OK.match(ch) else " " for ch in why)[:200]
        self._scontrol(host, "state=drain", f"reason={PREFIX}{text}")
        self.events.append((time.time(), host, "drained"))

    # -- helpers ------------------------------------------------------------------

    def _pod(self, i: int, node: str) -> Obj:
        pname = f"{self.name}-{i}"
        host = self.hostnames[i]
        return {
            "metadata": {
                "name": pname,
                "namespace": self.namespace,
                "labels": {
                    "app.kubernetes.io/name": "slurmd",
                    "app.kubernetes.io/instance": self.name,
                    "nodeset.slinky.slurm.net/pod-name": pname,
                    "nodeset.slinky.slurm.net/pod-index": str(i),
                    "nodeset.slinky.slurm.net/pod-hostname": host,
                    "nodeset.slinky.slurm.net/scaling-mode": "StatefulSet",
                },
                "ownerReferences": [
                    {
                        "apiVersion": f"{GROUP}/v1beta1",
                        "kind": "NodeSet",
                        "name": self.name,
                        "uid": "nodeset-uid",
                        "controller": True,
                    }
                ],
            },
            "spec": {"nodeName": node, "hostname": host, "containers": [{"name": "slurmd"}]},
        }

    def _pods(self) -> list[Obj]:
        res = self._res["pods"]
        sel = f"app.kubernetes.io/instance={self.name}"
        return list(self.store.list(res, self.namespace, sel, "").get("items") or [])

    def _schedulable(self) -> str | None:
        taken = {p["spec"].get("nodeName") for p in self._pods()}
        for m in sorted(self.api.items("nodes"), key=lambda n: n["metadata"]["name"]):
            spec = m.get("spec") or {}
            if spec.get("unschedulable") or m["metadata"]["name"] in taken:
                continue
            if any(
                t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or []
            ):
                continue
            return str(m["metadata"]["name"])
        return None

    def _patch_pod(self, pod: Obj, body: Obj) -> None:
        from slurm_hooks_lab.k8s_standin import MERGE, ApiError

        md = pod["metadata"]
        try:
            self.store.patch(self._res["pods"], md["namespace"], md["name"], MERGE, body)
        except ApiError as exc:
            log.info("nodeset: patch of %s failed: %s", md["name"], exc)

    def _nodeset(self) -> Obj:
        return self.store.get(self._res["nodesets"], self.namespace, self.name)

    def _load_last(self) -> dict[str, Any]:
        ann = self._nodeset()["metadata"].get("annotations") or {}
        try:
            return dict(json.loads(ann.get(LAST_NODES) or "{}"))
        except ValueError:
            return {}

    def _save_last(self, last: dict[str, Any]) -> None:
        from slurm_hooks_lab.k8s_standin import MERGE

        body = {"metadata": {"annotations": {LAST_NODES: json.dumps(last, sort_keys=True)}}}
        self.store.patch(self._res["nodesets"], self.namespace, self.name, MERGE, body)

    def _scontrol(self, host: str, *args: str) -> None:
        argv = ["scontrol", "update", f"nodename={host}", *args]
        run(argv, timeout=15, env={"SLURM_CONF": str(self.lab.slurm_conf)})

    def _slurmd_start(self, host: str) -> str:
        res = run(
            ["scontrol", "-o", "show", "node", "--", host],
            timeout=15,
            env={"SLURM_CONF": str(self.lab.slurm_conf)},
            check=False,
        )
        m = re.search(r"SlurmdStartTime=(\S+)", res.stdout)
        value = m.group(1) if m else ""
        return "" if value in ("None", "Unknown") else value

    # -- thread -------------------------------------------------------------------

    def start(self, interval: float = 0.5) -> NodeSetController:
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.reconcile_once()
                except (SlurmHooksError, KeyError, OSError) as exc:
                    log.warning("nodeset controller pass failed: %s", exc)
                    self.errors.append(str(exc))

        self._thread = threading.Thread(target=loop, name="nodeset-controller", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None


def _ready_status() -> Obj:
    return {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


def _resources() -> list[Any]:
    from slurm_hooks_lab.k8s_standin import RESOURCES

    return RESOURCES
