"""The GPU-scoped evacuation (``[policy] evacuate = "gpu"``), without Slurm:
Slurm's per-node GRES detail as recorded on 22.05 (tests/data/slurm), the
pure rule (decide/scope.py) and the engine against test_actions' fake.
On real Slurm, every release: tests/test_gpu_scope_lab.py."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import pytest
from test_actions import Clock, FakeSlurm, Recorder, xid79

from slurm_hooks.act import gpu_scope
from slurm_hooks.act.engine import Engine
from slurm_hooks.act.notify import Notifier
from slurm_hooks.core.errors import SlurmError
from slurm_hooks.core.model import Action, Component, Finding, JobInfo, Status
from slurm_hooks.decide import DecisionKind, PolicyConfig
from slurm_hooks.decide.repair import RepairConfig
from slurm_hooks.decide.scope import fault_gpu, spared
from slurm_hooks.slurm import job_gpus, parse
from slurm_hooks.slurm.gres import gpu_indices, gpus_on
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import StateStore

RECORDED = (Path(__file__).parent / "data" / "slurm" / "22.05-jobs_gres_detail.txt").read_text()


@pytest.mark.parametrize(
    ("detail", "want"),
    [
        ("gpu:1(IDX:0)", {0}),
        ("gpu:2(IDX:1-2)", {1, 2}),
        ("gpu:h100:3(IDX:0,2-3)", {0, 2, 3}),
        ("gpu:1(IDX:0),nic:1(IDX:0)", {0}),  # another GRES beside: not a GPU
        ("", set()),  # a CPU job (``GRES=``)
        ("(null)", set()),
        (None, set()),
        ("shard:2(2/8,0/8,0/8,0/8)", None),  # a share: which GPU is not said
        ("gpu:4(IDX:0-3),mps:50(50/100)", None),
        ("gpu:1g.10gb:1(IDX:3)", None),  # MIG: IDX numbers slices
        ("gpu:2(IDX:N/A)", None),
        ("gpu:2", None),
        ("gpu:2(IDX:3-1)", None),
    ],
)
def test_gpu_indices(detail, want):
    got = gpu_indices(detail)
    assert (None if got is None else set(got)) == want


def test_the_recorded_detail_of_each_job_on_each_node():
    assert job_gpus.detail_from_scontrol(RECORDED, "1") == [("n2", "gpu:1(IDX:0)")]
    two = job_gpus.detail_from_scontrol(RECORDED, "2")
    assert two == [("n1", "gpu:1(IDX:0)"), ("n2", "gpu:1(IDX:1)")]
    assert (gpus_on(two, "n1"), gpus_on(two, "n2"), gpus_on(two, "n3")) == ({0}, {1}, None)
    assert gpus_on(job_gpus.detail_from_scontrol(RECORDED, "3"), "n1") == frozenset()
    assert job_gpus.detail_from_scontrol(RECORDED, "99") == []
    # The two detail runs no longer make job 2's record ambiguous, and its
    # fields are those without -d.
    (job,) = [j for j in parse.parse_scontrol_jobs(RECORDED) if j.job_id == "2"]
    assert (job.user, job.nodes, job.state) == ("sltest", "n[1-2]", "RUNNING")
    assert gpus_on([("n[1-2]", "gpu:1(IDX:0)")], "n2") == {0}


@pytest.mark.parametrize("where", ["JobName", "Comment", "WorkDir", "StdOut"])
def test_a_detail_run_written_by_the_user_is_not_read(where):
    """A user's text (name, comment, paths) that imitates a detail run
    names no GPU: only the record's fixed middle is read."""
    (record,) = [r for r in RECORDED.splitlines() if r.startswith("JobId=3 ")]
    fake = "x Nodes=n1 CPU_IDs=1 Mem=0 GRES=gpu:4(IDX:0-3)"
    if where == "Comment":
        forged = record.replace(" StdErr=", f" Comment={fake} StdErr=")
    else:
        forged = record.replace(f" {where}=", f" {where}={fake}", 1)
    assert forged != record
    assert job_gpus.detail_from_scontrol(forged, "3") == [("n1", "")]


def test_a_record_forged_in_a_job_name_is_refused():
    (record,) = [r for r in RECORDED.splitlines() if r.startswith("JobId=3 ")]
    (mine,) = [r for r in RECORDED.splitlines() if r.startswith("JobId=2 ")]
    forged = record.replace(
        " JobName=s.sh ", " JobName=s.sh\n" + mine.replace("JobId=2", "JobId=3") + " "
    )
    with pytest.raises(parse.ShadowedRecord):
        job_gpus.detail_from_scontrol(forged, "3")


def test_slurmrestd_detail_is_taken_only_where_node_order_cannot_matter():
    one = {"nodes": "n1", "gres_detail": ["gpu:2(IDX:1-2)"]}
    same = {"nodes": "n[1-2]", "gres_detail": ["gpu:1(IDX:0)", "gpu:1(IDX:0)"]}
    differ = {"nodes": "n[1-2]", "gres_detail": ["gpu:1(IDX:0)", "gpu:1(IDX:1)"]}
    assert job_gpus.detail_from_json(one) == [("n1", "gpu:2(IDX:1-2)")]
    assert gpus_on(job_gpus.detail_from_json(same), "n2") == {0}
    assert job_gpus.detail_from_json(differ) == []
    assert job_gpus.detail_from_json({"nodes": "n1", "gres_detail": []}) == []
    assert job_gpus.detail_from_json({"nodes": "n[1-2]", "gres_detail": ["gpu:1(IDX:0)"]}) == []


@pytest.mark.parametrize(
    ("evacuate", "component", "node_gpus", "job", "want"),
    [
        ("gpu", "gpu3", 4, frozenset({0, 1}), True),
        ("gpu", "gpu3", 4, frozenset({3}), False),
        ("gpu", "gpu3", 4, frozenset({2, 3}), False),
        ("gpu", "gpu3", 4, frozenset(), True),  # a CPU job
        ("gpu", "gpu3", 4, None, False),  # not known: moved
        ("gpu", "gpu3", 0, frozenset(), False),  # GPUs not GRES: every job looks CPU-only
        ("gpu", "gpu3", 3, frozenset({0}), False),  # an index that is not Slurm's
        ("gpu", "nvswitch0", 4, frozenset({0}), False),  # not one GPU's fault
        ("gpu", "ib:mlx5_0/1", 4, frozenset({0}), False),
        ("gpu", None, 4, frozenset({0}), False),
        ("node", "gpu3", 4, frozenset({0}), False),  # the default moves every job
    ],
)
def test_which_jobs_a_drain_spares(evacuate, component, node_gpus, job, want):
    assert spared(fault_gpu(evacuate, component, node_gpus), job) is want


def test_the_setting_is_checked():
    PolicyConfig(evacuate="gpu").validate()
    with pytest.raises(ValueError, match="evacuate"):
        PolicyConfig(evacuate="socket").validate()


class GpuSlurm(FakeSlurm):
    """test_actions' fake that also answers JobGpus (job id -> detail)."""

    def __init__(self):
        super().__init__()
        self.detail: dict[str, list[tuple[str, str]]] = {}

    def job_gpu_detail(self, job_id):
        self.calls.append(("job_gpu_detail", job_id))
        if job_id not in self.detail:
            raise SlurmError(f"no detail for {job_id}")
        return self.detail[job_id]


@pytest.fixture
def gpu_env(tmp_path):
    slurm = GpuSlurm()
    slurm.nodes["n1"] = dataclasses.replace(slurm.nodes["n1"], gres="gpu:4")
    slurm.jobs["101"] = JobInfo("101", "alice", "RUNNING", "n1", "n1", True, name="on-gpu3")
    slurm.jobs["102"] = JobInfo("102", "bob", "RUNNING", "n1", "n1", True, name="on-gpu0-1")
    slurm.jobs["103"] = JobInfo("103", "carol", "RUNNING", "n1", "n1", True, name="unknown")
    slurm.detail = {"101": [("n1", "gpu:1(IDX:3)")], "102": [("n1", "gpu:2(IDX:0-1)")]}
    clock, spawned = Clock(), []

    def make(evacuate="gpu", repair=True):
        return Engine(
            slurm, PolicyConfig(grace_seconds=60, evacuate=evacuate),
            StateStore(tmp_path / "state"), AuditLog(tmp_path / "audit.jsonl"),
            Notifier([Recorder()]), clock=clock, spawn=lambda path: spawned.append(path) or 2_000_000_000,  # no such pid
            repair=RepairConfig(enabled=repair),
        )  # fmt: skip

    return slurm, clock, spawned, make, tmp_path


def test_a_fault_on_one_gpu_moves_its_jobs_and_spares_the_rest_until_they_end(gpu_env):
    slurm, clock, spawned, make, tmp_path = gpu_env
    eng = make()
    (d,) = eng.handle("n1", [xid79(3)])
    assert d.kind is DecisionKind.DRAIN
    signalled = {c[1] for c in slurm.calls if c[0] == "signal"}
    assert signalled == {"101", "103"}  # gpu3's job, and the one whose GPUs are not known
    doc = StateStore(tmp_path / "state").read_incident(d.incident)
    assert set(doc["jobs"]) == {"101", "103"} and doc["scope"] == "gpu3"
    assert doc["spared"]["102"]["user"] == "bob" and doc["spared"]["102"]["gpus"] == [0, 1]
    spares = [
        e for e in AuditLog(tmp_path / "audit.jsonl").entries() if e["action"] == "job_spared"
    ]
    assert [(e["job"], e["user"]) for e in spares] == [("102", "bob")]
    # The grace worker was started; after the grace the moved jobs are requeued.
    assert len(spawned) == 1
    clock.now += timedelta(seconds=61)
    outcomes = {o.job_id: o.outcome for o in eng.finish_incident(d.incident)}
    assert outcomes == {"101": "requeued", "103": "requeued"}
    assert slurm.jobs["102"].state == "RUNNING" and slurm.jobs["102"].restart_count == 0
    # bob's job still holds the node: no repair worker yet, however often
    # the node's hook (a passing check) or the watcher rolls it forward;
    # Slurm was asked about it when the grace ended, and not again within
    # gpu_scope.CHECK_S.
    asked = slurm.count("get_job")
    for _ in range(2):
        assert eng.handle("n1", []) == []
        assert eng.resume_pending("n1") == [d.incident]
    assert len(spawned) == 1
    assert slurm.count("get_job") == asked
    doc = StateStore(tmp_path / "state").read_incident(d.incident)
    assert [s["step"] for s in doc["steps"]].count("waiting_for_spared") == 1
    assert "repair" not in doc
    # It ends: the next run starts the repair.
    slurm.jobs["102"] = dataclasses.replace(slurm.jobs["102"], state="COMPLETED")
    eng.handle("n1", [])
    assert len(spawned) == 1  # seen at the next look, not before
    clock.now += timedelta(seconds=gpu_scope.CHECK_S)
    eng.handle("n1", [])
    assert len(spawned) == 2
    doc = StateStore(tmp_path / "state").read_incident(d.incident)
    assert doc["spared"]["102"]["ended_at"]
    assert "102" not in {c[1] for c in slurm.calls if c[0] in ("signal", "requeue", "cancel")}


def test_the_default_moves_every_job(gpu_env):
    slurm, _, _, make, tmp_path = gpu_env
    (d,) = make(evacuate="node").handle("n1", [xid79(3)])
    assert {c[1] for c in slurm.calls if c[0] == "signal"} == {"101", "102", "103"}
    assert not any(c[0] == "job_gpu_detail" for c in slurm.calls)
    doc = StateStore(tmp_path / "state").read_incident(d.incident)
    assert "spared" not in doc and "scope" not in doc


def test_a_fault_of_the_node_moves_every_job_under_gpu_scope(gpu_env):
    slurm, _, _, make, _ = gpu_env
    node_fault = Finding("nvswitch", Status.FAIL, "SXID", "NVSwitch fatal", Component("nvswitch", 0),
                         Action.REBOOT)  # fmt: skip
    make().handle("n1", [node_fault])
    assert {c[1] for c in slurm.calls if c[0] == "signal"} == {"101", "102", "103"}


def test_where_gpus_are_not_gres_every_job_moves(gpu_env):
    slurm, _, _, make, _ = gpu_env
    slurm.nodes["n1"] = dataclasses.replace(slurm.nodes["n1"], gres=None)
    slurm.detail = {jid: [("n1", "")] for jid in slurm.jobs}  # as Slurm says there: no GRES
    make().handle("n1", [xid79(3)])
    assert {c[1] for c in slurm.calls if c[0] == "signal"} == {"101", "102", "103"}


def test_a_client_that_cannot_say_moves_every_job(tmp_path):
    slurm = FakeSlurm()  # no job_gpu_detail
    slurm.nodes["n1"] = dataclasses.replace(slurm.nodes["n1"], gres="gpu:4")
    for jid in ("1", "2"):
        slurm.jobs[jid] = JobInfo(jid, "u", "RUNNING", "n1", "n1", True)
    Engine(slurm, PolicyConfig(grace_seconds=60, evacuate="gpu"), StateStore(tmp_path / "s"),
           AuditLog(tmp_path / "a.jsonl"), Notifier([]), clock=Clock(), spawn=None,
           ).handle("n1", [xid79(3)])  # fmt: skip
    assert {c[1] for c in slurm.calls if c[0] == "signal"} == {"1", "2"}


def past_the_grace(env, **kw):
    """XID 79 on GPU 3 handled, and the grace over: the moved jobs settled,
    bob's job (GPUs 0-1) spared.  Returns the engine and the decision."""
    _, clock, _, make, _ = env
    eng = make(**kw)
    (d,) = eng.handle("n1", [xid79(3)])
    clock.now += timedelta(seconds=61)
    eng.finish_incident(d.incident)
    return eng, d


def test_without_the_repair_loop_the_incident_stops_pending_once_the_spared_jobs_end(gpu_env):
    slurm, clock, _, _, _ = gpu_env
    eng, d = past_the_grace(gpu_env, repair=False)
    assert eng.resume_pending("n1") == [d.incident]  # bob's job runs on
    slurm.jobs["102"] = dataclasses.replace(slurm.jobs["102"], state="COMPLETED")
    clock.now += timedelta(seconds=gpu_scope.CHECK_S)
    eng.handle("n1", [])
    assert eng.resume_pending("n1") == []


def test_a_later_fault_on_a_spared_jobs_gpu_moves_it_too(gpu_env):
    slurm, clock, _, _, tmp_path = gpu_env
    eng, d = past_the_grace(gpu_env)
    signals = lambda: [c[1] for c in slurm.calls if c[0] == "signal"]  # noqa: E731
    before = signals()
    # The same GPU again, and a GPU no spared job holds: bob's job stays.
    eng.handle("n1", [xid79(3)])
    eng.handle("n1", [xid79(2)])
    assert signals() == before and slurm.jobs["102"].restart_count == 0
    # A fault on GPU 1, which bob's job holds: it is moved like the first ones.
    (again,) = eng.handle("n1", [xid79(1)])
    assert again.kind is DecisionKind.ALREADY_HANDLED
    assert signals()[len(before) :] == ["102", "102"]  # USR1 to the batch, TERM to the steps
    doc = StateStore(tmp_path / "state").read_incident(d.incident)
    assert doc["spared"] == {} and doc["jobs"]["102"]["user"] == "bob" and not doc["jobs_done"]
    assert eng.finish_incident(d.incident) == []  # a new grace for it
    clock.now += timedelta(seconds=61)
    assert {o.job_id: o.outcome for o in eng.finish_incident(d.incident)} == {"102": "requeued"}
    assert slurm.jobs["102"].restart_count == 1 and slurm.jobs["101"].restart_count == 1
    moved = [e for e in AuditLog(tmp_path / "audit.jsonl").entries() if e["action"] == "job_moved"]
    assert [(e["job"], e["user"]) for e in moved] == [("102", "bob")]


def test_a_later_fault_of_the_node_moves_every_spared_job(gpu_env):
    slurm = gpu_env[0]
    eng, _ = past_the_grace(gpu_env)
    node_fault = Finding("nvswitch", Status.FAIL, "SXID", "NVSwitch fatal", Component("nvswitch", 0),
                         Action.REBOOT)  # fmt: skip
    eng.handle("n1", [node_fault])
    assert "102" in [c[1] for c in slurm.calls if c[0] == "signal"]


@pytest.mark.parametrize(
    ("minors", "gres", "spared_jobs"),
    [
        ("0123", None, {"102"}),
        # Minors out of bus order (minor 0 on NVML's GPU 3) and no gres.conf to
        # say how slurmd numbers: the two cannot be matched, no job is spared.
        ("3210", None, set()),
        # AutoDetect=nvml: slurmd numbers as NVML does; bob's IDX 0-1 are
        # NVML's 0-1, the fault's gpu3 is alice's.
        ("3210", "AutoDetect=nvml\n", {"102"}),
        # File= lines: IDX k is /dev/nvidia<k>, NVML's 3-k: alice's IDX 3 is
        # NVML's gpu0, bob's IDX 0-1 are NVML's 3 and 2, the fault's: bob moves.
        ("3210", "Name=gpu File={dev}/nvidia[0-3]\n", {"101"}),
    ],
)
def test_slurms_gpu_numbers_are_matched_to_the_faults_or_every_job_moves(
    gpu_env, tmp_path, monkeypatch, minors, gres, spared_jobs
):
    """The drain's GPU number is NVML's (bus order), the job's is Slurm's
    index in slurmd's GPU list (``slurm/gpu_order.py``): the job is spared
    only when the one can be told from the other."""
    import os
    import stat

    slurm, _, _, make, _ = gpu_env
    root, dev = tmp_path / "proc-gpus", tmp_path / "dev"
    dev.mkdir()
    for place, minor in enumerate(minors):
        (root / f"0000:{0x18 + place:02x}:00.0").mkdir(parents=True)
        (root / f"0000:{0x18 + place:02x}:00.0" / "information").write_text(
            f"Device Minor: \t {minor}\n"
        )
        try:
            os.mknod(dev / f"nvidia{minor}", stat.S_IFCHR | 0o666, os.makedev(195, int(minor)))
        except PermissionError:
            pytest.skip("making a character device needs root (the test command runs as root)")
    conf = tmp_path / "gres.conf"
    if gres is not None:
        conf.write_text(gres.format(dev=dev))
    monkeypatch.setattr(gpu_scope, "PROC_ROOT", str(root))
    monkeypatch.setattr(gpu_scope, "GRES_CONF", conf)
    (d,) = make().handle("n1", [xid79(3)])
    doc = StateStore(tmp_path / "state").read_incident(d.incident)
    assert set(doc.get("spared") or {}) == spared_jobs
    moved = {c[1] for c in slurm.calls if c[0] == "signal"}
    assert moved == {"101", "102", "103"} - spared_jobs
