"""The chunked scanner: folding floods, chunk boundaries, hostile input."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest

from slurm_hooks.detect.xid.scan import (
    MAX_AGGREGATES,
    Scanner,
    normalise_message,
    scan_path,
    scan_stream,
    scan_text,
)

REAL = json.loads((Path(__file__).parent / "data" / "kernel-logs" / "real-lines.json").read_text())

X79 = "[100.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
NOISE = "[100.000002] mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE"


def test_real_lines_scanned_as_a_log() -> None:
    lines = [e["line"] for e in REAL["events"]] + [n["line"] for n in REAL["not_events"]]
    random.Random(7).shuffle(lines)
    res = scan_text("\n".join(lines) + "\n", year=2026)
    assert res.event_count == len(REAL["events"])
    assert res.stats.events == len(REAL["events"])
    assert res.stats.lines == len(lines)
    # the one malformed "Xid (79)" line is counted, not turned into an event
    assert res.stats.malformed == 1


def test_flood_folds_into_distinct_events() -> None:
    # One cluster logged ~800,000 XID 95 lines that were 29 distinct events.
    distinct = [
        f"NVRM: Xid (PCI:0000:{0x18 + 0x10 * (i % 8):02x}:00): 95, pid={1000 + i}, name=python3, "
        f"Uncontained: FBHUB. RST: Yes, D-RST: No"
        for i in range(29)
    ]
    rng = random.Random(1)
    lines = []
    for n in range(60_000):
        stamp = f"[{1000 + n / 1000:.6f}] "
        lines.append(stamp + rng.choice(distinct))
        if n % 7 == 0:
            lines.append(
                stamp
                + "NVRM: Xid (PCI:0000:18:00): 45, pid=1000, name=python3, Ch 0000000"
                + str(n % 10)
            )
    res = scan_text("\n".join(lines) + "\n")
    x95 = [a for a in res.aggregates if a.xid == 95]
    assert len(x95) == 29
    assert sum(a.count for a in x95) == 60_000
    x45 = [a for a in res.aggregates if a.xid == 45]
    assert len(x45) == 1  # channel ids differ, the event is the same
    first = min(x95, key=lambda a: a.first_monotonic or 0)
    assert first.first_monotonic == pytest.approx(1000.0)
    assert all(a.last_monotonic >= a.first_monotonic for a in x95)


def test_normalise_message_keeps_small_numbers() -> None:
    a = normalise_message(
        "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address"
    )
    b = normalise_message(
        "Graphics SM Warp Exception on (GPC 2, TPC 0, SM 0): Out Of Range Address"
    )
    assert a != b
    assert normalise_message("Ch 00000008, intr 10000000") == normalise_message(
        "Ch 0000000c, intr 10000000"
    )
    assert normalise_message("faulted @ 0x17_00592000") == normalise_message(
        "faulted @ 0x0_00000000"
    )


@pytest.mark.parametrize("chunk", [1, 7, 64, 4096])
def test_chunk_boundaries_do_not_lose_or_split_lines(chunk: int) -> None:
    text = "\n".join([NOISE, X79, NOISE * 3, X79.replace("79,", "48,"), "short", X79]) + "\n"
    sc = Scanner()
    consumed = sc.feed_stream(io.BytesIO(text.encode()), chunk=chunk)
    assert consumed == len(text.encode())
    aggs = sc.aggregates()
    assert sorted((a.xid, a.count) for a in aggs) == [(48, 1), (79, 2)]
    assert sc.stats.lines == 6


def test_unterminated_last_line_final_and_not() -> None:
    data = (NOISE + "\n" + X79).encode()
    sc = Scanner()
    assert sc.feed_stream(io.BytesIO(data), final=False) == len(NOISE) + 1
    assert sc.stats.events == 0
    sc2 = Scanner()
    assert sc2.feed_stream(io.BytesIO(data), final=True) == len(data)
    assert sc2.stats.events == 1


def test_hostile_input_is_skipped_and_counted(tmp_path: Path) -> None:
    rng = random.Random(42)
    garbage = bytes(rng.randrange(256) for _ in range(300_000))
    parts = [
        garbage,
        b"\n",
        X79.encode() + b"\n",
        # non-UTF-8 bytes inside a real record: still an event, counted
        b"[1.0] NVRM: Xid (PCI:0000:3b:00): 13, pid=5, name=py\xff\xfethon, Graphics Exception\n",
        # a megabyte line holding an XID-looking text: skipped
        b"x" * 2_000_000 + b" NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n",
        # truncated record
        b"[2.0] NVRM: Xid (PCI:0000:3b:00): 7\n",
        # NUL padding left by a crash before a real record
        b"\x00\x00\x00\x00[3.0] NVRM: Xid (PCI:0000:86:00): 48, pid=7, name=z, DBE\n",
        # two writers interleaved on one line
        b"[4.0] NVRM: Xid (PCI:0000:3b:00): 31, pid=8, name=a, MMU Fault[4.1] NVRM: Xid (PCI:0000:af:00): 94, pid=9, name=b, Contained\n",
        b"\xc3\x28 Xid garbage \xa0\xa1\n",
        X79.encode()[:40],  # cut off mid-record at EOF
    ]
    data = b"".join(parts)
    for chunk in (4096, 1 << 20):
        sc = Scanner()
        sc.feed_stream(io.BytesIO(data), chunk=chunk)
        got = sorted((a.xid, a.pci, a.count) for a in sc.aggregates())
        assert got == [
            (13, "0000:3b:00.0", 1),
            (31, "0000:3b:00.0", 1),
            (48, "0000:86:00.0", 1),
            (79, "0000:3b:00.0", 1),
            (94, "0000:af:00.0", 1),
        ], chunk
        st = sc.stats
        assert st.oversized >= 1
        assert st.malformed >= 2  # truncated record, record cut at EOF
        assert st.decode_errors >= 1
        assert st.binary == 1
        assert st.interleaved == 1
        name13 = next(a.name for a in sc.aggregates() if a.xid == 13)
        assert name13 is not None and "\ufffd" in name13


def test_random_bytes_never_crash_or_invent_events() -> None:
    rng = random.Random(3)
    for _ in range(30):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 20_000)))
        # sprinkle needles so the slow path runs too
        blob = blob.replace(b"\x00\x01", b"Xid").replace(b"\x02\x03", b"NVRM: Xid (")
        res = scan_stream(io.BufferedReader(io.BytesIO(blob)))
        assert res.stats.events == 0


def test_distinct_cap_folds_without_losing_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    import slurm_hooks.detect.xid.scan as scan_mod

    monkeypatch.setattr(scan_mod, "MAX_AGGREGATES", 5)
    lines = [
        f"NVRM: Xid (PCI:0000:3b:00): 13, pid={i}, name=p, Graphics Exception" for i in range(50)
    ]
    lines.append("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.")
    res = scan_text("\n".join(lines))
    assert res.event_count == 51
    assert {a.xid for a in res.aggregates} == {13, 79}
    assert res.stats.folded > 0
    assert MAX_AGGREGATES == 10_000


def test_journal_json_file_with_byte_arrays(tmp_path: Path) -> None:
    body = b"NVRM: Xid (PCI:0000:3b:00): 63, pid='<unknown>', name=<unknown>, Row Remapper \x1b"
    recs = [
        {
            "__CURSOR": "s=1",
            "__REALTIME_TIMESTAMP": "1700000000000000",
            "MESSAGE": "usb 1-1: reset",
        },
        {
            "__CURSOR": "s=2",
            "__REALTIME_TIMESTAMP": "1700000001000000",
            "_TRANSPORT": "kernel",
            "MESSAGE": list(body),
        },
        {
            "__CURSOR": "s=3",
            "__REALTIME_TIMESTAMP": "1700000002000000",
            "_TRANSPORT": "kernel",
            "MESSAGE": X79.split("] ", 1)[1],
        },
    ]
    p = tmp_path / "journal.json"
    p.write_text("".join(json.dumps(r, separators=(", ", " : ")) + "\n" for r in recs))
    res = scan_path(str(p))
    assert sorted(a.xid for a in res.aggregates) == [63, 79]
    assert next(a for a in res.aggregates if a.xid == 63).first_wall == pytest.approx(1700000001.0)
