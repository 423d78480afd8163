"""NCCL RAS status output and PyTorch flight-recorder dumps: who the others wait for.  Pure.

Two outside views of a hung collective, each naming the rank that holds the
others up, parsed into :class:`Suspect` values the hang judge weighs after
its own /proc evidence (``judge.judge_hang(..., hints=...)``):

* **NCCL RAS** (NCCL 2.24+): the text status an ``ncclras`` client receives
  from the RAS socket (``localhost:28028``).  The lines we read, written by
  ``src/ras/client_support.cc``'s ``rasOutAppend`` formats (tests/data/nccl_ras/
  README.md): the ``DEAD`` and ``INCOMPLETE`` sections' ``Process <pid> on node
  <host> managing GPU<s> <list>`` lines; a communicator's ``#G-C (hash)
  INCOMPLETE`` block's ``Rank <r> -- GPU <g> managed by process <pid> on node
  <host>`` lines (ranks that did not answer); and a ``MISMATCH`` block's
  ``Rank <r> has launched up to operation <n> -- ...`` /
  ``Rank <r> has not launched any operations -- ...`` outliers beside
  ``<k> ranks have launched up to operation <m>``: the rank behind the others.
* **Flight recorder** (``TORCH_NCCL_TRACE_BUFFER_SIZE``): one dump per rank
  (``TORCH_FR_DUMP_TEMP_FILE`` / ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` prefix +
  global rank), a dict with ``version``, ``pg_config``, ``pg_status``
  (``last_enqueued_collective``, ``last_started_collective``,
  ``last_completed_collective`` per process group) and ``entries``
  (``collective_seq_id``, ``profiling_name``, ``state`` = scheduled | started
  | completed, ...).  The rank whose last *enqueued* collective on the default
  group is lowest, alone, is the one the others wait for: they entered the
  next collective, it never did.

Every byte was written by the job's user (or by a process of theirs), so
nothing here raises on hostile input, sizes are capped, and pickles are
loaded by :func:`safe_unpickle`, which refuses every global: no class is
ever constructed, no code runs - only dicts, lists, tuples, strings,
numbers, booleans and None come out (what the recorder writes).  JSON and
pickles go through ``bounded`` (size, items, depth, string length, memo and
CPU capped before anything is built); a refused file is a
:class:`~slurm_hooks.detect.progress.bounded.Rejected` with its reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurm_hooks.detect.progress.bounded import DEFAULT_LIMITS, Rejected, load_json, load_pickle

#: Bytes of one RAS output or flight-recorder dump parsed at most.
MAX_BYTES = DEFAULT_LIMITS.max_bytes
#: Suspects one RAS output may name (a communicator of every rank of a big job).
MAX_SUSPECTS = 4096
#: Process groups one flight-recorder dump keeps (the lowest ids: the default
#: group the judgement uses is among them); a real rank is in a few dozen.
MAX_GROUPS = 256
#: Integers past this many bits are not a sequence id or a pid: a user's file
#: gets no say in how long turning one into text takes (Python refuses
#: ``str()`` of an int over 4,300 digits with a ValueError).
_INT_BITS = 64


_UNSAFE = re.compile(r"[^A-Za-z0-9 _.,:#()/\-]")


def clean(text: str, limit: int = 200) -> str:
    """Text from a user's file made safe to log and show: plain characters only."""
    return _UNSAFE.sub("_", text)[:limit]


@dataclass(frozen=True)
class Suspect:
    """One outside source naming a process the others wait for."""

    #: NCCL RAS: "ras"; flight recorder: "flight_recorder".
    source: str
    #: Why: "dead", "no response", "behind" (a lower operation count / seq id).
    why: str
    rank: int | None = None
    pid: int | None = None
    host: str | None = None
    detail: str = ""
    #: Ranks in the communicator that ``rank`` is a rank of (RAS), when known.
    comm_size: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "detail", clean(self.detail))
        if self.host is not None:
            object.__setattr__(self, "host", clean(self.host, 255))


# -- NCCL RAS ------------------------------------------------------------------------------

_PROCESS = re.compile(r"^  Process (\d{1,10}) on node (\S{1,255}) managing GPUs? (.{0,256})$")
_RANK_GPU = re.compile(
    r"^  Rank (\d{1,9}) (?:(has launched up to operation (\d{1,20})|has not launched any operations)"
    r" )?-- (?:GPU (.{0,256}) managed by process (\d{1,10}) on node (\S{1,255})"
    r"|\[process information not found\])$"
)
_MAJORITY = re.compile(
    r"^  (\d{1,9}) ranks have (?:launched up to operation (\d{1,20})|not launched any operations)$"
)
_MISSING_224 = re.compile(r"^  The missing ranks?: ([0-9,]{1,4096})$")
_GROUP_ROW = re.compile(r"^ {0,4}(\d{1,5})  +\d+  +\d+  +\S+  +(\d{1,10})  +\d+  +\S+  +\S+$")
_COMM = re.compile(r"^#(\d+)-(\d+) \(([0-9a-f]{1,16})\) (INCOMPLETE|ERROR|MISMATCH)$")
_SECTIONS = ("DEAD", "INCOMPLETE", "TIMEOUT")


@dataclass(frozen=True)
class RasReport:
    """What one RAS status output says about missing, dead and lagging processes."""

    suspects: tuple[Suspect, ...] = ()
    #: The version line (``NCCL version 2.24.3+cuda12.6``), when present.
    version: str | None = None
    #: Communicators flagged, as ``#G-C (hash) KIND``.
    flagged: tuple[str, ...] = ()
    #: Why the output was refused (too large, too deep...); None when read.
    rejected: str | None = None


def parse_ras(text: str) -> RasReport:
    """The suspects in an ``ncclras`` status, text or ``-f json`` (anything
    else is ignored)."""
    if len(text) > MAX_BYTES:
        return RasReport(rejected=f"{len(text)} characters, more than {MAX_BYTES}")
    if text.lstrip()[:1] == "{":
        return _parse_ras_json(text)
    suspects: list[Suspect] = []
    sizes: dict[int, int] = {}  # summary table: group -> ranks per communicator
    size: int | None = None  # the current communicator block's
    flagged: list[str] = []
    version = None
    section: str | None = None  # DEAD / INCOMPLETE at top level, or a comm block's kind
    majority: int | None = None  # the op count most ranks of a MISMATCH block reached
    group: int | None = None  # the op count of the group the next rank lines belong to
    counted: list[tuple[int, Suspect]] = []  # this MISMATCH block's ranks and op counts

    def close_block() -> None:
        # One rank behind the rest names it; several behind name nobody.
        if counted:
            ops = [n for n, _ in counted]
            floor = majority if majority is not None else max(ops)
            low = [s for n, s in counted if n < floor and n == min(ops)]
            if len(low) == 1 and sum(1 for n in ops if n == min(ops)) == 1:
                suspects.append(low[0])
        counted.clear()

    for raw in text.splitlines():
        if len(suspects) + len(counted) >= MAX_SUSPECTS:
            break
        line = raw.rstrip("\r")
        if line.startswith("NCCL version ") and version is None:
            version = line[len("NCCL version ") :].strip()[:64]
            continue
        m = _COMM.match(line)
        if line in _SECTIONS or m:
            close_block()
            section, majority, group = (m.group(4) if m else line), None, None
            size = sizes.get(int(m.group(1))) if m else None
            if m:
                flagged.append(line)
            continue
        gm = _GROUP_ROW.match(line)
        if gm and section is None:
            sizes[int(gm.group(1))] = int(gm.group(2))
            continue
        if not line.startswith("  "):
            if line.strip():
                close_block()
                section, majority, group = None, None, None
            continue
        if section in ("DEAD", "INCOMPLETE"):
            pm = _PROCESS.match(line)
            if pm:
                why = "dead" if section == "DEAD" else "no response"
                suspects.append(Suspect("ras", why, None, int(pm.group(1)), pm.group(2),
                                        line.strip()[:200]))  # fmt: skip
                continue
        mm = _MISSING_224.match(line)
        if mm and section == "INCOMPLETE":  # NCCL 2.24: rank numbers only
            for r in [x for x in mm.group(1).split(",") if x][:4096]:
                suspects.append(Suspect("ras", "no response", int(r), None, None,
                                        line.strip()[:200], size))  # fmt: skip
            continue
        maj = _MAJORITY.match(line)
        if maj and section == "MISMATCH":
            group = int(maj.group(2) or 0)
            majority = group if majority is None else majority
            continue
        rm = _RANK_GPU.match(line)
        if rm is None:
            continue
        rank = int(rm.group(1))
        pid = int(rm.group(5)) if rm.group(5) else None
        host = rm.group(6)
        if section == "INCOMPLETE":  # a communicator's ranks that did not answer
            suspects.append(
                Suspect("ras", "no response", rank, pid, host, line.strip()[:200], size)
            )
        elif section == "MISMATCH":
            if rm.group(2) is not None:  # an outlier alone at its count
                ops = int(rm.group(3)) if rm.group(3) else 0
            elif group is not None:
                ops = group
            else:
                continue
            counted.append(
                (ops, Suspect("ras", "behind", rank, pid, host, line.strip()[:200], size))
            )
    close_block()
    return RasReport(tuple(suspects), version, tuple(flagged))


def _parse_ras_json(text: str) -> RasReport:
    """``ncclras -f json`` (``rasDumpCommsToJSON``): ``communicators[]`` with
    ``size``, ``ranks[]`` (``rank``, ``host``, ``pid``, ``collective_counts``)
    and ``missing_ranks[]`` (``status``: ``unresponsive``, ``considered_dead``)."""
    doc = load_json(text)
    if isinstance(doc, Rejected):
        return RasReport(rejected=doc.why)
    if not isinstance(doc, dict):
        return RasReport()
    suspects: list[Suspect] = []
    comms = doc.get("communicators")
    for c in comms[:4096] if isinstance(comms, list) else ():
        if not isinstance(c, dict):
            continue
        size = _int(c.get("size"), 0) or None
        missing = c.get("missing_ranks")
        for m in missing[:4096] if isinstance(missing, list) else ():
            if isinstance(m, dict) and _int(m.get("rank")) >= 0:
                st = m.get("status")
                dead = isinstance(st, dict) and st.get("considered_dead") is True
                why = "dead" if dead else "no response"
                pid = _int(m.get("pid"))
                suspects.append(Suspect("ras", why, _int(m.get("rank")), pid if pid > 0 else None,
                                        _text(m.get("host"), 255) or None,
                                        f"communicator {_text(c.get('hash'), 32)}: rank "
                                        f"{_int(m.get('rank'))} missing", size))  # fmt: skip
        listed = c.get("ranks")
        ranks = (
            [r for r in listed[:4096] if isinstance(r, dict)] if isinstance(listed, list) else []
        )
        ops: dict[str, dict[int, int]] = {}
        for r in ranks:
            counts = r.get("collective_counts")
            for op, n in counts.items() if isinstance(counts, dict) else ():
                ops.setdefault(str(op)[:32], {})[id(r)] = _int(n)
        for op, by in sorted(ops.items()):
            if len(by) < 2 or len(set(by.values())) < 2:
                continue
            low = min(by.values())
            alone = [i for i, n in by.items() if n == low]
            if len(alone) == 1:
                r = next(x for x in ranks if id(x) == alone[0])
                pid = _int(r.get("pid"))
                suspects.append(Suspect("ras", "behind", _int(r.get("rank")),
                                        pid if pid > 0 else None, _text(r.get("host"), 255) or None,
                                        f"rank {_int(r.get('rank'))} launched {low} {op} operation(s), "
                                        f"the others up to {max(by.values())}", size))  # fmt: skip
                break
    version = _text(doc.get("nccl_version"), 64)
    return RasReport(tuple(suspects[:MAX_SUSPECTS]), version or None, ())


# -- flight recorder -------------------------------------------------------------------------


def safe_unpickle(data: bytes) -> Any:
    """Load a pickle of plain containers only; raises ``ValueError`` for
    anything else (a class, a reduce call, a persistent id, garbage, or a
    pickle past :class:`~slurm_hooks.detect.progress.bounded.Limits`).
    Never the C unpickler: it allocates the lengths a pickle claims."""
    doc = load_pickle(data)
    if isinstance(doc, Rejected):
        raise ValueError(f"not a plain pickle: {doc.why}"[:200])
    return doc


@dataclass(frozen=True)
class FrDump:
    """One rank's flight-recorder dump, as far as the hang judge needs it."""

    version: str
    #: Per process group id: (last enqueued, last started, last completed) seq ids.
    pg_status: Mapping[str, tuple[int, int, int]]
    #: The newest entry's (collective_seq_id, profiling_name, state) per pg id.
    last_entry: Mapping[str, tuple[int, str, str]]


def _text(v: Any, limit: int) -> str:
    """A user's scalar as text (never ``str()`` of a container: a huge or
    deep one costs what its owner chose)."""
    if isinstance(v, str):
        return v[:limit]
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)[:limit] if v.bit_length() <= _INT_BITS else ""
    if isinstance(v, float):
        return str(v)[:limit]
    return ""


def _int(v: Any, default: int = -1) -> int:
    if isinstance(v, bool):
        return default
    if isinstance(v, int):
        return v if v.bit_length() <= _INT_BITS else default
    if isinstance(v, str) and re.fullmatch(r"-?\d{1,20}", v.strip()):
        return int(v)
    return default


def parse_flight_recorder(data: bytes) -> FrDump | None:
    """A dump in the JSON form (``_dump_nccl_trace_json``) or the pickle form
    (the file the recorder writes); None for anything that is not one."""
    dump = read_flight_recorder(data)
    return dump if isinstance(dump, FrDump) else None


def read_flight_recorder(data: bytes) -> FrDump | Rejected:
    """:func:`parse_flight_recorder` with the reason a file was refused."""
    doc: Any
    head = data[:1]
    if head in (b"{", b" ", b"\n", b"\t", b"\r", b"["):
        doc = load_json(data)
    else:
        doc = load_pickle(data)
    if isinstance(doc, Rejected):
        return doc
    if not isinstance(doc, dict) or "version" not in doc:
        return Rejected("not a flight-recorder dump (no version)")
    status: dict[str, tuple[int, int, int]] = {}
    raw_status = doc.get("pg_status")
    if isinstance(raw_status, dict):
        for pg, s in list(raw_status.items())[:4096]:
            if isinstance(s, dict):
                status[_text(pg, 32)] = (
                    _int(s.get("last_enqueued_collective")),
                    _int(s.get("last_started_collective")),
                    _int(s.get("last_completed_collective")),
                )
    last: dict[str, tuple[int, str, str]] = {}
    entries = doc.get("entries")
    if isinstance(entries, list):
        for e in entries[-100000:]:
            if not isinstance(e, dict) or e.get("is_p2p") is True:
                continue
            pg = _text(e.get("pg_id", ""), 32)
            seq = _int(e.get("collective_seq_id"))
            if seq >= 0 and seq >= last.get(pg, (-1, "", ""))[0]:
                last[pg] = (seq, _text(e.get("profiling_name", ""), 64),
                            _text(e.get("state", ""), 16))  # fmt: skip
    for pg, (seq, _, _) in last.items():  # an older dump without pg_status
        if pg not in status:
            status[pg] = (seq, -1, -1)
    kept = sorted(status, key=_pg_order)[:MAX_GROUPS]
    return FrDump(_text(doc.get("version"), 16), {pg: status[pg] for pg in kept},
                  {pg: last[pg] for pg in kept if pg in last})  # fmt: skip


def _pg_order(pg: str) -> tuple[int, str]:
    """Process group ids in number order (the default group, 0, first)."""
    return (_int(pg, 1 << 62), pg)


def fr_waited_for(dumps: Mapping[int, FrDump], pg: str | None = None) -> Suspect | None:
    """The rank the others wait for, from every rank's dump (global rank ->
    dump): on the default group (``pg``, else the lowest pg id all dumps
    share), the one rank whose last enqueued collective is lower than every
    other rank's.  None when dumps are fewer than two, or no rank is alone
    behind."""
    if len(dumps) < 2:
        return None
    shared = set.intersection(*(set(d.pg_status) for d in dumps.values()))
    if pg is None:
        if not shared:
            return None
        pg = min(shared, key=_pg_order)
    elif pg not in shared:
        return None
    enq = {r: d.pg_status[pg][0] for r, d in dumps.items()}
    low = min(enq.values())
    behind = [r for r, v in enq.items() if v == low]
    if len(behind) != 1 or max(enq.values()) <= low:
        return None
    rank = behind[0]
    entry = dumps[rank].last_entry.get(pg)
    others = max(v for r, v in enq.items() if r != rank)
    what = f" (last: {entry[1]} #{entry[0]} {entry[2]})" if entry else ""
    return Suspect("flight_recorder", "behind", rank, None, None,
                   f"rank {rank} enqueued collective #{low} on process group {pg}, "
                   f"the others #{others}{what}")  # fmt: skip


def resolve(hints: Sequence[Suspect], ranks: Mapping[int, Any]) -> tuple[int, Suspect] | None:
    """The first hint that names one rank of ``ranks`` (views with ``pid`` and
    ``rank``): by pid when exactly one rank has it, else by rank number."""
    for h in hints:
        if h.pid is not None:
            hit = [r for r, v in ranks.items() if v.pid == h.pid]
            if len(hit) == 1:
                return hit[0], h
            if hit:
                continue  # the same pid on two nodes: ambiguous
        # A rank number alone: the recorder's file names the global rank; a
        # RAS rank is a communicator's, the global one only in a communicator
        # of every rank of the job.
        whole = h.source == "flight_recorder" or h.comm_size == len(ranks)
        if h.pid is None and h.rank is not None and h.rank in ranks and whole:
            return h.rank, h
    return None
