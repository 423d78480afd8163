"""Side by side with NHC: run the site's NHC beside the imported checks and
report where their verdicts differ.

NHC runs as slurmd would run it (``SLURMD_NODENAME`` set, its own timeout),
so it keeps marking the node as before: during the side-by-side week NHC
still owns the node's health.  Its verdict is its exit status (0 healthy);
its message is the ``Health check failed:`` line it prints.  Ours is
whether any imported check would fail (``fatal`` ones).  A difference is a
WARN finding, ``NHC_ONLY_FAILS`` or ``SITE_ONLY_FAILS`` (two codes, so the
audit log's one line per code per minute never hides a flip from one to
the other): the audit log, the fault history and the
``slurm_hooks_findings{code=~"NHC_ONLY_FAILS|SITE_ONLY_FAILS"}`` metric show
it, and ``slurm-hooks history`` lists it per node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slurm_hooks.core.model import Action, Component, Finding, Status
from slurm_hooks.detect.site.gather import Ran

NHC_ONLY = "NHC_ONLY_FAILS"
SITE_ONLY = "SITE_ONLY_FAILS"
DISAGREE = frozenset({NHC_ONLY, SITE_ONLY})


def run_nhc(program: str, args: Sequence[str], timeout: float, node: str, run: Any = None) -> Ran:
    """Run NHC (through ``probes.commands.run`` unless ``run`` is given) with
    slurmd's ``SLURMD_NODENAME``; never raises: no verdict is a Ran with
    ``error`` set."""
    from slurm_hooks.core.errors import CommandError, CommandTimeout

    if run is None:
        from slurm_hooks.detect.probes.commands import run
    try:
        r = run([program, *args], timeout=timeout, check=False, env={"SLURMD_NODENAME": node})
    except CommandTimeout as exc:
        return Ran(None, "", str(exc), timed_out=True)
    except CommandError as exc:
        return Ran(None, "", str(exc))
    return Ran(r.rc, (r.stdout or "") + (r.stderr or ""))


def nhc_message(output: str) -> str:
    """NHC's failure text: the line after ``Health check failed:``."""
    for line in output.splitlines():
        if "Health check failed:" in line:
            return line.split("Health check failed:", 1)[1].strip()
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def compare(
    nhc: Ran, results: Sequence[tuple[Any, Any, Any]], findings: Sequence[Finding]
) -> Finding:
    """One finding: OK when NHC and the imported checks agree, WARN
    ``NHC_ONLY_FAILS`` / ``SITE_ONLY_FAILS`` (no action) when they do not, UNKNOWN when NHC could
    not give a verdict."""
    comp = Component("site", name="nhc-compare")
    if nhc.rc is None:
        return Finding(
            check="site", status=Status.UNKNOWN, code="CHECK_UNKNOWN",
            message=f"side by side: NHC gave no verdict: {nhc.error}", component=comp,
        )  # fmt: skip
    ours = sorted(
        {
            str(f.values.get("site_check"))
            for f in findings
            if f.values.get("would_fail") and f.status in (Status.FAIL, Status.WARN)
        }
    )
    nhc_fails = nhc.rc != 0
    values: dict[str, Any] = {
        "nhc_rc": nhc.rc,
        "ours_failed": ",".join(ours),
        "checks": len(results),
    }
    if nhc_fails == bool(ours):
        verdict = "fail" if nhc_fails else "pass"
        return Finding(
            check="site", status=Status.OK, code="OK",
            message=f"side by side: NHC and the imported checks agree ({verdict})",
            component=comp, values=values,
        )  # fmt: skip
    if nhc_fails:
        code = NHC_ONLY
        text = f"NHC fails ({nhc_message(nhc.output) or 'rc ' + str(nhc.rc)}); the imported checks pass"
    else:
        code = SITE_ONLY
        text = f"the imported checks fail ({', '.join(ours)}); NHC passes"
    return Finding(
        check="site", status=Status.WARN, code=code,
        message=f"side by side: {text}", component=comp, action=Action.NONE, values=values,
    )  # fmt: skip
