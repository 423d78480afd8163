"""NVLink links down, and link error counters rising since the last run.

The state of every link the profile expects (``nvlinks_per_gpu``; without
a profile value, until NVML says there are no more) is read as
``nvmlDeviceGetNvLinkState`` returns it.  A link that is down, or missing,
breaks NVSwitch all-to-all bandwidth: FAIL.  Error counters only ever grow
until a driver reload or reset, so the check keeps the last values in the
state directory and judges the increase; a counter that went down was
reset, not improved.

NVML is asked one ``nvmlDeviceGetFieldValues`` query per GPU for the
states (:func:`read_states`) and one for the error counters of every link
that is up (:func:`read_counters`): nvml.h names a field per counter and
link for links 0-11, and the replay and recovery counters of any link as
one field scoped by the link.  What a query does not answer (the CRC
counters of links 12-17 on an H100, a state other than active or
inactive, a field this driver does not know, a driver without the field
API) is asked of ``nvmlDeviceGetNvLinkState`` or
``nvmlDeviceGetNvLinkErrorCounter`` one link or counter at a time, as before.
"""

from __future__ import annotations

import logging
import os
from typing import Any, ClassVar

from slurm_hooks.core.model import Action, Component, Finding, Phase, Status
from slurm_hooks.core.record import record, replace
from slurm_hooks.detect.checks.base import CheckContext, Problem
from slurm_hooks.detect.checks.gpubase import GpuCheck, GpuData, GpuSample, call_optional
from slurm_hooks.detect.probes.nvml import (
    ERROR_FUNCTION_NOT_FOUND,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_SUPPORTED,
    field_results,
    is_nvml_error,
)
from slurm_hooks.detect.profiles import as_profile

log = logging.getLogger(__name__)

STATE_FILE = "nvlink_counters.json"
#: Counter name -> pynvml constant name.
COUNTERS = {
    "replay": "NVML_NVLINK_ERROR_DL_REPLAY",
    "recovery": "NVML_NVLINK_ERROR_DL_RECOVERY",
    "crc_flit": "NVML_NVLINK_ERROR_DL_CRC_FLIT",
    "crc_data": "NVML_NVLINK_ERROR_DL_CRC_DATA",
}
#: Counter name -> its per-link field ids' name without the link number
#: (``NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L0`` ... ``_L11`` in nvml.h).
FIELDS = {
    "replay": "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L",
    "recovery": "NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L",
    "crc_flit": "NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L",
    "crc_data": "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L",
}
#: Counter name -> its field for any link, the link as ``scopeId`` (nvml.h:
#: "NVLink Replay/Recovery Error Counter"; for links without a field above).
SCOPED_FIELDS = {
    "replay": "NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY",
    "recovery": "NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY",
}
#: Upper bound when the profile does not say how many links to expect.
MAX_LINKS = 18
NVLINK_DOWN = Problem("NVLINK_DOWN", Status.FAIL, Action.RESET_GPU)
NVLINK_ERRORS = Problem("NVLINK_ERRORS", Status.WARN, Action.DRAIN)


@record
class Settings:
    #: New replay + CRC errors on one link since the last run before WARN.
    max_new_errors: int = 100
    #: New link recoveries (the link retrained) on one link before WARN.
    max_new_recoveries: int = 0


class NvlinkCheck(GpuCheck):
    name: ClassVar[str] = "nvlink"
    settings_class: ClassVar[type | None] = Settings
    phases: ClassVar[frozenset[Phase]] = frozenset(
        {Phase.HEALTHCHECK, Phase.EPILOG, Phase.ACCEPTANCE}
    )

    # Not applicable with nvlinks_per_gpu = 0 or gpu_count = 0: ``skip_when`` in
    # checks/registry.py, read by the runner before this module is imported.

    def gather_gpu(self, nvml: Any, handle: Any, ctx: CheckContext) -> dict[str, Any] | None:
        expected = as_profile(ctx.profile).nvlinks_per_gpu
        limit = expected if expected is not None else MAX_LINKS
        answered = read_states(nvml, handle, limit)
        states: dict[int, int | None] = {}
        for link in range(limit):
            if link in answered:
                states[link] = answered[link]
                continue
            try:
                states[link] = int(nvml.nvmlDeviceGetNvLinkState(handle, link))
            except Exception as exc:
                if not is_nvml_error(exc, ERROR_NOT_SUPPORTED, ERROR_INVALID_ARGUMENT):
                    raise
                if expected is None:
                    break
                states[link] = None  # expected but not reported
        if not any(v is not None for v in states.values()):
            return None
        up = int(nvml.NVML_FEATURE_ENABLED)
        counters = read_counters(nvml, handle, [link for link, st in states.items() if st == up])
        return {"states": states, "up_value": up, "counters": counters}

    def gather(self, ctx: CheckContext) -> GpuData:
        data = super().gather(ctx)
        if data.skipped:
            return data
        path = os.path.join(ctx.state_dir, STATE_FILE)
        stored = _read(path)
        previous = _parse(stored, path)
        current = dict(previous)
        samples = []
        for s in data.samples:
            key = s.component.uuid or f"gpu{s.component.index}"
            if s.value is not None:
                current[key] = s.value["counters"]
                s = GpuSample(s.component, {**s.value, "previous": previous.get(key)}, None)
            samples.append(s)
        text = _dump(current)
        # Counters that did not move (every healthy run) are already on disk:
        # no rewrite, and no two fsyncs on the node's disk each interval.
        saved = text == stored or _save(path, text)
        return replace(data, samples=tuple(samples), extra={"state_saved": saved})

    def judge_gpu(self, comp: Component, value: Any, ctx: CheckContext) -> list[Finding]:
        expected = as_profile(ctx.profile).nvlinks_per_gpu
        if value is None:
            if not expected:
                return []
            detail = f"NVML reports no NVLink, profile expects {expected} links"
            return [self.gpu_finding(NVLINK_DOWN, comp, detail, {"expected": expected, "up": 0})]
        findings = []
        states = value["states"]
        down = [link for link, st in states.items() if st is not None and st != value["up_value"]]
        missing = [link for link, st in states.items() if st is None]
        if down or missing:
            parts = []
            if down:
                parts.append(f"link(s) {_links(down)} down")
            if missing:
                parts.append(f"link(s) {_links(missing)} not reported")
            values = {
                "down": _links(down),
                "missing": _links(missing),
                "up": len(states) - len(down) - len(missing),
                "expected": expected if expected is not None else len(states),
            }
            findings.append(
                self.gpu_finding(NVLINK_DOWN, comp, f"NVLink {'; '.join(parts)}", values)
            )
        s = ctx.settings_as(Settings, self.name)
        previous = value.get("previous") or {}
        for link, cur in value["counters"].items():
            prev = previous.get(link)
            if not prev:
                continue
            delta = {k: v - prev[k] for k, v in cur.items() if k in prev and v >= prev[k]}
            errors = sum(v for k, v in delta.items() if k != "recovery")
            recoveries = delta.get("recovery", 0)
            if errors > s.max_new_errors or recoveries > s.max_new_recoveries:
                message = (
                    f"{comp.short()} link {link}: {errors} new replay/CRC error(s), "
                    f"{recoveries} new recovery(ies) since the last run"
                )
                values = {"link": int(link), **{f"new_{k}": v for k, v in delta.items()}}
                findings.append(NVLINK_ERRORS.finding(self.name, message, comp, values))
        return findings


def read_states(nvml: Any, handle: Any, limit: int) -> dict[int, int]:
    """The states of links 0..limit-1 that one field-value query answers
    unambiguously (``NVML_FI_DEV_NVLINK_GET_STATE``, the link as scope):
    NVML_NVLINK_STATE_ACTIVE / _INACTIVE, as the NVML_FEATURE_ENABLED /
    _DISABLED that ``nvmlDeviceGetNvLinkState`` returns.  A link left out
    (another state such as sleep, an entry error, a field or field API the
    driver lacks) is asked of ``nvmlDeviceGetNvLinkState``, which decides
    as it always did.  Any other error of the query raises."""
    fid = getattr(nvml, "NVML_FI_DEV_NVLINK_GET_STATE", None)
    active = getattr(nvml, "NVML_NVLINK_STATE_ACTIVE", None)
    inactive = getattr(nvml, "NVML_NVLINK_STATE_INACTIVE", None)
    if not isinstance(fid, int) or limit <= 0 or active is None or inactive is None:
        return {}
    try:
        results = field_results(nvml, handle, [(fid, link) for link in range(limit)])
    except Exception as exc:
        if not is_nvml_error(exc, ERROR_FUNCTION_NOT_FOUND):
            raise
        return {}
    as_enable = {active: int(nvml.NVML_FEATURE_ENABLED), inactive: int(nvml.NVML_FEATURE_DISABLED)}
    return {
        link: as_enable[int(value)]
        for link, (ret, value) in enumerate(results)
        if ret == 0 and value is not None and int(value) in as_enable
    }


def read_counters(nvml: Any, handle: Any, links: list[int]) -> dict[str, dict[str, int]]:
    """The error counters of ``links`` (str(link) -> counter -> value; a
    counter NVML does not support there is left out, as before).  One
    field-value query asks every counter that has a field; each counter it
    does not answer (no field, an entry error such as NOT_SUPPORTED, no
    field API at all) is asked of ``nvmlDeviceGetNvLinkErrorCounter``,
    which decides as it always did.  Any other error of the query raises,
    as a failing single call did."""
    if not links:
        return {}
    found: dict[tuple[int, str], int] = {}
    batched: list[tuple[int, str, int | tuple[int, int]]] = []
    for link in links:
        for cname in COUNTERS:
            fid = _field_id(nvml, cname, link)
            if fid is not None:
                batched.append((link, cname, fid))
    if batched:
        try:
            results = field_results(nvml, handle, [fid for _, _, fid in batched])
        except Exception as exc:
            if not is_nvml_error(exc, ERROR_FUNCTION_NOT_FOUND):
                raise
        else:
            for (link, cname, _), (ret, value) in zip(batched, results, strict=True):
                if ret == 0 and value is not None:
                    found[link, cname] = int(value)
    constants = {cname: getattr(nvml, const) for cname, const in COUNTERS.items()}
    out: dict[str, dict[str, int]] = {}
    for link in links:
        per: dict[str, int] = {}
        for cname in COUNTERS:
            if (link, cname) in found:
                per[cname] = found[link, cname]
                continue
            value = call_optional(
                nvml.nvmlDeviceGetNvLinkErrorCounter, handle, link, constants[cname]
            )
            if value is not None:
                per[cname] = int(value)
        out[str(link)] = per
    return out


def _field_id(nvml: Any, counter: str, link: int) -> int | tuple[int, int] | None:
    """The field giving ``counter`` of ``link``: its own id (links 0-11), or
    the scoped field with the link as scope, or None."""
    fid = getattr(nvml, f"{FIELDS[counter]}{link}", None)
    if isinstance(fid, int):
        return fid
    name = SCOPED_FIELDS.get(counter)
    scoped = getattr(nvml, name, None) if name else None
    return (scoped, link) if isinstance(scoped, int) else None


def _links(links: list[int]) -> str:
    return ",".join(str(x) for x in links)


def _read(path: str) -> str | None:
    """The saved counters as written, or None when there are none to read."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("nvlink: ignoring unreadable state %s: %s", path, exc)
        return None


def _parse(text: str | None, path: str) -> dict[str, Any]:
    import json

    if text is None:
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        log.warning("nvlink: ignoring unreadable state %s: %s", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def _dump(data: dict[str, Any]) -> str:
    import json

    return json.dumps(data, sort_keys=True)


def _save(path: str, text: str) -> bool:
    """Atomic (temp file + rename): a crash never leaves half a file."""
    from slurm_hooks.store.atomicfile import write_atomic

    try:
        write_atomic(path, text, mode=0o600)
    except OSError as exc:
        log.warning("nvlink: cannot save counters to %s: %s", path, exc)
        return False
    return True
