"""Multi-event XID rules: aggregates (+ history) -> Findings.  Pure.

The catalogue gives each XID a bucket; some buckets need context that one
line cannot carry.  The rules here supply it:

* XID 13 / 31 (WORKFLOW_XID_13/31): an application bug unless repeated on
  the same GPU - ``repeat_count`` distinct incidents (different processes, or
  bursts more than ``burst_s`` apart) within ``repeat_window_s``, counting
  incidents remembered from earlier runs.  Then the GPU is suspect: drain.
* XID 48 (WORKFLOW_XID_48): alone, reset the GPU; with XID 63/64 on the same
  GPU (now or within ``pair_window_s``), drain and reset.  171/172 follow 48.
* XID 45 (WORKFLOW_XID_45): fallout of another XID when one is present on
  the GPU (ignore it, follow the other); alone, restart the application.
* XID 74 (WORKFLOW_NVLINK_ERR): decode the register bits on the line as the
  catalogue describes (ignorable, sympathetic, ECC threshold, hardware).
* XID 144-150 (WORKFLOW_NVLINK5_ERR): Fatal needs a reset; Nonfatal does
  not, except RLW_REMAP/RLW_SRC_TRACK (restart the application unless an XID
  154 says more).
* XID 154: the driver's own statement of the recovery it needs.  The latest
  one on a GPU overrides every guess made from the other XIDs on that GPU.
* 94 (contained: restart the application) and 95 (uncontained: reset the
  GPU) come straight from the catalogue.

Time is passed in (``now``, seconds since the epoch); nothing here reads a
clock, a file or a device.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from slurm_hooks.core.model import Action, Component, Finding, Status, Value
from slurm_hooks.detect.checks.base import Problem
from slurm_hooks.detect.xid.aggregate import XidAggregate
from slurm_hooks.detect.xid.catalogue import Catalogue, load_catalogue
from slurm_hooks.detect.xid.parser import nvlink5_info, nvlink_registers, recovery_action
from slurm_hooks.detect.xid.pci import GpuRef
from slurm_hooks.detect.xid.settings import XidSettings

CHECK = "xid"


@dataclass(frozen=True)
class Incident:
    """One remembered occurrence of an XID on a GPU (kept across runs)."""

    code: str
    pci: str | None
    pid: int | None
    t: float
    count: int = 1
    #: The owner of the process the driver named, when it was still there to
    #: ask (None otherwise): repeats of XIDs a user's own code raises count
    #: against the GPU only across users (``XidSettings.repeat_users``).
    user: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The history file's record: the fields as they are (``from_dict`` reads it back)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Incident | None:
        try:
            pid = d.get("pid")
            user = d.get("user")
            return cls(
                code=str(d["code"]),
                pci=d.get("pci") if isinstance(d.get("pci"), str) else None,
                pid=pid if isinstance(pid, int) else None,
                t=float(d["t"]),
                count=int(d.get("count", 1)),
                user=user if isinstance(user, str) and user else None,
            )
        except (KeyError, TypeError, ValueError):
            return None


def incidents_from(
    aggregates: Sequence[XidAggregate], now: float, owners: Mapping[int, str] | None = None
) -> list[Incident]:
    """This scan's incidents; ``owners`` maps the pids the driver named to
    their processes' users (read on the node when the XID was)."""
    owners = owners or {}
    return [
        Incident(
            code=a.code,
            pci=a.pci or a.raw_pci,
            pid=a.pid,
            t=a.first_wall if a.first_wall is not None else now,
            count=a.count,
            user=owners.get(a.pid) if a.pid is not None else None,
        )
        for a in aggregates
    ]


def update_history(
    history: Sequence[Incident],
    aggregates: Sequence[XidAggregate],
    now: float,
    settings: XidSettings,
    owners: Mapping[int, str] | None = None,
) -> list[Incident]:
    """History to save after a scan: old incidents still inside the longest
    window, plus this scan's, newest ``history_max`` kept."""
    horizon = now - settings.history_window_s
    kept = [i for i in history if i.t >= horizon]
    kept.extend(incidents_from(aggregates, now, owners))
    kept.sort(key=lambda i: i.t)
    return kept[-settings.history_max :]


def _distinct_incidents(incidents: Sequence[Incident], burst_s: float) -> int:
    """Incidents from one process count once; without a pid, bursts closer
    than ``burst_s`` count once."""
    pids: set[int] = set()
    times: list[float] = []
    for inc in incidents:
        if inc.pid is not None and inc.pid > 0:
            pids.add(inc.pid)
        else:
            times.append(inc.t)
    bursts = 0
    last: float | None = None
    for t in sorted(times):
        if last is None or t - last > burst_s:
            bursts += 1
        last = t
    return len(pids) + bursts


@dataclass
class _Group:
    kind: str
    xid: int
    pci: str | None
    switch: str | None
    aggs: list[XidAggregate]

    @property
    def code(self) -> str:
        return f"SXID{self.xid}" if self.kind == "sxid" else f"XID{self.xid}"

    @property
    def count(self) -> int:
        return sum(a.count for a in self.aggs)


@dataclass
class _Verdict:
    action: Action
    status: Status
    rule: str | None = None
    note: str | None = None
    extra: dict[str, Value] | None = None


def _worst(verdicts: Iterable[_Verdict], base: _Verdict) -> _Verdict:
    """The most severe of ``verdicts`` (action first, then status; the first
    of equals), else ``base``: a GPU's NVLink events decoded one by one are
    judged by the worst of them."""
    return max(verdicts, key=lambda v: (v.action.rank, v.status.rank), default=base)


def _status_for(action: Action) -> Status:
    if action.rank >= Action.RESET_GPU.rank:
        return Status.FAIL
    if action is Action.RESTART_APP:
        return Status.WARN
    return Status.OK


def evaluate(
    aggregates: Sequence[XidAggregate],
    *,
    now: float,
    history: Sequence[Incident] = (),
    settings: XidSettings | None = None,
    gpus: Mapping[str, GpuRef] | None = None,
    catalogue: Catalogue | None = None,
    owners: Mapping[int, str] | None = None,
) -> list[Finding]:
    """One Finding per (code, GPU or switch) seen in ``aggregates``;
    ``owners``: the users of the processes the driver named (pid -> user)."""
    settings = settings or XidSettings()
    owners = owners or {}
    cat = catalogue or load_catalogue()
    gpus = gpus or {}
    groups: dict[tuple[str, int, str | None], _Group] = {}
    for a in aggregates:
        key = (a.kind, a.xid, a.pci or a.raw_pci)
        g = groups.get(key)
        if g is None:
            g = groups[key] = _Group(a.kind, a.xid, a.pci or a.raw_pci, a.switch, [])
        g.aggs.append(a)
    by_pci: dict[str | None, set[int]] = defaultdict(set)
    for g in groups.values():
        if g.kind == "xid":
            by_pci[g.pci].add(g.xid)
    any_sxid = any(g.kind == "sxid" for g in groups.values())

    verdicts: dict[tuple[str, int, str | None], _Verdict] = {}
    for key, g in groups.items():
        if g.kind == "sxid":
            verdicts[key] = _sxid_verdict(g, cat)
        else:
            verdicts[key] = _xid_verdict(g, cat, settings, now, history, by_pci, any_sxid, owners)

    # XID 154: the driver's final word for its GPU.
    overrides: dict[str | None, tuple[Action, str]] = {}
    for key, g in groups.items():
        if g.kind != "xid" or g.xid != 154:
            continue
        latest = max(
            g.aggs,
            key=lambda a: (a.last_wall or float("-inf"), a.last_monotonic or float("-inf")),
        )
        ra = recovery_action(latest.message)
        if ra is None:
            continue
        text, action = cat.recovery_actions.get(
            ra.code, (ra.text or f"0x{ra.code:x}", Action.DRAIN)
        )
        label = ra.text or text
        verdicts[key] = _Verdict(
            action,
            _status_for(action),
            rule="xid154",
            note=f"driver requests: {label}",
            extra={"recovery_action": ra.code, "recovery_text": label},
        )
        if ra.code != 0:
            overrides[g.pci] = (action, label)

    findings = []
    for key, g in groups.items():
        v = verdicts[key]
        extra = dict(v.extra or {})
        if g.kind == "xid" and g.xid != 154 and g.pci in overrides:
            action, label = overrides[g.pci]
            extra["catalogue_action"] = str(v.action)
            extra["overridden_by"] = "XID154"
            v = replace(v, action=action, status=_status_for(action), note=f"XID 154: {label}")
        if g.kind == "xid" and (g.xid in settings.repeat_xids or v.action is Action.RESTART_APP):
            # Whose code raised it, for the policy's repeat rule: a fault
            # any user can cause repeats against the node only across users.
            extra["process_users"] = ",".join(
                sorted({owners[a.pid] for a in g.aggs if a.pid is not None and a.pid in owners})
            )
        findings.append(_finding(g, v, extra, cat, gpus))
    findings.sort(key=lambda f: (-f.status.rank, -f.action.rank, f.code))
    return findings


def _xid_verdict(
    g: _Group,
    cat: Catalogue,
    settings: XidSettings,
    now: float,
    history: Sequence[Incident],
    by_pci: Mapping[str | None, set[int]],
    any_sxid: bool,
    owners: Mapping[int, str],
) -> _Verdict:
    bucket = cat.bucket_for(g.xid)
    base = _Verdict(bucket.action, bucket.status, rule=bucket.rule)
    others = by_pci.get(g.pci, set()) - {g.xid}

    if g.xid in settings.repeat_xids:
        horizon = now - settings.repeat_window_s
        past = [i for i in history if i.code == g.code and i.pci == g.pci and i.t >= horizon]
        current = incidents_from(g.aggs, now, owners)
        n = _distinct_incidents(past + current, settings.burst_s)
        users = {i.user for i in past + current if i.user}
        extra: dict[str, Value] = {
            "incidents": n,
            "window_s": settings.repeat_window_s,
            "threshold": settings.repeat_count,
            "users": len(users),
        }
        if n >= settings.repeat_count and settings.repeat_users > max(1, len(users)):
            # One user's code raises these at will: their repeats are the
            # application's until another user's processes see the GPU fail.
            return _Verdict(
                bucket.action,
                bucket.status,
                rule=f"repeat_xid{g.xid}",
                note=f"{n} incidents on this GPU, from the processes of {len(users)} "
                f"user(s): {settings.repeat_users} users' are needed to blame the GPU",
                extra=extra,
            )
        if n >= settings.repeat_count:
            return _Verdict(
                Action.DRAIN,
                Status.FAIL,
                rule=f"repeat_xid{g.xid}",
                note=f"{n} incidents on this GPU within {settings.repeat_window_s:g}s: possible hardware fault, run diagnostics",
                extra=extra,
            )
        return _Verdict(bucket.action, bucket.status, rule=f"repeat_xid{g.xid}", extra=extra)

    if bucket.rule == "xid48":
        horizon = now - settings.pair_window_s
        paired = bool(others & {63, 64}) or any(
            i.code in ("XID63", "XID64") and i.pci == g.pci and i.t >= horizon for i in history
        )
        if paired:
            return _Verdict(
                Action.DRAIN,
                Status.FAIL,
                rule="xid48",
                note="with row remapping (XID 63/64): drain and reset",
            )
        return _Verdict(Action.RESET_GPU, Status.FAIL, rule="xid48", note="alone: reset the GPU")

    if bucket.rule == "xid45":
        if others:
            return _Verdict(
                Action.IGNORE,
                Status.OK,
                rule="xid45",
                note="follows XID " + ", ".join(str(x) for x in sorted(others)),
            )
        return _Verdict(Action.RESTART_APP, Status.WARN, rule="xid45", note="alone")

    if bucket.rule == "nvlink74":
        sympathetic = bool(others) or any_sxid
        return _worst((decode_xid74(a.message, sympathetic_ok=sympathetic) for a in g.aggs), base)

    if bucket.rule == "nvlink5":
        return _worst((decode_nvlink5(g.xid, a.message) for a in g.aggs), base)

    return base


# -- XID 74 -------------------------------------------------------------------

#: Catalogue's WORKFLOW_NVLINK_ERR register guide: register index -> bit -> class.
_NVLINK74_BITS: dict[int, dict[int, str]] = {
    0: {
        0: "ignore", 23: "ignore", 30: "ignore",
        1: "sympathetic", 20: "sympathetic",
        4: "ecc", 5: "ecc",
        8: "link_hw", 9: "link_hw", 12: "link_hw", 16: "link_hw", 17: "link_hw", 24: "link_hw", 28: "link_hw",
        21: "signal", 22: "signal",
        27: "report", 29: "report",
    },
    2: {0: "ecc", 1: "ecc", 2: "ecc", 6: "ecc", 13: "report", 16: "diag", 19: "diag", 17: "report", 18: "report"},
    3: {16: "sympathetic", 17: "sympathetic", 18: "sympathetic"},
    4: {
        18: "ecc", 19: "ecc", 21: "ecc", 22: "ecc", 24: "ecc", 25: "ecc", 27: "ecc", 28: "ecc",
        20: "threshold", 23: "threshold", 26: "threshold", 29: "threshold",
    },
}  # fmt: skip
_HW = {"ecc", "link_hw", "signal", "diag"}


def nvlink74_classes(registers: Sequence[int]) -> list[str]:
    """Sorted classes of the bits set in an XID 74 register tuple; bits the
    guide does not list are ``unknown`` (the catalogue says: report them).
    The second register is not populated on Hopper and is not decoded."""
    classes: set[str] = set()
    for idx, value in enumerate(registers):
        table = _NVLINK74_BITS.get(idx)
        if table is None:
            continue
        bit = 0
        while value:
            if value & 1:
                classes.add(table.get(bit, "unknown"))
            value >>= 1
            bit += 1
    return sorted(classes)


def decode_xid74(message: str, *, sympathetic_ok: bool) -> _Verdict:
    parsed = nvlink_registers(message)
    if parsed is None:
        return _Verdict(
            Action.DRAIN,
            Status.FAIL,
            rule="nvlink74",
            note="no registers on the line: treated as a link fault",
        )
    link, regs = parsed
    classes = nvlink74_classes(regs)
    extra: dict[str, Value] = {
        "link": link,
        "registers": " ".join(f"0x{r:x}" for r in regs),
        "nvlink_classes": ",".join(classes) or "none",
    }
    if classes and set(classes) & _HW:
        return _Verdict(
            Action.DRAIN,
            Status.FAIL,
            "nvlink74",
            "likely hardware (ECC/parity, link or signal integrity): drain, reset, run diagnostics",
            extra,
        )
    if "unknown" in classes or "report" in classes or not classes:
        return _Verdict(
            Action.RESET_GPU, Status.FAIL, "nvlink74", "NVLink error needing a GPU reset", extra
        )
    if "sympathetic" in classes:
        if sympathetic_ok:
            return _Verdict(
                Action.IGNORE,
                Status.OK,
                "nvlink74",
                "sympathetic: follow the other XID/SXID",
                extra,
            )
        return _Verdict(
            Action.RESET_GPU,
            Status.FAIL,
            "nvlink74",
            "sympathetic error seen alone: reset and report",
            extra,
        )
    if "threshold" in classes:
        return _Verdict(
            Action.NONE,
            Status.WARN,
            "nvlink74",
            "NVLink ECC threshold exceeded, no uncorrectable error: continue",
            extra,
        )
    return _Verdict(Action.IGNORE, Status.OK, "nvlink74", "ignorable bits only", extra)


# -- XID 144-150 ---------------------------------------------------------------

_EVAL_154 = {"RLW_REMAP", "RLW_SRC_TRACK"}


def decode_nvlink5(xid: int, message: str) -> _Verdict:
    info = nvlink5_info(message)
    if info is None:
        return _Verdict(
            Action.RESET_GPU, Status.FAIL, "nvlink5", "undecodable NVLink 5 error: treated as fatal"
        )
    extra: dict[str, Value] = {"subcode": info.subcode, "link": info.link, "fatal": info.fatal}
    if info.intr_info is not None:
        extra["intr_info"] = f"0x{info.intr_info:08x}"
    if info.error_status is not None:
        extra["error_status"] = f"0x{info.error_status:08x}"
    if info.fatal:
        return _Verdict(
            Action.RESET_GPU, Status.FAIL, "nvlink5", "fatal NVLink 5 error: reset the GPU", extra
        )
    if xid == 145 and info.subcode in _EVAL_154:
        return _Verdict(
            Action.RESTART_APP,
            Status.WARN,
            "nvlink5",
            "non-fatal; restart the application unless XID 154 says more",
            extra,
        )
    return _Verdict(Action.IGNORE, Status.OK, "nvlink5", "non-fatal NVLink 5 error", extra)


# -- SXID ------------------------------------------------------------------------


def _sxid_verdict(g: _Group, cat: Catalogue) -> _Verdict:
    info = cat.sxid(g.xid)
    severity = "unknown"
    for a in g.aggs:
        head = a.message[:16].lower()
        if head.startswith("fatal"):
            severity = "fatal"
            break
        if head.startswith(("non-fatal", "nonfatal")):
            severity = "nonfatal"
    if severity == "unknown" and info is not None:
        severity = info.severity
    bucket = cat.bucket(cat.sxid_defaults.get(severity, "MONITOR"))
    return _Verdict(
        bucket.action,
        bucket.status,
        rule="sxid",
        note=f"{severity} NVSwitch error",
        extra={"severity": severity},
    )


# -- Finding -----------------------------------------------------------------------


def _finding(
    g: _Group, v: _Verdict, extra: dict[str, Value], cat: Catalogue, gpus: Mapping[str, GpuRef]
) -> Finding:
    first = g.aggs[0]
    if g.kind == "sxid":
        info_s = cat.sxid(g.xid)
        name = info_s.name if info_s else "NVSwitch error"
        digits = "".join(ch for ch in (g.switch or "") if ch.isdigit())
        component = Component(
            "nvswitch", index=int(digits) if digits else None, pci=g.pci, name=g.switch
        )
        bucket_name = cat.sxid_defaults.get(str(extra.get("severity", "unknown")), "MONITOR")
        confidence = info_s.confidence if info_s else "low"
    else:
        info = cat.get(g.xid)
        name = info.name if info else "unknown XID"
        ref = gpus.get(g.pci) if g.pci else None
        component = Component(
            "gpu",
            index=ref.index if ref else None,
            uuid=ref.uuid if ref else None,
            pci=g.pci,
        )
        bucket_name = info.bucket if info else "MONITOR"
        confidence = info.confidence if info else "low"
    firsts = [a.first_wall for a in g.aggs if a.first_wall is not None]
    lasts = [a.last_wall for a in g.aggs if a.last_wall is not None]
    mfirsts = [a.first_monotonic for a in g.aggs if a.first_monotonic is not None]
    mlasts = [a.last_monotonic for a in g.aggs if a.last_monotonic is not None]
    pids = sorted({a.pid for a in g.aggs if a.pid is not None})
    names = sorted({a.name for a in g.aggs if a.name})
    values: dict[str, Value] = {
        "xid": g.xid,
        "count": g.count,
        "distinct": len(g.aggs),
        "first_seen": min(firsts) if firsts else None,
        "last_seen": max(lasts) if lasts else None,
        "first_monotonic": min(mfirsts) if mfirsts else None,
        "last_monotonic": max(mlasts) if mlasts else None,
        "pid": first.pid,
        "pids": ",".join(str(p) for p in pids[:10]) or None,
        "process": ",".join(names[:5]) or None,
        "bucket": bucket_name,
        "confidence": confidence,
        "rule": v.rule,
    }
    values.update(extra)
    where = component.short() if component.kind == "gpu" else (g.switch or component.short())
    msg = (first.message or "").strip()
    # Most lines repeat the catalogue's name ("GPU has fallen off the bus."):
    # say it once; keep the line's own words when they add something.
    same = msg.rstrip(". ").lower() == str(name).rstrip(". ").lower()
    detail = name if (same or not msg) else f"{name}: {msg}"
    text = f"{g.code} on {where}: {detail}"
    if g.count > 1:
        text += f" (x{g.count})"
    if v.note:
        text += f" [{v.note}]"
    # The catalogue's verdict makes the group's code a Problem like any check's.
    return Problem(g.code, v.status, v.action).finding(CHECK, text, component, values)
