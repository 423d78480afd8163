"""The ``[bridge]`` config section.

Kept apart from the planner and the client so that loading a config file
never imports requests, and so that the pure planner and the executor read
one frozen value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: How a Slurm node name becomes a Kubernetes node name.
MAPPINGS = ("same", "label", "template")
#: How a replacement is requested.
REPLACEMENTS = ("none", "cluster-api", "webhook", "crd")
#: Plain http is accepted for a receiver on this host only (tests, the demo).
_WEBHOOK_SCHEMES = ("https://", "http://127.0.0.1:", "http://127.0.0.1/", "http://localhost:")


#: What a lent node's drain timeout leads to: keep waiting for the disruption
#: budgets, or delete the remaining pods and give the node back anyway.
DRAIN_TIMEOUT_ACTIONS = ("wait", "force")


@dataclass(frozen=True)
class LendingConfig:
    """``[bridge.lending]``: lend idle Slurm nodes to Kubernetes inference and
    take them back when Slurm has work for them.  Slurm decides: a lent node
    is drained with our ``LEND`` reason, and comes back the moment pending
    jobs need it.  Off by default."""

    enabled: bool = False
    #: Which Slurm nodes may be lent: in any of these partitions (empty: any),
    #: with all of these features, and in this hostlist (empty: any).
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    nodes: str = ""
    #: A node must have been idle in Slurm this long before it is lent.
    idle_seconds: float = 900.0
    #: Idle nodes (in scope) that always stay in Slurm.
    min_idle_nodes: int = 1
    #: At most this share of the nodes in scope is lent at once.
    max_lent_fraction: float = 0.5
    max_lend_per_pass: int = 2
    #: Hysteresis: a lent node stays lent at least this long, and a node
    #: handed back stays in Slurm at least this long before it is lent again.
    min_lend_seconds: float = 600.0
    min_slurm_seconds: float = 1800.0
    #: A freshly lent node is assumed to serve the pending pods for this long
    #: (the scheduler needs a moment): it is subtracted from pod demand.
    settle_seconds: float = 120.0
    #: Demand: Pending, unschedulable pods matching this label selector or
    #: with one of these priority classes (both empty: pods give no demand).
    pod_selector: str = ""
    priority_classes: tuple[str, ...] = ()
    pod_namespace: str = ""
    #: Demand: ``namespace/name`` of a ConfigMap whose ``demand_key`` holds
    #: the number of nodes Kubernetes wants lent (a target, not an increment).
    demand_configmap: str = ""
    demand_key: str = "nodes"
    #: GPUs a pending pod asks for are counted through this resource; a node
    #: whose Slurm Gres names no GPU count is assumed to have gpus_per_node.
    gpu_resource: str = "nvidia.com/gpu"
    gpus_per_node: int = 8
    #: Label set to "true" on a lent node (inference pods select on it).
    lent_label: str = "slurm-hooks.io/lent"
    #: Taint every Slurm-owned node carries so inference pods stay off it
    #: (empty: no taint; the label alone steers inference pods).
    reserve_taint_key: str = "slurm-hooks.io/reserved"
    reserve_taint_effect: str = "NoSchedule"
    #: Pending-job reasons (prefixes of squeue's %r) that lent nodes can cure.
    reclaim_reasons: tuple[str, ...] = (
        "Resources",
        "Priority",
        "ReqNodeNotAvail",
        "Nodes required for job are DOWN, DRAINED",
    )
    #: Seconds evictions may take on reclaim (disruption budgets answer 429)
    #: before ``on_drain_timeout`` applies: "wait" (keep trying) or "force"
    #: (delete the remaining pods and hand the node back).
    drain_timeout: float = 600.0
    on_drain_timeout: str = "wait"
    #: The free text of the LEND reason.
    reason_text: str = "lent to kubernetes inference"
    #: Plan and log lending moves, change nothing (the bridge's dry_run implies it).
    dry_run: bool = False

    def validate(self) -> None:
        if not 0.0 <= self.max_lent_fraction <= 1.0:
            raise ValueError("lending.max_lent_fraction must be in [0, 1]")
        if self.on_drain_timeout not in DRAIN_TIMEOUT_ACTIONS:
            raise ValueError("lending.on_drain_timeout must be 'wait' or 'force'")
        if self.reserve_taint_effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ValueError("lending.reserve_taint_effect must be a taint effect")
        if min(self.idle_seconds, self.min_lend_seconds, self.min_slurm_seconds) < 0:
            raise ValueError("lending durations must be >= 0")
        if self.min_idle_nodes < 0 or self.max_lend_per_pass < 0 or self.gpus_per_node < 1:
            raise ValueError("lending counts must be >= 0 (gpus_per_node >= 1)")
        if self.demand_configmap and self.demand_configmap.count("/") != 1:
            raise ValueError("lending.demand_configmap must be 'namespace/name'")
        if self.enabled and not (
            self.pod_selector or self.priority_classes or self.demand_configmap
        ):
            raise ValueError(
                "lending needs a demand source: pod_selector, priority_classes or demand_configmap"
            )
        if not self.lent_label:
            raise ValueError("lending.lent_label must not be empty")


@dataclass(frozen=True)
class BridgeConfig:
    """Settings of ``slurm-hooks bridge``.  Defaults are the safe ones: act
    only on our own reasons, request no replacement, leader election on."""

    #: Seconds between reconcile passes.
    interval: float = 30.0
    #: Namespace of the Lease and of NodeReplacement objects.
    namespace: str = "slurm-hooks"
    #: "same": the names match; "label": the Kubernetes node carrying
    #: ``node_label=<slurm name>``; "template": ``node_template.format(name=...)``.
    node_mapping: str = "same"
    node_label: str = "slurm.node"
    node_template: str = "{name}"
    #: Label selector restricting the one Node LIST per pass (empty: all nodes).
    node_selector: str = ""
    #: Act on our own reasons (``slurm-hooks/1 CODE ...``).
    act_on_ours: bool = True
    #: Our fault codes never acted on (SPARE marks standby capacity).
    ignore_codes: tuple[str, ...] = ("SPARE",)
    #: Foreign reasons acted on too, by prefix (for example ``"NHC:"``).
    foreign_prefixes: tuple[str, ...] = ()
    #: Taint added to every node we cordon.
    taint_key: str = "slurm-hooks.io/fault"
    taint_effect: str = "NoSchedule"
    #: Prefix of the annotations that record what we did (our state).
    annotation_prefix: str = "slurm-hooks.io"
    #: Evict pods from cordoned nodes through the Eviction API.
    evict: bool = True
    #: Label selector of the pod running the node's slurmd (Slinky's NodeSet pods).
    slurmd_pod_selector: str = "app.kubernetes.io/name=slurmd"
    #: "none", "cluster-api", "webhook" or "crd".
    replacement: str = "none"
    #: Cluster API: "annotate" (remediate-machine annotation) or "delete" the Machine.
    capi_mode: str = "annotate"
    capi_version: str = "v1beta1"
    #: Namespace of Machines when the Node lacks ``cluster.x-k8s.io/cluster-namespace``.
    capi_namespace: str = "default"
    webhook_url: str = ""
    #: Environment variable holding a bearer token for the webhook (never the token itself).
    webhook_token_env: str = ""
    #: CA bundle for the webhook; empty: the system store.
    webhook_ca: str = ""
    #: At most this many nodes waiting for a replacement at once.
    max_concurrent_replacements: int = 2
    #: Never have more than this share of mapped Kubernetes nodes unschedulable
    #: through us (at least one node is always allowed).
    max_cordoned_fraction: float = 0.1
    #: Hostlist of standby Slurm nodes; one is resumed per incident.
    spare_pool: str = ""
    #: Foreign reasons (by prefix) that also mark a standby node.
    spare_reasons: tuple[str, ...] = ()
    #: Plan and log, change nothing.
    dry_run: bool = False
    leader_election: bool = True
    lease_name: str = "slurm-hooks-bridge"
    #: Seconds a leader's lease lasts without renewal; must exceed ``interval``.
    lease_duration: int = 90
    #: Kubernetes API: seconds per call and retries (with backoff) per call.
    api_timeout: float = 10.0
    api_retries: int = 3
    #: With ``[general] slurm_backend = "rest"``: slurmrestd's URL, the user
    #: and the environment variable holding its JWT.
    slurm_rest_url: str = ""
    slurm_rest_user: str = ""
    slurm_rest_token_env: str = "SLURM_JWT"
    #: 0: no metrics endpoint.
    metrics_port: int = 0
    #: Lending idle Slurm nodes to Kubernetes inference (``[bridge.lending]``).
    lending: LendingConfig = field(default_factory=LendingConfig)

    def validate(self) -> None:
        if self.node_mapping not in MAPPINGS:
            raise ValueError(f"node_mapping must be one of {', '.join(MAPPINGS)}")
        if self.replacement not in REPLACEMENTS:
            raise ValueError(f"replacement must be one of {', '.join(REPLACEMENTS)}")
        if self.capi_mode not in ("annotate", "delete"):
            raise ValueError("capi_mode must be 'annotate' or 'delete'")
        if self.replacement == "webhook" and not self.webhook_url.startswith(_WEBHOOK_SCHEMES):
            raise ValueError("webhook_url must be an https:// URL (http only on loopback)")
        if self.taint_effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ValueError("taint_effect must be NoSchedule, PreferNoSchedule or NoExecute")
        if "{name}" not in self.node_template:
            raise ValueError("node_template must contain {name}")
        if not 0.0 < self.max_cordoned_fraction <= 1.0:
            raise ValueError("max_cordoned_fraction must be in (0, 1]")
        if self.max_concurrent_replacements < 0 or self.api_retries < 0:
            raise ValueError("max_concurrent_replacements and api_retries must be >= 0")
        if self.interval <= 0 or self.api_timeout <= 0:
            raise ValueError("interval and api_timeout must be > 0")
        if self.leader_election and self.lease_duration <= self.interval:
            raise ValueError("lease_duration must be longer than interval")
        self.lending.validate()
