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
from slurm_hooks.core.http_retry import mount_retry, retry_policy


class NotifyError(SlurmHooksError):
    """A notification could not be delivered (caught by the Notifier)."""


#: A zero-width space: put after ``@`` and inside ``://`` it keeps a word
#: from being a mention or a link, and reads the same.
_ZWSP = "\u200b"


def _chat_escape(text: str) -> str:
    """Slack's control sequences are ``<...>`` (``<!channel>``, ``<@U123>``,
    links) and ``&``: escaped as its docs ask.  Mattermost and Rocket.Chat
    also read a plain ``@channel``, ``@all`` or ``@user`` as a mention, and
    every one of them links a bare URL: an alert quotes what users wrote (a
    job's name, a process's arguments), so neither is left whole.  No value
    can mention, page or link anyone."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("@", "@" + _ZWSP).replace("://", ":" + _ZWSP + "//")


def _safe_dict(alert: Alert) -> dict[str, Any]:
    """The alert's fields with a ``user`` that is not a valid passwd name
    replaced by a marker: a forged owner is never named as a recipient."""
    from slurm_hooks.core.identifiers import InvalidIdentifier, check_user

    d = alert.to_dict()
    if "user" in d:
        try:
            check_user(d["user"], resolve=False)
        except InvalidIdentifier:
            d["user"] = "(invalid)"
    return d


def payload(alert: Alert) -> dict[str, Any]:
    raw = _safe_dict(alert)
    fields = [
        {"title": k, "value": _chat_escape(str(v)), "short": True}
        for k, v in raw.items()
        if k not in ("text", "kind")
    ]
    text = _chat_escape(alert.text)
    return {
        "text": f"*{_chat_escape(alert.subject)}*\n{text}",
        "attachments": [{"fallback": text, "fields": fields}],
        "unfurl_links": False,
        "unfurl_media": False,
        "slurm_hooks": raw,
    }


class WebhookSink:
    name = "webhook"

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 0.5,
        deadline: float | None = None,
    ):
        self.url = url
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        #: Total seconds one ``send`` may take, retries included.  requests'
        #: timeout is per socket read: a server trickling a byte every 2 s
        #: would hold the caller for ever.  Default: one timeout per try.
        self.deadline = deadline if deadline is not None else timeout * (retries + 1)
        self._session: Any = None

    def _http(self) -> Any:
        if self._session is None:
            import requests

            retry = retry_policy(self.retries, backoff=self.backoff, methods=("POST",))
            session = requests.Session()
            mount_retry(session, retry)
            self._session = session
        return self._session

    def send(self, alert: Alert) -> None:
        """POST the alert; NotifyError when it failed or took longer than
        ``deadline`` in total (the POST is then abandoned in its daemon
        thread and its connection closed, so the caller moves on)."""
        import threading

        import requests

        body = payload(alert)
        box: dict[str, Any] = {}
        session = self._http()

        def post() -> None:
            try:
                box["resp"] = session.post(self.url, json=body, timeout=self.timeout)
            except requests.RequestException as exc:
                box["exc"] = exc
            except Exception as exc:  # noqa: BLE001 - reported to the caller below
                box["exc"] = exc

        worker = threading.Thread(target=post, name="webhook-post", daemon=True)
        worker.start()
        worker.join(self.deadline)
        if worker.is_alive():
            self._session = None  # a fresh pool next time; the stuck one is dropped
            try:
                session.close()
            except Exception:  # noqa: BLE001, S110 - best effort to cut the stuck socket
                pass
            raise NotifyError(f"webhook POST took over its {self.deadline:g}s deadline")
        if "exc" in box:
            raise NotifyError(f"webhook POST failed: {box['exc']}") from box["exc"]
        resp = box["resp"]
        if resp.status_code >= 300:
            raise NotifyError(f"webhook answered {resp.status_code} {resp.reason}")
