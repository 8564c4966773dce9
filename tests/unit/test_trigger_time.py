"""triggerAt: only times Kairos can store and show (1970 through 9999), never a boolean,
and a time without an offset read in the job's own time zone."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest

from common.db.apps import App
from common.errors import ValidationFailedError
from common.handler_patterns import EVERY_HANDLER
from common.schedule import Schedule
from common.timefmt import MAX_INSTANT_MS, parse_instant
from services.api.schemas import JobCreate
from services.api.validation import build_job, first_trigger

NOW_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HANDLERS = frozenset({"demo.echo"})


def _body(**fields: Any) -> JobCreate:
    return JobCreate.model_validate({"jobName": "report", "jobHandler": "demo.echo", **fields})


def _first(trigger_at: Any, timezone: str = "UTC") -> int:
    body = _body(triggerAt=trigger_at, timezone=timezone)
    return first_trigger(body, Schedule(timezone=timezone), NOW_MS)


def _refused(trigger_at: Any) -> ValidationFailedError:
    with pytest.raises(ValidationFailedError) as caught:
        _first(trigger_at)
    assert caught.value.field == "triggerAt"
    return caught.value


@pytest.mark.parametrize(
    "trigger_at",
    [
        -1,
        -100_000_000_000_000,
        MAX_INSTANT_MS + 1,
        2**63,
        10**30,
        "1969-12-31T23:59:59.999Z",
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59-05:00",
        "100000000000000000000000",
        "9" * 5000,
    ],
)
def test_a_time_before_1970_or_after_9999_is_refused(trigger_at: Any) -> None:
    _refused(trigger_at)


def test_the_refusal_says_which_range_is_taken() -> None:
    message = _refused(-100_000_000_000_000).message
    assert "1970-01-01T00:00:00Z" in message and "9999-12-31T23:59:59.999Z" in message


@pytest.mark.parametrize(
    ("trigger_at", "expected"),
    [
        (0, 0),
        ("1970-01-01T00:00:00Z", 0),
        (MAX_INSTANT_MS, MAX_INSTANT_MS),
        ("9999-12-31T23:59:59.999Z", MAX_INSTANT_MS),
        (1.7e12, 1_700_000_000_000),
    ],
)
def test_the_ends_of_the_range_are_taken(trigger_at: Any, expected: int) -> None:
    assert _first(trigger_at) == expected


@pytest.mark.parametrize("value", ["true", "false", "1.5", "[1]", '{"at": 1}', "1e400"])
def test_a_boolean_fraction_or_other_type_is_no_time(value: str) -> None:
    raw = '{"jobName": "r", "jobHandler": "demo.echo", "triggerAt": ' + value + "}"
    with pytest.raises(pydantic.ValidationError) as caught:
        JobCreate.model_validate_json(raw)
    assert [error["loc"] for error in caught.value.errors()] == [("triggerAt",)]


def test_a_time_without_offset_is_a_wall_time_in_the_jobs_zone() -> None:
    assert _first("2026-06-01T08:00:00", "Asia/Shanghai") == parse_instant("2026-06-01T00:00:00Z")


def test_build_job_reads_trigger_at_in_the_jobs_zone() -> None:
    body = _body(triggerAt="2026-06-01T08:00:00", timezone="Asia/Shanghai")
    job = build_job(body, App(1, "app_1", "a", EVERY_HANDLER), HANDLERS, 1024, NOW_MS)
    assert job.next_trigger_time == parse_instant("2026-06-01T00:00:00Z")


@pytest.mark.parametrize(
    ("trigger_at", "utc"),
    [
        ("2026-06-01T08:00:00Z", "2026-06-01T08:00:00Z"),
        ("2026-06-01T08:00:00+00:00", "2026-06-01T08:00:00Z"),
        ("2026-06-01T08:00:00-05:00", "2026-06-01T13:00:00Z"),
    ],
)
def test_an_offset_wins_over_the_jobs_zone(trigger_at: str, utc: str) -> None:
    assert _first(trigger_at, "Asia/Shanghai") == parse_instant(utc)


def test_epoch_milliseconds_do_not_depend_on_the_zone() -> None:
    assert _first(NOW_MS, "Asia/Shanghai") == NOW_MS
    assert _first(str(NOW_MS), "Asia/Shanghai") == NOW_MS


def test_a_skipped_wall_time_is_shifted_forward_by_the_gap() -> None:
    # Paris skips 02:00-03:00 on 2026-03-29: 02:30 is taken as 03:30 CEST.
    assert _first("2026-03-29T02:30:00", "Europe/Paris") == parse_instant(
        "2026-03-29T03:30:00+02:00"
    )


def test_a_repeated_wall_time_is_its_first_occurrence() -> None:
    # Paris shows 02:00-03:00 twice on 2026-10-25: 02:30 is the first one, in CEST.
    assert _first("2026-10-25T02:30:00", "Europe/Paris") == parse_instant(
        "2026-10-25T02:30:00+02:00"
    )


def test_a_wall_time_is_checked_against_the_range_after_its_zone() -> None:
    # 1970-01-01T05:00 in Shanghai is 1969-12-31T21:00Z.
    with pytest.raises(ValidationFailedError) as caught:
        _first("1970-01-01T05:00:00", "Asia/Shanghai")
    assert caught.value.field == "triggerAt"


def test_unicode_digits_are_not_epoch_milliseconds() -> None:
    _refused_text = "\u0661\u0662\u0663"  # Arabic-Indic 123
    with pytest.raises(ValidationFailedError):
        _first(_refused_text)


def test_the_schema_says_how_a_time_without_offset_is_read() -> None:
    schema = json.dumps(JobCreate.model_json_schema()["properties"]["triggerAt"])
    assert "timezone" in schema
