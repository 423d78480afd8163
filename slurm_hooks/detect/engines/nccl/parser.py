"""Parser for nccl-tests output (``all_reduce_perf`` and its siblings).

Formats handled, all from real runs:

* the header ``# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor)
  warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0``, with or
  without the leading ``#`` (old versions), and the newer ``# nccl-tests
  version 2.20.0 ...`` line;
* device lines ``#  Rank  0 Group  0 Pid  28307 on gpu59 device  0 [0x16] NAME``
  (``Group`` missing in old versions, PCI as ``[0000:04:00]`` in new ones);
* the table: ``size count type redop root`` then ``time algbw busbw #wrong``
  out-of-place and in-place; ``root`` is missing in old versions, whose last
  column is ``error`` (a max deviation, not a count); ``#wrong`` is ``N/A``
  with ``-c 0`` and ``-1`` in some builds without validation;
* ``# Out of bounds values : 0 OK`` and ``# Avg bus bandwidth    : 123.45``
  (optionally followed by ``OK``/``FAILED`` with ``NCCL_TESTS_MIN_BW``);
* ``srun --label`` (``0: ``) and ``mpirun --tag-output`` (``[1,0]<stdout>:``)
  prefixes;
* failures: ``host: Test NCCL failure common.cu:1234 'unhandled cuda error ...'``,
  ``Test CUDA failure``, `` .. host pid 123: Test failure common.cu:401``,
  ``Test timeout``, ``NCCL WARN ...``, crashes and MPI aborts.
"""

from __future__ import annotations

import logging
import re

from slurm_hooks.detect.engines.nccl.model import NcclDevice, NcclRow, NcclRun

log = logging.getLogger(__name__)

_PREFIX = re.compile(r"^(?:\s*\d+:\s|\[\d+,\d+\]<std(?:out|err)>:\s?)")
_HEADER_KV = re.compile(
    r"(nThread|nGpus|minBytes|maxBytes) (\d+)|step: (\d+)\((factor|bytes)\)"
    r"|(warmup iters|agg iters|iters|validation|graph): (\d+)"
)
_VERSION = re.compile(r"nccl-tests version (\S+)")
_DEVICE = re.compile(
    r"Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]+)\]\s+(.*)$"
)
_OOB = re.compile(r"Out of bounds values\s*:\s*(\d+)")
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)")
_REDUCING = re.compile(r"Reducing maxBytes to (\d+)")
_NCCL_FAIL = re.compile(r"Test (NCCL|CUDA) failure (\S+) '?(.*?)'?\s*$")
_TEST_FAIL = re.compile(r"Test failure (\S+)")
_TEST_TIMEOUT = re.compile(r"Test timeout \((\d+)s\)")
_NCCL_WARN = re.compile(r"NCCL WARN (.*)$")
_CRASH = re.compile(
    r"(Segmentation fault|Bus error|core dumped|Aborted|terminate called|"
    r"Process received signal|MPI_ABORT was invoked|mpirun noticed that process|"
    r"srun: error:|CANCELLED AT|DUE TO TIME LIMIT|Killed)"
)
_INT = re.compile(r"^-?\d+$")


def _strip(line: str) -> str:
    return _PREFIX.sub("", line, count=1)


def _float(tok: str) -> float | None:
    try:
        return float(tok)
    except ValueError:
        return None


def _wrong(tok: str, counts: bool) -> int | None:
    if not counts or tok.upper() == "N/A":
        return None
    v = _float(tok)
    if v is None or v < 0:
        return None
    return int(v)


def _row(tokens: list[str], counts: bool) -> NcclRow | None:
    """A table row, or None when ``tokens`` is not one.  Read from both
    ends: size and count first, eight result columns last, and between them
    type, redop and (in newer versions) root."""
    if len(tokens) < 10 or not (_INT.match(tokens[0]) and _INT.match(tokens[1])):
        return None
    tail = tokens[-8:]
    mid = tokens[2:-8]
    if len(mid) > 3:
        return None
    nums = [_float(t) for t in (tail[0], tail[1], tail[2], tail[4], tail[5], tail[6])]
    if any(v is None for v in nums):
        return None
    if not (tail[3].upper() == "N/A" or _float(tail[3]) is not None):
        return None
    if not (tail[7].upper() == "N/A" or _float(tail[7]) is not None):
        return None
    dtype = mid[0] if len(mid) >= 1 else ""
    redop = mid[1] if len(mid) >= 2 else ""
    root = int(mid[2]) if len(mid) >= 3 and _INT.match(mid[2]) else None
    t0, a0, b0, t1, a1, b1 = (float(v) for v in nums)  # type: ignore[arg-type]
    return NcclRow(
        size=int(tokens[0]),
        count=int(tokens[1]),
        type=dtype,
        redop=redop,
        root=root,
        oop_time_us=t0,
        oop_algbw=a0,
        oop_busbw=b0,
        oop_wrong=_wrong(tail[3], counts),
        ip_time_us=t1,
        ip_algbw=a1,
        ip_busbw=b1,
        ip_wrong=_wrong(tail[7], counts),
    )


def parse_nccl_tests(text: str, *, engine: str = "nccl-tests") -> NcclRun:
    """Parse the combined output of one nccl-tests run.  Never raises on
    odd input; what cannot be read is left out and the run is only
    ``completed`` when its final summary was printed."""
    rows: list[NcclRow] = []
    devices: dict[int, NcclDevice] = {}
    header: dict[str, str] = {}
    errors: list[str] = []
    warnings: list[str] = []
    avg: float | None = None
    oob: int | None = None
    counts_wrong = True
    saw_avg = False
    timed_out: float | None = None
    for raw in text.splitlines():
        line = _strip(raw.rstrip("\r"))
        body = line.lstrip("#").strip()
        if not body:
            continue
        if line.lstrip().startswith("#") or not _INT.match(body.split()[0]):
            if m := _AVG.search(body):
                saw_avg = True
                avg = _float(m.group(1))
                if avg is not None and avg != avg:  # nan: no row ran
                    avg = None
                if "FAILED" in body[m.end() :]:
                    errors.append(f"average bus bandwidth below NCCL_TESTS_MIN_BW: {m.group(1)}")
                continue
            if m := _OOB.search(body):
                oob = int(m.group(1))
                continue
            if m := _DEVICE.search(body):
                rank = int(m.group(1))
                devices[rank] = NcclDevice(
                    rank=rank,
                    host=m.group(3),
                    device=int(m.group(4)),
                    pci=m.group(5),
                    name=m.group(6).strip(),
                )
                continue
            if "nThread" in body and "nGpus" in body:
                for km in _HEADER_KV.finditer(body):
                    if km.group(1):
                        header[km.group(1)] = km.group(2)
                    elif km.group(3):
                        header["step"] = f"{km.group(3)}({km.group(4)})"
                    else:
                        header[km.group(5).replace(" ", "_")] = km.group(6)
                continue
            if m := _VERSION.search(body):
                header["version"] = m.group(1)
                continue
            if m := _REDUCING.search(body):
                header["reduced_max_bytes"] = m.group(1)
                continue
            if "size" in body and "count" in body and "busbw" in body:
                counts_wrong = "#wrong" in body
                continue
            if m := _NCCL_FAIL.search(body):
                errors.append(f"{m.group(1)} failure at {m.group(2)}: {m.group(3)}".strip())
                continue
            if m := _TEST_TIMEOUT.search(body):
                errors.append(f"test timeout ({m.group(1)}s)")
                timed_out = float(m.group(1)[:9])  # its own -T: stopped for not ending
                continue
            if m := _TEST_FAIL.search(body):
                errors.append(f"test failure at {m.group(1)}")
                continue
            if m := _NCCL_WARN.search(body):
                warnings.append(m.group(1).strip())
                continue
            if m := _CRASH.search(body):
                errors.append(body[:300])
                continue
            continue
        row = _row(body.split(), counts_wrong)
        if row is not None:
            rows.append(row)
        else:
            log.debug("nccl parser skipped line %r", body[:120])

    nranks: int | None = len(devices) or None
    if nranks is None and "nThread" in header and "nGpus" in header:
        nranks = int(header["nThread"]) * int(header["nGpus"])
    return NcclRun(
        engine=engine,
        rows=tuple(rows),
        devices=tuple(devices[k] for k in sorted(devices)),
        nranks=nranks,
        avg_busbw=avg,
        out_of_bounds=oob,
        completed=saw_avg,
        errors=tuple(errors),
        warnings=tuple(warnings),
        header=tuple(header.items()),
        counts_wrong=counts_wrong,
        killed_after=timed_out,
    )
