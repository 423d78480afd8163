"""The bridge's planner, table-driven and pure (no HTTP, no Slurm)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone

import pytest

from slurm_hooks.bridge import plan as P
from slurm_hooks.bridge.settings import BridgeConfig
from slurm_hooks.core.model import JobInfo, NodeState
from slurm_hooks.core.reason import DrainReason, format_reason

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
CFG = BridgeConfig(replacement="crd", max_cordoned_fraction=0.5)
K = P.Keys(CFG.annotation_prefix)


def ours(code: str = "XID79", inc: str = "7f3a2c1b", *, repl: bool = True) -> str:
    """Our reason; ``repl``: the policy marked it for replacement (``repl=requested``),
    which the bridge needs before it asks for one (``replace_on = "policy"``)."""
    extra = {"repl": "requested"} if repl else {}
    return format_reason(DrainReason(code, inc, "GPU has fallen off the bus", "gpu3", extra))


def slurm(name: str, state: str = "idle", flags=("DRAIN",), reason: str | None = None) -> NodeState:
    return NodeState(name, state, frozenset(flags), reason=reason)


def knode(name: str, *, unsched: bool = False, ann=None, labels=None, taints=None) -> dict:
    spec: dict = {}
    if unsched:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "7",
            "annotations": dict(ann or {}),
            "labels": dict(labels or {}),
        },
        "spec": spec,
    }


def held(inc: str = "7f3a2c1b", **extra: str) -> dict:
    return {K.incident: inc, K.cordoned: "true", **extra}


def kinds(p: P.Plan) -> list[str]:
    return [type(s).__name__ for s in p.steps]


OK_IDLE = slurm("n2", flags=(), reason=None)

CASES = [
    # (id, slurm states, k8s nodes, jobs, cfg changes, expected step kinds, expected deferred)
    ("healthy fleet: nothing", [OK_IDLE], [knode("n2")], {}, {}, [], 0),
    (
        "our drain, idle: cordon, evict, replace",
        [slurm("n1", reason=ours())],
        [knode("n1"), knode("n2")],
        {},
        {},
        ["Cordon", "Evict", "RequestReplacement"],
        0,
    ),
    (
        "our drain, jobs still running: no replacement yet, slurmd kept",
        [slurm("n1", state="mixed", reason=ours())],
        [knode("n1"), knode("n2")],
        {},
        {},
        ["Cordon", "Evict"],
        0,
    ),
    (
        "our drain, squeue shows a job: no replacement",
        [slurm("n1", reason=ours())],
        [knode("n1"), knode("n2")],
        {"n1": [JobInfo("12", "u", "RUNNING", "n1")]},
        {},
        ["Cordon", "Evict"],
        0,
    ),
    (
        "already cordoned, evicted and replaced for this incident: nothing",
        [slurm("n1", reason=ours())],
        [knode("n1", unsched=True, ann=held(**{K.evicted: "7f3a2c1b", K.replacement: "7f3a2c1b"}))],
        {},
        {},
        [],
        0,
    ),
    (
        "restart after cordon: only the missing steps",
        [slurm("n1", reason=ours())],
        [knode("n1", unsched=True, ann=held(**{K.evicted: "7f3a2c1b"})), knode("n2")],
        {},
        {},
        ["RequestReplacement"],
        0,
    ),
    (
        "new incident on a held node: cordon again for it",
        [slurm("n1", reason=ours(inc="00000002"))],
        [knode("n1", unsched=True, ann=held(**{K.replacement: "7f3a2c1b"})), knode("n2")],
        {},
        {},
        ["Cordon", "Evict", "RequestReplacement"],
        0,
    ),
    (
        "SPARE is ours but never acted on",
        [slurm("n1", reason=ours("SPARE"))],
        [knode("n1")],
        {},
        {},
        [],
        0,
    ),
    (
        "admin drain is foreign",
        [slurm("n1", reason="bad fan, ticket 42")],
        [knode("n1")],
        {},
        {},
        [],
        0,
    ),
    (
        "NHC is foreign by default",
        [slurm("n1", reason="NHC: check_hw_ib failed")],
        [knode("n1")],
        {},
        {},
        [],
        0,
    ),
    (
        "NHC acted on when configured: no replacement, the policy did not ask for one",
        [slurm("n1", reason="NHC: check_hw_ib failed")],
        [knode("n1"), knode("n2")],
        {},
        {"foreign_prefixes": ("NHC:",)},
        ["Cordon", "Evict"],
        0,
    ),
    (
        "NHC acted on, replace_on = drain: replaced like any drain",
        [slurm("n1", reason="NHC: check_hw_ib failed")],
        [knode("n1"), knode("n2")],
        {},
        {"foreign_prefixes": ("NHC:",), "replace_on": "drain"},
        ["Cordon", "Evict", "RequestReplacement"],
        0,
    ),
    (
        "our drain the policy did not mark for replacement: cordon and evict only",
        [slurm("n1", reason=ours(repl=False))],
        [knode("n1"), knode("n2")],
        {},
        {},
        ["Cordon", "Evict"],
        0,
    ),
    (
        "the same incident later marked for replacement: only the replacement is added",
        [slurm("n1", reason=ours())],
        [knode("n1", unsched=True, ann=held(**{K.evicted: "7f3a2c1b"}))],
        {},
        {},
        ["RequestReplacement"],
        0,
    ),
    (
        "the repair ladder's REPLACE of a release that wrote no repl=: replaced",
        [slurm("n1", reason=ours(code="REPLACE", repl=False))],
        [knode("n1"), knode("n2")],
        {},
        {},
        ["Cordon", "Evict", "RequestReplacement"],
        0,
    ),
    (
        "replace_on = drain: our unmarked drain is replaced too",
        [slurm("n1", reason=ours(repl=False))],
        [knode("n1"), knode("n2")],
        {},
        {"replace_on": "drain"},
        ["Cordon", "Evict", "RequestReplacement"],
        0,
    ),
    (
        "slurm-operator reason on a free node: foreign",
        [slurm("n1", reason="slurm-operator: node cordoned")],
        [knode("n1", unsched=True)],
        {},
        {},
        [],
        0,
    ),
    (
        "slurm-operator echo on a node we hold: keep holding",
        [slurm("n1", reason="slurm-operator: node cordoned")],
        [knode("n1", unsched=True, ann=held())],
        {},
        {},
        [],
        0,
    ),
    (
        "resumed in Slurm: uncordon",
        [slurm("n1", flags=())],
        [knode("n1", unsched=True, ann=held())],
        {},
        {},
        ["Uncordon"],
        0,
    ),
    (
        "not drained any more (flag gone, reason lingers): uncordon",
        [slurm("n1", flags=(), reason=ours())],
        [knode("n1", unsched=True, ann=held())],
        {},
        {},
        ["Uncordon"],
        0,
    ),
    ("no Kubernetes node: deferred", [slurm("n9", reason=ours())], [knode("n1")], {}, {}, [], 1),
    (
        "down with our reason counts",
        [slurm("n1", state="down", flags=(), reason=ours())],
        [knode("n1"), knode("n2")],
        {},
        {"replacement": "none", "evict": False},
        ["Cordon"],
        0,
    ),
]


@pytest.mark.parametrize(
    "states,nodes,jobs,changes,expected,n_deferred",
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_plan_table(states, nodes, jobs, changes, expected, n_deferred):
    cfg = dataclasses.replace(CFG, **changes)
    p = P.plan(states, nodes, cfg, jobs=jobs)
    assert kinds(p) == expected
    assert len(p.deferred) == n_deferred


def test_uncordon_only_clears_our_cordon():
    foreign = knode("n1", unsched=True, ann={K.incident: "7f3a2c1b"})  # no cordoned mark
    (step,) = P.plan([slurm("n1", flags=())], [foreign], CFG).steps
    assert isinstance(step, P.Uncordon) and step.uncordon is False
    body = P.uncordon_patch(foreign, CFG)
    assert "unschedulable" not in body["spec"]
    assert body["metadata"]["annotations"] == {K.incident: None}


def test_evict_keeps_slurmd_while_jobs_run():
    p = P.plan([slurm("n1", state="mixed", reason=ours())], [knode("n1"), knode("n2")], CFG)
    evict = next(s for s in p.steps if isinstance(s, P.Evict))
    assert evict.keep_slurmd is True


def test_cordon_cap():
    states = [slurm(f"n{i}", reason=ours(inc=f"0000000{i}")) for i in range(1, 4)]
    states += [slurm(f"n{i}", flags=()) for i in range(4, 7)]
    nodes = [knode(f"n{i}") for i in range(1, 7)]
    cfg = dataclasses.replace(CFG, max_cordoned_fraction=0.34, replacement="none", evict=False)
    p = P.plan(states, nodes, cfg)
    assert [s.node for s in p.steps] == ["n1", "n2"]  # floor(0.34 * 6) = 2
    assert [d.slurm_node for d in p.deferred] == ["n3"]
    assert "cordon cap" in p.deferred[0].why


def test_cordon_cap_counts_our_existing_cordons_and_ignores_foreign_ones():
    states = [slurm("n1", reason=ours(inc="00000001")), slurm("n2", reason=ours(inc="00000002"))]
    nodes = [knode("n1"), knode("n2", unsched=True), knode("n3", ann=held("old"))] + [
        knode(f"m{i}") for i in range(7)
    ]
    cfg = dataclasses.replace(CFG, max_cordoned_fraction=0.1, replacement="none", evict=False)
    p = P.plan(states, nodes, cfg)
    # allowance is 1 and n3 already uses it; n2 is cordoned by someone else: no new cordon
    assert [s.node for s in p.steps] == ["n2"]
    assert [d.slurm_node for d in p.deferred] == ["n1"]


def test_replacement_cap():
    states = [slurm(f"n{i}", reason=ours(inc=f"0000000{i}")) for i in range(1, 4)]
    nodes = [knode(f"n{i}") for i in range(1, 4)]
    cfg = dataclasses.replace(
        CFG, max_cordoned_fraction=1.0, max_concurrent_replacements=1, evict=False
    )
    p = P.plan(states, nodes, cfg)
    assert sum(isinstance(s, P.RequestReplacement) for s in p.steps) == 1
    assert len(p.deferred) == 2


@pytest.mark.parametrize(
    "mapping,extra,k8s_name",
    [
        ({"node_mapping": "same"}, {}, "gpu001"),
        (
            {"node_mapping": "template", "node_template": "{name}.cluster.local"},
            {},
            "gpu001.cluster.local",
        ),
        ({"node_mapping": "label"}, {"labels": {"slurm.node": "gpu001"}}, "ip-10-0-0-7"),
    ],
)
def test_node_mapping(mapping, extra, k8s_name):
    cfg = dataclasses.replace(CFG, **mapping)
    nodes = [knode(k8s_name, **extra), knode("other")]
    assert P.node_name(P.map_nodes(["gpu001", "gpu002"], nodes, cfg)["gpu001"]) == k8s_name
    assert "gpu002" not in P.map_nodes(["gpu001", "gpu002"], nodes, cfg)


def test_spares_claimed_once_each():
    cfg = dataclasses.replace(
        CFG, spare_pool="s[1-2]", replacement="none", evict=False, max_cordoned_fraction=1.0
    )
    states = [
        slurm("n1", reason=ours(inc="00000001")),
        slurm("n2", reason=ours(inc="00000002")),
        slurm("n3", reason=ours(inc="00000003")),
        slurm("s1", reason=ours("SPARE", "5pare001")),
        slurm("s2", reason="standby pool"),  # foreign, not configured as a spare reason
    ]
    nodes = [knode(n) for n in ("n1", "n2", "n3")]
    p = P.plan(states, nodes, cfg, spare_pool=["s1", "s2"])
    claims = [s for s in p.steps if isinstance(s, P.ClaimSpare)]
    assert [(c.node, c.spare) for c in claims] == [("n1", "s1")]
    assert len(p.deferred) == 2  # n2 and n3 get no spare

    cfg2 = dataclasses.replace(cfg, spare_reasons=("standby",))
    p2 = P.plan(states, nodes, cfg2, spare_pool=["s1", "s2"])
    assert [(c.node, c.spare) for c in p2.steps if isinstance(c, P.ClaimSpare)] == [
        ("n1", "s1"),
        ("n2", "s2"),
    ]


def test_spare_intent_is_finished_after_a_crash_not_duplicated():
    cfg = dataclasses.replace(CFG, spare_pool="s[1-2]", replacement="none", evict=False)
    states = [
        slurm("n1", reason=ours()),
        slurm("s1", reason=ours("SPARE", "5pare001")),
        slurm("s2", reason=ours("SPARE", "5pare002")),
    ]
    # Crashed after recording s1 but before resuming it: resume s1 again, not s2.
    nodes = [knode("n1", unsched=True, ann=held(**{K.spare: "s1"}))]
    (step,) = P.plan(states, nodes, cfg, spare_pool=["s1", "s2"]).steps
    assert step == P.ClaimSpare("n1", "n1", "7f3a2c1b", "s1")
    # s1 resumed: nothing left to do.
    states[1] = slurm("s1", flags=())
    assert P.plan(states, nodes, cfg, spare_pool=["s1", "s2"]).steps == ()


def test_job_queries_only_for_open_incidents():
    cfg = CFG
    states = [
        slurm("n1", reason=ours(inc="00000001")),  # new: ask
        slurm("n2", state="mixed", reason=ours(inc="00000002")),  # busy: known, no need to ask
        slurm("n3", reason=ours(inc="00000003")),  # done: no need to ask
        slurm("n4", flags=()),
    ]
    done = held("00000003", **{K.evicted: "00000003", K.replacement: "00000003"})
    nodes = [knode("n1"), knode("n2"), knode("n3", ann=done), knode("n4")]
    assert P.job_queries(states, nodes, cfg) == ["n1"]


def test_foreign_incident_is_stable():
    when = datetime(2024, 5, 1, 10, 0)
    a = P.foreign_incident("n1", "NHC: x", when)
    assert a == P.foreign_incident("n1", "NHC: x", when)
    assert a != P.foreign_incident("n1", "NHC: x", datetime(2024, 5, 2, 10, 0))


def test_cordon_patch_keeps_other_taints_and_carries_resource_version():
    other = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    stale = {"key": CFG.taint_key, "value": "OLD", "effect": "NoSchedule"}
    node = knode("n1", taints=[other, stale])
    step = P.Cordon(
        "n1", "n1", "7f3a2c1b", "XID79", ours(), datetime(2024, 5, 1, 11, 0, tzinfo=UTC)
    )
    body = P.cordon_patch(node, step, CFG, NOW)
    assert body["metadata"]["resourceVersion"] == "7"
    assert body["spec"]["unschedulable"] is True
    assert body["spec"]["taints"] == [
        other,
        {"key": CFG.taint_key, "value": "XID79", "effect": "NoSchedule"},
    ]
    ann = body["metadata"]["annotations"]
    assert ann[K.incident] == "7f3a2c1b" and ann[K.cordoned] == "true"
    assert ann[K.reason] == ours() and ann[K.drained_at] == "2024-05-01T11:00:00Z"
    # Slinky: we never set the operator's cordon-reason annotation
    assert not any("slinky" in k for k in ann)


def test_cordon_patch_on_foreign_cordon_does_not_claim_it():
    node = knode("n1", unsched=True)
    step = P.Cordon("n1", "n1", "7f3a2c1b", "XID79", ours(), None)
    body = P.cordon_patch(node, step, CFG, NOW)
    assert "unschedulable" not in body["spec"]
    assert K.cordoned not in body["metadata"]["annotations"]


def pod(name, *, owner=None, labels=None, phase="Running", mirror=False, deleting=False,
        ns="default"):  # fmt: skip
    md = {"name": name, "namespace": ns, "labels": labels or {}, "annotations": {}}
    if owner:
        md["ownerReferences"] = [{"kind": owner, "name": "x", "apiVersion": "apps/v1", "uid": "u"}]
    if mirror:
        md["annotations"]["kubernetes.io/config.mirror"] = "abc"
    if deleting:
        md["deletionTimestamp"] = "2024-05-01T12:00:00Z"
    return {"metadata": md, "status": {"phase": phase}}


@pytest.mark.parametrize(
    "the_pod,keep_slurmd,evicted",
    [
        (pod("web", owner="ReplicaSet"), False, True),
        (pod("bare"), False, True),
        (pod("ds", owner="DaemonSet"), False, False),
        (pod("static", mirror=True), False, False),
        (pod("done", phase="Succeeded"), False, False),
        (pod("going", deleting=True), False, False),
        (pod("slurmd", labels={"app.kubernetes.io/name": "slurmd"}, ns="slurm"), True, False),
        (pod("slurmd", labels={"app.kubernetes.io/name": "slurmd"}, ns="slurm"), False, True),
        # A tenant's pod labelled as slurmd, outside slinky_namespace: a workload.
        (pod("slurmd", labels={"app.kubernetes.io/name": "slurmd"}), True, True),
    ],
)
def test_pods_to_evict(the_pod, keep_slurmd, evicted):
    out = P.pods_to_evict([the_pod], keep_slurmd=keep_slurmd, cfg=CFG)
    assert (out == [the_pod]) is evicted


def test_annotation_times_are_utc_even_from_a_local_aware_time():
    # Slurm's reason times are parsed as aware local times (UTC+2 here):
    # the annotation must carry the same instant in UTC, not the local wall
    # clock with a Z glued on.
    local = datetime(2024, 5, 1, 13, 0, tzinfo=timezone(timedelta(hours=2)))
    step = P.Cordon("n1", "n1", "7f3a2c1b", "XID79", ours(), local)
    body = P.cordon_patch(knode("n1"), step, CFG, NOW)
    assert body["metadata"]["annotations"][K.drained_at] == "2024-05-01T11:00:00Z"
    assert P.parse_time(body["metadata"]["annotations"][K.drained_at]) == local


def test_cordon_cap_counts_mapped_nodes_not_every_listed_node():
    # Two Slurm GPU nodes among twenty Kubernetes nodes that Slurm does not
    # know (CPU workers): the cap is a share of the Slurm-mapped nodes, so
    # at 50 % only one of the two may be cordoned.
    states = [slurm("n1", reason=ours(inc="00000001")), slurm("n2", reason=ours(inc="00000002"))]
    nodes = [knode("n1"), knode("n2")] + [knode(f"cpu{i}") for i in range(20)]
    cfg = dataclasses.replace(CFG, max_cordoned_fraction=0.5, replacement="none", evict=False)
    p = P.plan(states, nodes, cfg)
    assert [s.node for s in p.steps] == ["n1"]
    assert [d.slurm_node for d in p.deferred] == ["n2"]
