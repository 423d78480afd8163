"""core/clock.py: the one UTC-to-the-second form our Kubernetes objects and
held marks carry, written and read back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from slurm_hooks.core.clock import format_utc, parse_time, parse_utc


def test_format_utc_writes_utc_with_z_whatever_the_zone() -> None:
    east = timezone(timedelta(hours=2))
    assert format_utc(datetime(2026, 1, 2, 5, 4, 5, 999, tzinfo=east)) == "2026-01-02T03:04:05Z"


def test_parse_utc_reads_what_format_utc_wrote() -> None:
    t = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert parse_utc(format_utc(t)) == t
    assert parse_time(format_utc(t)) == t


@pytest.mark.parametrize("text", ["2026-01-02T03:04:05", "2026-01-02 03:04:05Z", "yesterday"])
def test_parse_utc_refuses_any_other_form(text: str) -> None:
    with pytest.raises(ValueError):
        parse_utc(text)
