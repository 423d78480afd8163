"""The scontrol/sinfo/squeue/scancel backend: retry logic through a fake
command port, then the real thing on the lab."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from slurm_hooks.core.errors import CommandError, CommandTimeout, SlurmError, SlurmUnavailable
from slurm_hooks.core.reason import DrainReason, format_reason, parse_reason
from slurm_hooks.detect.probes.commands import CommandResult, run
from slurm_hooks.slurm import get_client
from slurm_hooks.slurm.base import SignalTarget, SlurmClient
from slurm_hooks.slurm.cli_backend import CliClient

DATA = Path(__file__).parent / "data" / "slurm"


class FakeRunner:
    """Replays scripted results and records argv."""

    def __init__(self, *results: CommandResult | Exception) -> None:
        self.results = list(results)
        self.calls: list[tuple[list[str], dict]] = []

    def __call__(self, argv, **kw):  # type: ignore[no-untyped-def]
        self.calls.append((list(argv), kw))
        item = self.results.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


def res(rc: int = 0, stdout: str = "", stderr: str = "") -> CommandResult:
    return CommandResult(("x",), rc, stdout, stderr, 0.01)


UNREACHABLE = "scontrol: error: Unable to contact slurm controller (connect failure)"


def client(runner: FakeRunner, **kw) -> tuple[CliClient, list[float]]:  # type: ignore[no-untyped-def]
    sleeps: list[float] = []
    c = CliClient(slurm_conf="/x/slurm.conf", runner=runner, sleep=sleeps.append, **kw)
    return c, sleeps


def test_retries_with_backoff_then_succeeds() -> None:
    nodes = (DATA / "22.05-nodes_states.txt").read_text()
    runner = FakeRunner(res(1, stderr=UNREACHABLE), CommandTimeout(["scontrol"], 10), res(0, nodes))
    c, sleeps = client(runner, retries=3, backoff=0.5)
    assert [n.name for n in c.list_nodes()] == ["n1", "n2", "n3", "n4"]
    assert sleeps == [0.5, 1.0]
    argv, kw = runner.calls[0]
    assert argv == ["scontrol", "-o", "show", "node"]
    assert kw["env"]["SLURM_CONF"] == "/x/slurm.conf" and kw["timeout"] == 10.0
    assert kw["check"] is False


def test_unavailable_after_retries() -> None:
    runner = FakeRunner(*[res(1, stderr=UNREACHABLE)] * 3)
    c, sleeps = client(runner, retries=2, backoff=1.0, max_backoff=1.5)
    with pytest.raises(SlurmUnavailable, match="after 3 attempt"):
        c.get_node("n1")
    assert sleeps == [1.0, 1.5]


def test_refusal_is_not_retried() -> None:
    runner = FakeRunner(res(1, stderr="slurm_update error: Invalid node state specified"))
    c, sleeps = client(runner)
    with pytest.raises(SlurmError, match="Invalid node state specified") as exc:
        c.resume("n1")
    assert not isinstance(exc.value, SlurmUnavailable)
    assert sleeps == [] and len(runner.calls) == 1
    assert runner.calls[0][0] == ["scontrol", "update", "NodeName=n1", "State=RESUME"]


def test_missing_program_is_slurm_error() -> None:
    runner = FakeRunner(CommandError(["scontrol"], None, message="cannot run 'scontrol'"))
    c, _ = client(runner)
    with pytest.raises(SlurmError, match="cannot run scontrol"):
        c.list_nodes()


def test_argv_is_a_list_reason_unquoted() -> None:
    reason = 'it\'s "bad"; rm -rf / $(x) `y` | z'
    runner = FakeRunner(res(), res(), res())
    c, _ = client(runner)
    c.drain("n2", reason)
    c.down("n2", reason)
    c.update_reason("n2", reason)
    assert [call[0] for call in runner.calls] == [
        ["scontrol", "update", "NodeName=n2", "State=DRAIN", f"Reason={reason}"],
        ["scontrol", "update", "NodeName=n2", "State=DOWN", f"Reason={reason}"],
        ["scontrol", "update", "NodeName=n2", f"Reason={reason}"],
    ]


@pytest.mark.parametrize("reason", ["", "   ", "two\nlines", "cr\r"])
def test_bad_reasons_refused_before_calling(reason: str) -> None:
    runner = FakeRunner()
    c, _ = client(runner)
    with pytest.raises(SlurmError):
        c.drain("n1", reason)
    assert runner.calls == []


@pytest.mark.parametrize(
    ("call", "argv"),
    [
        (
            lambda c: c.signal_job("7", "USR1", SignalTarget.BATCH),
            ["scancel", "--ctld", "-v", "--signal=USR1", "--batch", "7"],
        ),
        (
            lambda c: c.signal_job("7", "sigterm", SignalTarget.FULL),
            ["scancel", "--ctld", "-v", "--signal=SIGTERM", "--full", "7"],
        ),
        (
            lambda c: c.signal_job("7", "10", SignalTarget.STEPS),
            ["scancel", "--ctld", "-v", "--signal=10", "7"],
        ),
        (lambda c: c.requeue("7"), ["scontrol", "requeue", "7"]),
        (lambda c: c.cancel("7"), ["scancel", "7"]),
        (
            lambda c: c.set_job_comment("7", "a b=c"),
            ["scontrol", "update", "JobId=7", "Comment=a b=c"],
        ),
        (
            lambda c: c.set_job_comment("7", "x", admin=True),
            ["scontrol", "update", "JobId=7", "AdminComment=x"],
        ),
    ],
)
def test_job_operations_argv(call, argv) -> None:  # type: ignore[no-untyped-def]
    runner = FakeRunner(res())
    c, _ = client(runner)
    call(c)
    assert runner.calls[0][0] == argv


@pytest.mark.parametrize("bad", ["7; rm", "-1", "", "7 8", "--all"])
def test_bad_job_ids_refused(bad: str) -> None:
    c, _ = client(FakeRunner())
    with pytest.raises(SlurmError):
        c.cancel(bad)


def test_bad_signal_and_node_refused() -> None:
    c, _ = client(FakeRunner())
    with pytest.raises(SlurmError):
        c.signal_job("1", "USR1 --full", SignalTarget.BATCH)
    with pytest.raises(SlurmError):
        c.drain("n[1-4]", "x")


def test_get_client_factory() -> None:
    assert isinstance(get_client("cli", slurm_conf="/x"), CliClient)
    assert isinstance(get_client("cli"), SlurmClient)
    with pytest.raises(SlurmError, match="unknown slurm backend"):
        get_client("carrier-pigeon")


# -- on the real lab -------------------------------------------------------------


def our_reason(code: str = "XID79", text: str = "GPU has fallen off the bus") -> str:
    return format_reason(DrainReason(code=code, incident="deadbeef", component="gpu3", text=text))


@pytest.mark.slurm
def test_lab_list_and_get_nodes(fresh_lab) -> None:  # type: ignore[no-untyped-def]
    c = fresh_lab.client()
    nodes = c.list_nodes()
    assert [n.name for n in nodes] == fresh_lab.node_names
    assert all(n.state == "idle" and not n.flags for n in nodes)
    assert [n.name for n in c.list_nodes("n[2-3]")] == ["n2", "n3"]
    assert c.get_node("n4").partitions == ("debug",)
    with pytest.raises(SlurmError, match="not found"):
        c.get_node("n99")


@pytest.mark.slurm
def test_lab_drain_reason_in_sinfo_and_scontrol(fresh_lab) -> None:  # type: ignore[no-untyped-def]
    c = fresh_lab.client()
    reason = our_reason()
    c.drain("n2", reason)
    node = c.get_node("n2")
    assert (node.state, node.flags, node.reason, node.reason_user) == (
        "idle",
        frozenset({"DRAIN"}),
        reason,
        "root",
    )
    assert abs(node.reason_time.timestamp() - time.time()) < 60
    sinfo = run(["sinfo", "-R", "-h", "-o", "%E|%U|%N"], timeout=10, env=fresh_lab.env()).stdout
    assert f"{reason}|root(0)|n2" in sinfo.splitlines()
    assert parse_reason(node.reason).code == "XID79"
    # the json source sees the same
    jnode = fresh_lab.client(node_source="json").get_node("n2")
    assert (jnode.reason, jnode.flags, jnode.reason_user) == (reason, node.flags, "root")
    c.update_reason("n2", our_reason(text="updated"))
    assert c.get_node("n2").reason.endswith(":: updated")
    c.down("n3", reason)
    assert c.get_node("n3").down
    c.resume("n2")
    c.resume("n3")
    fresh_lab.wait_idle(["n2", "n3"])


@pytest.mark.slurm
def test_lab_show_config_and_version(lab) -> None:  # type: ignore[no-untyped-def]
    c = lab.client()
    conf = c.show_config()
    # 22.05 prints "Yes", 24.11 and 26.05 "yes" (seen in the matrix roots)
    assert conf["MULTIPLE_SLURMD"] == ("Yes" if c.version() < (24, 11, 0) else "yes")
    assert "nohold_on_prolog_fail" in conf["SchedulerParameters"]
    assert c.version()[:2] == tuple(int(x) for x in conf["SLURM_VERSION"].split(".")[:2])
    assert c.ping()


@pytest.mark.slurm
@pytest.mark.skipif(shutil.which("scontrol") is None, reason="slurm-client not installed")
def test_real_unreachable_controller_is_unavailable(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # scontrol itself retries a refused connection for several seconds; our
    # timeout cuts that short and counts it as "unreachable".
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=nowhere\nSlurmctldHost=localhost\nSlurmctldPort=9\n"
        "NodeName=x CPUs=1\nPartitionName=p Nodes=ALL\n"
    )
    c = CliClient(slurm_conf=str(conf), retries=1, backoff=0.01, timeout=1.5)
    t0 = time.monotonic()
    with pytest.raises(SlurmUnavailable, match="after 2 attempt"):
        c.list_nodes()
    assert time.monotonic() - t0 < 10


JOB = """#!/bin/bash
trap 'echo "USR1 $SLURM_JOB_ID" >> "$OUT/usr1.$SLURM_JOB_ID"' USR1
echo "start restart=${SLURM_RESTART_COUNT:-0} host=$(hostname)" >> "$OUT/start.$SLURM_JOB_ID"
while true; do sleep 0.2 & wait $!; done
"""


def write_job(job_dir: Path) -> Path:
    script = job_dir / "job.sh"
    script.write_text(JOB)
    script.chmod(0o755)
    return script


@pytest.mark.slurm
def test_lab_signal_batch_reaches_trap(fresh_lab, job_dir, sbatch) -> None:  # type: ignore[no-untyped-def]
    c = fresh_lab.client()
    jid = sbatch(write_job(job_dir), f"--export=ALL,OUT={job_dir}", "-o", f"{job_dir}/%j.out")
    job = fresh_lab.wait_job(jid, lambda j: j.state == "RUNNING", timeout=20)
    assert job.user == "sltest" and job.batch_host in fresh_lab.node_names
    start = job_dir / f"start.{jid}"
    fresh_lab.wait_for(start.exists, 10, what="job start")
    assert [j.job_id for j in c.jobs_on_node(job.batch_host)] == [jid]
    assert jid in [j.job_id for j in c.list_jobs(["RUNNING"])]
    c.signal_job(jid, "USR1", SignalTarget.BATCH)
    marker = job_dir / f"usr1.{jid}"
    fresh_lab.wait_for(marker.exists, 10, what="USR1 trap")
    assert marker.read_text().strip() == f"USR1 {jid}"
    assert c.get_job(jid).state == "RUNNING"  # trapped, still running
    c.set_job_comment(jid, "slurm-hooks: grace 120s")
    c.set_job_comment(jid, "slurm-hooks/1 admin note", admin=True)
    job = c.get_job(jid)
    assert (job.comment, job.admin_comment) == (
        "slurm-hooks: grace 120s",
        "slurm-hooks/1 admin note",
    )
    c.cancel(jid)
    fresh_lab.wait_for(lambda: not c.jobs_on_node(job.batch_host), 30, what="cancel")


@pytest.mark.slurm
def test_lab_requeue_runs_again(fresh_lab, job_dir, sbatch) -> None:  # type: ignore[no-untyped-def]
    c = fresh_lab.client()
    jid = sbatch(
        write_job(job_dir), "--requeue", f"--export=ALL,OUT={job_dir}", "-o", f"{job_dir}/%j.out"
    )
    job = fresh_lab.wait_job(jid, lambda j: j.state == "RUNNING", timeout=20)
    assert job.requeue is True and job.restart_count == 0
    start = job_dir / f"start.{jid}"
    fresh_lab.wait_for(start.exists, 10, what="first start")
    first_host = job.batch_host
    c.drain(first_host, our_reason())  # so the restart goes elsewhere
    c.requeue(jid)
    again = fresh_lab.wait_job(
        jid, lambda j: j.state == "RUNNING" and j.restart_count == 1, timeout=45
    )
    assert again.batch_host != first_host
    fresh_lab.wait_for(lambda: len(start.read_text().splitlines()) == 2, 10, what="second start")
    lines = start.read_text().splitlines()
    assert lines == [
        f"start restart=0 host={first_host}",
        f"start restart=1 host={again.batch_host}",
    ]


@pytest.mark.slurm
def test_lab_requeue_refused_for_no_requeue_job(fresh_lab, job_dir, sbatch) -> None:  # type: ignore[no-untyped-def]
    c = fresh_lab.client()
    jid = sbatch(
        write_job(job_dir), "--no-requeue", f"--export=ALL,OUT={job_dir}", "-o", "/dev/null"
    )
    fresh_lab.wait_job(jid, lambda j: j.state == "RUNNING", timeout=20)
    assert c.get_job(jid).requeue is False
    with pytest.raises(SlurmError, match="presently disabled"):
        c.requeue(jid)
    with pytest.raises(SlurmError, match="Invalid job id"):
        c.get_job("999999")
