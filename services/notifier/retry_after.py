"""Reading a receiver's ``Retry-After``: delay-seconds or an HTTP date (RFC 9110 10.2.3)."""

from __future__ import annotations

from email.utils import parsedate_to_datetime

# Status codes whose Retry-After Kairos honours instead of the next tier's delay.
HONOURED = frozenset({429, 503})


def retry_after_seconds(value: str | None, now_s: float) -> float | None:
    """How long the receiver asked to wait, from ``now_s`` (epoch seconds); None when the
    header is absent or unreadable (the tier's delay applies then)."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(int(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now_s)
