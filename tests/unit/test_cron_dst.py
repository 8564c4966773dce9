"""Every-second and every-minute crons across offset changes, and the work one costs.

README, "Daylight saving": an expression whose hour field covers all 24 hours skips
the wall times a clock skips and fires in both passes of a repeated hour; any other
expression fires a skipped wall time once, shifted by the gap, and a repeated one once,
at its first pass. The 2026 changes used here:

| zone | change (UTC) | wall clock |
|---|---|---|
| Europe/Paris | 03-29 01:00 | 02:00 CET -> 03:00 CEST |
| Europe/Paris | 10-25 01:00 | 03:00 CEST -> 02:00 CET |
| America/New_York | 03-08 07:00 | 02:00 EST -> 03:00 EDT |
| Australia/Lord_Howe | 04-04 15:00 | 02:00 (+11) -> 01:30 (+10:30) |
| Australia/Lord_Howe | 10-03 15:30 | 02:00 (+10:30) -> 02:30 (+11) |
| America/Santiago | 09-06 04:00 | 00:00 (-4) -> 01:00 (-3) |
| America/Santiago | 04-05 03:00 | 24:00 (-3) -> 23:00 (-4) |
"""

from __future__ import annotations

import pytest

from common.cron import CronWork, next_trigger_ms, preview
from common.timefmt import iso_ms, parse_instant

SECOND = 1000
MINUTE = 60_000


def runs(expr: str, start: str, count: int, tz: str) -> list[str | None]:
    return [iso_ms(t) for t in preview(expr, parse_instant(start), count, tz)]


@pytest.mark.parametrize(
    ("tz", "change"),
    [
        ("Europe/Paris", "2026-03-29T01:00:00Z"),
        ("Europe/Paris", "2026-10-25T01:00:00Z"),
        ("America/New_York", "2026-03-08T07:00:00Z"),
        ("America/New_York", "2026-11-01T06:00:00Z"),
        ("Australia/Lord_Howe", "2026-04-04T15:00:00Z"),
        ("Australia/Lord_Howe", "2026-10-03T15:30:00Z"),
        ("America/Santiago", "2026-09-06T04:00:00Z"),
        ("Asia/Kolkata", "2026-03-29T01:00:00Z"),
    ],
)
def test_every_second_fires_every_second_across_an_offset_change(tz: str, change: str) -> None:
    """Skipping the missing wall seconds and running both passes of the repeated ones
    is every UTC second: 100 in a row, none left out, none twice."""
    start = parse_instant(change) - 50 * SECOND
    assert preview("* * * * * *", start, 100, tz) == [start + n * SECOND for n in range(1, 101)]


def test_every_second_at_the_spring_forward_second_goes_to_three_oclock() -> None:
    fired = runs("* * * * * *", "2026-03-29T00:59:58Z", 3, "Europe/Paris")
    # 01:59:59 CET, then 03:00:00 CEST: the wall seconds 02:00:00-02:59:59 do not exist.
    assert fired == [
        "2026-03-29T00:59:59.000Z",
        "2026-03-29T01:00:00.000Z",
        "2026-03-29T01:00:01.000Z",
    ]


def test_every_minute_skips_the_missing_hour_in_new_york() -> None:
    fired = runs("* * * * *", "2026-03-08T06:58:30Z", 3, "America/New_York")
    assert fired == [
        "2026-03-08T06:59:00.000Z",  # 01:59 EST
        "2026-03-08T07:00:00.000Z",  # 03:00 EDT
        "2026-03-08T07:01:00.000Z",
    ]


def test_every_minute_runs_in_both_passes_of_the_repeated_hour() -> None:
    start = parse_instant("2026-10-25T00:00:00Z")  # 02:00 CEST, first pass
    fired = preview("* * * * *", start - MINUTE, 121, "Europe/Paris")
    assert fired == [start + n * MINUTE for n in range(121)]  # 02:00 CEST .. 02:59 CET


def test_a_minute_cron_within_one_hour_shifts_the_skipped_hour() -> None:
    """``* 2 * * *`` does not fire every hour: its minutes 02:00-02:59, skipped on the
    day of the change, fire from 03:00 to 03:59 CEST, once each."""
    fired = preview("* 2 * * *", parse_instant("2026-03-28T12:00:00Z"), 61, "Europe/Paris")
    start = parse_instant("2026-03-29T01:00:00Z")
    assert fired[:60] == [start + n * MINUTE for n in range(60)]
    assert iso_ms(fired[60]) == "2026-03-30T00:00:00.000Z"  # 02:00 CEST the next day


def test_a_minute_cron_within_one_hour_fires_its_repeated_hour_once() -> None:
    fired = preview("* 2 * * *", parse_instant("2026-10-24T12:00:00Z"), 61, "Europe/Paris")
    start = parse_instant("2026-10-25T00:00:00Z")  # 02:00 CEST
    assert fired[:60] == [start + n * MINUTE for n in range(60)]
    assert iso_ms(fired[60]) == "2026-10-26T01:00:00.000Z"  # 02:00 CET the next day


def test_lord_howe_half_hour_gap_skips_for_an_every_hour_cron() -> None:
    fired = runs("*/15 * * * *", "2026-10-03T15:00:00Z", 3, "Australia/Lord_Howe")
    assert fired == [
        "2026-10-03T15:15:00.000Z",  # 01:45 (+10:30)
        "2026-10-03T15:30:00.000Z",  # 02:30 (+11): 02:00 and 02:15 never happened
        "2026-10-03T15:45:00.000Z",
    ]


def test_lord_howe_half_hour_gap_shifts_a_daily_cron_by_thirty_minutes() -> None:
    fired = runs("15 2 * * *", "2026-10-03T00:00:00Z", 2, "Australia/Lord_Howe")
    assert fired == ["2026-10-03T15:45:00.000Z", "2026-10-04T15:15:00.000Z"]


def test_lord_howe_repeated_half_hour_runs_twice_for_an_every_hour_cron() -> None:
    fired = runs("*/15 * * * *", "2026-04-04T14:20:00Z", 5, "Australia/Lord_Howe")
    assert fired == [
        "2026-04-04T14:30:00.000Z",  # 01:30 (+11)
        "2026-04-04T14:45:00.000Z",  # 01:45 (+11)
        "2026-04-04T15:00:00.000Z",  # 01:30 (+10:30)
        "2026-04-04T15:15:00.000Z",  # 01:45 (+10:30)
        "2026-04-04T15:30:00.000Z",  # 02:00 (+10:30)
    ]


def test_santiago_midnight_gap_shifts_a_midnight_job_to_one_oclock() -> None:
    fired = runs("0 0 * * *", "2026-09-05T12:00:00Z", 2, "America/Santiago")
    assert fired == ["2026-09-06T04:00:00.000Z", "2026-09-07T03:00:00.000Z"]


def test_santiago_repeated_eleven_pm_fires_once_for_a_daily_job() -> None:
    fired = runs("30 23 * * *", "2026-04-04T12:00:00Z", 2, "America/Santiago")
    assert fired == ["2026-04-05T02:30:00.000Z", "2026-04-06T03:30:00.000Z"]


def test_a_start_inside_the_gap_still_fires_the_shifted_time() -> None:
    """Asked just after 03:00 CEST, a 02:45 job of that day is still due at 03:45."""
    assert runs("45 2 * * *", "2026-03-29T01:10:00Z", 1, "Europe/Paris") == [
        "2026-03-29T01:45:00.000Z"
    ]


def test_a_start_in_the_second_pass_does_not_fire_the_repeat_of_a_daily_job() -> None:
    """At 02:20 CET (second pass), 02:15 fired in the first pass: next is tomorrow."""
    assert runs("15 2 * * *", "2026-10-25T01:20:00Z", 1, "Europe/Paris") == [
        "2026-10-26T01:15:00.000Z"
    ]


def test_a_skipped_day_fires_its_noon_once_with_the_next_days() -> None:
    """Apia skipped 2011-12-30 whole (-10 -> +14): that day's noon, shifted by the gap of
    24 hours, falls on the 31st's noon and fires once."""
    fired = runs("0 12 * * *", "2011-12-29T20:00:00Z", 3, "Pacific/Apia")
    assert fired == [
        "2011-12-29T22:00:00.000Z",  # 12-29 12:00 (-10)
        "2011-12-30T22:00:00.000Z",  # 12-31 12:00 (+14)
        "2011-12-31T22:00:00.000Z",
    ]


@pytest.mark.parametrize("tz", ["UTC", "Europe/Paris", "Australia/Lord_Howe"])
@pytest.mark.parametrize(
    "expr",
    ["* * * * * *", "*/7 * * * * *", "* * * * *", "0 0 29 2 *", "0 0 1 1 *", "0 0 * 2 1#5"],
)
@pytest.mark.parametrize("start", ["2026-03-29T00:59:59.500Z", "2072-03-01T00:00:00Z"])
def test_one_computation_does_a_bounded_count_of_work(expr: str, tz: str, start: str) -> None:
    work = CronWork()
    next_trigger_ms(expr, parse_instant(start), tz, work)
    assert work.rounds <= 3
    assert work.probes <= 3 * (3 + 2 * 17)
    assert work.months <= 2 * 41  # 2072 to 2112 for a 5th Monday in February


def test_an_expression_past_the_last_computed_time_has_no_next_time() -> None:
    assert next_trigger_ms("0 0 29 2 *", parse_instant("9996-03-01T00:00:00Z")) is None
    assert preview("0 0 29 2 *", parse_instant("9990-01-01T00:00:00Z"), 5) == [
        parse_instant("9992-02-29T00:00:00Z"),
        parse_instant("9996-02-29T00:00:00Z"),
    ]
