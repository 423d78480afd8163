"""Time helpers shared by every layer (pure: no clock is read here)."""

from __future__ import annotations

from datetime import UTC, datetime

#: RFC 3339 in UTC to the second, as Kubernetes writes its times (and as our
#: held marks and replacement requests carry them): ``2026-01-02T03:04:05Z``.
UTC_SECONDS = "%Y-%m-%dT%H:%M:%SZ"


def format_utc(when: datetime) -> str:
    """``when`` in the :data:`UTC_SECONDS` form (a naive time is taken as local)."""
    return when.astimezone(UTC).strftime(UTC_SECONDS)


def parse_utc(text: str) -> datetime:
    """A time in the :data:`UTC_SECONDS` form, aware; ValueError for any other text."""
    return datetime.strptime(text, UTC_SECONDS).replace(tzinfo=UTC)


def parse_time(text: str | None) -> datetime | None:
    """An ISO 8601 / RFC 3339 timestamp (``Z`` allowed, as Kubernetes writes
    it) as a datetime; None for empty or unparsable text."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
