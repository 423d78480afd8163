"""The only code that knows the grammar of the Slurm reasons we write.

A reason has to serve two readers.  Humans see it in ``sinfo -R``, whose
default column is 20 characters wide, so the owner and the fault code come
first.  Programs (the bridge, ``status``, the resume path, other nodes'
circuit breakers) parse it back, so it is a strict token grammar::

    slurm-hooks/1 XID79 gpu3 inc=7f3a2c1b :: GPU has fallen off the bus

    owner/version  code  [component]  [key=value ...]  " :: "  free text

Rules that keep us safe on a shared cluster:

* only reasons that parse as ours are ours; everything else (an admin's
  words, ``NHC:``, ``slurm-operator:``, Slurm's own ``Prolog error``) is
  foreign and must never be overwritten or cleared by us;
* the free text is sanitised to one line (a newline breaks ``sinfo`` and
  ``scontrol show node`` output) and the whole reason is kept short.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_hooks.core.errors import ReasonFormatError
from slurm_hooks.core.model import ReasonOwner

PREFIX = "slurm-hooks"
VERSION = 1
SEPARATOR = " :: "
#: Slurm stores reasons of any length, but sinfo -R and scontrol lines become
#: unreadable and argv strings are capped at 128 KiB.  256 keeps one line.
MAX_REASON_LEN = 256
ELLIPSIS = "..."

#: Our codes that take a node out of Slurm for a reason other than a fault
#: (lent to Kubernetes, held as a spare).  A fault on such a node wins: it is
#: drained afresh with its own incident, never treated as already handled.
NON_FAULT_CODES = frozenset({"LEND", "SPARE"})
#: Our codes for a fault seen from a running job's progress (docs/progress.md):
#: ``HANG`` (the job stopped progressing, this node holds the rank the others
#: wait for) and ``SLOW`` (a straggler).  The component names the job and the
#: rank: ``slurm-hooks/1 HANG job:1234/rank3 inc=... :: ...``.
JOB_FAULT_CODES = frozenset({"HANG", "SLOW"})


def job_component(job: str, rank: int) -> str:
    """The component token of a job-scoped fault: ``job:<id>/rank<R>``."""
    return f"job:{job}/rank{int(rank)}"


_CODE_RE = re.compile(r"^[A-Z][A-Z0-9_]{0,31}$")
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_.:/+\-\[\],]{1,64}$")
_KEY_RE = re.compile(r"^[a-z][a-z0-9_]{0,15}$")
#: ASCII only (``\d`` would take ``١``) and bounded: a 4,301-digit version
#: would make int() raise ValueError, not ReasonFormatError.
_HEAD_RE = re.compile(rf"^{re.escape(PREFIX)}/([0-9]{{1,6}}) ", re.ASCII)
#: Tokens of the head are separated by ASCII blanks only (no-break spaces
#: and other Unicode blanks are part of a token, which then fails to parse).
_BLANKS_RE = re.compile(r"[ \t]+")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SPACES_RE = re.compile(r"\s+")

#: Reasons Slurm writes itself.  Matched by prefix.
SLURM_REASONS = (
    "Prolog error",
    "Epilog error",
    "Not responding",
    "Kill task failed",
    "batch job complete failure",
    "Node unexpectedly rebooted",
    "Low RealMemory",
    "Low socket*core*thread count",
    "Low TmpDisk",
    "Reboot ASAP",
    "reboot requested",
    "reboot issued",
    "Scheduled reboot",
    "Node silently failed and came back",
    "NO NETWORK ADDRESS FOUND",
    "Prolog/Epilog",
    "Job env setup failure",
    "Duplicate jobid",
)


#: The field the policy (decision REPLACE) and the repair ladder's last step
#: write when the hardware must go: the bridge asks its provider for a
#: machine on it (``[bridge] replace_on = "policy"``).
REPLACEMENT_ASKED: Mapping[str, str] = {"repl": "requested"}


@dataclass(frozen=True)
class DrainReason:
    """A parsed reason of ours.  ``text`` is always the sanitised text, so
    ``parse_reason(format_reason(r)) == r`` for any reason built here."""

    code: str
    incident: str
    text: str
    component: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
    version: int = VERSION

    def __post_init__(self) -> None:
        # fullmatch: "$" alone would let a trailing newline through.
        if not isinstance(self.code, str) or not _CODE_RE.fullmatch(self.code):
            raise ReasonFormatError(f"invalid fault code {self.code!r}")
        if not isinstance(self.incident, str) or not _TOKEN_RE.fullmatch(self.incident):
            raise ReasonFormatError(f"invalid incident id {self.incident!r}")
        if self.component is not None and (
            not isinstance(self.component, str)
            or not _TOKEN_RE.fullmatch(self.component)
            or "=" in self.component
        ):
            raise ReasonFormatError(f"invalid component {self.component!r}")
        for key, value in self.extra.items():
            if (
                key == "inc"
                or not isinstance(key, str)
                or not isinstance(value, str)
                or not _KEY_RE.fullmatch(key)
                or not _TOKEN_RE.fullmatch(value)
            ):
                raise ReasonFormatError(f"invalid reason field {key}={value!r}")
        object.__setattr__(self, "extra", dict(self.extra))
        object.__setattr__(self, "text", sanitize_text(self.text))

    @property
    def is_fault(self) -> bool:
        return self.code not in NON_FAULT_CODES

    @property
    def replacement_asked(self) -> bool:
        """The reason carries ``repl=`` (:data:`REPLACEMENT_ASKED`)."""
        return "repl" in self.extra

    def with_extra(self, **fields: str) -> DrainReason:
        """A copy with more key=value fields (for example ``repl=requested``)."""
        return DrainReason(
            self.code, self.incident, self.text, self.component, {**self.extra, **fields}
        )


#: Square brackets become round ones: scontrol prints a node's reason as
#: ``Reason=<text> [user@time]`` and the fields after it (``Comment=``,
#: ``Extra=``), so a ``[x@y] Comment=...`` inside the text (a user's process
#: arguments that a site check quotes) would end the reason early and forge
#: the node's comment.
_BRACKETS = str.maketrans("[]", "()")


def printable(text: str) -> str:
    """``text`` with every control character (escape sequences, newlines,
    line separators) a blank: what a user wrote, safe on a terminal."""
    return _CONTROL_RE.sub(" ", text)


def sanitize_text(text: str) -> str:
    """One line, no control characters, no runs of blanks, no square
    brackets (see ``_BRACKETS``)."""
    text = printable(text).translate(_BRACKETS)
    text = _SPACES_RE.sub(" ", text).strip()
    return text


def new_incident_id() -> str:
    """Eight hex digits: unique enough per fleet and short enough for sinfo."""
    return secrets.token_hex(4)


def format_reason(reason: DrainReason) -> str:
    """Render a reason; the free text is cut (with ``...``) to keep the whole
    string within MAX_REASON_LEN.  The structured head is never cut."""
    head = [f"{PREFIX}/{reason.version}", reason.code]
    if reason.component:
        head.append(reason.component)
    head.append(f"inc={reason.incident}")
    head.extend(f"{k}={v}" for k, v in sorted(reason.extra.items()))
    head_s = " ".join(head)
    room = MAX_REASON_LEN - len(head_s) - len(SEPARATOR)
    text = reason.text
    if len(text) > room:
        text = text[: max(room - len(ELLIPSIS), 0)].rstrip() + ELLIPSIS
    return f"{head_s}{SEPARATOR}{text}"


def parse_reason(raw: str | None) -> DrainReason:
    """Parse one of our reasons; raise ReasonFormatError for anything else."""
    if not raw or not isinstance(raw, str):
        raise ReasonFormatError("empty reason")
    raw = raw.strip(" \t\r\n")
    m = _HEAD_RE.match(raw)
    if not m:
        raise ReasonFormatError(f"not a {PREFIX} reason: {raw[:40]!r}")
    version = int(m.group(1))
    if version != VERSION:
        raise ReasonFormatError(f"unsupported {PREFIX} reason version {version}")
    head, sep, text = raw[m.end() :].partition(SEPARATOR.strip())
    if not sep:
        raise ReasonFormatError(f"missing '::' in {raw[:60]!r}")
    tokens = [t for t in _BLANKS_RE.split(head) if t]
    if not tokens:
        raise ReasonFormatError("missing fault code")
    code, rest = tokens[0], tokens[1:]
    component: str | None = None
    fields: dict[str, str] = {}
    for tok in rest:
        key, eq, value = tok.partition("=")
        if eq:
            if key in fields:
                raise ReasonFormatError(f"duplicate field {key!r}")
            fields[key] = value
        elif component is None and not fields:
            component = tok
        else:
            raise ReasonFormatError(f"unexpected token {tok!r}")
    incident = fields.pop("inc", None)
    if incident is None:
        raise ReasonFormatError("missing inc= field")
    return DrainReason(code, incident, text.strip(), component, fields, version)


def try_parse_reason(raw: str | None) -> DrainReason | None:
    """Like parse_reason, but None for foreign or malformed reasons."""
    try:
        return parse_reason(raw)
    except ReasonFormatError:
        return None


def is_ours(raw: str | None) -> bool:
    return try_parse_reason(raw) is not None


def classify_owner(raw: str | None) -> ReasonOwner:
    """Who wrote this reason.  A reason that merely starts like ours but does
    not parse is treated as an admin's: we never touch what we cannot prove
    is ours."""
    if raw is None or not isinstance(raw, str) or not raw.strip():
        return ReasonOwner.NONE if raw is None or isinstance(raw, str) else ReasonOwner.ADMIN
    text = raw.strip()
    if is_ours(text):
        return ReasonOwner.OURS
    if text.upper().startswith("NHC"):
        return ReasonOwner.NHC
    if text.startswith("slurm-operator:"):
        return ReasonOwner.OPERATOR
    if any(text.startswith(p) for p in SLURM_REASONS):
        return ReasonOwner.SLURM
    return ReasonOwner.ADMIN
