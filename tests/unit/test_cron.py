"""Cron expressions: validation, normalisation and the next trigger time, all in UTC."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from common.cron import next_trigger_ms, validate_cron
from common.errors import ValidationFailedError


def _ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    """Epoch ms of a UTC wall time."""
    return int(datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()) * 1000


def test_five_fields_are_accepted_unchanged() -> None:
    assert validate_cron("*/15 9-17 * * 1-5") == "*/15 9-17 * * 1-5"


def test_five_fields_put_minutes_first() -> None:
    assert next_trigger_ms("30 * * * *", _ms(2026, 1, 1)) == _ms(2026, 1, 1, 0, 30)


def test_six_fields_put_seconds_first() -> None:
    assert validate_cron("30 * * * * *") == "30 * * * * *"
    assert next_trigger_ms("30 * * * * *", _ms(2026, 1, 1)) == _ms(2026, 1, 1, 0, 0, 30)


def test_six_fields_every_two_seconds_fires_every_two_seconds() -> None:
    fired = [_ms(2026, 1, 1)]
    for _ in range(5):
        upcoming = next_trigger_ms("*/2 * * * * *", fired[-1])
        assert upcoming is not None
        fired.append(upcoming)
    assert [t - fired[0] for t in fired] == [0, 2000, 4000, 6000, 8000, 10_000]


def test_six_fields_second_field_is_not_read_as_minutes() -> None:
    """``0 30 * * * *`` is minute 30 of every hour, not second 30 of every minute."""
    assert next_trigger_ms("0 30 * * * *", _ms(2026, 1, 1)) == _ms(2026, 1, 1, 0, 30)


def test_validate_normalises_whitespace() -> None:
    assert validate_cron("  */5\t*   * *\n*  ") == "*/5 * * * *"


def test_validate_normalises_whitespace_in_six_fields() -> None:
    assert validate_cron(" */2  *\t* * * * ") == "*/2 * * * * *"


@pytest.mark.parametrize("expr", ["", "   ", "* * * *", "* * * * * * *", "@daily", "*"])
def test_wrong_field_count_is_rejected_with_the_count(expr: str) -> None:
    with pytest.raises(ValidationFailedError) as caught:
        validate_cron(expr)
    assert caught.value.field == "cronExpr"
    assert f"has {len(expr.split())} fields" in caught.value.message


@pytest.mark.parametrize(
    "expr",
    [
        "60 * * * *",
        "* 24 * * *",
        "* * 0 * *",
        "* * 32 * *",
        "* * * 0 *",
        "* * * 13 *",
        "* * * * 8",
        "-1 * * * *",
        "60 * * * * *",
        "* 60 * * * *",
        "* * 24 * * *",
        "* * * 32 * *",
    ],
)
def test_out_of_range_values_are_rejected(expr: str) -> None:
    with pytest.raises(ValidationFailedError) as caught:
        validate_cron(expr)
    assert caught.value.field == "cronExpr"
    assert "is not a valid cron" in caught.value.message


@pytest.mark.parametrize("expr", ["a * * * *", "*/0 * * * *", "1,,2 * * * *", "0- * * * *"])
def test_malformed_fields_are_rejected(expr: str) -> None:
    with pytest.raises(ValidationFailedError) as caught:
        validate_cron(expr)
    assert caught.value.field == "cronExpr"


@pytest.mark.parametrize("expr", ["0 0 30 2 *", "0 0 31 4 *", "0 0 0 31 11 *"])
def test_dates_that_never_occur_are_rejected(expr: str) -> None:
    with pytest.raises(ValidationFailedError):
        validate_cron(expr)


def test_validation_error_keeps_the_parser_error_as_cause() -> None:
    with pytest.raises(ValidationFailedError) as caught:
        validate_cron("61 * * * *")
    assert isinstance(caught.value.__cause__, ValueError)


def test_next_trigger_is_strictly_after_a_matching_time() -> None:
    assert next_trigger_ms("0 * * * *", _ms(2026, 1, 1, 5)) == _ms(2026, 1, 1, 6)
    assert next_trigger_ms("*/2 * * * * *", _ms(2026, 1, 1, 0, 0, 2)) == _ms(2026, 1, 1, 0, 0, 4)


@pytest.mark.parametrize("offset_ms", [1, 500, 1000, 1999])
def test_every_two_seconds_from_inside_the_gap_fires_at_the_next_even_second(
    offset_ms: int,
) -> None:
    start = _ms(2026, 1, 1)
    assert next_trigger_ms("*/2 * * * * *", start + offset_ms) == start + 2000


def test_five_fields_from_a_partial_minute_fire_at_the_next_whole_minute() -> None:
    after = _ms(2026, 1, 1, 0, 0, 30) + 250
    assert next_trigger_ms("* * * * *", after) == _ms(2026, 1, 1, 0, 1)


def test_day_31_skips_months_that_are_shorter() -> None:
    assert next_trigger_ms("0 0 31 * *", _ms(2026, 4, 1)) == _ms(2026, 5, 31)


def test_day_30_skips_february() -> None:
    assert next_trigger_ms("0 12 30 * *", _ms(2026, 1, 30, 12)) == _ms(2026, 3, 30, 12)


def test_last_minute_of_a_month_rolls_into_the_next_month() -> None:
    assert next_trigger_ms("0 0 1 * *", _ms(2026, 2, 28, 23, 59, 59) + 999) == _ms(2026, 3, 1)


def test_year_end_rolls_into_the_next_year() -> None:
    assert next_trigger_ms("0 0 1 1 *", _ms(2026, 12, 31, 23, 59, 59)) == _ms(2027, 1, 1)


def test_leap_day_waits_for_the_next_leap_year() -> None:
    assert next_trigger_ms("0 0 29 2 *", _ms(2026, 1, 1)) == _ms(2028, 2, 29)


def test_leap_day_after_firing_waits_four_years() -> None:
    assert next_trigger_ms("0 0 29 2 *", _ms(2028, 2, 29)) == _ms(2032, 2, 29)


def test_leap_day_is_a_valid_cron() -> None:
    assert validate_cron("0 0 29 2 *") == "0 0 29 2 *"


def test_leap_day_in_six_fields() -> None:
    assert next_trigger_ms("0 0 0 29 2 *", _ms(2026, 3, 1)) == _ms(2028, 2, 29)
