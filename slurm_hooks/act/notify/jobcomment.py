"""A note on the job itself, so its owner sees why it restarted
(``scontrol show job`` / ``squeue -O comment``)."""

from __future__ import annotations

import re
from typing import Any

from slurm_hooks.act.notify.base import Alert
from slurm_hooks.core.reason import sanitize_text
from slurm_hooks.slurm.door import SlurmDoor

#: Alerts about a job that deserve a note on it.
JOB_KINDS = frozenset({"job_requeued", "job_cancelled", "job_signalled"})
MAX_COMMENT = 200
#: A word a job's owner writes in its comment for us (docs/progress.md).
_TOKEN = re.compile(r"slurm-hooks:[a-z][a-z-]{0,39}")


class JobCommentSink:
    name = "job_comment"

    def __init__(self, slurm: Any, *, admin: bool = False):
        self.slurm = slurm
        self.admin = admin

    def wants(self, alert: Alert) -> bool:
        return alert.job_id is not None and alert.kind in JOB_KINDS

    def send(self, alert: Alert) -> None:
        assert alert.job_id is not None
        note = sanitize_text(f"slurm-hooks: {alert.text}")
        if not self.admin:
            # The job's Comment is its owner's: the note replaces it, but
            # the owner's words to us (``slurm-hooks:no-watch``, the requeue
            # opt-in) go first and stay, so the requeued job keeps them.
            mine = self.slurm.get_job(alert.job_id).comment or ""
            kept = dict.fromkeys(t for t in mine.replace(",", " ").split() if _TOKEN.fullmatch(t))
            note = " ".join((*kept, note))
        SlurmDoor(self.slurm).comment(alert.job_id, note[:MAX_COMMENT], admin=self.admin)
