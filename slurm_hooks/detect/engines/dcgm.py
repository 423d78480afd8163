"""DCGM diagnostics (``dcgmi diag -r N -j``): run, parse, judge.

Used in acceptance (a drained node must pass before it is resumed) when
DCGM is installed.  The JSON differs between DCGM versions; the parser
accepts all the shapes seen in real output:

* ``{"DCGM GPU Diagnostic": {"test_categories": [{"category": ..., "tests":
  [{"name": ..., "results": [...]}]}], "version": ...}}`` (``"DCGM Diagnostic"``
  as the top key in some builds);
* the GPU of a result as ``"gpu_id"``, ``"gpu_ids"`` (string, CSV string
  for the software tests, or integer) or ``"entity_id"`` with
  ``"entity_group": "GPU"`` (DCGM 4);
* statuses in any case: Pass/PASS, Fail, Warn, Skip/SKIPPED, "Not Run";
* ``warnings`` as strings or objects (``{"warning"|"message": ..., "error_id"
  |"error_code": ...}``), ``info`` as string or list;
* ``null`` entries in ``tests`` and text before the JSON (a warning line);
* ``"runtime_error"`` at the top when the diagnostic could not run.

Judging, and why: a Fail is a hardware verdict (FAIL, per GPU where known);
a Warn is an observation (WARN); Skip/Not Run establish nothing; a document
with no results, a runtime error, or dcgmi exiting non-zero over an all-pass
document is UNKNOWN, never a pass.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurm_hooks.core.errors import CommandTimeout, SlurmHooksError
from slurm_hooks.core.model import Action, Component, Finding, Status
from slurm_hooks.detect.engines.judging import finding
from slurm_hooks.detect.probes import commands

log = logging.getLogger(__name__)

CHECK = "dcgm"

_STATUS = {
    "pass": "pass",
    "fail": "fail",
    "warn": "warn",
    "warning": "warn",
    "skip": "skip",
    "skipped": "skip",
    "not run": "notrun",
    "notrun": "notrun",
}


class DcgmParseError(SlurmHooksError, ValueError):
    """The text is not dcgmi diag JSON."""


@dataclass(frozen=True)
class DcgmResult:
    category: str
    test: str
    #: GPU index; None for results that cover all GPUs (software tests).
    gpu: int | None
    #: pass, fail, warn, skip, notrun (or the raw word, lower-cased, if unknown).
    status: str
    warnings: tuple[str, ...] = ()
    error_ids: tuple[int, ...] = ()
    info: tuple[str, ...] = ()


@dataclass(frozen=True)
class DcgmReport:
    results: tuple[DcgmResult, ...] = ()
    version: str | None = None
    runtime_error: str | None = None
    rc: int | None = None

    def by_status(self, status: str) -> tuple[DcgmResult, ...]:
        return tuple(r for r in self.results if r.status == status)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "runtime_error": self.runtime_error,
            "rc": self.rc,
            "results": [
                {
                    "category": r.category,
                    "test": r.test,
                    "gpu": r.gpu,
                    "status": r.status,
                    "warnings": list(r.warnings),
                    "error_ids": list(r.error_ids),
                    "info": list(r.info),
                }
                for r in self.results
            ],
        }


def _texts(value: Any, *keys: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Messages (and error ids) from a string, a list of strings or a list of objects."""
    if value is None:
        return (), ()
    items = value if isinstance(value, list) else [value]
    msgs: list[str] = []
    ids: list[int] = []
    for it in items:
        if isinstance(it, str):
            msgs.append(it.strip())
        elif isinstance(it, Mapping):
            for k in keys:
                if isinstance(it.get(k), str):
                    msgs.append(it[k].strip())
                    break
            for k in ("error_id", "error_code"):
                if isinstance(it.get(k), int):
                    ids.append(int(it[k]))
                    break
    return tuple(m for m in msgs if m), tuple(ids)


def _gpus(result: Mapping[str, Any]) -> list[int | None]:
    if "entity_id" in result:
        group = str(result.get("entity_group", "GPU")).upper()
        if group == "GPU":
            try:
                return [int(result["entity_id"])]
            except (TypeError, ValueError):
                return [None]
        return [None]
    raw = result.get("gpu_id", result.get("gpu_ids"))
    if raw is None:
        return [None]
    if isinstance(raw, int):
        return [raw]
    parts = [p.strip() for p in str(raw).split(",") if p.strip()]
    if len(parts) == 1:
        try:
            return [int(parts[0])]
        except ValueError:
            return [None]
    # A CSV of GPUs: one result that covers them all (software tests).
    return [None]


def parse_dcgmi_diag(text: str, *, rc: int | None = None) -> DcgmReport:
    """Parse ``dcgmi diag -j`` output.  Raises DcgmParseError when no JSON
    object can be found (dcgmi printed only an error)."""
    start = text.find("{")
    end = text.rfind("}")
    if start < 0 or end < start:
        raise DcgmParseError(f"no JSON in dcgmi output: {text.strip()[:200]!r}")
    try:
        doc = json.loads(text[start : end + 1])
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise DcgmParseError(f"invalid JSON from dcgmi: {exc}") from exc
    if not isinstance(doc, Mapping):
        raise DcgmParseError("dcgmi JSON is not an object")
    root: Any = doc
    for key in ("DCGM GPU Diagnostic", "DCGM Diagnostic"):
        if isinstance(doc.get(key), Mapping):
            root = doc[key]
            break
    runtime_error = root.get("runtime_error") or doc.get("runtime_error")
    version = root.get("version") or doc.get("version")
    results: list[DcgmResult] = []
    categories = root.get("test_categories") or []
    if not categories and isinstance(root.get("tests"), list):
        categories = [{"category": "", "tests": root["tests"]}]
    for cat in categories if isinstance(categories, list) else []:
        if not isinstance(cat, Mapping):
            continue
        cname = str(cat.get("category", ""))
        for test in cat.get("tests") or []:
            if not isinstance(test, Mapping):
                continue  # DCGM emits nulls between tests
            tname = str(test.get("name", "?"))
            for res in test.get("results") or []:
                if not isinstance(res, Mapping):
                    continue
                raw = str(res.get("status", "")).strip().lower()
                status = _STATUS.get(raw, raw or "unknown")
                warns, ids = _texts(res.get("warnings"), "warning", "message")
                info, _ = _texts(res.get("info"), "info", "message")
                for gpu in _gpus(res):
                    results.append(DcgmResult(cname, tname, gpu, status, warns, ids, info))
    return DcgmReport(
        results=tuple(results),
        version=None if version is None else str(version),
        runtime_error=None if runtime_error is None else str(runtime_error),
        rc=rc,
    )


def diag_argv(
    level: int = 2, gpus: Sequence[int] | None = None, binary: str = "dcgmi"
) -> list[str]:
    """``dcgmi diag -r LEVEL -j [-i 0,1]``: the subsystem must come first."""
    argv = [binary, "diag", "-r", str(level), "-j"]
    if gpus:
        argv += ["-i", ",".join(str(g) for g in gpus)]
    return argv


Runner = Callable[..., commands.CommandResult]


def run_dcgmi_diag(
    argv: Sequence[str], *, timeout: float, run: Runner = commands.run
) -> DcgmReport:
    """Run dcgmi diag.  dcgmi exits non-zero when a test fails, so the rc
    is kept, not raised.  Timeouts raise CommandTimeout (UNKNOWN upstream:
    a diagnostic cut short judged nothing)."""
    res = run(list(argv), timeout=timeout, check=False)
    text = res.stdout if "{" in res.stdout else res.stdout + "\n" + res.stderr
    try:
        return parse_dcgmi_diag(text, rc=res.rc)
    except DcgmParseError:
        msg = (res.stderr or res.stdout).strip().splitlines()
        return DcgmReport(
            runtime_error=(msg[-1] if msg else f"dcgmi exited rc={res.rc}"), rc=res.rc
        )


def judge_dcgm(
    report: DcgmReport, *, check: str = CHECK, warn_is_fail: bool = False
) -> list[Finding]:
    out: list[Finding] = []
    node = Component("node")
    if report.runtime_error:
        return [
            finding(
                Status.UNKNOWN,
                "DCGM_ERROR",
                f"dcgmi diag could not run: {report.runtime_error}",
                node,
                Action.NONE,
                check,
                rc=report.rc,
            )
        ]
    judged = [r for r in report.results if r.status in ("pass", "fail", "warn")]
    if not judged:
        return [
            finding(
                Status.UNKNOWN,
                "DCGM_NO_RESULTS",
                "dcgmi diag ran no test on this node",
                node,
                Action.NONE,
                check,
                rc=report.rc,
            )
        ]
    for r in report.results:
        comp = Component("gpu", index=r.gpu) if r.gpu is not None else node
        detail = "; ".join(r.warnings or r.info)[:300]
        where = f"gpu{r.gpu} " if r.gpu is not None else ""
        if r.status == "fail":
            out.append(
                finding(
                    Status.FAIL,
                    "DCGM_FAIL",
                    f"{where}{r.test} failed" + (f": {detail}" if detail else ""),
                    comp,
                    Action.DRAIN,
                    check,
                    test=r.test,
                    category=r.category,
                    error_ids=",".join(map(str, r.error_ids)) or None,
                )
            )
        elif r.status == "warn":
            out.append(
                finding(
                    Status.FAIL if warn_is_fail else Status.WARN,
                    "DCGM_WARN",
                    f"{where}{r.test} warned" + (f": {detail}" if detail else ""),
                    comp,
                    Action.DRAIN if warn_is_fail else Action.NONE,
                    check,
                    test=r.test,
                    category=r.category,
                )
            )
    if not out and report.rc not in (None, 0):
        return [
            finding(
                Status.UNKNOWN,
                "DCGM_ERROR",
                f"dcgmi diag exited rc={report.rc} although every test passed",
                node,
                Action.NONE,
                check,
                rc=report.rc,
            )
        ]
    if not out:
        skipped = len(report.results) - len(judged)
        out.append(
            finding(
                Status.OK,
                "OK",
                f"dcgmi diag: {len(judged)} results passed"
                + (f", {skipped} skipped" if skipped else ""),
                node,
                Action.NONE,
                check,
                version=report.version,
                passed=len(judged),
                skipped=skipped,
            )
        )
    return out


def run_or_timeout(argv: Sequence[str], timeout: float, run: Runner = commands.run) -> DcgmReport:
    """run_dcgmi_diag with a timeout reported as a runtime error."""
    try:
        return run_dcgmi_diag(argv, timeout=timeout, run=run)
    except CommandTimeout as exc:
        return DcgmReport(runtime_error=str(exc))
