"""Parse NVIDIA XID / NVSwitch SXID lines out of kernel-log records.

One function, :func:`parse_line`, understands every wrapping admins meet:
raw ``dmesg``, ``dmesg -T``, ``dmesg --time-format=iso``, syslog and
``journalctl -k`` prefixes (classic and ISO 8601 timestamps, optionally with
the kernel's ``[secs.usecs]`` after ``kernel:``), ``/dev/kmsg`` records and
``journalctl -o json`` objects (``MESSAGE`` as text or as a byte array).

Speed matters more than elegance here: a node's kernel log can hold hundreds
of thousands of lines and a flood of one XID can add another million, so the
first thing done with any line is one substring test, and regular
expressions run only on lines that pass it.  The scanner in ``scan.py`` goes
further and never decodes lines without ``Xid`` in them at all.

Nothing here raises on bad input: a line that looks like an XID but cannot be
parsed returns ``None`` and :func:`classify_line` says why, so callers count
it instead of crashing or inventing an event.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime

from slurm_hooks.detect.xid.limits import MAX_LINE
from slurm_hooks.detect.xid.pci import normalise_pci, split_mig

__all__ = ["MAX_LINE", "NOT_KERNEL", "XidEvent", "XidIdentity", "classify_line", "parse_line"]


@dataclass(frozen=True, slots=True)
class XidIdentity:
    """What an XID event and an aggregate of identical events share: the
    fields that tell one event from another, and the stable code they make
    (``XID79``, ``SXID20034``) that findings, reasons and alerts key on."""

    kind: str
    xid: int
    pci: str | None
    pid: int | None
    name: str | None
    message: str

    @property
    def code(self) -> str:
        return f"SXID{self.xid}" if self.kind == "sxid" else f"XID{self.xid}"


@dataclass(frozen=True, slots=True)
class XidEvent(XidIdentity):
    """One XID (``kind="xid"``) or NVSwitch SXID (``kind="sxid"``) line.

    ``pci`` is normalised (``0000:3b:00.0``) or None when the line carries no
    usable bus id; ``raw_pci`` keeps what the driver printed.  ``monotonic``
    is seconds since boot (dmesg, /dev/kmsg, journal), ``wall`` seconds since
    the epoch (dmesg -T, syslog, ISO stamps, journal); either may be None.
    """

    raw_pci: str | None = None
    #: The MIG GPU instance the driver named (``GPU-I:05``), else None.
    gpu_instance: int | None = None
    switch: str | None = None
    monotonic: float | None = None
    wall: float | None = None
    boot_id: str | None = None
    seq: int | None = None
    cursor: str | None = None


# -- bodies -----------------------------------------------------------------

_XID_RE = re.compile(
    r"NVRM: Xid (?:\((?:PCI:)?(?P<pci>[^)]{0,64})\):? ?)?(?P<xid>\d{1,6}),[ \t]*(?P<rest>.*)",
    re.S,
)
_SXID_RE = re.compile(
    r"(?:(?P<switch>nvidia-nvswitch\d+): )?SXid \((?:PCI:)?(?P<pci>[^)]{0,64})\):? ?"
    r"(?P<xid>\d{1,6}),[ \t]*(?P<rest>.*)",
    re.S,
)
_PID_RE = re.compile(r"pid=(?P<pid>'?<[^>,]{0,16}>'?|'?-?\d+'?)(?:,[ \t]*|$)")
_NAME_RE = re.compile(r"name=(?P<name>[^,]{0,256})(?:,[ \t]*|$)")

# -- prefixes ---------------------------------------------------------------

_KMSG_RE = re.compile(r"^\s*(?P<prio>\d{1,4}),(?P<seq>\d{1,20}),(?P<usec>\d{1,20}),[^;]*;")
_MONO_RE = re.compile(r"\[\s*(?P<mono>\d+\.\d+)\]")
_CTIME_RE = re.compile(
    r"\[(?:\w{3} )?(?P<mon>\w{3}) +(?P<day>\d{1,2}) (?P<time>\d\d:\d\d:\d\d) (?P<year>\d{4})\]"
)
_ISO_RE = re.compile(
    r"(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)"
)
_SYSLOG_RE = re.compile(r"^(?:<\d+>)?(?P<mon>\w{3}) +(?P<day>\d{1,2}) (?P<time>\d\d:\d\d:\d\d) ")
#: The start of a second record glued to the end of a first one.
_GLUED_PREFIX = re.compile(r"(?:\[[^\[\]]{0,40}\]|\S+ kernel:|\d+,\d+,\d+,[^;]{0,20};|kernel:)\s*$")
_JSON_BYTES_RE = re.compile(r'"MESSAGE"\s*:\s*\[')
_MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}

#: Results of :func:`classify_line` besides an event.
NOT_XID = "not_xid"
MALFORMED = "malformed"
OVERSIZED = "oversized"
#: An XID-looking line that a program, not the kernel, wrote (``logger``,
#: a user's syslog message, a journal record with another transport).
NOT_KERNEL = "not_kernel"

# -- who wrote the record ---------------------------------------------------
#
# Any local user can put "NVRM: Xid ..." into syslog (``logger``) or the
# journal; only the kernel's own records may count.  Kernel records are
# recognised by what the user cannot choose: the kmsg facility, the
# journal's trusted ``_TRANSPORT``, the program tag a syslog daemon writes
# in front of the message (``host kernel:``; a user's line says ``host
# user:`` or ``host name[pid]:``), dmesg's own ``kern  :err   :``.

#: A syslog header: RFC 3164 or ISO stamp, host, then the program tag.
_SYSLOG_HEAD_RE = re.compile(
    r"^(?:<(?P<pri>[0-9]{1,3})>)?(?:[A-Z][a-z]{2} +[0-9]{1,2} [0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.,]+(?:Z|[+-][0-9]{2}:?[0-9]{2})?) +"
    r"(?P<host>\S+) +(?P<tag>[^\s:\[]+)(?P<pid>\[[0-9]*\])?: ",
    re.ASCII,
)
#: No stamp, ``host tag[pid]: `` (some syslog templates).
_BARE_TAG_RE = re.compile(r"^(?:(?P<host>[^\s:\[]+) +)?(?P<tag>[^\s:\[]+)(?P<pid>\[[0-9]*\])?: ")
#: ``dmesg --decode``: ``kern  :err   : ``.
_DECODE_RE = re.compile(r"^(?P<fac>[a-z0-9]+) *:(?P<lvl>[a-z]+) *: ", re.ASCII)
_DECODE_FACILITIES = frozenset(
    "kern user mail daemon auth syslog lpr news uucp cron authpriv ftp".split()
    + [f"local{i}" for i in range(8)]
)


#: What may stand between a kernel record's header and its ``NVRM: Xid``:
#: time stamps (``[secs]``, ``[ctime]``, ISO), nothing else.
_STAMPS_ONLY = re.compile(
    r"\s*(?:(?:\[[^\[\]]{1,64}\]|[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.,]+"
    r"(?:Z|[+-][0-9]{2}:?[0-9]{2})?)\s*)*",
    re.ASCII,
)


def _kernel_prefix(prefix: str) -> bool:
    """Whether the text before ``NVRM: Xid`` is a kernel record's header and
    stamps, and nothing else.  The kernel's own records quote user text (a
    file name in ``process '%s' launched '%s' with NULL argv``): an XID
    quoted inside one is the user's words, not the driver's."""
    after = _after_kernel_header(prefix)
    return after is not None and _STAMPS_ONLY.fullmatch(after) is not None


def _after_kernel_header(prefix: str) -> str | None:
    """The prefix after a kernel record's header (kmsg, ``dmesg --decode``,
    syslog with tag ``kernel``); None for a record of another facility or
    tag."""
    km = _KMSG_RE.match(prefix)
    if km is not None:
        return prefix[km.end() :] if int(km["prio"]) >> 3 == 0 else None  # 0 = kernel
    text = prefix.lstrip()
    dm = _DECODE_RE.match(text)
    if dm is not None and dm["fac"] in _DECODE_FACILITIES:
        return text[dm.end() :] if dm["fac"] == "kern" else None
    sm = _SYSLOG_HEAD_RE.match(text)
    if sm is not None:
        if sm["pri"] is not None and int(sm["pri"]) >> 3 != 0:
            return None
        return text[sm.end() :] if sm["tag"] == "kernel" and sm["pid"] is None else None
    tm = _BARE_TAG_RE.match(text)
    if tm is not None and not text.startswith("["):
        return text[tm.end() :] if tm["tag"] == "kernel" and tm["pid"] is None else None
    return text  # dmesg: stamps or nothing before the message


def parse_line(line: str, *, year: int | None = None) -> XidEvent | None:
    """The XID/SXID event in one log line, or None (not one, or unparseable).

    ``year`` fills in syslog stamps, which carry none (default: this year).
    """
    result = classify_line(line, year=year)
    return result if isinstance(result, XidEvent) else None


def classify_line(
    line: str, *, year: int | None = None, max_line: int = MAX_LINE
) -> XidEvent | str:
    """Like :func:`parse_line` but says why a line yields no event:
    NOT_XID, MALFORMED (mentions an XID but does not parse) or OVERSIZED
    (longer than ``max_line``, the scanner's ``[checks.xid] max_line``)."""
    if "Xid" not in line:
        # One cheap test for the 99.9 % case.  A JSON record whose MESSAGE is a
        # byte array has no "Xid" text; those are recognised by their key.
        if '"MESSAGE"' not in line or _JSON_BYTES_RE.search(line) is None:
            return NOT_XID
    if len(line) > max_line:
        return OVERSIZED
    stripped = line.lstrip()
    if stripped.startswith("{"):
        return _parse_json(stripped, year, max_line)
    return _parse_text(line, year)


def _parse_text(
    line: str,
    year: int | None,
    *,
    mono: float | None = None,
    wall: float | None = None,
    seq: int | None = None,
    boot_id: str | None = None,
    cursor: str | None = None,
    check_origin: bool = True,
) -> XidEvent | str:
    is_sxid = False
    at = line.find("NVRM: Xid")
    if at < 0:
        at = line.find("SXid (")
        if at < 0:
            return NOT_XID
        is_sxid = True
        sw = line.rfind("nvidia-nvswitch", 0, at)
        if sw >= 0 and line[sw:at].count(" ") <= 1:
            at = sw
    body = line[at:]
    if not is_sxid and body.count("NVRM: Xid", 1) > 0:
        # Two writers interleaved on one line: keep only this record's text.
        body = _GLUED_PREFIX.sub("", body[: body.find("NVRM: Xid", 1)]).rstrip()
    m = (_SXID_RE if is_sxid else _XID_RE).match(body)
    if m is None:
        return MALFORMED
    try:
        xid = int(m["xid"])
    except ValueError:  # pragma: no cover - the regex admits digits only
        return MALFORMED
    raw_pci = m["pci"]
    bus, gpu_instance = split_mig(raw_pci) if raw_pci else (raw_pci, None)
    rest = m["rest"].rstrip("\r\n\x00 ")
    pid: int | None = None
    name: str | None = None
    pm = _PID_RE.match(rest)
    if pm is not None:
        text = pm["pid"].strip("'")
        pid = int(text) if text.lstrip("-").isdigit() and len(text) <= 18 else None
        rest = rest[pm.end() :]
        nm = _NAME_RE.match(rest)
        if nm is not None:
            value = nm["name"].strip()
            name = None if value in ("<unknown>", "'<unknown>'", "") else value
            rest = rest[nm.end() :]
    prefix = line[:at]
    # A record whose origin the transport vouches for (the journal's
    # MESSAGE) still has to start with the driver's words.
    kernel = _kernel_prefix(prefix) if check_origin else _STAMPS_ONLY.fullmatch(prefix) is not None
    if not kernel:
        return NOT_KERNEL
    if prefix:
        mono2, wall2, seq2 = _parse_prefix(prefix, year)
        mono = mono if mono is not None else mono2
        wall = wall if wall is not None else wall2
        seq = seq if seq is not None else seq2
    return XidEvent(
        kind="sxid" if is_sxid else "xid",
        xid=xid,
        pci=normalise_pci(bus) if bus else None,
        pid=pid,
        name=name,
        message=rest.strip(),
        raw_pci=raw_pci or None,
        gpu_instance=gpu_instance,
        switch=m["switch"] if is_sxid else None,
        monotonic=mono,
        wall=wall,
        boot_id=boot_id,
        seq=seq,
        cursor=cursor,
    )


def _parse_prefix(prefix: str, year: int | None) -> tuple[float | None, float | None, int | None]:
    mono = wall = None
    seq = None
    km = _KMSG_RE.match(prefix)
    if km is not None:
        seq = int(km["seq"])
        mono = int(km["usec"]) / 1e6
        return mono, wall, seq
    mm = _MONO_RE.search(prefix)
    if mm is not None:
        mono = float(mm["mono"])
    cm = _CTIME_RE.search(prefix)
    if cm is not None:
        wall = _local(int(cm["year"]), cm["mon"], cm["day"], cm["time"])
    else:
        im = _ISO_RE.search(prefix)
        if im is not None:
            wall = _iso(im["iso"])
        else:
            sm = _SYSLOG_RE.match(prefix)
            if sm is not None:
                wall = _local(year or datetime.now().year, sm["mon"], sm["day"], sm["time"])
    return mono, wall, seq


def _local(year: int, mon: str, day: str, hms: str) -> float | None:
    month = _MONTHS.get(mon)
    if month is None:
        return None
    try:
        h, mi, s = (int(x) for x in hms.split(":"))
        return datetime(year, month, int(day), h, mi, s).timestamp()
    except (ValueError, OverflowError):
        return None


def _iso(text: str) -> float | None:
    text = text.replace(",", ".").replace(" ", "T", 1)
    if "." in text:  # fromisoformat wants at most 6 fractional digits
        head, _, tail = text.partition(".")
        digits = len(tail) - len(tail.lstrip("0123456789"))
        text = head + "." + tail[: min(digits, 6)].ljust(6, "0") + tail[digits:]
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    elif len(text) > 5 and text[-5] in "+-" and text[-4:].isdigit():
        text = text[:-2] + ":" + text[-2:]
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _parse_json(text: str, year: int | None, max_line: int = MAX_LINE) -> XidEvent | str:
    """One ``journalctl -o json`` record."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested [[[[...
        return MALFORMED
    if not isinstance(obj, dict):
        return MALFORMED
    msg = obj.get("MESSAGE")
    if isinstance(msg, list):
        try:
            msg = bytes(msg).decode("utf-8", errors="replace")
        except (TypeError, ValueError):
            return MALFORMED
    if not isinstance(msg, str):
        return MALFORMED if msg is not None else NOT_XID
    if "Xid" not in msg:
        return NOT_XID
    if len(msg) > max_line:
        return OVERSIZED
    if obj.get("_TRANSPORT") != "kernel":
        # journald sets _TRANSPORT itself (a trusted field): "syslog",
        # "journal", "stdout" are programs, whatever MESSAGE says.
        return NOT_KERNEL
    wall = _int_field(obj.get("__REALTIME_TIMESTAMP"))
    mono = _int_field(obj.get("__MONOTONIC_TIMESTAMP"))
    boot = obj.get("_BOOT_ID")
    cursor = obj.get("__CURSOR")
    return _parse_text(
        msg,
        year,
        check_origin=False,  # the transport said kernel; MESSAGE has no header
        mono=mono / 1e6 if mono is not None else None,
        wall=wall / 1e6 if wall is not None else None,
        boot_id=boot if isinstance(boot, str) else None,
        cursor=cursor if isinstance(cursor, str) else None,
    )


def _int_field(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


# -- message details the rules need -----------------------------------------

_RECOVERY_RE = re.compile(
    r"recovery action changed(?: from (?P<from>0x[0-9a-fA-F]+)(?: \((?P<from_text>[^)]*)\))?)?"
    r" to (?P<to>0x[0-9a-fA-F]+)(?: \((?P<to_text>[^)]*)\))?"
)
_NVLINK74_RE = re.compile(
    r"[Ll]ink (?P<link>-?\d+) ?\((?P<regs>0x[0-9a-fA-F]+(?:, ?0x[0-9a-fA-F]+)*)\)"
)
_NVLINK5_RE = re.compile(
    r"^(?P<sub>[A-Z][A-Z0-9_/]*)\s+(?P<sev>Fatal|Nonfatal|Non-fatal)\b.*?[Ll]ink\s+(?P<link>-?\d+)"
    r"(?:\s*\((?P<regs>0x[0-9a-fA-F]+(?:\s+0x[0-9a-fA-F]+)*)\))?",
    re.S,
)


@dataclass(frozen=True, slots=True)
class RecoveryAction:
    """What an XID 154 line says the driver wants."""

    code: int
    text: str | None
    previous: int | None = None


def recovery_action(message: str) -> RecoveryAction | None:
    m = _RECOVERY_RE.search(message)
    if m is None:
        return None
    return RecoveryAction(
        code=int(m["to"], 16),
        text=m["to_text"],
        previous=int(m["from"], 16) if m["from"] else None,
    )


def nvlink_registers(message: str) -> tuple[int, tuple[int, ...]] | None:
    """(link, registers) from an XID 74 line such as
    ``NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, ...)``."""
    m = _NVLINK74_RE.search(message)
    if m is None:
        return None
    return int(m["link"]), tuple(int(r, 16) for r in re.split(r",\s*", m["regs"]))


@dataclass(frozen=True, slots=True)
class NvLink5Info:
    """Fields of an XID 144-150 line (Blackwell NVLink 5)."""

    subcode: str
    fatal: bool
    link: int
    intr_info: int | None
    error_status: int | None


def nvlink5_info(message: str) -> NvLink5Info | None:
    m = _NVLINK5_RE.search(message.strip())
    if m is None:
        return None
    regs = [int(r, 16) for r in m["regs"].split()] if m["regs"] else []
    return NvLink5Info(
        subcode=m["sub"],
        fatal=m["sev"] == "Fatal",
        link=int(m["link"]),
        intr_info=regs[0] if regs else None,
        error_status=regs[1] if len(regs) > 1 else None,
    )
