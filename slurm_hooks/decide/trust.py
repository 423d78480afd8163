"""The trust rule: what evidence a job's user can write may cause.  Pure.

A finding whose every source is user-side (``Finding.user_side``: progress
records, RAS output, flight-recorder dumps, a process state the user can
set) may blame the node only with *trusted* corroboration on that node,
read from the node's own history (root-written, ``store/state.py``):

* a trusted fault the policy took (or would have taken) the node out for,
  within ``[policy] user_evidence_window_s``, but none that the node's
  users can cause by using it (a full scratch: ``core/user_caused.py``);
* a kernel XID/SXID logged in that window that the catalogue does not put
  down to the application itself (a user's kernel can raise those at
  will, ``APP_CAUSED``: they never corroborate);
* hangs of jobs of at least ``cross_user_hangs`` different users naming this
  node as the culprit within the window (this one included), where a site
  turned that rule on (off by default: every hang is evidence its user
  writes, and two accounts can agree).

Trusted evidence gathered with the finding itself (NVML answering GPU lost,
a step's process stuck inside the nvidia driver) makes the finding trusted
(its provenance lists it) and never reaches this module.

Without corroboration the finding acts on its job only: REPORT_JOB (tell
the owner and the admins) or, when the job opted in (``requeue_opt_in``
set by the progress pass from the job's comment, docs/progress.md),
REQUEUE_JOB of that one job.  Neither drains, writes a reason, touches
another job or counts towards the breaker.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from slurm_hooks.core.history import NodeHistory
from slurm_hooks.core.model import Finding
from slurm_hooks.core.user_caused import USERS_CAUSE
from slurm_hooks.decide.config import PolicyConfig
from slurm_hooks.decide.decision import DecisionKind

#: XIDs an application raises by itself (NVIDIA's XID catalogue,
#: slurm_hooks/data/xid_catalogue.json): every one whose investigatory action
#: is CHECK_APP/CUDA (11, 25, 32, 37, 69, 80) or the XID 13/31 workflows
#: (graphics engine exception, MMU fault), 43 (a software-induced fault), 45
#: (preemptive cleanup after an application ended) and 137 (an illegal
#: NVLink peer access, usually an application bug).  A test holds this set
#: to the catalogue.
APP_CAUSED = frozenset(f"XID{n}" for n in (11, 13, 25, 31, 32, 37, 43, 45, 69, 80, 137))
#: Severities of a history event that mean the policy took (or tried to
#: take) the node out of service for it.
NODE_SEVERITIES = frozenset(
    {
        "drain",
        "replace",
        "hold_for_human",
        "secondary",
        "breaker_tripped",
        "foreign_reason",
        "already_handled",
    }
)
#: Codes of user-side verdicts about a job's progress (counted per user).
HANG_CODES = frozenset({"HANG"})


def corroboration(f: Finding, history: NodeHistory, cfg: PolicyConfig, now: datetime) -> str | None:
    """Why the node may be blamed for the user-side finding ``f`` (None: it may not)."""
    since = now - timedelta(seconds=cfg.user_evidence_window_s)
    recent = history.faults_since(since)
    for e in reversed(recent):
        if not e.trusted or e.code in USERS_CAUSE:
            continue  # a full scratch, the load: users can cause them (core/user_caused.py)
        if e.severity in NODE_SEVERITIES:
            return f"trusted {e.code} ({e.severity}) on this node at {e.at.isoformat()}"
        if e.code.startswith(("XID", "SXID")) and e.code not in APP_CAUSED:
            return f"kernel {e.code} on this node at {e.at.isoformat()}"
    user = f.values.get("user") if f.values else None
    if f.code in HANG_CODES and cfg.cross_user_hangs >= 2 and isinstance(user, str) and user:
        users = {e.user for e in recent if e.code in HANG_CODES and not e.trusted and e.user}
        users.add(user)
        if len(users) >= cfg.cross_user_hangs:
            return (
                f"hangs of {len(users)} different users' jobs named this node within "
                f"{cfg.user_evidence_window_s:g}s ({', '.join(sorted(users))})"
            )
    return None


def job_only_kind(f: Finding) -> DecisionKind:
    """REQUEUE_JOB when the job opted in (and names itself), else REPORT_JOB."""
    values = f.values or {}
    if values.get("requeue_opt_in") is True and isinstance(values.get("job"), str):
        return DecisionKind.REQUEUE_JOB
    return DecisionKind.REPORT_JOB


def job_facts(f: Finding) -> dict[str, object]:
    """What the engine needs to act on the job alone, and what ``explain`` shows."""
    values = f.values or {}
    facts: dict[str, object] = {"provenance": [str(p) for p in f.provenance]}
    for key in ("job", "user", "restart_count"):
        if values.get(key) is not None:
            facts[key] = values[key]
    return facts
