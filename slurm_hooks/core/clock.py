"""Time helpers shared by every layer (pure: no clock is read here)."""

from __future__ import annotations

from datetime import datetime


def parse_time(text: str | None) -> datetime | None:
    """An ISO 8601 / RFC 3339 timestamp (``Z`` allowed, as Kubernetes writes
    it) as a datetime; None for empty or unparsable text."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
