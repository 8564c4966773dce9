"""Cron in IANA time zones: daylight-saving edges, leap days, month ends."""

from __future__ import annotations

import pytest

from common.cron import next_trigger_ms, preview, zone
from common.errors import ValidationFailedError
from common.timefmt import iso_ms, parse_instant


def runs(expr: str, start: str, count: int, tz: str) -> list[str | None]:
    return [iso_ms(t) for t in preview(expr, parse_instant(start), count, tz)]


@pytest.mark.parametrize(
    ("tz", "day_before", "gap_day_fire", "next_day_fire"),
    [
        # New York skips 02:00-03:00 on 2026-03-08 (EST -5 -> EDT -4).
        (
            "America/New_York",
            "2026-03-07T12:00:00Z",
            "2026-03-08T07:30:00.000Z",
            "2026-03-09T06:30:00.000Z",
        ),
        # Berlin skips 02:00-03:00 on 2026-03-29 (CET +1 -> CEST +2).
        (
            "Europe/Berlin",
            "2026-03-28T12:00:00Z",
            "2026-03-29T01:30:00.000Z",
            "2026-03-30T00:30:00.000Z",
        ),
    ],
)
def test_daily_job_in_a_skipped_hour_runs_once_that_day(
    tz: str, day_before: str, gap_day_fire: str, next_day_fire: str
) -> None:
    assert runs("30 2 * * *", day_before, 2, tz) == [gap_day_fire, next_day_fire]


@pytest.mark.parametrize(
    ("tz", "day_before", "expected"),
    [
        # New York repeats 01:00-02:00 on 2026-11-01: 01:30 EDT is 05:30Z, 01:30 EST 06:30Z.
        (
            "America/New_York",
            "2026-10-31T12:00:00Z",
            ["2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"],
        ),
        # Berlin repeats 02:00-03:00 on 2026-10-25: 02:30 CEST is 00:30Z.
        (
            "Europe/Berlin",
            "2026-10-24T12:00:00Z",
            ["2026-10-25T00:30:00.000Z", "2026-10-26T01:30:00.000Z"],
        ),
    ],
)
def test_daily_job_in_a_repeated_hour_runs_once(
    tz: str, day_before: str, expected: list[str]
) -> None:
    hour = "1" if tz == "America/New_York" else "2"
    assert runs(f"30 {hour} * * *", day_before, 2, tz) == expected


def test_sub_hourly_job_runs_in_both_passes_of_a_repeated_hour() -> None:
    fired = runs("*/30 * * * *", "2026-11-01T04:45:00Z", 6, "America/New_York")
    assert fired == [
        "2026-11-01T05:00:00.000Z",  # 01:00 EDT
        "2026-11-01T05:30:00.000Z",  # 01:30 EDT
        "2026-11-01T06:00:00.000Z",  # 01:00 EST
        "2026-11-01T06:30:00.000Z",  # 01:30 EST
        "2026-11-01T07:00:00.000Z",  # 02:00 EST
        "2026-11-01T07:30:00.000Z",
    ]


def test_sub_hourly_job_skips_wall_times_that_do_not_exist() -> None:
    fired = runs("*/30 * * * *", "2026-03-08T06:45:00Z", 3, "America/New_York")
    assert fired == [
        "2026-03-08T07:00:00.000Z",  # 03:00 EDT: 02:00 and 02:30 never happened
        "2026-03-08T07:30:00.000Z",
        "2026-03-08T08:00:00.000Z",
    ]


def test_southern_hemisphere_zone_shifts_the_other_way() -> None:
    # Sydney leaves daylight time on 2026-04-05 (03:00 AEDT -> 02:00 AEST).
    fired = runs("30 2 * * *", "2026-04-04T00:00:00Z", 2, "Australia/Sydney")
    assert fired == ["2026-04-04T15:30:00.000Z", "2026-04-05T16:30:00.000Z"]


def test_leap_day_job_fires_only_on_leap_years() -> None:
    fired = runs("0 12 29 2 *", "2026-01-01T00:00:00Z", 2, "Europe/Paris")
    assert fired == ["2028-02-29T11:00:00.000Z", "2032-02-29T11:00:00.000Z"]


def test_month_end_day_31_skips_short_months() -> None:
    fired = runs("0 0 31 * *", "2026-01-31T12:00:00Z", 3, "UTC")
    assert fired == [
        "2026-03-31T00:00:00.000Z",
        "2026-05-31T00:00:00.000Z",
        "2026-07-31T00:00:00.000Z",
    ]


def test_last_day_of_month_with_l() -> None:
    fired = runs("0 9 L * *", "2028-02-01T00:00:00Z", 2, "Asia/Tokyo")
    assert fired == ["2028-02-29T00:00:00.000Z", "2028-03-31T00:00:00.000Z"]


def test_next_trigger_is_strictly_after_the_given_instant() -> None:
    at = parse_instant("2026-06-01T09:00:00Z")
    assert next_trigger_ms("0 9 * * *", at, "UTC") == at + 86_400_000


def test_every_second_in_a_zone_matches_utc() -> None:
    at = parse_instant("2026-06-01T09:00:00.250Z")
    assert next_trigger_ms("* * * * * *", at, "Europe/Berlin") == at + 750


def test_unknown_zone_is_a_validation_error() -> None:
    with pytest.raises(ValidationFailedError, match="IANA"):
        zone("Mars/Olympus_Mons")
