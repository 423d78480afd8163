"""The ``[bridge]`` config section.

Kept apart from the planner and the client so that loading a config file
never imports requests, and so that the pure planner and the executor read
one frozen value.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from slurm_hooks.core.bounds import require_at_least, require_positive

if TYPE_CHECKING:
    from slurm_hooks.core.config import GeneralConfig

#: How a Slurm node name becomes a Kubernetes node name ("slinky": live,
#: through the slurmd pod of a Slinky NodeSet, read each pass).
MAPPINGS = ("same", "label", "template", "slinky")
#: How a replacement is requested.
REPLACEMENTS = ("none", "cluster-api", "webhook", "crd")
#: Which drains a replacement is requested for (see ``BridgeConfig.replace_on``).
REPLACE_ON = ("policy", "drain")
#: Plain http is accepted for a receiver on this host only (tests, the demo).
_WEBHOOK_SCHEMES = ("https://", "http://127.0.0.1:", "http://127.0.0.1/", "http://localhost:")
#: ``[bridge.lending] pod_namespace``: pending pods of every namespace count.
ALL_NAMESPACES = "*"
#: A Kubernetes namespace name (an RFC 1123 label).
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


#: What a lent node's drain timeout leads to: keep waiting for the disruption
#: budgets, or delete the remaining pods and give the node back anyway.
DRAIN_TIMEOUT_ACTIONS = ("wait", "force")


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"


def check_qualified_name(value: str, what: str, *, prefix_only: bool = False) -> None:
    """Kubernetes' rule for label, annotation and taint keys: an optional DNS
    subdomain prefix (<= 253) and "/", then a name (<= 63).  A bad key would
    make every patch fail with 422 on every pass, so it is refused on load."""
    import re

    prefix, slash, name = value.rpartition("/") if not prefix_only else (value, "/", "x")
    if slash and (
        not prefix
        or len(prefix) > 253
        or not all(re.fullmatch(_DNS_LABEL, part) for part in prefix.split("."))
    ):
        raise ValueError(f"{what}: {value!r} has an invalid DNS-subdomain prefix")
    if not prefix_only and (len(name) > 63 or not re.fullmatch(_NAME, name)):
        raise ValueError(f"{what}: {value!r} is not a valid Kubernetes key name (<= 63 chars)")


@dataclass(frozen=True)
class LendingConfig:
    """``[bridge.lending]``: lend idle Slurm nodes to Kubernetes inference and
    take them back when Slurm has work for them.  Slurm decides: a lent node
    is drained with our ``LEND`` reason, and comes back the moment pending
    jobs need it.  Off by default."""

    #: Turn lending on; it then needs a demand source: pod_selector,
    #: priority_classes or demand_configmap.
    enabled: bool = False
    #: Which Slurm nodes may be lent: in any of these partitions (empty: any),
    #: with all of these features, and in this hostlist (empty: any).
    partitions: tuple[str, ...] = ()
    #: Slurm features a node must all have to be lent (empty: no condition).
    features: tuple[str, ...] = ()
    #: Slurm hostlist (``gpu[001-016]``) of the nodes that may be lent; empty: any.
    nodes: str = ""
    #: A node must have been idle in Slurm this long before it is lent.
    idle_seconds: float = 900.0
    #: Idle nodes (in scope) that always stay in Slurm.
    min_idle_nodes: int = 1
    #: At most this share of the nodes in scope is lent at once.
    max_lent_fraction: float = 0.5
    #: At most this many nodes are newly lent per reconcile pass (0: lend none).
    max_lend_per_pass: int = 2
    #: Hysteresis: a lent node stays lent at least this long, and a node
    #: handed back stays in Slurm at least this long before it is lent again.
    min_lend_seconds: float = 600.0
    #: Seconds a node handed back to Slurm stays there before it may be lent
    #: again (counted from our reclaimed-at annotation).
    min_slurm_seconds: float = 1800.0
    #: A freshly lent node is assumed to serve the pending pods for this long
    #: (the scheduler needs a moment): it is subtracted from pod demand.
    settle_seconds: float = 120.0
    #: Demand: Pending, unschedulable pods matching this label selector or
    #: with one of these priority classes (both empty: pods give no demand).
    pod_selector: str = ""
    #: Pods whose ``priorityClassName`` is one of these count as inference
    #: demand too (either match suffices).
    priority_classes: tuple[str, ...] = ()
    #: Namespace whose pending pods count as demand (a DNS label), or "*" for
    #: every namespace.  Required with ``pod_selector`` or ``priority_classes``:
    #: a pod's labels and priority class are its creator's to choose, so in
    #: every namespace any tenant's pending pod would pull idle nodes out of
    #: Slurm.  "*" only where admission keeps tenants from making such pods.
    pod_namespace: str = ""
    #: Demand: ``namespace/name`` of a ConfigMap whose ``demand_key`` holds
    #: the number of nodes Kubernetes wants lent (a target, not an increment).
    demand_configmap: str = ""
    #: Key in the ConfigMap's ``data`` holding that target; a missing key, a
    #: missing ConfigMap or a value that is not an integer >= 0 means no target.
    demand_key: str = "nodes"
    #: GPUs a pending pod asks for are counted through this resource; a node
    #: whose Slurm Gres names no GPU count is assumed to have gpus_per_node.
    gpu_resource: str = "nvidia.com/gpu"
    #: GPUs per node: pending pods' GPUs are packed into nodes of this size
    #: (a pod asking for none takes a whole node), and a node whose Gres names
    #: no GPU count is taken to have this many.  At least 1.
    gpus_per_node: int = 8
    #: Label set to "true" on a lent node (inference pods select on it).
    lent_label: str = "slurm-hooks.io/lent"
    #: Taint every Slurm-owned node carries so inference pods stay off it
    #: (empty: no taint; the label alone steers inference pods).
    reserve_taint_key: str = "slurm-hooks.io/reserved"
    #: Effect of that taint: "NoSchedule", "PreferNoSchedule" or "NoExecute"
    #: (NoExecute also evicts pods already there that do not tolerate it).
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
    #: "wait": keep evicting until the budgets allow it; "force": past
    #: ``drain_timeout``, delete the remaining pods and resume the node in Slurm.
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
        require_at_least(
            self,
            0,
            "idle_seconds",
            "min_lend_seconds",
            "min_slurm_seconds",
            "min_idle_nodes",
            "max_lend_per_pass",
        )
        require_at_least(self, 1, "gpus_per_node")
        if self.demand_configmap and self.demand_configmap.count("/") != 1:
            raise ValueError("lending.demand_configmap must be 'namespace/name'")
        if self.enabled and not (
            self.pod_selector or self.priority_classes or self.demand_configmap
        ):
            raise ValueError(
                "lending needs a demand source: pod_selector, priority_classes or demand_configmap"
            )
        if self.enabled and (self.pod_selector or self.priority_classes) and not self.pod_namespace:
            raise ValueError(
                "lending.pod_namespace must name the namespace of the inference pods "
                '(any tenant can label a pod or give it a priority class); "*" for every namespace'
            )
        if self.pod_namespace not in ("", ALL_NAMESPACES) and not _NAMESPACE.fullmatch(
            self.pod_namespace
        ):
            raise ValueError('lending.pod_namespace must be a namespace name (a DNS label) or "*"')
        if not self.lent_label:
            raise ValueError("lending.lent_label must not be empty")
        check_qualified_name(self.lent_label, "lending.lent_label")
        if self.reserve_taint_key:
            check_qualified_name(self.reserve_taint_key, "lending.reserve_taint_key")


@dataclass(frozen=True)
class BridgeConfig:
    """Settings of ``slurm-hooks bridge``.  Defaults are the safe ones: act
    only on our own reasons, request no replacement, leader election on."""

    #: Seconds between reconcile passes.
    interval: float = 30.0
    #: Namespace of the Lease and of NodeReplacement objects.
    namespace: str = "slurm-hooks"
    #: "same": the names match; "label": the Kubernetes node carrying
    #: ``node_label=<slurm name>``; "template": ``node_template.format(name=...)``;
    #: "slinky": live, through the Slinky NodeSet pod of each Slurm node (docs/slinky.md).
    node_mapping: str = "same"
    #: With ``node_mapping = "label"``: the Node label whose value is the
    #: Slurm node name (nodes without it are not mapped).
    node_label: str = "slurm.node"
    #: With ``node_mapping = "template"``: a ``str.format`` pattern that must
    #: contain ``{name}`` (the Slurm node name), e.g. ``"{name}.k8s.example"``.
    node_template: str = "{name}"
    #: With ``node_mapping = "slinky"``: namespace of the NodeSet pods (the
    #: one pod LIST per pass, selected by ``slurmd_pod_selector``).  Required:
    #: pods of other namespaces are their tenants' to label as they like.
    slinky_namespace: str = "slurm"
    #: Label selector restricting the one Node LIST per pass (empty: all nodes).
    node_selector: str = ""
    #: From this many Nodes on, the bridge keeps the Node list between passes
    #: and reads only the changes (a watch from the last resourceVersion)
    #: instead of a paged LIST of every Node each pass; 0: LIST every pass.
    #: Below it a LIST is cheap and the watch's wait not worth it.
    node_watch_min_nodes: int = 2000
    #: The watch's ``timeoutSeconds``: how long each pass waits (no CPU) for
    #: the server to end the stream of changes; the API's minimum is 1.
    node_watch_seconds: int = 1
    #: Act on our own reasons (``slurm-hooks/1 CODE ...``).
    act_on_ours: bool = True
    #: Our fault codes never acted on (SPARE marks standby capacity).
    ignore_codes: tuple[str, ...] = ("SPARE",)
    #: Foreign reasons acted on too, by prefix (for example ``"NHC:"``).
    foreign_prefixes: tuple[str, ...] = ()
    #: Taint added to every node we cordon.
    taint_key: str = "slurm-hooks.io/fault"
    #: Effect of that taint (its value is the fault code): "NoSchedule",
    #: "PreferNoSchedule" or "NoExecute" (also evicts pods that do not tolerate it).
    taint_effect: str = "NoSchedule"
    #: Prefix of the annotations that record what we did (our state).
    annotation_prefix: str = "slurm-hooks.io"
    #: Evict pods from cordoned nodes through the Eviction API.
    evict: bool = True
    #: Label selector of the pod running the node's slurmd (Slinky's NodeSet pods).
    slurmd_pod_selector: str = "app.kubernetes.io/name=slurmd"
    #: "none", "cluster-api", "webhook" or "crd".
    replacement: str = "none"
    #: Which drains hand the machine to ``replacement``.  "policy": only those
    #: whose Slurm reason says the policy decided the hardware must go
    #: (``repl=requested``: a fault that needs replacing, or hardware faults
    #: past ``[policy] replace_after``), so the repair ladder (GPU reset,
    #: reboot, acceptance) runs first and a repaired node is resumed, not
    #: replaced.  "drain": every drain that moves jobs (ours and
    #: ``foreign_prefixes``), where machines are cattle and the provider
    #: repairs.  With ``node_mapping = "slinky"`` the machine the slurmd pod
    #: left is always handed over: no Slurm repair reaches it any more.
    replace_on: str = "policy"
    #: Cluster API: "annotate" (remediate-machine annotation) or "delete" the Machine.
    capi_mode: str = "annotate"
    #: API version of ``cluster.x-k8s.io`` Machines in the request path.
    capi_version: str = "v1beta1"
    #: Namespace of Machines when the Node lacks ``cluster.x-k8s.io/cluster-namespace``.
    capi_namespace: str = "default"
    #: With ``replacement = "webhook"``: where replacement requests are POSTed
    #: (required then; https://, plain http only to 127.0.0.1 or localhost).
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
    #: Act only while holding a coordination.k8s.io Lease, so that one of
    #: several bridge replicas acts; a replica that cannot renew it follows.
    #: Not used with dry_run.
    leader_election: bool = True
    #: Name of that Lease (in ``namespace``).
    lease_name: str = "slurm-hooks-bridge"
    #: Seconds a leader's lease lasts without renewal; must exceed ``interval``.
    lease_duration: int = 90
    #: Kubernetes API: seconds per call.
    api_timeout: float = 10.0
    #: Retries per Kubernetes API call, with exponential backoff: connection
    #: errors, and 429/5xx answers to GET/PUT/DELETE (not POST/PATCH); the
    #: replacement webhook's POSTs use it too.  0: no retries.
    api_retries: int = 3
    #: With ``[general] slurm_backend = "rest"``: slurmrestd's URL for the
    #: bridge (``http://host:6820``), winning over ``[general] slurm_rest_url``
    #: and ``slurm_rest_socket``; empty: the bridge uses those (one of the
    #: two is then required).  Ignored with the other backends.
    slurm_rest_url: str = ""
    #: Sent as ``X-SLURM-USER-NAME`` with the JWT (only when a token is set).
    #: Used with ``slurm_rest_url`` above; otherwise ``[general]``'s.
    slurm_rest_user: str = ""
    #: Name of the environment variable holding slurmrestd's JWT (never the
    #: token itself); unset or empty: no token header is sent.  Used with
    #: ``slurm_rest_url`` above; otherwise ``[general]``'s.
    slurm_rest_token_env: str = "SLURM_JWT"
    #: Port of the bridge's Prometheus ``/metrics``, served on all addresses
    #: (``[metrics]`` is the hooks' and the watcher's); 0: no endpoint (the
    #: ``--metrics-port`` option wins).
    metrics_port: int = 0
    #: Lending idle Slurm nodes to Kubernetes inference (``[bridge.lending]``).
    lending: LendingConfig = field(default_factory=LendingConfig)

    def slurm_general(self, general: GeneralConfig) -> GeneralConfig:
        """``[general]`` as the bridge's Slurm client sees it: with
        ``slurm_rest_url`` set here, this section's URL, user and token
        variable replace ``[general]``'s (as before ``[general]`` had them);
        otherwise ``[general]`` unchanged."""
        if not self.slurm_rest_url:
            return general
        return dataclasses.replace(
            general,
            slurm_rest_url=self.slurm_rest_url,
            slurm_rest_socket="",
            slurm_rest_user=self.slurm_rest_user,
            slurm_rest_token_env=self.slurm_rest_token_env,
        )

    def validate(self, *, slurm_backend: str | None = None, general_rest: bool = False) -> None:
        """Checked on load; ``slurm_backend`` (``[general] slurm_backend``,
        another section) is given by the bridge at start-up, and
        ``general_rest``: whether ``[general]`` has slurmrestd's address."""
        if slurm_backend == "rest" and not self.slurm_rest_url and not general_rest:
            raise ValueError(
                'slurm_rest_url is required with [general] slurm_backend = "rest" '
                "unless [general] slurm_rest_url or slurm_rest_socket is set"
                " (e.g. http://slurmrestd:6820)"
            )
        check_qualified_name(self.taint_key, "taint_key")
        check_qualified_name(self.annotation_prefix, "annotation_prefix", prefix_only=True)
        check_qualified_name(self.node_label, "node_label")
        if self.node_mapping not in MAPPINGS:
            raise ValueError(f"node_mapping must be one of {', '.join(MAPPINGS)}")
        if self.node_mapping == "slinky" and not _NAMESPACE.fullmatch(self.slinky_namespace):
            # Every namespace's pods would do: a tenant's pod labelled as
            # slurmd with a Slurm node's hostname would map that node onto
            # the tenant's machine (cordoned, replaced) (docs/security.md).
            raise ValueError(
                "slinky_namespace must name the namespace of the NodeSet pods (a DNS label)"
            )
        if self.replacement not in REPLACEMENTS:
            raise ValueError(f"replacement must be one of {', '.join(REPLACEMENTS)}")
        if self.replace_on not in REPLACE_ON:
            raise ValueError(f"replace_on must be one of {', '.join(REPLACE_ON)}")
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
        require_at_least(
            self, 0, "max_concurrent_replacements", "api_retries", "node_watch_min_nodes"
        )
        require_at_least(self, 1, "node_watch_seconds")
        require_positive(self, "interval", "api_timeout")
        if self.leader_election and self.lease_duration <= self.interval:
            raise ValueError("lease_duration must be longer than interval")
        self.lending.validate()
