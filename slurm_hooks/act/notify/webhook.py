"""Slack-compatible webhook sink.

The body is ``{"text": ...}`` (what Slack, Mattermost and Rocket.Chat
incoming webhooks read) plus ``attachments[0].fields`` for Slack's
structured display and ``slurm_hooks`` with the raw alert for machines.
requests is imported on first send, not on the hook path.
"""

from __future__ import annotations

from typing import Any

from slurm_hooks.act.notify.base import Alert
from slurm_hooks.core.errors import SlurmHooksError


class NotifyError(SlurmHooksError):
    """A notification could not be delivered (caught by the Notifier)."""


def payload(alert: Alert) -> dict[str, Any]:
    fields = [
        {"title": k, "value": str(v), "short": True}
        for k, v in alert.to_dict().items()
        if k not in ("text", "kind")
    ]
    return {
        "text": f"*{alert.subject}*\n{alert.text}",
        "attachments": [{"fallback": alert.text, "fields": fields}],
        "slurm_hooks": alert.to_dict(),
    }


class WebhookSink:
    name = "webhook"

    def __init__(self, url: str, *, timeout: float = 5.0, retries: int = 3, backoff: float = 0.5):
        self.url = url
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._session: Any = None

    def _http(self) -> Any:
        if self._session is None:
            import requests
            from requests.adapters import HTTPAdapter
            from urllib3.util.retry import Retry

            retry = Retry(
                total=self.retries,
                connect=self.retries,
                read=self.retries,
                status=self.retries,
                backoff_factor=self.backoff,
                status_forcelist=(429, 500, 502, 503, 504),
                allowed_methods=frozenset({"POST"}),
                raise_on_status=False,
            )
            session = requests.Session()
            adapter = HTTPAdapter(max_retries=retry)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            self._session = session
        return self._session

    def send(self, alert: Alert) -> None:
        import requests

        try:
            resp = self._http().post(self.url, json=payload(alert), timeout=self.timeout)
        except requests.RequestException as exc:
            raise NotifyError(f"webhook POST failed: {exc}") from exc
        if resp.status_code >= 300:
            raise NotifyError(f"webhook answered {resp.status_code} {resp.reason}")
