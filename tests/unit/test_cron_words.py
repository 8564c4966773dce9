"""Schedules in words, as the console shows them."""

from __future__ import annotations

import pytest

from common.cron.words import describe_cron, describe_schedule, every_interval


@pytest.mark.parametrize(
    ("expr", "words"),
    [
        ("*/2 * * * * *", "every 2 seconds"),
        ("* * * * * *", "every second"),
        ("0 * * * * *", "every minute"),
        ("* * * * *", "every minute"),
        ("*/15 * * * *", "every 15 minutes"),
        ("0 * * * *", "at minute 0 of every hour"),
        ("5,35 * * * *", "at minutes 5 and 35 of every hour"),
        ("5 * * * * *", "at second 5 of every minute"),
        ("0-10,30 * * * *", "at minutes 0 through 10 and 30 of every hour"),
        ("*/5 9-17 * * *", "every 5 minutes, from 09:00 through 17:59"),
        ("15 */2 * * *", "at minute 15, every 2 hours"),
        ("30 2 * * *", "at 02:30, every day"),
        ("0 9,17 * * *", "at 09:00 and 17:00, every day"),
        ("0 30 9 * * MON-FRI", "at 09:30, Monday through Friday"),
        ("0 9 * * 1-5", "at 09:00, Monday through Friday"),
        ("0 9 * * MON", "at 09:00, on Monday"),
        ("0 0 * * SAT,SUN", "at 00:00, on Saturday and Sunday"),
        ("0 0 * * 7", "at 00:00, on Sunday"),
        ("*/15 9-17 * * 1-5", "every 15 minutes, from 09:00 through 17:59, Monday through Friday"),
        ("0 0 1 1 *", "at 00:00, on day 1 of the month, in January"),
        ("0 0 L * *", "at 00:00, on the last day of the month"),
        ("0 0 * 2 1#5", "at 00:00, on the fifth Monday of the month, in February"),
        # Both day fields restricted: a day matches either, and the words say "or".
        ("0 0 1 * MON", "at 00:00, on day 1 of the month or on Monday"),
        ("0 0 */2 * *", "at 00:00, every 2 days of the month"),
        ("0 12 * JAN-MAR,DEC *", "at 12:00, every day, in January through March and December"),
        ("0 0 1 */3 *", "at 00:00, on day 1 of the month, every 3 months"),
        ("0 15 10 * * *", "at 10:15, every day"),
        ("30 15 10 * * *", "at 10:15:30, every day"),
    ],
)
def test_a_cron_reads_as_it_fires(expr: str, words: str) -> None:
    assert describe_cron(expr) == words


def test_a_schedule_names_its_zone_rate_or_once() -> None:
    assert describe_schedule("30 2 * * *", "Europe/Paris", None) == (
        "at 02:30, every day (Europe/Paris time)"
    )
    assert describe_schedule("*/2 * * * * *", "UTC", None) == "every 2 seconds (UTC)"
    assert describe_schedule(None, "UTC", 90) == "every 90 seconds (fixed rate)"
    assert describe_schedule(None, "UTC", None) == "once"


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (1, "every second"),
        (90, "every 90 seconds"),
        (600, "every 10 minutes"),
        (3600, "every hour"),
        (7200, "every 2 hours"),
        (86400, "every day"),
    ],
)
def test_a_fixed_rate_reads_in_its_largest_whole_unit(seconds: int, words: str) -> None:
    assert every_interval(seconds) == words
