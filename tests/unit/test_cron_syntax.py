"""What cronExpr accepts (README, "Cron expressions") and what it refuses, and why."""

from __future__ import annotations

import pytest

from common.cron import next_trigger_ms, preview, validate_cron
from common.errors import ValidationFailedError
from common.timefmt import iso_ms, parse_instant

JAN_1 = parse_instant("2026-01-01T00:00:00Z")  # a Thursday


def days(expr: str, count: int = 4) -> list[str]:
    """The dates (YYYY-MM-DD) of the next ``count`` fires from 2026-01-01, UTC."""
    return [str(iso_ms(t))[:10] for t in preview(expr, JAN_1, count)]


def refused(expr: str) -> str:
    with pytest.raises(ValidationFailedError) as caught:
        validate_cron(expr)
    assert caught.value.field == "cronExpr"
    return caught.value.message


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("R * * * *", "R (a random value) is not supported"),
        ("0 R * * *", "R (a random value) is not supported"),
        ("0 0 * * R", "R (a random value) is not supported"),
        ("H * * * *", "H (a hashed value) is not supported"),
        ("H/15 * * * *", "H (a hashed value) is not supported"),
        ("H(0-29) * * * *", "H (a hashed value) is not supported"),
        ("0 0 ? * 1", "'?' (no specific value) is not supported"),
        ("0 0 1 * ?", "'?' (no specific value) is not supported"),
        ("0 0 15W * *", "W (nearest weekday) is not supported"),
        ("0 0 LW * *", "W (nearest weekday) is not supported"),
        ("0 0 * * 5L", "L is accepted only alone in day of month"),
        ("0 0 * * L", "L is accepted only alone in day of month"),
        ("L * * * *", "L is accepted only alone in day of month"),
        ("0 0 L/2 * *", "L is accepted only alone in day of month"),
        ("0 0 1-L * *", "L is accepted only alone in day of month"),
        ("0 0 1#2 * *", "D#N is accepted only in day of week"),
        ("0 0 * * 1#6", "D#N needs N from 1 to 5"),
        ("0 0 * * 1#0", "D#N needs N from 1 to 5"),
        ("0 22-2 * * *", "a range must go upward"),
        ("0 0 * * FRI-MON", "a range must go upward"),
        ("0 0 * * 7/2", "starts past 6"),
        ("FRI * * * *", "names are accepted only in month"),
        ("0 0 * * JAN", "names are accepted only in month"),
        ("0 0 0 1 1 * 2027", "has 7 fields"),
        ("@daily", "has 1 fields"),
        ("*/0 * * * *", "the step must be a whole number from 1"),
        ("*/x * * * *", "the step must be a whole number from 1"),
        ("+1 * * * *", "not a number"),
        ("9" * 5000 + " * * * *", "is out of range 0-59"),
        ("0 0 * * 1#" + "9" * 5000, "D#N needs N from 1 to 5"),
        ("0 0 * * \u0661", "not a number"),  # an Arabic-Indic 1: digits are 0-9 only
        ("0 0 * * MONDAY", "not a number or a name (SUN-SAT)"),
        ("0 0 * FEBRUARY *", "not a number or a name (JAN-DEC)"),
        ("0 0 30 2 *", "never fires: no month in it (Feb) has day 30"),
        ("0 0 31 4,6 *", "never fires: no month in it (Apr, Jun) has day 31"),
    ],
)
def test_extensions_and_mistakes_are_refused_with_the_reason(expr: str, reason: str) -> None:
    assert reason in refused(expr)


def test_a_refused_expression_cannot_be_computed_either() -> None:
    with pytest.raises(ValidationFailedError, match="R \\(a random value\\)"):
        next_trigger_ms("R * * * *", JAN_1)


def test_the_year_field_is_refused_not_read_as_a_weekday() -> None:
    assert "out of range 0-7" in refused("0 0 1 1 * 2027")


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("0 0 * * MON-FRI", ["2026-01-02", "2026-01-05", "2026-01-06", "2026-01-07"]),
        ("0 0 * * mon,wed", ["2026-01-05", "2026-01-07", "2026-01-12", "2026-01-14"]),
        ("0 0 * * 7", ["2026-01-04", "2026-01-11", "2026-01-18", "2026-01-25"]),
        ("0 0 * * 6-7", ["2026-01-03", "2026-01-04", "2026-01-10", "2026-01-11"]),
        ("0 0 * * */2", ["2026-01-03", "2026-01-04", "2026-01-06", "2026-01-08"]),
        ("0 0 * * 1/2", ["2026-01-02", "2026-01-05", "2026-01-07", "2026-01-09"]),
        ("0 0 1 JAN-MAR/2 *", ["2026-03-01", "2027-01-01", "2027-03-01", "2028-01-01"]),
        ("0 0 1 */4 *", ["2026-05-01", "2026-09-01", "2027-01-01", "2027-05-01"]),
        ("0 0 */10 * *", ["2026-01-11", "2026-01-21", "2026-01-31", "2026-02-01"]),
        ("0 0 5/10 * *", ["2026-01-05", "2026-01-15", "2026-01-25", "2026-02-05"]),
        ("0 0 10-20/5 1 *", ["2026-01-10", "2026-01-15", "2026-01-20", "2027-01-10"]),
        ("0 0 L * *", ["2026-01-31", "2026-02-28", "2026-03-31", "2026-04-30"]),
        ("0 0 1,L * *", ["2026-01-31", "2026-02-01", "2026-02-28", "2026-03-01"]),
        ("0 0 * * MON#1", ["2026-01-05", "2026-02-02", "2026-03-02", "2026-04-06"]),
        ("0 0 * * 0#5", ["2026-03-29", "2026-05-31", "2026-08-30", "2026-11-29"]),
        ("0 0 * 2 1#5", ["2044-02-29", "2072-02-29", "2112-02-29", "2140-02-29"]),
        # Both day fields restricted: a day matches if either does.
        ("0 0 13 * FRI", ["2026-01-02", "2026-01-09", "2026-01-13", "2026-01-16"]),
        ("0 0 L * 1#1", ["2026-01-05", "2026-01-31", "2026-02-02", "2026-02-28"]),
        ("0 0 */15 * 1", ["2026-01-05", "2026-01-12", "2026-01-16", "2026-01-19"]),
    ],
)
def test_accepted_forms_fire_as_documented(expr: str, expected: list[str]) -> None:
    assert validate_cron(expr) == expr
    assert days(expr) == expected


def test_every_accepted_expression_gives_the_same_time_on_every_computation() -> None:
    for expr in ("0 0 * * MON#1", "*/7 */5 * * * *", "0 0 L * *"):
        assert len({next_trigger_ms(expr, JAN_1) for _ in range(20)}) == 1
