"""What a job's user writes for the progress pass can cost it a refusal,
never the pass: numbers Python cannot print, a parser that fails, many large
dumps held in the parse cache, a ``ranks`` that is not a list, a directory
made under another user's job id.  The lab plays these for real
(tests/test_trust_lab.py); here each one is pinned where it is handled."""

from __future__ import annotations

import json
import os
import pickle
import time

import pytest

from slurm_hooks.detect.progress import gather
from slurm_hooks.detect.progress.bounded import Rejected
from slurm_hooks.detect.progress.external import (
    MAX_GROUPS,
    FrDump,
    parse_ras,
    read_flight_recorder,
)
from slurm_hooks.detect.progress.gather import is_job_dir, read_hints

BIG = 1 << 20_000  # str() of it raises: past 4,300 digits


def _fr(tmp_path, job: str, name: str, doc: object) -> str:
    d = tmp_path / job
    d.mkdir(exist_ok=True)
    (d / name).write_bytes(pickle.dumps(doc, protocol=4))
    return f"{tmp_path}/{{job}}/fr_*"


@pytest.fixture(autouse=True)
def _empty_cache():
    gather._PARSED.clear()
    gather._parsed_weight = 0
    yield
    gather._PARSED.clear()
    gather._parsed_weight = 0


@pytest.mark.parametrize(
    "doc",
    [
        {"version": BIG},
        {"version": "2.5", "pg_status": {"0": {"last_enqueued_collective": BIG}}},
        {"version": "2.5", "entries": [{"pg_id": BIG, "collective_seq_id": 1}]},
    ],
)
def test_a_dump_of_numbers_python_cannot_print_is_refused(tmp_path, doc):
    pattern = _fr(tmp_path, "71", "fr_0", doc)
    got = read_flight_recorder(pickle.dumps(doc, protocol=4))
    assert isinstance(got, Rejected) and "bits" in got.why
    assert read_hints("", pattern, "71", uid=os.getuid()) == []


def test_a_parser_that_fails_costs_a_refusal_not_the_pass(tmp_path, monkeypatch, caplog):
    pattern = _fr(tmp_path, "72", "fr_0", {"version": "2.5"})

    def broken(data: bytes) -> object:
        raise RuntimeError("a parser bug a user's file found")

    monkeypatch.setattr(gather, "read_flight_recorder", broken)
    budget = gather.Budget(max_files=10, max_bytes=1 << 20, max_cpu_s=5.0)
    with gather.metering(budget):
        assert read_hints("", pattern, "72", uid=os.getuid()) == []
    assert [why for _, why in budget.rejected] == ["rejected: the parser failed (RuntimeError)"]
    assert "the fr parser failed" in caplog.text


def test_a_refused_files_name_reaches_the_log_as_one_printable_line(tmp_path, caplog):
    """The file's name is its user's to choose: a newline posing as a log
    line of ours, an escape sequence for an admin's terminal."""
    name = "fr_\n2026-12-06 CRITICAL slurm_hooks.act.drain: n1 drained by alice\x1b[2K 0"
    pattern = _fr(tmp_path, "74", name, {"version": BIG})
    budget = gather.Budget(max_files=10, max_bytes=1 << 20, max_cpu_s=5.0)
    with gather.metering(budget):
        assert read_hints("", pattern, "74", uid=os.getuid()) == []
    [(path, _)] = budget.rejected
    assert path.isprintable() and "CRITICAL" in path
    [msg] = [r.getMessage() for r in caplog.records if "fr_" in r.getMessage()]
    assert msg.isprintable() and "drained by alice" in msg


def test_the_parse_cache_is_bounded_by_what_it_holds(tmp_path, monkeypatch):
    monkeypatch.setattr(gather, "_PARSED_WEIGHT_MAX", 8 * (1 + MAX_GROUPS))
    groups = {str(g): {"last_enqueued_collective": g} for g in range(4 * MAX_GROUPS)}
    for n in range(20):
        _fr(tmp_path, "73", f"fr_{n}", {"version": "2.5", "pg_status": groups})
    read_hints("", f"{tmp_path}/{{job}}/fr_*", "73", uid=os.getuid())
    held = [v for v in gather._PARSED.values() if isinstance(v, FrDump)]
    assert 0 < len(held) <= 8 and all(len(d.pg_status) == MAX_GROUPS for d in held)
    assert "0" in held[0].pg_status  # the default group is among those kept
    weight = sum(gather._weight(v) for v in gather._PARSED.values())
    assert weight == gather._parsed_weight <= gather._PARSED_WEIGHT_MAX


def test_ras_json_whose_ranks_is_not_a_list_is_read_as_none():
    doc = {"communicators": [{"ranks": 1, "size": 2}, {"ranks": "ab"}, {"ranks": None}]}
    report = parse_ras(json.dumps(doc))
    assert report.suspects == () and report.rejected is None


def test_ras_text_group_sizes_past_ten_digits_are_not_rows():
    text = "NCCL version 2.24.3\n    0  1  1  1  " + "9" * 5000 + "  1  1  1\n"
    assert parse_ras(text).suspects == ()


@pytest.mark.skipif(os.getuid() != 0, reason="chown needs root")
def test_a_directory_another_user_made_under_a_jobs_id_is_not_the_jobs(tmp_path):
    (tmp_path / "81").mkdir()
    os.chown(tmp_path / "81", 4242, 4242)
    assert is_job_dir(tmp_path, "81")  # a directory...
    assert not is_job_dir(tmp_path, "81", uid=0)  # ...but not the job owner's
    assert is_job_dir(tmp_path, "81", uid=4242)
    (tmp_path / "82").symlink_to(tmp_path / "81")
    assert not is_job_dir(tmp_path, "82", uid=4242)


def test_the_first_pass_reads_only_the_owners_directory(tmp_path):
    """The pass's first read (before any Slurm question) trusts a job's
    directory and records only if the job's owner made them."""
    from test_progress_budget import job, make, stall

    stall(tmp_path, "91")
    p, slurm = make(tmp_path, [job("91")])
    p.run()
    assert p.last.judged == 1
    if os.getuid() == 0:
        os.chown(tmp_path / "91", 4242, 4242)
        for f in (tmp_path / "91").iterdir():
            os.chown(f, 4242, 4242)
        time.sleep(0.01)
        p.run()
        assert p.last.judged == 0 and p.last.files == 0


@pytest.mark.skipif(os.getuid() != 0, reason="chown needs root")
def test_a_progress_directory_a_user_made_is_moved_aside_and_made_roots(tmp_path, caplog):
    """The first job on a node could make the shared directory its user's:
    its owner could then rename every other job's directory.  The passes
    refuse it, and the watcher moves it aside and makes it root's (1777)."""
    import stat

    base = tmp_path / "progress"
    base.mkdir()
    os.chmod(base, 0o1777)
    os.chown(base, 4242, 4242)
    (base / "55").mkdir()
    assert gather.base_stat(base) is None and "not a directory root owns" in caplog.text
    assert gather.claim_base(base)
    st = os.lstat(base)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o1777) and list(base.iterdir()) == []
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("progress.untrusted-")]
    assert (aside / "55").is_dir()  # kept for the admin
    # A symlink, and a world-writable directory without the sticky bit.
    link = tmp_path / "link"
    link.symlink_to(base)
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o777)
    assert gather.base_stat(link) is None and gather.base_stat(loose) is None
    assert gather.claim_base(link) and not os.path.islink(link)


@pytest.mark.skipif(os.getuid() != 0, reason="chown needs root")
def test_a_pass_over_a_directory_a_user_owns_reads_nothing(tmp_path):
    from test_progress_budget import job, make, stall

    stall(tmp_path, "93")
    p, slurm = make(tmp_path, [job("93")])
    os.chmod(tmp_path, 0o1777)
    os.chown(tmp_path, 4242, 4242)
    p.run()
    assert (p.last.dirs, p.last.judged, slurm.listed) == (0, 0, 0)
    os.chown(tmp_path, 0, 0)
    p.run()
    assert p.last.judged == 1


@pytest.mark.skipif(os.getuid() != 0, reason="chown needs root")
def test_a_directory_another_user_made_under_a_future_jobs_id_is_moved_aside(tmp_path):
    """Job ids come in order: anyone may make ``<dir>/<id>`` for the id
    someone else's job gets next.  Before that job starts the prolog moves
    whatever is there and is not a real directory of the job's user aside."""
    from slurm_hooks.detect.progress.claim import claim_job_dir, progress_dir

    base = tmp_path / "progress"
    base.mkdir()
    os.chmod(base, 0o1777)
    owner, other = 4242, 4343
    (base / "100").mkdir()  # another user's
    os.chown(base / "100", other, other)
    os.mkfifo(base / "101")
    (base / "102").symlink_to(tmp_path)
    (base / "103").mkdir(mode=0o777)  # the owner's, but anyone may write it
    os.chmod(base / "103", 0o777)
    os.chown(base / "103", owner, owner)
    (base / "104").mkdir()  # the owner's own (a requeued job's): kept
    os.chown(base / "104", owner, owner)
    moved = [claim_job_dir(str(base), job, owner) for job in ("100", "101", "102", "103", "104")]
    assert [m is not None for m in moved] == [True, True, True, True, False]
    assert sorted(p.name for p in base.iterdir() if p.name.isdigit()) == ["104"]
    assert claim_job_dir(str(base), "105", owner) is None  # nothing there: the usual case
    os.chown(base, other, other)
    (base / "106").mkdir()
    assert claim_job_dir(str(base), "106", owner) is None  # a directory root does not own
    assert progress_dir({"enabled": False}) is None
    assert progress_dir({}) == "/dev/shm/slurm-hooks-progress"
    assert progress_dir({"dir": "relative"}) is None


@pytest.mark.skipif(os.getuid() != 0, reason="chown needs root")
def test_the_job_side_writer_never_fails_or_waits_on_what_another_user_made(tmp_path):
    """A directory another user made under the job's id, or a FIFO in the
    rank's file's place: the training goes on, without records (warned)."""
    from slurm_hooks.jobside.progress import Progress

    base = tmp_path / "progress"
    base.mkdir()
    os.chmod(base, 0o1777)
    (base / "200").mkdir()
    os.chown(base / "200", 4343, 4343)
    os.chmod(base / "200", 0o777)
    (base / "201").mkdir()
    os.mkfifo(base / "201" / "rank0.log")
    for job in ("200", "201"):
        with pytest.warns(RuntimeWarning, match="progress off"):
            p = Progress(str(base), job, 0)
        assert not p.enabled
        p.step(1)  # a no-op, never an error
    ok = Progress(str(base), "202", 0)
    assert ok.enabled and (base / "202" / "rank0.log").read_text().count("step=0") == 1


def test_a_users_fuse_mount_is_told_from_roots_and_from_other_file_systems(tmp_path):
    """``/proc/self/mountinfo`` as the kernel writes it (proc(5)): a FUSE
    mount a user made carries their ``user_id``; root's (an admin's sshfs)
    ``user_id=0``; a tmpfs is no FUSE at all."""
    from slurm_hooks.detect.progress.beneath import users_fuse

    info = tmp_path / "mountinfo"
    info.write_text(
        "30 25 0:26 / /dev/shm rw,nosuid,nodev shared:4 - tmpfs tmpfs rw,inode64\n"
        "45 30 0:40 / /dev/shm/p/101 rw,nosuid,nodev,relatime shared:9 - fuse /tmp/src"
        " rw,user_id=1001,group_id=1001,default_permissions,allow_other\n"
        "46 30 0:41 / /dev/shm/p/102 rw,relatime - fuse.sshfs host:/x rw,user_id=1002,group_id=1002\n"
        "47 30 0:42 / /mnt/site rw,relatime - fuse.sshfs host:/y rw,user_id=0,group_id=0,allow_other\n"
    )
    assert users_fuse(45, str(info)) and users_fuse(46, str(info))
    assert not users_fuse(47, str(info))  # root's own
    assert not users_fuse(30, str(info))  # tmpfs
    assert not users_fuse(99, str(info))  # no such mount (gone)
    assert users_fuse(45, str(tmp_path / "unreadable"))  # cannot tell: do not look
