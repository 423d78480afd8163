"""The ``[notify]`` config section."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_hooks.core.bounds import require_at_least, require_positive


@dataclass(frozen=True)
class NotifyConfig:
    """``[notify]``: where remediation alerts go.  Every sink is optional."""

    #: Slack-compatible incoming webhook (POST JSON {"text": ...}); empty: off.
    webhook_url: str = ""
    #: Seconds per webhook POST attempt (connect and read; > 0).
    webhook_timeout: float = 5.0
    #: Retries on connection errors and 429/5xx, with exponential backoff.
    webhook_retries: int = 3
    #: Backoff factor in seconds: the wait before retry n is about
    #: ``webhook_backoff * 2 ** (n - 1)`` (urllib3's Retry).
    webhook_backoff: float = 0.5
    #: Mail command as an argument list; the message goes to its stdin.
    #: Placeholders: {user} {node} {job} {subject} {incident} {code}.
    #: Each value is validated first (a passwd user, digits for a job id); end the
    #: options with "--": ["/usr/bin/mail", "-s", "{subject}", "--", "{user}@example.org"].
    #: Empty: off.
    mail_argv: tuple[str, ...] = ()
    #: Seconds the mail command may run before it is killed (> 0).
    mail_timeout: float = 10.0
    #: Leave a note on the job itself (which node, which fault, requeued).
    #: In Comment it replaces the owner's text but keeps their words to us
    #: (``slurm-hooks:no-watch``, ``slurm-hooks:requeue-on-hang``) first.
    job_comment: bool = True
    #: Write it to AdminComment (operators only) instead of Comment (the user sees it).
    job_comment_admin: bool = False

    def validate(self) -> None:
        if self.webhook_url and not self.webhook_url.startswith(("http://", "https://")):
            raise ValueError("webhook_url must be an http(s) URL")
        require_positive(self, "webhook_timeout", "mail_timeout")
        require_at_least(self, 0, "webhook_retries")
