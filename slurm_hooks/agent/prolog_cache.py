"""The prolog's cached pass: what is stored, and when it is still good.

A pass is cached in ``<state_dir>/prolog/pass.json`` (atomic JSON) and is
good for ``validity_s`` unless the node rebooted, new XID events came, a
fault or a SLOW report was recorded since, or the job asks for GPUs the pass
did not test (``cache_verdict``, pure; the facts it judges against are read
fresh on every prolog: ``read_boot_id``, ``xid_mark``, ``last_fault_at``,
``last_slow_at``).  A pass that missed only for its GPUs is kept and widened
by the next full run's (``still_good``, ``widened``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slurm_hooks.core.config import Config
from slurm_hooks.core.errors import StateError
from slurm_hooks.core.record import record

log = logging.getLogger("slurm_hooks.agent.prolog")  # the prolog's own log

#: Where the pass is cached, under general.state_dir.
CACHE_FILE = "prolog/pass.json"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
#: Fault severities in the node's state that do not void a pass: decisions
#: that only log (a check that could not run, a WARN with no action).
_HARMLESS_SEVERITIES = frozenset({"log"})


@record
class CachedPass:
    """One full pass, as stored."""

    node: str
    passed_at: float
    devices: tuple[int, ...] | None = None
    boot_id: str | None = None
    xid_mark: str | None = None
    job_id: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": 1,
            "node": self.node,
            "passed_at": self.passed_at,
            "devices": list(self.devices) if self.devices is not None else None,
            "boot_id": self.boot_id,
            "xid_mark": self.xid_mark,
            "job_id": self.job_id,
            "seconds": round(self.seconds, 3),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CachedPass | None:
        try:
            devices = d.get("devices")
            return cls(
                node=str(d["node"]),
                passed_at=float(d["passed_at"]),
                devices=tuple(int(x) for x in devices) if devices is not None else None,
                boot_id=d.get("boot_id"),
                xid_mark=d.get("xid_mark"),
                job_id=d.get("job_id"),
                seconds=float(d.get("seconds", 0.0)),
            )
        except (KeyError, TypeError, ValueError):
            return None


@record
class NodeFacts:
    """What the cache is judged against, read fresh on every prolog."""

    node: str
    now: float
    boot_id: str | None
    xid_mark: str | None
    #: Wall time of the latest fault the state store recorded (not "log" ones).
    last_fault_at: float | None = None
    #: Wall time of the latest SLOW report within ``[progress] slow_history_s``
    #: (a straggler the default policy only reported: agent/slow_history.py).
    last_slow_at: float | None = None


def cache_verdict(
    entry: CachedPass | None,
    facts: NodeFacts,
    devices: tuple[int, ...] | None,
    validity_s: float,
) -> tuple[bool, str]:
    """Is the cached pass still good for a job on ``devices``?  Pure."""
    if entry is None:
        return False, "no cached pass"
    if entry.node != facts.node:
        return False, f"cached pass is for {entry.node}, not {facts.node}"
    age = facts.now - entry.passed_at
    if age < -60:
        return False, "cached pass is from the future (clock stepped back)"
    if age >= validity_s:
        return False, f"cached pass is {age:.0f}s old (validity {validity_s:g}s)"
    if entry.boot_id and facts.boot_id and entry.boot_id != facts.boot_id:
        return False, "node rebooted since the pass"
    if entry.xid_mark != facts.xid_mark:
        return False, "new XID events since the pass"
    if facts.last_fault_at is not None and facts.last_fault_at >= entry.passed_at:
        return False, "a fault was recorded since the pass"
    if facts.last_slow_at is not None and facts.last_slow_at >= entry.passed_at:
        return False, "the node was reported SLOW since the pass"
    if entry.devices is not None and (devices is None or not set(devices) <= set(entry.devices)):
        return False, "the pass did not test all of this job's GPUs"
    return True, f"passed {age:.0f}s ago"


def still_good(entry: CachedPass | None, facts: NodeFacts, validity_s: float) -> CachedPass | None:
    """``entry`` where it still holds for the GPUs it tested (a job asking
    for others misses the cache, but that pass is no less true), else None.
    Pure."""
    if entry is None or entry.devices is None:
        return None  # an all-GPU pass missed for a reason other than GPUs
    return entry if cache_verdict(entry, facts, entry.devices, validity_s)[0] else None


def widened(kept: CachedPass | None, new: CachedPass) -> CachedPass:
    """``new`` together with the GPUs a still-good earlier pass tested, so
    1-GPU jobs packed on a node each pay the full run once per validity,
    not once per job: the union of the GPUs, and the earlier pass's time
    (the older test sets when both expire).  Pure."""
    if kept is None or kept.devices is None or new.devices is None:
        return new
    both = tuple(sorted(set(kept.devices) | set(new.devices)))
    return CachedPass(new.node, kept.passed_at, both, new.boot_id, new.xid_mark,
                      new.job_id, new.seconds)  # fmt: skip


class PassCache:
    """The cached pass file (atomic writes; a broken file counts as none)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)

    def read(self) -> CachedPass | None:
        from slurm_hooks.store.state import read_json

        try:
            data = read_json(self.path)
        except StateError as exc:
            log.warning("prolog cache unreadable: %s", exc)
            return None
        return CachedPass.from_dict(data) if isinstance(data, Mapping) else None

    def write(self, entry: CachedPass) -> None:
        from slurm_hooks.store.state import atomic_write_json

        atomic_write_json(self.path, entry.to_dict())

    def invalidate(self, why: str) -> bool:
        """Drop the pass; True when there was one."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StateError(f"cannot remove {self.path}: {exc}") from exc
        log.info("prolog cache invalidated: %s", why)
        return True


def read_boot_id(path: str = BOOT_ID_PATH) -> str | None:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def xid_mark(state_dir: str) -> str | None:
    """A fingerprint of the XID history file: it changes whenever anyone's
    scan recorded new XID events (the file is rewritten only then)."""
    from slurm_hooks.detect.xid.cursor import state_path
    from slurm_hooks.detect.xid.history import NAME

    try:
        st = os.stat(state_path(state_dir, NAME))
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"error:{exc.errno}"
    return f"{st.st_mtime_ns}:{st.st_size}"


def last_fault_at(state_dir: str, node: str) -> float | None:
    """The newest fault the engine recorded for ``node`` (one small file read)."""
    from slurm_hooks.store.state import StateStore, parse_time

    try:
        data = StateStore(state_dir).read_node(node)
    except StateError as exc:
        log.warning("prolog: node state unreadable: %s", exc)
        return time.time()  # cannot prove nothing happened: no cache
    latest = None
    for f in data.get("faults", ()):
        if f.get("severity") in _HARMLESS_SEVERITIES:
            continue
        try:
            t = parse_time(f["at"]).timestamp()
        except (KeyError, TypeError, ValueError):
            continue
        latest = t if latest is None else max(latest, t)
    return latest


def last_slow_at(cfg: Config, state_dir: str, node: str, now: float) -> float | None:
    """The newest recent SLOW report of ``node`` (one small file read)."""
    from slurm_hooks.agent import slow_history

    reports = slow_history.recent_slow(
        state_dir, node, now=now, window_s=slow_history.window_s(cfg)
    )
    return reports[-1].at if reports else None
