"""Epoch milliseconds to and from the ISO 8601 text the API and callbacks show."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

MIN_INSTANT_MS = 0
"""1970-01-01T00:00:00.000Z: the earliest time Kairos stores and shows."""

MAX_INSTANT_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z: the latest time ISO 8601 text (and Python) can show."""


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
    # Fields, not strftime: a callback's payload shows three of these, and strftime took
    # most of the time of building one.
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}:"
        f"{moment.minute:02d}:{moment.second:02d}.{moment.microsecond // 1000:03d}Z"
    )


def parse_instant(value: str | int | float, zone: tzinfo = UTC) -> int:
    """Epoch ms from epoch ms or ISO 8601 text; raises ValueError for anything else.

    Text without an offset is a wall time in ``zone`` (UTC unless given). A wall time
    the zone skips (the clock jumps forward over it) is shifted forward by the gap; one
    the zone shows twice (the clock falls back) is its first occurrence. These are
    Python's rules for ``fold=0`` and the cron rules of ``common.cron``.
    """
    if isinstance(value, int | float):
        return int(value)
    text = value.strip()
    if text.isascii() and text.isdigit():
        return int(text)
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone, fold=0)
    return (moment - EPOCH) // timedelta(milliseconds=1)
