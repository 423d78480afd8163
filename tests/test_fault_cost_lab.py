"""O(1) Slurm work per fault on the real lab: the CLI backend's single-node
read says what the whole-table read says, and asks slurmctld for one node;
a node's jobs are signalled without reading the job table from 24.05.

Unit counts are in test_fault_cost.py; bench/bench_fault_cost.py measures
every hook path at 16 to 16,400 nodes.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from slurm_hooks.core.errors import JobGone
from slurm_hooks.core.reason import DrainReason, format_reason
from slurm_hooks.slurm.base import SignalTarget
from slurm_hooks.slurm.cli_backend import CliClient

_RPC = re.compile(r"^\s+(REQUEST_\w+)\s+\(\s*\d+\)\s+count:(\d+)", re.MULTILINE)


def rpcs(c: CliClient) -> Counter[str]:
    return Counter({m.group(1): int(m.group(2)) for m in _RPC.finditer(c.raw("sdiag"))})


def same_as_table(c: CliClient, name: str) -> None:
    (table,) = [n for n in c.list_nodes() if n.name == name]
    single = c.get_node(name)
    assert single == table, (single, table)


@pytest.mark.slurm
def test_single_node_read_equals_the_table_and_is_one_rpc(fresh_lab) -> None:  # type: ignore[no-untyped-def]
    c = fresh_lab.client()
    same_as_table(c, "n1")
    reason = format_reason(DrainReason("XID79", "deadbeef", "a | b; c=d [x@y]", "gpu3"))
    c.drain("n2", reason)
    c.set_node_comment("n2", "rack 4 | psu")
    same_as_table(c, "n2")
    c.down("n3", "admin: bad fan")
    same_as_table(c, "n3")
    before = rpcs(c)
    node = c.get_node("n2")
    delta = rpcs(c) - before
    delta["REQUEST_STATS_INFO"] -= 1  # the sdiag that measured it
    assert node.reason == reason and node.comment == "rack 4 | psu"
    assert +delta == Counter({"REQUEST_NODE_INFO_SINGLE": 1, "REQUEST_PARTITION_INFO": 1})
    for n in ("n2", "n3"):
        c.set_node_comment(n, "")
        c.resume(n)
    fresh_lab.wait_idle(["n2", "n3"])


@pytest.mark.slurm
def test_jobs_on_node_reads_no_node_table(fresh_lab, sbatch, job_dir) -> None:  # type: ignore[no-untyped-def]
    c = fresh_lab.client()
    script = job_dir / "sleep.sh"
    script.write_text("#!/bin/sh\nsleep 300\n")
    jid = sbatch(script, "-w", "n2", "-o", "/dev/null")
    fresh_lab.wait_job(jid, lambda j: j.state == "RUNNING")
    before = rpcs(c)
    jobs = c.jobs_on_node("n2")
    delta = rpcs(c) - before
    assert [j.job_id for j in jobs] == [jid] and c.jobs_on_node("n1") == []
    assert delta["REQUEST_NODE_INFO"] == 0 and delta["REQUEST_JOB_INFO"] == 1


@pytest.mark.slurm
@pytest.mark.parametrize("via", ["scancel", "auto"])
def test_signal_jobs_reads_the_job_table_once_then_not_at_all(
    fresh_lab, sbatch, job_dir, via
) -> None:  # type: ignore[no-untyped-def]
    """One ``scancel --ctld`` for a node's jobs: from 24.05 one
    REQUEST_KILL_JOBS and no job-table read, up to 23.11 one table read
    (scancel loads it for any ``--signal``); a job that ended is JobGone
    either way (scancel exits 0 on the one-request path: its line tells).
    ``auto`` below 24.05: libslurm's slurm_kill_job2, one REQUEST_KILL_JOB
    per job and no table read, the ended job JobGone from its line."""
    c = fresh_lab.client(signal_via=via)
    done = job_dir / "true.sh"
    done.write_text("#!/bin/sh\ntrue\n")
    ended = sbatch(done, "-w", "n2", "-n1", "-o", "/dev/null")
    fresh_lab.wait_job(ended, lambda j: j.state == "COMPLETED")
    script = job_dir / "sleep.sh"
    script.write_text("#!/bin/sh\nsleep 300\n")
    running = [sbatch(script, "-w", "n2", "-n1", "-o", "/dev/null") for _ in range(2)]
    for jid in running:
        fresh_lab.wait_job(jid, lambda j: j.state == "RUNNING")
    before = rpcs(c)
    out = c.signal_jobs([*running, ended], "CONT", SignalTarget.BATCH)
    delta = rpcs(c) - before
    assert out[running[0]] is None and out[running[1]] is None
    assert isinstance(out[ended], JobGone)
    if c.version() >= (24, 5, 0):
        assert delta["REQUEST_JOB_INFO"] == 0 and delta["REQUEST_KILL_JOBS"] == 1
    elif via == "auto":
        assert delta["REQUEST_JOB_INFO"] == 0 and delta["REQUEST_KILL_JOB"] == 3
    else:
        assert delta["REQUEST_JOB_INFO"] == 1
    with pytest.raises(JobGone):
        c.signal_job(ended, "CONT", SignalTarget.STEPS)
