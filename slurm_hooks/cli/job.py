"""``slurm-hooks job JOBID``: a training job's progress, rank by rank, and the verdict.

Reads the records the job writes (docs/progress.md) from ``[progress] dir``
and judges them with the watcher's own judges (hang, straggler), plus NCCL
RAS output and flight-recorder dumps where ``[progress] ras_path`` /
``flight_recorder_path`` find some.  Processes are looked at for the ranks
on this host only; a rank elsewhere shows as ``remote``.  Read-only: nothing
is drained or signalled, whatever the verdict.  When Slurm answers, only the
files of the job's owner are read (what the watcher trusts) and a job that
is no longer running is reported as such, not as a hang.

Exit status: 0 progressing (or starting, or not running any more), 1 hang
suspected, stalled or a straggler, 2 unknown job, no records or could not run.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from slurm_hooks.cli._common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_UNHEALTHY,
    config_option,
    exits_on_error,
    load_config,
)
from slurm_hooks.cli._width import fill, table, wide_option
from slurm_hooks.core.errors import JobGone, SlurmError
from slurm_hooks.core.identifiers import uid_of


def _slurm_job(cfg: Any, job: str) -> tuple[Any, str | None]:
    """(JobInfo or None, a note); raises JobGone for an unknown job."""
    from slurm_hooks.cli._common import slurm_client

    try:
        return slurm_client(cfg).get_job(job), None
    except JobGone:
        raise
    except SlurmError as exc:
        return None, f"Slurm not consulted ({exc})"


def _fmt_s(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}s"


def _ago(v: float) -> str:
    return f"{v:.0f}s ago" if v >= 10 else f"{v:.1f}s ago"


def judge_job(cfg: Any, job: str, *, use_slurm: bool, now: float | None = None) -> dict[str, Any]:
    """The whole report as a dict (the ``--json`` document)."""
    from slurm_hooks.detect.progress.corroborate import step_pids
    from slurm_hooks.detect.progress.gather import read_hints, read_job
    from slurm_hooks.detect.progress.judge import (
        ProcState,
        Verdict,
        judge_hang,
        judge_stragglers,
    )
    from slurm_hooks.detect.progress.pidns import rank_processes
    from slurm_hooks.detect.progress.records import rank_views
    from slurm_hooks.detect.progress.settings import ProgressConfig
    from slurm_hooks.detect.progress.summary import rows
    from slurm_hooks.detect.runner import node_name

    s = cfg.section("progress", ProgressConfig)
    now = time.time() if now is None else now
    doc: dict[str, Any] = {"job": job, "dir": s.dir, "slurm": None, "note": None}
    info = None
    if use_slurm:
        try:
            info, doc["note"] = _slurm_job(cfg, job)
        except JobGone:
            doc["slurm"] = {"state": "UNKNOWN"}
    uid = uid_of(info.user) if info is not None else None
    if info is not None:
        doc["slurm"] = {"state": info.state, "nodes": info.nodes, "user": info.user,
                        "restart_count": info.restart_count}  # fmt: skip
    records = read_job(s.dir, job, tail_bytes=s.tail_bytes, uid=uid)
    views = rank_views(records, job)
    here = node_name()
    local = {r: v for r, v in views.items() if v.node == here}
    # A rank in a container of its own: found among the job's processes here.
    _, procs = rank_processes(local, uid, lambda: step_pids(job, here))
    procs.update({r: ProcState.REMOTE for r in views if r not in local})
    hints = read_hints(s.ras_path, s.flight_recorder_path, job, uid=uid) if views else []
    hang = judge_hang(job, views, procs, now, s.hang, hints)
    slow = judge_stragglers(job, views, s.slow) if views else []
    state = (info.state or "").split()[0].upper() if info is not None and info.state else ""
    if doc["slurm"] == {"state": "UNKNOWN"}:
        verdict, exit_code = "unknown job", EXIT_ERROR
    elif not views:
        verdict, exit_code = "no progress records", EXIT_ERROR
    elif state and state != "RUNNING":
        verdict, exit_code = f"not running ({state})", EXIT_OK
    elif hang.verdict is Verdict.HANG:
        verdict, exit_code = f"hang suspected: {hang.explanation}", EXIT_UNHEALTHY
    elif hang.verdict is Verdict.STALLED:
        verdict, exit_code = f"stalled, no culprit: {hang.explanation}", EXIT_UNHEALTHY
    elif slow:
        verdict = "straggler: " + "; ".join(x.explanation for x in slow)
        exit_code = EXIT_UNHEALTHY
    elif hang.verdict is Verdict.STARTING:
        verdict, exit_code = "starting (no first step yet)", EXIT_OK
    else:
        verdict, exit_code = f"progressing ({hang.explanation})", EXIT_OK
    doc.update(
        verdict=verdict,
        judge=str(hang.verdict),
        exit_code=exit_code,
        culprit=(
            {"rank": hang.rank, "node": hang.node, "cause": hang.cause}
            if hang.verdict is Verdict.HANG
            else None
        ),
        stragglers=[
            {
                "rank": x.rank,
                "node": x.node,
                "over_percent": round(x.over_percent, 1),
                "windows": [list(w) for w in x.windows],
            }
            for x in slow
        ],  # fmt: skip
        hints=[
            {
                "source": h.source,
                "why": h.why,
                "rank": h.rank,
                "pid": h.pid,
                "host": h.host,
                "detail": h.detail,
            }
            for h in hints
        ],  # fmt: skip
        ranks=[
            {
                "rank": r.rank,
                "node": r.node,
                "step": r.step,
                "since_s": round(r.since_s, 3),
                "step_time_median_s": r.step_time_s,
                "busy_median_s": r.busy_s,
                "skew": None if r.skew is None else round(r.skew, 3),
                "process": str(procs.get(r.rank, ProcState.UNKNOWN)),
            }
            for r in rows(records, views, now)
        ],  # fmt: skip
    )
    return doc


def render(doc: dict[str, Any], *, wide: bool) -> list[str]:
    out = [fill(f"job {doc['job']}: {doc['verdict']}", wide=wide, subsequent="  ")]
    sl = doc.get("slurm")
    if sl and sl.get("state") != "UNKNOWN":
        out.append(f"  Slurm: {sl['state']} on {sl['nodes']}, restart {sl['restart_count']}")
    if doc.get("note"):
        out.append(fill(doc["note"], wide=wide, indent="  ", subsequent="  "))
    if doc["ranks"]:
        cells = [["RANK", "NODE", "STEP", "LAST", "STEP TIME", "BUSY", "SKEW", "PROCESS"]]
        for r in doc["ranks"]:
            cells.append([
                str(r["rank"]), r["node"], str(r["step"]), _ago(r["since_s"]),
                _fmt_s(r["step_time_median_s"]), _fmt_s(r["busy_median_s"]),
                "-" if r["skew"] is None else f"{r['skew']:.2f}", r["process"],
            ])  # fmt: skip
        out += table(cells, wide=wide, indent="  ")
    else:
        out.append(f"  no records under {doc['dir']}/{doc['job']}/")
    for h in doc.get("hints", ()):
        who = f"rank {h['rank']}" if h["rank"] is not None else f"pid {h['pid']}"
        out.append(fill(f"{h['source']}: {who} {h['why']}: {h['detail']}", wide=wide,
                        indent="  ", subsequent="    "))  # fmt: skip
    return out


@click.command("job")
@click.argument("job_id", metavar="JOBID")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--no-slurm", is_flag=True, help="Judge the records only; do not ask Slurm.")
@wide_option
@config_option
@exits_on_error
def command(
    job_id: str, as_json: bool, no_slurm: bool, wide: bool, config_path: str | None
) -> None:
    """A training job's progress per rank, and whether it hangs or straggles.

    For each rank that writes progress records (docs/progress.md): its last
    step and how long ago, the median step time, the median busy time and
    its skew against its peers (1.00: as fast as the others), the state of
    its process when it runs on this host; then the verdict of the watcher's
    judges: progressing, hang suspected (with the culprit), stalled with no
    culprit, or a straggler.  Read-only.  Exit status: 0 progressing, 1 hang
    or straggler, 2 unknown job or no records.

    \b
    Example:
      slurm-hooks job 1234
      slurm-hooks job 1234 --json | jq '.ranks[] | {rank, skew}'
    """
    if not job_id.isdigit() or len(job_id) > 20:
        raise click.BadParameter("a numeric job id", param_hint="JOBID")
    cfg = load_config(config_path)
    doc = judge_job(cfg, job_id, use_slurm=not no_slurm)
    if as_json:
        click.echo(json.dumps(doc, sort_keys=True))
    else:
        for line in render(doc, wide=wide):
            click.echo(line)
    raise SystemExit(doc["exit_code"])
