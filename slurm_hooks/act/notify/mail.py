"""Mail through a local command (mail, sendmail -t, a site script).

The argv is a list from the config with ``{placeholders}``; the message goes
to stdin; the call goes through probes.commands.run (timeout, no shell).
"""

from __future__ import annotations

from collections.abc import Sequence

from slurm_hooks.act.notify.base import Alert
from slurm_hooks.detect.probes import commands


class _Fields(dict):
    def __missing__(self, key: str) -> str:
        raise KeyError(key)


class MailSink:
    name = "mail"

    def __init__(self, argv: Sequence[str], *, timeout: float = 10.0):
        self.argv = list(argv)
        self.timeout = timeout

    def _values(self, alert: Alert) -> _Fields:
        return _Fields(
            user=alert.user or "",
            node=alert.node or "",
            job=alert.job_id or "",
            subject=alert.subject,
            incident=alert.incident or "",
            code=alert.code or "",
        )

    def wants(self, alert: Alert) -> bool:
        """Alerts addressed to a user need one."""
        needs_user = any("{user}" in a for a in self.argv)
        return not needs_user or bool(alert.user)

    def send(self, alert: Alert) -> None:
        values = self._values(alert)
        argv = [a.format_map(values) for a in self.argv]
        commands.run(argv, timeout=self.timeout, input=f"{alert.text}\n", check=True)
