"""An XID line a user wrote (``logger``, the journal, /dev/kmsg with a user
facility) is never an event: it is counted as ``not_kernel``.  The kernel's
own forms (tests/data/kernel-logs) still parse.

The hostile lines are what a syslog daemon writes for ``logger``: RFC 3164
``Mmm dd hh:mm:ss host tag[pid]: msg`` (rsyslog's traditional file format),
rsyslog's ISO 8601 ``RSYSLOG_FileFormat``, ``journalctl -o json`` records
with a non-kernel ``_TRANSPORT`` (systemd.journal-fields(7)), /dev/kmsg
records written from user space (facility 1, Documentation/ABI/testing/dev-kmsg)
and ``dmesg --decode`` of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_hooks.detect.xid.parser import NOT_KERNEL, XidEvent, classify_line
from slurm_hooks.detect.xid.scan import scan_text
from slurm_hooks.detect.xid.source import FileSource, scan_new

BODY = "NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
DATA = Path(__file__).parent / "data" / "kernel-logs" / "real-lines.json"

USER_LINES = [
    f"Nov 29 11:35:27 host user: {BODY}",  # logger, default tag (the user name)
    f"Nov 29 11:35:27 host sltest: {BODY}",
    f"Nov 29 11:35:27 host root[1234]: {BODY}",  # logger -i
    f"Nov  9 01:02:03 host kernel[1234]: {BODY}",  # logger -t kernel -i
    f"Nov 29 11:35:27 host sltest: kernel: {BODY}",  # tag faked in the message
    f"Nov 29 11:35:27 host sltest: [ 5123.456789] {BODY}",
    f"2026-11-29T11:35:27.123456+00:00 host sltest: {BODY}",
    f"2026-11-29T11:35:27.123456+00:00 host python3[77]: kernel: {BODY}",
    f"<13>Nov 29 11:35:27 host sltest: {BODY}",
    f"<11>Nov 29 11:35:27 host kernel: {BODY}",  # facility user, tag kernel
    f"host root[1234]: {BODY}",
    f"sltest: {BODY}",
    f"12,4711,9370042162,-;{BODY}",  # /dev/kmsg record written by a program
    f"14,4712,9370042163,-;{BODY}",
    f"user  :warn  : [ 123.456] {BODY}",  # dmesg --decode of such a record
    f"Nov 29 11:35:27 host sltest: {BODY} {BODY}",  # glued copies
    # The kernel's own records quote user text: fs/exec.c (Linux 5.18+) logs,
    # once a boot, pr_warn_once("process '%s' launched '%s' with NULL argv:
    # empty string added") with the path a user passed to execve().
    f"4,9921,9370042162,-;process 'sh' launched '/tmp/u/{BODY}' with NULL argv: empty string added",
    f"[ 5123.456789] process 'sh' launched '/tmp/u/{BODY}' with NULL argv: empty string added",
    f"Nov 29 11:35:27 n2 kernel: [ 5123.456789] process 'sh' launched '/tmp/u/{BODY}'",
    f"kern  :warn  : [ 123.456] process 'sh' launched '/tmp/u/{BODY}'",
    f"[ 5123.456789] [ 5123.456790] x {BODY}",
]
KERNEL_LINES = [
    BODY,
    f"[ 5123.456789] {BODY}",
    f"[Mon Sep 14 04:48:45 2026] {BODY}",
    f"2026-11-29T11:35:27,123456+00:00 {BODY}",
    f"Nov 29 11:35:27 n2 kernel: [ 5123.456789] {BODY}",
    f"Nov 29 11:35:27 n2 kernel: {BODY}",
    f"2026-11-29T11:35:27.123456+00:00 n2 kernel: {BODY}",
    f"kernel: {BODY}",
    f"4,9921,9370042162,-;{BODY}",
    f"kern  :err   : [ 123.456] {BODY}",
]


@pytest.mark.parametrize("line", USER_LINES)
def test_user_written_xid_lines_are_not_events(line):
    assert classify_line(line) == NOT_KERNEL
    res = scan_text(line + "\n")
    assert res.aggregates == () and res.stats.events == 0
    assert res.stats.not_kernel >= 1


@pytest.mark.parametrize("line", KERNEL_LINES)
def test_kernel_forms_still_parse(line):
    ev = classify_line(line, year=2026)
    assert isinstance(ev, XidEvent) and ev.xid == 79


def test_every_recorded_real_kernel_line_still_parses():
    for case in json.loads(DATA.read_text())["events"]:
        ev = classify_line(case["line"], year=2026)
        assert isinstance(ev, XidEvent), case["line"]


@pytest.mark.parametrize("transport", ["syslog", "journal", "stdout", "audit", None])
def test_journal_records_of_other_transports_are_ignored(transport):
    rec = {"__CURSOR": "s=1", "MESSAGE": BODY, "SYSLOG_IDENTIFIER": "kernel", "PRIORITY": "3"}
    if transport:
        rec["_TRANSPORT"] = transport
    assert classify_line(json.dumps(rec)) == NOT_KERNEL
    res = scan_text(json.dumps(rec) + "\n")
    assert res.stats.events == 0 and res.stats.not_kernel == 1
    rec["_TRANSPORT"] = "kernel"
    assert isinstance(classify_line(json.dumps(rec)), XidEvent)


def test_a_kmsg_header_of_thousands_of_digits_is_no_record():
    """Found by the fuzz test (seed 3360057693's neighbour): a priority of
    5,000 digits reached ``int()``, which refuses past 4,300 (ValueError)."""
    line = "1" * 5000 + "4,1,2,-;" + BODY
    assert classify_line(line, max_line=10_000) == NOT_KERNEL


def test_a_kernel_journal_record_quoting_an_xid_is_not_one():
    # The transport is the kernel's, but the XID is the user's file name.
    quoted = f"process 'sh' launched '/tmp/u/{BODY}' with NULL argv: empty string added"
    rec = {"__CURSOR": "s=1", "MESSAGE": quoted, "_TRANSPORT": "kernel", "PRIORITY": "4"}
    assert classify_line(json.dumps(rec)) == NOT_KERNEL
    assert scan_text(json.dumps(rec) + "\n").stats.events == 0
    rec["MESSAGE"] = BODY
    assert isinstance(classify_line(json.dumps(rec)), XidEvent)


def test_a_syslog_file_with_a_user_line_drains_nothing(tmp_path):
    log = tmp_path / "syslog"
    log.write_text(
        "\n".join(
            [
                f"Nov 29 11:35:27 n1 sltest: {BODY}",
                "Nov 29 11:35:28 n1 systemd[1]: Started foo.service.",
                f"Nov 29 11:35:29 n1 kernel: [ 5123.456789] {BODY.replace('79,', '48,')}",
            ]
        )
        + "\n"
    )
    res = scan_new(FileSource(str(log)), str(tmp_path / "state"))
    assert [a.xid for a in res.aggregates] == [48]
    assert res.stats.not_kernel == 1
