"""Notification sinks: failures are logged, never raised into remediation."""

from __future__ import annotations

from typing import Any

from slurm_hooks.act.notify.base import Alert, Delivery, Notifier, Sink
from slurm_hooks.act.notify.config import NotifyConfig

__all__ = ["Alert", "Delivery", "Notifier", "NotifyConfig", "Sink", "build_notifier"]


def build_notifier(cfg: NotifyConfig, slurm: Any | None = None) -> Notifier:
    """The sinks the config asks for (requests is imported only on first send)."""
    sinks: list[Sink] = []
    if cfg.webhook_url:
        from slurm_hooks.act.notify.webhook import WebhookSink

        sinks.append(
            WebhookSink(
                cfg.webhook_url,
                timeout=cfg.webhook_timeout,
                retries=cfg.webhook_retries,
                backoff=cfg.webhook_backoff,
            )
        )
    if cfg.mail_argv:
        from slurm_hooks.act.notify.mail import MailSink

        sinks.append(MailSink(cfg.mail_argv, timeout=cfg.mail_timeout))
    if cfg.job_comment and slurm is not None:
        from slurm_hooks.act.notify.jobcomment import JobCommentSink

        sinks.append(JobCommentSink(slurm, admin=cfg.job_comment_admin))
    return Notifier(sinks)
