"""The XID line parser against real pasted lines and every log format."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurm_hooks.detect.xid.parser import (
    MALFORMED,
    NOT_XID,
    OVERSIZED,
    classify_line,
    nvlink5_info,
    nvlink_registers,
    parse_line,
    recovery_action,
)
from slurm_hooks.detect.xid.pci import normalise_pci

DATA = Path(__file__).parent / "data" / "kernel-logs" / "real-lines.json"
REAL = json.loads(DATA.read_text())


def test_sample_set_is_big_enough() -> None:
    assert len(REAL["events"]) >= 30
    assert len({e["line"] for e in REAL["events"]}) == len(REAL["events"])
    assert all(e["source"] for e in REAL["events"] + REAL["not_events"])


@pytest.mark.parametrize("case", REAL["events"], ids=lambda c: c["line"][:60])
def test_real_lines(case: dict) -> None:
    ev = parse_line(case["line"], year=2026)
    assert ev is not None, case["line"]
    assert ev.kind == case["kind"]
    assert ev.xid == case["xid"]
    assert ev.pci == case["pci"]
    assert ev.pid == case["pid"]
    assert ev.name == case["name"]
    assert ev.message and "NVRM" not in ev.message
    for key in ("monotonic", "wall", "seq", "switch"):
        if key in case:
            assert (
                getattr(ev, key) == pytest.approx(case[key])
                if isinstance(case[key], float)
                else getattr(ev, key) == case[key]
            )


@pytest.mark.parametrize("case", REAL["not_events"], ids=lambda c: c["line"][:60])
def test_real_non_xid_nvrm_lines_are_not_events(case: dict) -> None:
    assert parse_line(case["line"]) is None


BODY = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


def _local(y: int, mo: int, d: int, h: int, mi: int, s: int) -> float:
    return datetime(y, mo, d, h, mi, s).timestamp()


@pytest.mark.parametrize(
    ("line", "mono", "wall"),
    [
        (f"[12345.678901] {BODY}", 12345.678901, None),
        (f"[    3.000001] {BODY}", 3.000001, None),
        (f"[Tue Mar  3 10:11:12 2026] {BODY}", None, _local(2026, 3, 3, 10, 11, 12)),
        (f"Mar  3 10:11:12 host kernel: {BODY}", None, _local(2026, 3, 3, 10, 11, 12)),
        (
            f"Mar 13 10:11:12 host kernel: [12345.678] {BODY}",
            12345.678,
            _local(2026, 3, 13, 10, 11, 12),
        ),
        (
            f"2026-03-03T10:11:12.123456+00:00 host kernel: {BODY}",
            None,
            datetime(2026, 3, 3, 10, 11, 12, 123456, tzinfo=UTC).timestamp(),
        ),
        (
            f"2026-03-03T10:11:12.123456789Z host kernel: {BODY}",
            None,
            datetime(2026, 3, 3, 10, 11, 12, 123456, tzinfo=UTC).timestamp(),
        ),
        (
            f"2026-03-03T10:11:12+0100 host kernel: {BODY}",
            None,
            datetime(2026, 3, 3, 9, 11, 12, tzinfo=UTC).timestamp(),
        ),
        (f"<3>Mar  3 10:11:12 host kernel: {BODY}", None, _local(2026, 3, 3, 10, 11, 12)),
        (f"6,1234,5678901,-;{BODY}", 5.678901, None),
        (BODY, None, None),
        (f"kernel: {BODY}", None, None),
    ],
)
def test_every_prefix(line: str, mono: float | None, wall: float | None) -> None:
    ev = parse_line(line, year=2026)
    assert ev is not None
    assert (ev.xid, ev.pci, ev.pid, ev.name) == (79, "0000:3b:00.0", 1234, "python")
    assert ev.message == "GPU has fallen off the bus."
    assert ev.monotonic == (pytest.approx(mono) if mono is not None else None)
    assert ev.wall == (pytest.approx(wall) if wall is not None else None)


def test_kmsg_record_sequence() -> None:
    ev = parse_line(f"3,42,100,-;{BODY}")
    assert ev is not None and ev.seq == 42


@pytest.mark.parametrize(
    ("pid_part", "pid", "name"),
    [
        ("pid=1234, name=python, ", 1234, "python"),
        ("pid='<unknown>', name=<unknown>, ", None, None),
        ("pid=<unknown>, name=<unknown>, ", None, None),
        ("pid=<n/a>, name=<unknown>, ", None, None),
        ("pid=1234, ", 1234, None),
        ("", None, None),
        ("pid=77, name=nvc:[driver], ", 77, "nvc:[driver]"),
        ("pid=5, name=pt_main_thread, ", 5, "pt_main_thread"),
    ],
)
def test_pid_and_name_forms(pid_part: str, pid: int | None, name: str | None) -> None:
    ev = parse_line(f"NVRM: Xid (PCI:0000:3b:00): 13, {pid_part}Graphics Exception: ESR 0x1=0x2")
    assert ev is not None
    assert (ev.pid, ev.name) == (pid, name)
    assert ev.message == "Graphics Exception: ESR 0x1=0x2"


def test_old_driver_form_without_pci_prefix() -> None:
    ev = parse_line("NVRM: Xid (0000:03:00): 13, 0003 00000000 0000a1c0 00000144 00000000 00000000")
    assert ev is not None
    assert (ev.xid, ev.pci, ev.pid) == (13, "0000:03:00.0", None)
    assert ev.message.startswith("0003 00000000")


def test_sxid() -> None:
    ev = parse_line(
        "[ 12.5] nvidia-nvswitch0: SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)"
    )
    assert ev is not None
    assert (ev.kind, ev.xid, ev.pci, ev.switch, ev.code) == (
        "sxid",
        12028,
        "0000:86:00.0",
        "nvidia-nvswitch0",
        "SXID12028",
    )
    assert ev.message.startswith("Non-fatal, Link 32")
    assert ev.monotonic == 12.5


def test_journal_json_text_message() -> None:
    rec = {
        "__CURSOR": "s=0123;i=42;b=abc;m=1;t=2;x=3",
        "__REALTIME_TIMESTAMP": "1772532672123456",
        "__MONOTONIC_TIMESTAMP": "12345678901",
        "_BOOT_ID": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
        "_TRANSPORT": "kernel",
        "PRIORITY": "4",
        "SYSLOG_IDENTIFIER": "kernel",
        "MESSAGE": BODY,
    }
    # journalctl -o json puts spaces around the colons; both must work.
    for text in (json.dumps(rec), json.dumps(rec, separators=(", ", " : "))):
        ev = parse_line(text)
        assert ev is not None
        assert (ev.xid, ev.pci, ev.pid) == (79, "0000:3b:00.0", 1234)
        assert ev.wall == pytest.approx(1772532672.123456)
        assert ev.monotonic == pytest.approx(12345.678901)
        assert ev.boot_id == rec["_BOOT_ID"]
        assert ev.cursor == rec["__CURSOR"]


def test_journal_json_byte_array_message() -> None:
    # journald stores messages with non-printable bytes as arrays of numbers.
    raw = BODY.encode() + b"\xff\x01"
    text = (
        '{ "__CURSOR" : "s=1", "_TRANSPORT" : "kernel", "MESSAGE" : [ '
        + ", ".join(str(b) for b in raw)
        + " ] }"
    )
    ev = parse_line(text)
    assert ev is not None
    assert ev.xid == 79 and ev.pid == 1234
    assert ev.message.startswith("GPU has fallen off the bus.")


def test_journal_json_non_xid_and_broken() -> None:
    assert classify_line('{"MESSAGE": "usb 1-1: new device"}') == NOT_XID
    assert classify_line('{"MESSAGE": "NVRM: Xid (PCI:0000:3b:00): 79, GPU') == MALFORMED
    assert classify_line('{"MESSAGE": [1, 2, "x"]}') == MALFORMED


def test_newer_forms_details() -> None:
    ev = parse_line(
        "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
    )
    assert ev is not None
    ra = recovery_action(ev.message)
    assert ra is not None and (ra.code, ra.text, ra.previous) == (1, "GPU Reset Required", 0)
    # the short form some drivers print
    ra2 = recovery_action("GPU recovery action changed to 0x2 (Node Reboot Required)")
    assert ra2 is not None and (ra2.code, ra2.previous) == (2, None)
    regs = nvlink_registers(
        "NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"
    )
    assert regs == (14, (0, 0, 0x10000, 0, 0, 0, 0))
    assert nvlink_registers("NVLink: fatal error detected on link 2") is None
    info = nvlink5_info(
        "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)"
    )
    assert info is not None
    assert (info.subcode, info.fatal, info.link, info.intr_info, info.error_status) == (
        "RLW_RXPIPE",
        False,
        13,
        0x0409A0C2,
        8,
    )
    info2 = nvlink5_info("NETIR_INT  Fatal   XC0 i0 Link -1")
    assert info2 is not None and info2.fatal and info2.link == -1 and info2.intr_info is None


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: Xid (PCI:0000:3b:00): 7",  # truncated before the comma
        "NVRM: Xid (PCI:0000:3b:00): ,",
        "NVRM: Xid (PCI:0000:3b:00",
        "NVRM: Xid",
        "nvidia-nvswitch0: SXid (PCI:0000:86:00.0): abc, x",
    ],
)
def test_truncated_lines_are_malformed_not_events(line: str) -> None:
    assert classify_line(line) == MALFORMED


def test_mentions_that_are_not_records() -> None:
    assert classify_line("python3: CUDA error, see dmesg for Xid") == NOT_XID
    assert classify_line("kernel: random text") == NOT_XID


def test_oversized() -> None:
    assert classify_line(BODY + "x" * 100_000) == OVERSIZED


def test_interleaved_line_keeps_first_record_only() -> None:
    line = BODY + "[1.0] NVRM: Xid (PCI:0000:86:00): 48, pid=9, name=y, DBE"
    ev = parse_line(line)
    assert ev is not None and ev.xid == 79 and ev.message == "GPU has fallen off the bus."


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("PCI:0000:3b:00", "0000:3b:00.0"),
        ("0000:3B:00", "0000:3b:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("00000000:3B:00.0", "0000:3b:00.0"),
        (b"00000000:86:00.0", "0000:86:00.0"),
        ("3b:00", "0000:3b:00.0"),
        ("0010:01:00", "0010:01:00.0"),
        ("00010001:c1:00.1", "10001:c1:00.1"),
        ("...", None),
        ("", None),
        ("zz:00", None),
        (None, None),
    ],
)
def test_normalise_pci(raw: str | bytes | None, want: str | None) -> None:
    assert normalise_pci(raw) == want


def test_mig_instance_xid_names_its_physical_gpu():
    """A MIG instance's XID (driver form ``PCI:<bus> GPU-I:<gi>``) is
    attributed to the physical GPU's bus id, and the instance is kept."""
    from slurm_hooks.detect.xid.parser import XidEvent, parse_line

    ev = parse_line(
        "[ 1234.5] NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=1234, name=python, "
        "Contained: CE User Channel (0x2). RST: No"
    )
    assert isinstance(ev, XidEvent)
    assert ev.pci == "0000:01:00.0"
    assert ev.gpu_instance == 5
    assert ev.raw_pci == "0000:01:00 GPU-I:05"
    plain = parse_line("[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.")
    assert isinstance(plain, XidEvent) and plain.pci == "0000:3b:00.0"
    assert plain.gpu_instance is None
