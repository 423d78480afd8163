"""NVIDIA's XID catalogue, loaded from ``slurm_hooks/data/xid_catalogue.json``.

The catalogue is data, not code: one row per XID with NVIDIA's immediate
and investigatory resolution buckets, the GPUs it applies to, and where our
reading differs from (or fills a gap in) NVIDIA's, a ``source`` and
``confidence`` saying so.  Updating it for a new driver is a data change.

Buckets map to :class:`slurm_hooks.core.model.Action` through the ``buckets``
table in the same file:

==================== ============ ====== ===========================================
NVIDIA bucket        Action       Status Why
==================== ============ ====== ===========================================
IGNORE               ignore       OK     nothing to do
RESTART_APP          restart_app  WARN   the job failed, the GPU is fine
RESTART_VM           restart_app  WARN   bare metal has no VM; the job restarts
RESET_GPU            reset_gpu    FAIL   the GPU must be reset before new work
RESTART_BM           reboot       FAIL   only a node reboot recovers it
CONTACT_SUPPORT      replace      FAIL   hardware: out of service, vendor ticket
CHECK_MECHANICALS    drain        FAIL   someone has to look at cables/seating
UPDATE_SWFW          drain        FAIL   driver/firmware mismatch
WORKFLOW_XID_45      restart_app  WARN   rule: ignore when another XID explains it
WORKFLOW_XID_48      reset_gpu    FAIL   rule: drain and reset with XID 63/64
WORKFLOW_NVLINK_ERR  drain        FAIL   rule: decode XID 74 registers
WORKFLOW_NVLINK5_ERR drain        FAIL   rule: decode XID 144-150 severity
XID_154              none         OK     rule: the message states the action
CHECK_UVM            reset_gpu    FAIL   CUDA on Slurm nodes uses UVM
MONITOR (ours)       none         WARN   report only (XIDs with no bucket yet)
==================== ============ ====== ===========================================

Loaded lazily on first use and cached for the life of the process.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Any

from slurm_hooks.core.errors import ConfigError
from slurm_hooks.core.model import Action, Status

DATA_FILE = "xid_catalogue.json"


@dataclass(frozen=True)
class Bucket:
    name: str
    action: Action
    status: Status
    meaning: str
    rule: str | None = None


@dataclass(frozen=True)
class XidInfo:
    xid: int
    mnemonic: str
    name: str
    description: str
    applies_to: tuple[str, ...]
    immediate: str | None
    investigatory: str | None
    xid154: bool
    bucket: str
    source: str
    confidence: str
    note: str | None = None


@dataclass(frozen=True)
class SxidInfo:
    sxid: int
    name: str
    severity: str
    source: str
    confidence: str


@dataclass(frozen=True)
class Catalogue:
    xids: Mapping[int, XidInfo]
    buckets: Mapping[str, Bucket]
    recovery_actions: Mapping[int, tuple[str, Action]]
    sxids: Mapping[int, SxidInfo]
    sxid_defaults: Mapping[str, str]
    source: str = ""

    def get(self, xid: int) -> XidInfo | None:
        return self.xids.get(xid)

    def sxid(self, sxid: int) -> SxidInfo | None:
        return self.sxids.get(sxid)

    def bucket(self, name: str) -> Bucket:
        return self.buckets.get(name) or self.buckets["MONITOR"]

    def bucket_for(self, xid: int) -> Bucket:
        """The bucket slurm-hooks acts on; unknown XIDs are reported, not acted on."""
        info = self.xids.get(xid)
        return self.bucket(info.bucket if info else "MONITOR")


def parse_catalogue(data: Mapping[str, Any], *, origin: str = DATA_FILE) -> Catalogue:
    """Build and validate a Catalogue; errors name the offending row."""
    try:
        buckets = {
            name: Bucket(
                name=name,
                action=Action(b["action"]),
                status=Status(b["status"]),
                meaning=b.get("meaning", ""),
                rule=b.get("rule"),
            )
            for name, b in data["buckets"].items()
        }
        if "MONITOR" not in buckets:
            raise ValueError("bucket MONITOR missing")
        xids: dict[int, XidInfo] = {}
        for row in data["xids"]:
            info = XidInfo(
                xid=int(row["xid"]),
                mnemonic=row["mnemonic"],
                name=row["name"],
                description=row.get("description") or row["name"],
                applies_to=tuple(row.get("applies_to", ())),
                immediate=row.get("immediate"),
                investigatory=row.get("investigatory"),
                xid154=bool(row.get("xid154", False)),
                bucket=row.get("bucket") or row.get("immediate") or "MONITOR",
                source=row.get("source", ""),
                confidence=row.get("confidence", "high"),
                note=row.get("note"),
            )
            if info.bucket not in buckets:
                raise ValueError(f"xid {info.xid}: unknown bucket {info.bucket!r}")
            xids[info.xid] = info
        recovery = {
            int(k): (v["text"], Action(v["action"]))
            for k, v in data.get("recovery_actions", {}).items()
        }
        sxids = {
            int(r["sxid"]): SxidInfo(
                sxid=int(r["sxid"]),
                name=r["name"],
                severity=r.get("severity", "unknown"),
                source=r.get("source", ""),
                confidence=r.get("confidence", "low"),
            )
            for r in data.get("sxids", ())
        }
        defaults = dict(data.get("sxid_defaults", {}))
        for name in defaults.values():
            if name not in buckets:
                raise ValueError(f"sxid_defaults: unknown bucket {name!r}")
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"invalid XID catalogue: {exc}", path=origin) from exc
    return Catalogue(
        xids=MappingProxyType(xids),
        buckets=MappingProxyType(buckets),
        recovery_actions=MappingProxyType(recovery),
        sxids=MappingProxyType(sxids),
        sxid_defaults=MappingProxyType(defaults),
        source=str(data.get("source", "")),
    )


@functools.cache
def load_catalogue(path: str | None = None) -> Catalogue:
    """The packaged catalogue (or the JSON file at ``path``), parsed once."""
    try:
        if path is None:
            text = (resources.files("slurm_hooks") / "data" / DATA_FILE).read_text(encoding="utf-8")
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        data = json.loads(text)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load XID catalogue: {exc}", path=path or DATA_FILE) from exc
    return parse_catalogue(data, origin=path or DATA_FILE)
