"""A note on the job itself, so its owner sees why it restarted
(``scontrol show job`` / ``squeue -O comment``)."""

from __future__ import annotations

from typing import Any

from slurm_hooks.act.notify.base import Alert
from slurm_hooks.core.reason import sanitize_text
from slurm_hooks.slurm.door import SlurmDoor

#: Alerts about a job that deserve a note on it.
JOB_KINDS = frozenset({"job_requeued", "job_cancelled", "job_signalled"})
MAX_COMMENT = 200


class JobCommentSink:
    name = "job_comment"

    def __init__(self, slurm: Any, *, admin: bool = False):
        self.slurm = slurm
        self.admin = admin

    def wants(self, alert: Alert) -> bool:
        return alert.job_id is not None and alert.kind in JOB_KINDS

    def send(self, alert: Alert) -> None:
        note = sanitize_text(f"slurm-hooks: {alert.text}")[:MAX_COMMENT]
        assert alert.job_id is not None
        SlurmDoor(self.slurm).comment(alert.job_id, note, admin=self.admin)
