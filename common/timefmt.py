"""Epoch milliseconds to and from the ISO 8601 text the API and callbacks show."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_ms(epoch_ms: int | None) -> str | None:
    """``2026-11-30T07:40:00.123Z`` for an epoch-ms value; None stays None.

    A value no ISO 8601 year (1 to 9999) can show is None too: every stage that
    renders a stored time must go on, whatever a row holds.
    """
    if epoch_ms is None:
        return None
    try:
        moment = EPOCH + timedelta(milliseconds=int(epoch_ms))
    except (OverflowError, ValueError):
        return None
    return (
        f"{moment.year:04d}-"
        + moment.strftime("%m-%dT%H:%M:%S.")
        + f"{moment.microsecond // 1000:03d}Z"
    )


def parse_instant(value: str | int | float) -> int:
    """Epoch ms from epoch ms or ISO 8601 text (a time without zone is taken as UTC)."""
    if isinstance(value, int | float):
        return int(value)
    text = value.strip()
    if text.isdigit():
        return int(text)
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - EPOCH) // timedelta(milliseconds=1)
