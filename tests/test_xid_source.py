"""Incremental reading: file cursors (rotation, truncation), /dev/kmsg
(sequence numbers, reboots, overwritten records), the journal."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from slurm_hooks.core.errors import KernelLogError
from slurm_hooks.detect.probes.commands import CommandResult
from slurm_hooks.detect.xid.cursor import load_cursor, state_path, write_json_atomic
from slurm_hooks.detect.xid.source import FileSource, JournalSource, KmsgSource, scan_new

X = "[{t}] NVRM: Xid (PCI:0000:3b:00): {xid}, pid={pid}, name=python, msg {t}\n"


def line(xid: int, t: float = 1.0, pid: int = 1) -> str:
    return X.format(xid=xid, t=f"{t:.6f}", pid=pid)


def xids(res: Any) -> list[int]:
    return sorted(a.xid for a in res.aggregates for _ in range(a.count))


# -- plain file ---------------------------------------------------------------


def test_file_incremental(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", str(tmp_path / "state")
    log.write_text(line(13) + "noise\n")
    src = FileSource(str(log))
    assert xids(scan_new(src, state)) == [13]
    assert xids(scan_new(src, state)) == []  # nothing new
    with log.open("a") as f:
        f.write(line(79, 2.0) + line(48, 3.0))
    res = scan_new(src, state)
    assert xids(res) == [48, 79] and res.reset is None
    assert xids(scan_new(src, state)) == []


def test_file_partial_line_waits_for_its_newline(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", str(tmp_path / "state")
    full = line(79)
    log.write_text(full[:30])
    src = FileSource(str(log))
    assert xids(scan_new(src, state)) == []
    with log.open("a") as f:
        f.write(full[30:])
    assert xids(scan_new(src, state)) == [79]


def test_file_rotation_new_inode(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", str(tmp_path / "state")
    log.write_text(line(13) * 5)
    src = FileSource(str(log))
    scan_new(src, state)
    os.rename(log, tmp_path / "kern.log.1")
    log.write_text(line(79))  # smaller than the old offset, new inode
    res = scan_new(src, state)
    assert res.reset == "rotated"
    assert xids(res) == [79]


def test_file_truncation(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", str(tmp_path / "state")
    log.write_text(line(13) * 5)
    src = FileSource(str(log))
    scan_new(src, state)
    with log.open("r+") as f:  # same inode, cut to zero (copytruncate)
        f.truncate(0)
        f.write(line(95))
    res = scan_new(src, state)
    assert res.reset == "truncated"
    assert xids(res) == [95]


def test_file_corrupt_cursor_starts_over(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", str(tmp_path / "state")
    log.write_text(line(79))
    src = FileSource(str(log))
    path = state_path(state, "cursor-" + src.name)
    os.makedirs(os.path.dirname(path))
    Path(path).write_text("{not json")
    assert xids(scan_new(src, state)) == [79]
    write_json_atomic(path, {"offset": "x"})
    res = scan_new(src, state)
    assert res.reset == "corrupt" and xids(res) == [79]


def test_file_first_run_end(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", str(tmp_path / "state")
    log.write_text(line(79))
    src = FileSource(str(log), first_run="end")
    assert xids(scan_new(src, state)) == []
    with log.open("a") as f:
        f.write(line(48))
    assert xids(scan_new(src, state)) == [48]


def test_file_missing(tmp_path: Path) -> None:
    with pytest.raises(KernelLogError):
        scan_new(FileSource(str(tmp_path / "nope")), str(tmp_path / "s"))


def test_cursor_written_atomically(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", str(tmp_path / "state")
    log.write_text(line(79))
    src = FileSource(str(log))
    scan_new(src, state)
    cur = load_cursor(state, src.name)
    assert cur is not None and cur["offset"] == log.stat().st_size
    assert [p for p in os.listdir(os.path.join(state, "xid")) if p.startswith(".tmp")] == []


# -- /dev/kmsg ----------------------------------------------------------------


class FakeKmsg:
    """Serves records one per read like /dev/kmsg; scripted errors in between."""

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)

    def read(self, fd: int, size: int) -> bytes:
        if not self.script:
            raise BlockingIOError(errno.EAGAIN, "no more")
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item


def rec(seq: int, msg: str, usec: int = 1000) -> bytes:
    return f"4,{seq},{usec},-;{msg}\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n".encode()


BODY79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=p, GPU has fallen off the bus."
BODY48 = "NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=p, DBE"


def kmsg(tmp_path: Path, boot: str, script: list[Any]) -> KmsgSource:
    (tmp_path / "boot_id").write_text(boot + "\n")
    fake = FakeKmsg(script)
    return KmsgSource(
        "/dev/fake-kmsg",
        boot_id_path=str(tmp_path / "boot_id"),
        read=fake.read,
        opener=lambda p: os.open(os.devnull, os.O_RDONLY),
    )


def test_kmsg_incremental_by_sequence(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    first = [rec(1, "Linux version"), rec(2, BODY79, 5_000_000), rec(3, "usb")]
    res = scan_new(kmsg(tmp_path, "boot-a", first), state)
    assert xids(res) == [79]
    ev = res.aggregates[0]
    assert ev.first_monotonic == pytest.approx(5.0)
    assert res.cursor == {"boot_id": "boot-a", "seq": 3}
    # same boot: the buffer is re-read from the start, old records skipped
    again = first + [rec(4, BODY48)]
    res2 = scan_new(kmsg(tmp_path, "boot-a", again), state)
    assert xids(res2) == [48] and res2.stats.lost == 0


def test_kmsg_reboot_resets(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    scan_new(kmsg(tmp_path, "boot-a", [rec(i, "x") for i in range(1, 50)]), state)
    res = scan_new(kmsg(tmp_path, "boot-b", [rec(1, BODY79), rec(2, "x")]), state)
    assert res.reset == "reboot"
    assert xids(res) == [79]


def test_kmsg_overwritten_records_counted(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    scan_new(kmsg(tmp_path, "b", [rec(1, "a"), rec(2, "b")]), state)
    # records 3..9 were overwritten before this run; one EPIPE mid-read
    script = [rec(10, BODY79), BrokenPipeError(errno.EPIPE, "overrun"), rec(12, BODY48)]
    res = scan_new(kmsg(tmp_path, "b", script), state)
    assert xids(res) == [48, 79]
    assert res.stats.lost == 7 + 1
    assert res.cursor == {"boot_id": "b", "seq": 12}


def test_kmsg_continuation_lines_ignored_and_garbage_counted(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    script = [
        b"garbage without header",
        rec(1, BODY79),
        OSError(errno.EINVAL, "too big"),
        rec(2, "x"),
    ]
    res = scan_new(kmsg(tmp_path, "b", script), state)
    assert xids(res) == [79]
    assert res.stats.malformed == 1 and res.stats.oversized == 1


def test_kmsg_first_run_end_reads_nothing_old(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    src = kmsg(tmp_path, "b", [rec(1, BODY79)])
    src.first_run = "end"
    assert xids(scan_new(src, state)) == []
    res = scan_new(kmsg(tmp_path, "b", [rec(1, BODY79), rec(2, BODY48)]), state)
    assert xids(res) == [48]


def test_kmsg_unreadable(tmp_path: Path) -> None:
    src = KmsgSource(str(tmp_path / "missing"), boot_id_path=str(tmp_path / "b"))
    with pytest.raises(KernelLogError):
        scan_new(src, str(tmp_path / "s"))


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="/dev/kmsg not readable here")
def test_real_dev_kmsg_reads_to_eagain(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    res = scan_new(KmsgSource(), state)
    assert res.stats.lines > 0
    assert res.cursor and res.cursor["seq"] >= 0
    res2 = scan_new(KmsgSource(), state)
    assert res2.reset is None and res2.stats.lines < res.stats.lines + 1000


# -- journal --------------------------------------------------------------------


def journal_lines(*recs: dict[str, Any]) -> str:
    return "".join(json.dumps(r, separators=(", ", " : ")) + "\n" for r in recs)


def test_journal_after_cursor(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    calls: list[list[str]] = []
    outputs = [
        journal_lines(
            {"__CURSOR": "c1", "MESSAGE": "usb"},
            {
                "__CURSOR": "c2",
                "__REALTIME_TIMESTAMP": "1700000000000000",
                "_BOOT_ID": "b",
                "_TRANSPORT": "kernel",
                "MESSAGE": BODY79,
            },
        ),
        "",
        journal_lines({"__CURSOR": "c3", "_TRANSPORT": "kernel", "MESSAGE": list(BODY48.encode())}),
    ]

    def run(argv: list[str], *, timeout: float, check: bool) -> CommandResult:
        calls.append(argv)
        assert timeout > 0 and check is False
        return CommandResult(tuple(argv), 0, outputs.pop(0), "", 0.01)

    src = JournalSource(run=run)
    assert xids(scan_new(src, state)) == [79]
    assert xids(scan_new(src, state)) == []
    assert xids(scan_new(src, state)) == [48]
    assert calls[0][:4] == ["journalctl", "-k", "-o", "json"] and "-b" in calls[0]
    assert calls[1][-2:] == ["--after-cursor", "c2"]
    assert calls[2][-2:] == ["--after-cursor", "c2"]  # empty output keeps the cursor
    assert load_cursor(state, "journal") == {"cursor": "c3"}


def test_journal_failure_is_an_error(tmp_path: Path) -> None:
    def run(argv: list[str], *, timeout: float, check: bool) -> CommandResult:
        return CommandResult(tuple(argv), 1, "", "Failed to open journal", 0.01)

    with pytest.raises(KernelLogError, match="Failed to open journal"):
        scan_new(JournalSource(run=run), str(tmp_path))


def test_scan_new_max_line(tmp_path: Path) -> None:
    """Lines over ``max_line`` are skipped and counted; a larger limit than
    the 64 KiB default is honoured by the parser too."""
    big = (
        "[1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name="
        + "p" * 70_000
        + ", GPU has fallen off the bus.\n"
    )
    log = tmp_path / "kern.log"
    log.write_text(line(13) + big)
    res = scan_new(FileSource(str(log)), str(tmp_path / "a"))
    assert xids(res) == [13] and res.stats.oversized == 1
    res = scan_new(FileSource(str(log)), str(tmp_path / "b"), max_line=128 * 1024)
    assert xids(res) == [13, 79] and res.stats.oversized == 0
    res = scan_new(FileSource(str(log)), str(tmp_path / "c"), max_line=1024)
    assert xids(res) == [13] and res.stats.oversized == 1


def test_journal_max_line_applies_to_the_record(tmp_path: Path) -> None:
    msg = (
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name="
        + "p" * 2000
        + ", GPU has fallen off the bus."
    )
    rec = json.dumps(
        {
            "MESSAGE": msg,
            "_TRANSPORT": "kernel",
            "__CURSOR": "s=1",
            "__MONOTONIC_TIMESTAMP": "5000000",
        }
    )

    def run(argv: list[str], **kw: Any) -> CommandResult:
        return CommandResult(tuple(argv), 0, rec + "\n", "", 0.1)

    res = scan_new(JournalSource(run=run), str(tmp_path / "a"))
    assert xids(res) == [79]
    res = scan_new(JournalSource(run=run), str(tmp_path / "b"), max_line=1024)
    assert xids(res) == [] and res.stats.oversized == 1
