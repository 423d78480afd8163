"""The node-local state store: small JSON files that survive restarts.

Layout under ``state_dir``::

    nodes/<node>.json        cursors, fault events, resumes, acceptance passes,
                             the open incident
    incidents/<id>.json      one remediation journal per incident (steps per job)
    locks/<name>.lock        fcntl locks; hooks, the watcher and the grace
                             worker run concurrently on one node

Every write is temp file + fsync + rename + directory fsync, so a crash
leaves the old file or the new one, never half of one.  Every
read-modify-write holds the file's lock.  Lists are capped so the files
stay small however long a node lives.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_hooks.core.errors import StateError
from slurm_hooks.store.atomicfile import ensure_dir, write_atomic

if TYPE_CHECKING:  # the policy is imported only where history is read: hooks
    # on a healthy node open the state store but never decide anything.
    from slurm_hooks.core.history import FaultEvent, NodeHistory, Trip

log = logging.getLogger(__name__)

#: Entries kept per list in a node file (oldest dropped first).
MAX_ENTRIES = 500
_SAFE = re.compile(r"^[A-Za-z0-9_.\-\[\],:+]{1,128}$")


def by_users(entry: Mapping[str, Any]) -> bool:
    """Whether a fault history entry is one the node's users can write or
    cause: user-side evidence (``trusted`` false), a fault their processes
    raised (``user`` names them), or a code of ``core/user_caused.py``."""
    from slurm_hooks.core.user_caused import USERS_CAUSE  # a long history only: not at start-up

    return (
        entry.get("trusted") is False or bool(entry.get("user")) or entry.get("code") in USERS_CAUSE
    )


def kept_faults(faults: list[Any]) -> list[Any]:
    """The fault history a node file keeps: the newest ``MAX_ENTRIES`` of
    what its users can write or cause (:func:`by_users`) and the newest
    ``MAX_ENTRIES`` of the rest, in their order.  One list for both let a
    user who forges a thousand stragglers push the node's own XID drains
    out of it, and with them the evidence REPLACE and the repeat rules
    count (decide.py)."""
    if len(faults) <= MAX_ENTRIES:
        return faults
    users = [i for i, f in enumerate(faults) if isinstance(f, Mapping) and by_users(f)]
    if len(users) <= MAX_ENTRIES and len(faults) - len(users) <= MAX_ENTRIES:
        return faults
    by_them = set(users)
    others = [i for i in range(len(faults)) if i not in by_them]
    drop = set(users[:-MAX_ENTRIES]) | set(others[:-MAX_ENTRIES])
    return [f for i, f in enumerate(faults) if i not in drop]


def iso(t: datetime) -> str:
    return t.isoformat()


def parse_time(s: str) -> datetime:
    t = datetime.fromisoformat(s)
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def atomic_write_json(path: Path, data: Any) -> None:
    """Replace ``path`` with ``data`` as JSON, durably and atomically."""
    text = json.dumps(data, indent=1, sort_keys=True, default=str) + "\n"
    try:
        write_atomic(path, text, mode=0o600)
    except OSError as exc:  # full, read-only, gone: the caller decides what it costs
        raise StateError(f"cannot write {path}: {exc}") from exc


def read_json(path: Path) -> Any | None:
    """The file's JSON, or None when it does not exist.  A file that is not
    JSON (should not happen with atomic writes; a disk may still lie) is
    moved aside and reported, so a bad byte cannot wedge remediation."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(f"cannot read {path}: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
        log.error("state file %s is not JSON (%s); moved to %s", path, exc, aside)
        with contextlib.suppress(OSError):
            os.replace(path, aside)
        return None


class LockTimeout(StateError):
    """Another process held the lock for the whole wait (the lock works; the
    holder is busy).  Any other StateError from :func:`locked` means the
    state dir itself is broken (full, read-only, gone)."""


#: Seconds the breaker latch's lock is waited for; it sits on a shared file
#: system and is taken under the detect lock, so it must never block a hook.
LATCH_LOCK_TIMEOUT_S = 5.0


@contextlib.contextmanager
def locked(path: Path, timeout: float, mode: int = 0o600) -> Iterator[None]:
    """The one lock helper: an exclusive ``flock`` on ``path`` (created with
    its folder), polled for at most ``timeout`` seconds.  Every failure, a
    timeout or an unwritable folder, is a StateError: no caller waits forever
    and none sees a raw OSError."""
    try:
        ensure_dir(path.parent, 0o700)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, mode)
    except OSError as exc:
        raise StateError(f"cannot open lock {path}: {exc}") from exc
    deadline = time.monotonic() + max(0.0, timeout)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise StateError(f"cannot lock {path}: {exc}") from exc
                if time.monotonic() >= deadline:
                    raise LockTimeout(
                        f"timed out after {timeout:g}s waiting for lock {path}"
                    ) from exc
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _safe(name: str, what: str) -> str:
    if not _SAFE.match(name) or name in (".", ".."):
        raise StateError(f"invalid {what} name {name!r}")
    return name


#: The node's detect-and-act lock: held around "scan the kernel log, then
#: act" by the watcher and the hooks, which share one cursor.
DETECT_LOCK = "detect"


class StateStore:
    """Per-node state under ``root`` (``general.state_dir``)."""

    def __init__(self, root: str | os.PathLike[str], *, lock_timeout: float = 20.0):
        self.root = Path(root)
        self.lock_timeout = lock_timeout

    # -- locking -----------------------------------------------------------

    @contextlib.contextmanager
    def lock(self, name: str, timeout: float | None = None) -> Iterator[None]:
        """An exclusive fcntl lock, waited for at most ``timeout`` seconds."""
        path = self.root / "locks" / f"{_safe(name, 'lock')}.lock"
        with locked(path, self.lock_timeout if timeout is None else timeout):
            yield

    # -- nodes ---------------------------------------------------------------

    def node_path(self, node: str) -> Path:
        return self.root / "nodes" / f"{_safe(node, 'node')}.json"

    def read_node(self, node: str) -> dict[str, Any]:
        data = read_json(self.node_path(node))
        return data if isinstance(data, dict) else {"node": node}

    def update_node(
        self,
        node: str,
        change: Callable[[dict[str, Any]], None],
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Locked read-modify-write of the node's file.  ``timeout``: wait
        for the lock at most that long (default ``lock_timeout``), for
        bookkeeping that must never hold up acting."""
        with self.lock(f"node-{node}", timeout):
            data = self.read_node(node)
            change(data)
            if "faults" in data:
                data["faults"] = kept_faults(data["faults"])
            for key in ("resumes", "acceptance"):
                if key in data and len(data[key]) > MAX_ENTRIES:
                    data[key] = data[key][-MAX_ENTRIES:]
            atomic_write_json(self.node_path(node), data)
            return data

    def history(self, node: str) -> NodeHistory:
        from slurm_hooks.core.history import FaultEvent, NodeHistory

        data = self.read_node(node)
        faults = tuple(
            FaultEvent(
                parse_time(f["at"]),
                f["code"],
                f.get("component"),
                f.get("severity", "log"),
                f.get("incident"),
                f.get("trusted", True) is not False,
                f.get("user") if isinstance(f.get("user"), str) else None,
            )
            for f in data.get("faults", ())
        )
        return NodeHistory(
            faults=faults,
            resumes=tuple(parse_time(t) for t in data.get("resumes", ())),
            acceptance_passes=tuple(
                parse_time(a["at"]) for a in data.get("acceptance", ()) if a.get("passed")
            ),
            open_incident=data.get("open_incident"),
        )

    def open_incident(self, node: str) -> str | None:
        """Cheap check the engine makes on every run (no Slurm call)."""
        return self.read_node(node).get("open_incident")

    def record_faults(
        self, node: str, events: list[FaultEvent], *, timeout: float | None = None
    ) -> None:
        if not events:
            return

        def change(d: dict[str, Any]) -> None:
            d.setdefault("faults", []).extend(
                {
                    "at": iso(e.at),
                    "code": e.code,
                    "component": e.component,
                    "severity": e.severity,
                    "incident": e.incident,
                    **({} if e.trusted else {"trusted": False}),
                    **({"user": e.user} if e.user else {}),
                }
                for e in events
            )

        self.update_node(node, change, timeout=timeout)

    def set_open_incident(
        self, node: str, incident: str | None, *, timeout: float | None = None
    ) -> None:
        def change(d: dict[str, Any]) -> None:
            d["open_incident"] = incident

        self.update_node(node, change, timeout=timeout)

    def clear_open_incident(self, node: str, incident: str) -> None:
        """Close ``incident`` if it is the node's open one (and only then)."""

        def change(d: dict[str, Any]) -> None:
            if d.get("open_incident") == incident:
                d["open_incident"] = None

        self.update_node(node, change)

    def record_resume(self, node: str, at: datetime, incident: str | None = None) -> None:
        def change(d: dict[str, Any]) -> None:
            d.setdefault("resumes", []).append(iso(at))
            if incident is None or d.get("open_incident") == incident:
                d["open_incident"] = None

        self.update_node(node, change)

    def record_acceptance(
        self, node: str, at: datetime, passed: bool = True, detail: str = ""
    ) -> None:
        """The acceptance run's verdict; resume needs a pass after the fault."""

        def change(d: dict[str, Any]) -> None:
            d.setdefault("acceptance", []).append(
                {"at": iso(at), "passed": passed, "detail": detail}
            )

        self.update_node(node, change)

    # -- held faults (the breaker refused them; act/held.py) -----------------

    def held(self, node: str) -> dict[str, dict[str, Any]]:
        """The node's held faults by code (empty when none)."""
        held = self.read_node(node).get("held")
        if not isinstance(held, dict):
            return {}
        return {k: v for k, v in held.items() if isinstance(v, dict)}

    def record_held(self, node: str, code: str, record: dict[str, Any]) -> None:
        """Keep (or refresh) a held fault; ``since`` of the first one stays."""

        def change(d: dict[str, Any]) -> None:
            held: dict[str, Any] = d["held"] if isinstance(d.get("held"), dict) else {}
            old: dict[str, Any] = held[code] if isinstance(held.get(code), dict) else {}
            held[code] = {**old, **record, "since": old.get("since", record.get("since"))}
            d["held"] = held

        self.update_node(node, change)

    def update_held(self, node: str, change_one: Callable[[dict[str, Any]], None]) -> None:
        """Change every held record of the node in place (alert times, checks)."""

        def change(d: dict[str, Any]) -> None:
            for rec in (d.get("held") or {}).values():
                if isinstance(rec, dict):
                    change_one(rec)

        self.update_node(node, change)

    def clear_held(self, node: str, codes: Iterable[str] | None = None) -> list[str]:
        """Forget held faults (all, or ``codes``); returns the codes dropped."""
        gone: list[str] = []

        def change(d: dict[str, Any]) -> None:
            held: dict[str, Any] = d["held"] if isinstance(d.get("held"), dict) else {}
            for code in list(held):
                if codes is None or code in set(codes):
                    gone.append(code)
                    del held[code]
            d["held"] = held

        self.update_node(node, change)
        return gone

    def held_nodes(self) -> list[str]:
        """Nodes with a state file here that hold a fault (status, reset)."""
        folder = self.root / "nodes"
        out = []
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
            data = read_json(path)
            if isinstance(data, dict) and data.get("held"):
                out.append(str(data.get("node") or path.stem))
        return out

    def get_cursor(self, node: str, name: str) -> Any | None:
        return self.read_node(node).get("cursors", {}).get(name)

    def set_cursor(self, node: str, name: str, value: Any) -> None:
        def change(d: dict[str, Any]) -> None:
            d.setdefault("cursors", {})[name] = value

        self.update_node(node, change)

    # -- incidents -------------------------------------------------------------

    def incident_path(self, incident: str) -> Path:
        return self.root / "incidents" / f"{_safe(incident, 'incident')}.json"

    def read_incident(self, incident: str) -> dict[str, Any] | None:
        data = read_json(self.incident_path(incident))
        return data if isinstance(data, dict) else None

    def write_incident(self, doc: dict[str, Any]) -> None:
        atomic_write_json(self.incident_path(doc["incident"]), doc)

    @contextlib.contextmanager
    def incident_lock(self, incident: str, timeout: float | None = None) -> Iterator[None]:
        """Held by whoever works on an incident's jobs (engine, worker,
        resume_pending), so that two of them never requeue the same job."""
        with self.lock(f"incident-{incident}", timeout):
            yield

    def update_incident(
        self, incident: str, change: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]:
        """Read-modify-write of a journal.  Callers hold ``incident_lock``."""
        doc = self.read_incident(incident)
        if doc is None:
            raise StateError(f"no incident {incident}")
        change(doc)
        self.write_incident(doc)
        return doc

    def incidents(
        self, node: str | None = None, *, pending_only: bool = False
    ) -> list[dict[str, Any]]:
        folder = self.root / "incidents"
        out = []
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
            doc = read_json(path)
            if not isinstance(doc, dict):
                continue
            if node is not None and doc.get("node") != node:
                continue
            if pending_only and not incident_pending(doc):
                continue
            out.append(doc)
        return out


#: ``repair.status`` values with nothing left to do (act/repair.py).
REPAIR_SETTLED = frozenset({"resumed", "replace", "left_for_human", "observed", "gave_up"})


#: Key in the node's state file: the open incident a passing health check
#: already asked to resume (``cleared``, act/resume.py) and was told no.
CLEARED_ASKED = "cleared_asked"


def incident_pending(doc: dict[str, Any]) -> bool:
    """An incident with work left: jobs not settled, or an alert (queued in
    the journal, ``act.alerts``) that some sink has not received yet, or
    our drain deferred behind a foreign reason (``act.deferred``)."""
    if not doc.get("jobs_done") or doc.get("drain_deferred"):
        return True
    rep = doc.get("repair")
    if isinstance(rep, dict) and rep.get("status") not in REPAIR_SETTLED:
        # A reset/reboot/ticket in flight (act/repair.py): after a reboot the
        # node's own hook must find it and start the worker.
        return doc.get("status") not in ("closed", "abandoned", "held")
    spared = doc.get("spared")
    if isinstance(spared, dict) and any(not (r or {}).get("ended_at") for r in spared.values()):
        # Jobs a GPU-scoped drain left running (act/gpu_scope.py): the
        # repair starts once they are seen gone.
        return doc.get("status") not in ("closed", "abandoned", "held")
    return any(not a.get("done") for a in (doc.get("alerts") or {}).values())


class BreakerLatch:
    """The circuit breaker's latch: tripped partitions, kept until a human
    resets them.  Point ``policy.breaker_state_file`` at a file system every
    node mounts (the Slurm state save directory's share, a home NFS) so that
    one node's trip stops every node; the lock file sits beside it."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        lock_path = self.path.with_name(self.path.name + ".lock")
        with locked(lock_path, LATCH_LOCK_TIMEOUT_S, 0o644):
            yield

    def read(self) -> dict[str, Trip]:
        from slurm_hooks.core.history import Trip

        data = read_json(self.path) or {}
        trips = {}
        for part, t in (data.get("trips") or {}).items():
            try:
                key = t.get("key_at")
                trips[part] = Trip(
                    part, parse_time(t["at"]), t.get("node", "?"), t["counted"], t["limit"],
                    parse_time(key) if key else None,
                )  # fmt: skip
            except (KeyError, TypeError, ValueError):
                log.warning("breaker latch %s: bad entry for %s ignored", self.path, part)
        return trips

    def trip(self, trip: Trip) -> bool:
        """Latch a partition; False when it already was."""
        with self._locked():
            data = read_json(self.path) or {}
            trips = data.setdefault("trips", {})
            if trip.partition in trips:
                return False
            trips[trip.partition] = {
                "at": iso(trip.at),
                "node": trip.node,
                "counted": trip.counted,
                "limit": trip.limit,
                "key_at": iso(trip.key_at) if trip.key_at is not None else None,
            }
            atomic_write_json(self.path, data)
            return True

    def reset(self, partition: str | None = None) -> list[str]:
        """Re-arm one partition (or all); returns the partitions re-armed."""
        with self._locked():
            data = read_json(self.path) or {}
            trips = data.get("trips") or {}
            gone = sorted(trips) if partition is None else [p for p in trips if p == partition]
            for p in gone:
                del trips[p]
            data["trips"] = trips
            atomic_write_json(self.path, data)
            return gone
