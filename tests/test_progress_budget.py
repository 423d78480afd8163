"""A progress pass costs what the node's jobs need, not what users create (issue #27).

Thousands of directories of jobs that do not run here cost one Slurm read
of the node's jobs (kept until a new directory appears) and no file read;
suspects ask Slurm ``max_job_reads`` at a time, in turn; files, bytes and
CPU per pass are capped; what was skipped or refused is counted."""

from __future__ import annotations

import os
import pwd
import time
from types import SimpleNamespace

from slurm_hooks_lab.hostile import hash_bomb, nested_json, records, string_bomb

from slurm_hooks.agent.progress_pass import ProgressPass
from slurm_hooks.core import hostlist
from slurm_hooks.core.errors import JobGone
from slurm_hooks.core.model import JobInfo
from slurm_hooks.detect.progress.settings import ProgressConfig

ME = pwd.getpwuid(os.getuid()).pw_name


class CountingSlurm:
    def __init__(self, jobs: list[JobInfo]):
        self.jobs = {j.job_id: j for j in jobs}
        self.listed = 0
        self.asked: list[str] = []

    def jobs_on_node(self, name):  # type: ignore[no-untyped-def]
        self.listed += 1
        return [j for j in self.jobs.values() if hostlist.contains(j.nodes, name)]

    def get_job(self, job_id):  # type: ignore[no-untyped-def]
        self.asked.append(job_id)
        if job_id not in self.jobs:
            raise JobGone(job_id)
        return self.jobs[job_id]

    def get_node(self, name):  # type: ignore[no-untyped-def]
        return SimpleNamespace(name=name, state="allocated", flags=frozenset(), reason=None)


class Engine:
    actor = "test"

    def __init__(self, slurm):  # type: ignore[no-untyped-def]
        self.slurm = slurm
        self.handled: list = []
        self.audit = SimpleNamespace(record=lambda *a, **k: None)

    def handle(self, node, findings):  # type: ignore[no-untyped-def]
        self.handled.append(list(findings))
        return []

    def notify(self, alert):  # type: ignore[no-untyped-def]
        pass


def job(jid: str) -> JobInfo:
    # Two nodes: this node's one rank gone (``stall``) is then a stall the
    # other node may wait on (on a job of this node alone, its step's end).
    return JobInfo(jid, ME, "RUNNING", "n[1-2]", batch_host="n1")


def stall(base, jid: str, node: str = "n1") -> None:  # type: ignore[no-untyped-def]
    d = base / jid
    d.mkdir(exist_ok=True)
    (d / "rank0.log").write_text(records(jid, node, time.time(), pid=2**22 + 3))


def make(tmp_path, jobs, **cfg):  # type: ignore[no-untyped-def]
    slurm = CountingSlurm(jobs)
    s = ProgressConfig(dir=str(tmp_path), hang_s=10.0, first_step_allowance_s=0.0,
                       drain_hang=False, **cfg)  # fmt: skip
    return ProgressPass(s, "n1", Engine(slurm)), slurm


def test_thousands_of_foreign_directories_cost_one_read_and_no_file(tmp_path):
    for i in range(3000):
        stall(tmp_path, str(900_000 + i))
    p, slurm = make(tmp_path, [])
    p.run()
    assert (slurm.listed, slurm.asked) == (1, [])
    assert p.last.dirs == 3000 and p.last.skipped_dirs == 3000 and p.last.files == 0
    p.run()
    assert slurm.listed == 1, "kept while no new directory appears"
    stall(tmp_path, "1234567")
    p.run()
    assert slurm.listed == 2 and slurm.asked == [], "a new directory: one read again"
    assert p.totals.skipped_dirs == 9001 and p.totals.slurm_reads == 2


def test_suspects_ask_slurm_in_turn_at_most_max_job_reads_a_pass(tmp_path):
    ids = ["501", "502", "503"]
    for jid in ids:
        stall(tmp_path, jid)
    p, slurm = make(tmp_path, [job(j) for j in ids], max_job_reads=1)
    for n in range(3):
        p.run()
        assert len(slurm.asked) == n + 1
        assert p.last.deferred_suspects == 2
    assert sorted(slurm.asked) == ids, "every suspect had its turn"


def test_files_bytes_and_cpu_are_capped_and_counted(tmp_path):
    ids = [str(700 + i) for i in range(10)]
    for jid in ids:
        stall(tmp_path, jid)
    p, slurm = make(tmp_path, [job(j) for j in ids], max_files=4)
    p.run()
    assert p.last.files == 4 and p.last.judged == 4
    assert p.last.skipped_dirs == 6  # the rest wait for the next pass
    p.run()
    assert p.last.judged == 4 and p.totals.files == 8
    q, _ = make(tmp_path, [job(j) for j in ids], max_bytes=150)
    q.run()
    assert q.last.bytes <= 150 and q.last.skipped_files + q.last.skipped_dirs >= 8


def test_hostile_evidence_is_rejected_and_reported(tmp_path):
    jid = "4242"
    stall(tmp_path, jid)
    d = tmp_path / jid
    (d / "fr_0.json").write_bytes(nested_json())
    (d / "fr_1").write_bytes(hash_bomb(3000))
    (d / "fr_2").write_bytes(string_bomb())
    (d / "ras.txt").write_bytes(b'{"c":' + nested_json() + b"}")
    (d / "rank1.log").write_bytes(nested_json() + b"\n")
    p, _ = make(tmp_path, [job(jid)], flight_recorder_path=f"{tmp_path}/{{job}}/fr_*",
                ras_path=f"{tmp_path}/{{job}}/ras*.txt")  # fmt: skip
    p.run()
    why = {os.path.basename(path): w for path, w in p.last.rejected}
    assert set(why) == {"fr_0.json", "fr_1", "fr_2", "ras.txt"}, why
    assert all(w.startswith("rejected: ") for w in why.values())
    assert "nested" in why["fr_0.json"] and "int" in why["fr_1"] and "bytes" in why["fr_2"]
    assert p.totals.rejected == 4


def test_the_cost_counters_are_served(tmp_path):
    from prometheus_client import CollectorRegistry, generate_latest

    from slurm_hooks.act.metrics import PhaseRun
    from slurm_hooks.agent.watch import _WatchCollector

    stall(tmp_path, "900001")
    p, _ = make(tmp_path, [])
    p.run()
    p.totals.crashes = 2
    watcher = SimpleNamespace(progress=p, phase_run=lambda: PhaseRun("watch", (), 0.0, 0.0))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_WatchCollector(watcher))
    text = generate_latest(reg).decode()
    assert "slurm_hooks_progress_skipped_dirs_total 1.0" in text
    assert "slurm_hooks_progress_slurm_reads_total 1.0" in text
    assert "slurm_hooks_progress_crashes_total 2.0" in text


def test_a_symlinked_job_directory_is_never_read(tmp_path):
    real = tmp_path / "elsewhere"
    real.mkdir()
    (real / "rank0.log").write_text(records("4243", "n1", time.time(), pid=2**22 + 3))
    base = tmp_path / "progress"
    base.mkdir()
    (base / "4243").symlink_to(real)
    p, slurm = make(base, [job("4243")])
    p.run()
    assert slurm.listed == 1 and p.last.files == 0 and p.last.judged == 0 and slurm.asked == []
