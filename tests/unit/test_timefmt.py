"""Epoch milliseconds to ISO 8601 text and back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.timefmt import MAX_INSTANT_MS, iso_ms, parse_instant

NEW_YEAR_2026_MS = 1_767_225_600_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _exact_ms(text: str) -> int:
    """Epoch ms of ISO text by integer arithmetic only (no float timestamp)."""
    moment = datetime.fromisoformat(text)
    return (moment - EPOCH) // timedelta(milliseconds=1)


def test_iso_ms_shows_milliseconds_and_z() -> None:
    assert iso_ms(NEW_YEAR_2026_MS + 123) == "2026-01-01T00:00:00.123Z"


@pytest.mark.parametrize(
    ("epoch_ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (5, "1970-01-01T00:00:00.005Z"),
        (NEW_YEAR_2026_MS + 999, "2026-01-01T00:00:00.999Z"),
        (NEW_YEAR_2026_MS - 1, "2025-12-31T23:59:59.999Z"),
    ],
)
def test_iso_ms_pads_and_never_rounds_up(epoch_ms: int, text: str) -> None:
    assert iso_ms(epoch_ms) == text


@given(st.integers(min_value=-62_135_596_800_000, max_value=MAX_INSTANT_MS))
def test_iso_ms_is_the_isoformat_of_the_instant_cut_to_milliseconds(epoch_ms: int) -> None:
    moment = EPOCH + timedelta(milliseconds=epoch_ms)
    expected = moment.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"
    assert iso_ms(epoch_ms) == expected


def test_iso_ms_keeps_none() -> None:
    assert iso_ms(None) is None


def test_parse_instant_reads_utc_with_z() -> None:
    assert parse_instant("2026-01-01T00:00:00Z") == NEW_YEAR_2026_MS


def test_parse_instant_reads_milliseconds() -> None:
    assert parse_instant("2026-01-01T00:00:00.123Z") == NEW_YEAR_2026_MS + 123


def test_parse_instant_applies_the_offset() -> None:
    assert parse_instant("2026-01-01T01:00:00+01:00") == NEW_YEAR_2026_MS
    assert parse_instant("2025-12-31T19:00:00-05:00") == NEW_YEAR_2026_MS


def test_parse_instant_takes_a_naive_time_as_utc() -> None:
    assert parse_instant("2026-01-01T00:00:00") == NEW_YEAR_2026_MS


def test_parse_instant_passes_epoch_ms_through() -> None:
    assert parse_instant(NEW_YEAR_2026_MS) == NEW_YEAR_2026_MS


def test_parse_instant_reads_epoch_ms_text() -> None:
    assert parse_instant(f" {NEW_YEAR_2026_MS} ") == NEW_YEAR_2026_MS


def test_parse_instant_ignores_surrounding_whitespace() -> None:
    assert parse_instant("  2026-01-01T00:00:00Z\n") == NEW_YEAR_2026_MS


@pytest.mark.parametrize("text", ["", "tomorrow", "2026-13-01T00:00:00Z", "1.5e12", "-5"])
def test_parse_instant_rejects_other_text_with_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_instant(text)


@pytest.mark.parametrize("offset_ms", [0, 1, 7, 123, 500, 999, 86_400_001, 31_536_000_777])
def test_iso_ms_and_parse_instant_round_trip(offset_ms: int) -> None:
    epoch_ms = NEW_YEAR_2026_MS + offset_ms
    assert parse_instant(iso_ms(epoch_ms) or "") == epoch_ms


@pytest.mark.parametrize("text", ["2039-03-08T19:46:13.411Z", "2004-03-15T07:55:47.472Z"])
def test_parse_instant_keeps_every_millisecond(text: str) -> None:
    assert parse_instant(text) == _exact_ms(text)
