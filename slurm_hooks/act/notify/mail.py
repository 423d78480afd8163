"""Mail through a local command (mail, sendmail -t, a site script).

The argv is a list from the config with ``{placeholders}``; the message goes
to stdin; the call goes through probes.commands.run (timeout, no shell).

Every placeholder value is validated before it reaches the argv (a user is
a passwd name that exists here, a job id is digits, a node a host name, the
rest our own tokens), so none can start with ``-`` or carry a blank or a
newline: a job owner that does not validate gets no mail at all, never a
mail to somebody else or an option (GNU mailutils' ``--exec=``) on a root
command line.  The recommended template ends its options with ``--``:
``["/usr/bin/mail", "-s", "{subject}", "--", "{user}@example.org"]``.
The body on stdin is our text with control characters removed and no line
starting with ``~`` (a mail tilde escape such as ``~!cmd``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from slurm_hooks.act.notify.base import Alert
from slurm_hooks.core.identifiers import (
    InvalidIdentifier,
    check_job_id,
    check_node,
    check_token,
    check_user,
)
from slurm_hooks.detect.probes import commands

#: Control characters a mail body must not carry (newlines are kept).
_BODY_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")
#: The body is cut to this many characters (a reason is 256; text is ours).
MAX_BODY = 8192


class _Fields(dict[str, str]):
    def __missing__(self, key: str) -> str:
        raise KeyError(key)


class MailSink:
    name = "mail"

    def __init__(
        self,
        argv: Sequence[str],
        *,
        timeout: float = 10.0,
        getpwnam: Callable[[str], Any] | None = None,
    ):
        self.argv = list(argv)
        self.timeout = timeout
        self._getpwnam = getpwnam

    def _values(self, alert: Alert) -> _Fields:
        """The placeholder values, each validated (InvalidIdentifier if one
        is not what it claims to be); absent ones are empty."""
        user = ""
        if alert.user:
            if self._getpwnam is not None:
                user = check_user(alert.user, getpwnam=self._getpwnam)
            else:
                user = check_user(alert.user)
        node = check_node(alert.node) if alert.node else ""
        job = check_job_id(alert.job_id) if alert.job_id else ""
        kind = check_token(alert.kind, "alert kind")
        parts = [kind.replace("_", " ")]
        if node:
            parts.append(node)
        if job:
            parts.append(f"job {job}")
        return _Fields(
            user=user,
            node=node,
            job=job,
            subject="slurm-hooks: " + " ".join(parts),
            incident=check_token(alert.incident, "incident id") if alert.incident else "",
            code=check_token(alert.code, "fault code") if alert.code else "",
        )

    def wants(self, alert: Alert) -> bool:
        """Alerts addressed to a user need one."""
        needs_user = any("{user}" in a for a in self.argv)
        return not needs_user or bool(alert.user)

    def send(self, alert: Alert) -> None:
        from slurm_hooks.act.notify.webhook import NotifyError

        try:
            values = self._values(alert)
        except InvalidIdentifier as exc:
            raise NotifyError(f"mail not sent: {exc}") from exc
        argv = [a.format_map(values) for a in self.argv]
        commands.run(argv, timeout=self.timeout, input=mail_body(alert.text), check=True)


def mail_body(text: str) -> str:
    """Our text as a mail body: no control characters but newlines, no line
    a mail program could read as a tilde escape, bounded."""
    text = _BODY_CONTROL.sub(" ", text.replace("\r\n", "\n").replace("\r", "\n"))[:MAX_BODY]
    lines = [(" " + line) if line.startswith("~") else line for line in text.split("\n")]
    return "\n".join(lines).rstrip("\n") + "\n"
