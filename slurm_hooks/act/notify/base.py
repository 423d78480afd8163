"""Alerts and the fan-out that never lets a failing sink block remediation."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Alert:
    """One thing people should hear about.

    ``kind``: node_drained, job_requeued, job_cancelled, breaker_tripped,
    node_resumed, node_held.  ``user`` is the job's owner when there is one.
    """

    kind: str
    text: str
    node: str | None = None
    job_id: str | None = None
    user: str | None = None
    incident: str | None = None
    code: str | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)

    @property
    def subject(self) -> str:
        parts = ["slurm-hooks", self.kind.replace("_", " ")]
        if self.node:
            parts.append(self.node)
        if self.job_id:
            parts.append(f"job {self.job_id}")
        return ": ".join([parts[0], " ".join(parts[1:])])

    def to_dict(self) -> dict[str, Any]:
        d = {
            "kind": self.kind,
            "text": self.text,
            "node": self.node,
            "job_id": self.job_id,
            "user": self.user,
            "incident": self.incident,
            "code": self.code,
        }
        d.update(self.fields)
        return {k: v for k, v in d.items() if v is not None}


class Sink(Protocol):
    name: str

    def send(self, alert: Alert) -> None:
        """Deliver or raise; the Notifier catches and logs."""
        ...


@dataclass(frozen=True)
class Delivery:
    sink: str
    ok: bool
    error: str | None = None


class Notifier:
    """Sends an alert to every sink that wants it; failures are logged and
    returned, never raised."""

    def __init__(self, sinks: Sequence[Sink] = ()):
        self.sinks = list(sinks)

    def send(self, alert: Alert) -> list[Delivery]:
        out = []
        for sink in self.sinks:
            wants = getattr(sink, "wants", None)
            if callable(wants) and not wants(alert):
                continue
            try:
                sink.send(alert)
            except Exception as exc:  # noqa: BLE001 - a sink must never break remediation
                log.warning(
                    "notification failed sink=%s kind=%s node=%s job=%s: %s",
                    sink.name,
                    alert.kind,
                    alert.node,
                    alert.job_id,
                    exc,
                )
                out.append(Delivery(sink.name, False, f"{type(exc).__name__}: {exc}"))
            else:
                out.append(Delivery(sink.name, True))
        return out
