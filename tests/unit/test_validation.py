"""Turning a job request into a NewJob: handler, params size, cron, callback URL, first trigger."""

from __future__ import annotations

import json
import string
from typing import Any

import pydantic
import pytest

from common.db.apps import App
from common.db.jobs import NewJob
from common.errors import HandlerNotAllowedError, UnknownHandlerError, ValidationFailedError
from common.handler_patterns import EVERY_HANDLER, HandlerPatterns
from common.schedule import Schedule
from services.api.batch import batch_hash
from services.api.schemas import JobCreate
from services.api.validation import (
    build_job,
    check_callback_url,
    check_params,
    first_trigger,
    request_hash,
)

HANDLERS = frozenset({"demo.echo", "demo.sleep"})
NOW_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
LIMIT = 1024
APP = App(id=7, app_id="app_7", name="reports", handlers=EVERY_HANDLER)


def _body(**fields: Any) -> JobCreate:
    return JobCreate.model_validate({"jobName": "report", "jobHandler": "demo.echo", **fields})


def _build(body: JobCreate, app: App = APP) -> NewJob:
    return build_job(body, app, known_handlers=HANDLERS, max_params_bytes=LIMIT, now_ms=NOW_MS)


def _restricted(*patterns: str) -> App:
    return App(id=7, app_id="app_7", name="reports", handlers=HandlerPatterns(patterns))


def _params_of_size(size: int) -> dict[str, Any]:
    """Params whose compact JSON takes exactly ``size`` bytes (size >= 8)."""
    return {"p": "x" * (size - len('{"p":""}'))}


def test_build_job_fills_every_field_of_a_one_shot_job() -> None:
    body = _body(
        params={"day": "2026-11-30"},
        callbackUrl="https://example.com/hooks/kairos",
        clientRequestId="report-1",
    )
    assert _build(body) == NewJob(
        app_pk=7,
        job_name="report",
        handler="demo.echo",
        params={"day": "2026-11-30"},
        cron_expr=None,
        next_trigger_time=NOW_MS,
        callback_url="https://example.com/hooks/kairos",
        client_request_id="report-1",
        request_hash=request_hash(body),
    )


def test_a_job_without_client_request_id_stores_no_request_hash() -> None:
    assert _build(_body()).request_hash is None


def test_build_job_stores_the_cron_normalised() -> None:
    job = _build(_body(cronExpr="  0  2 * * * "))
    assert job.cron_expr == "0 2 * * *"
    assert job.next_trigger_time == NOW_MS + 2 * 3600 * 1000


def test_unknown_handler_is_rejected_by_name() -> None:
    with pytest.raises(UnknownHandlerError) as caught:
        _build(_body(jobHandler="demo.missing"))
    assert caught.value.name == "demo.missing"


def test_unknown_handler_is_reported_before_other_mistakes() -> None:
    with pytest.raises(UnknownHandlerError):
        _build(_body(jobHandler="demo.missing", cronExpr="nope", callbackUrl="ftp://x"))


def test_a_handler_outside_the_apps_patterns_is_refused_naming_them() -> None:
    with pytest.raises(HandlerNotAllowedError) as caught:
        _build(_body(jobHandler="demo.sleep"), _restricted("demo.e*", "report.?"))
    error = caught.value
    assert error.field == "jobHandler" and error.name == "demo.sleep"
    assert "'demo.e*', 'report.?'" in error.message
    assert "kairos app handlers app_7" in error.message


def test_a_handler_inside_the_apps_patterns_is_taken() -> None:
    assert _build(_body(jobHandler="demo.echo"), _restricted("demo.e*")).handler == "demo.echo"


def test_a_handler_not_allowed_is_refused_as_such_even_when_no_worker_has_it() -> None:
    # The app learns nothing of handlers outside its patterns, registered or not.
    with pytest.raises(HandlerNotAllowedError):
        _build(_body(jobHandler="billing.missing"), _restricted("demo.*"))


def test_an_unknown_handler_lists_only_the_registered_handlers_the_app_may_use() -> None:
    with pytest.raises(UnknownHandlerError) as caught:
        _build(_body(jobHandler="demo.missing"), _restricted("demo.e*", "demo.missing"))
    assert "demo.echo" in caught.value.message and "demo.sleep" not in caught.value.message


def test_build_job_rejects_an_invalid_cron() -> None:
    with pytest.raises(ValidationFailedError) as caught:
        _build(_body(cronExpr="61 * * * *"))
    assert caught.value.field == "cronExpr"


def test_build_job_rejects_a_bad_callback_url() -> None:
    with pytest.raises(ValidationFailedError) as caught:
        _build(_body(callbackUrl="ftp://example.com/hook"))
    assert caught.value.field == "callbackUrl"


def test_build_job_rejects_params_over_the_limit() -> None:
    with pytest.raises(ValidationFailedError) as caught:
        _build(_body(params=_params_of_size(LIMIT + 1)))
    assert caught.value.field == "params"


def test_params_at_the_limit_are_accepted() -> None:
    params = _params_of_size(LIMIT)
    assert len(json.dumps(params, separators=(",", ":"))) == LIMIT
    check_params(_body(params=params), LIMIT)


def test_params_one_byte_over_the_limit_are_rejected_with_sizes() -> None:
    with pytest.raises(ValidationFailedError) as caught:
        check_params(_body(params=_params_of_size(LIMIT + 1)), LIMIT)
    assert caught.value.field == "params"
    assert f"{LIMIT + 1} bytes" in caught.value.message
    assert f"limit is {LIMIT} bytes" in caught.value.message


def test_empty_params_fit_any_reasonable_limit() -> None:
    check_params(_body(), 2)


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com",
        "https://example.com/hooks/kairos?x=1",
        "http://127.0.0.1:8080/cb",
        "https://user:pw@hooks.example.com/a",
        "http://[::1]:8080/cb",
        "https://bücher.example/hook?q=ä",
    ],
)
def test_http_and_https_urls_with_a_host_are_accepted(url: str) -> None:
    assert check_callback_url(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/hook",
        "example.com/hook",
        "/hooks/kairos",
        "http://",
        "https:///path-only",
        "mailto:ops@example.com",
        "javascript:alert(1)",
        "file:///etc/passwd",
        "http://[::1",
        "http://[::1/hook",
        "http://[v1.fe]/hook",
        "http://example.com:abc/",
        "http://example.com:99999/",
        "http://example.com:0/",
        "http://exa mple.com/",
        "http://example.com/a b",
        "http://example.com/\n",
        "http://a\x00b.com/",
        "http://xn--zz.com/",
        "http://\u2603.com/",
        "http://example.com/\ud800",
    ],
)
def test_other_callback_urls_are_rejected(url: str) -> None:
    with pytest.raises(ValidationFailedError) as caught:
        check_callback_url(url)
    assert caught.value.field == "callbackUrl"


@pytest.mark.parametrize(
    ("trigger_at", "expected"),
    [
        ("2026-01-02T00:00:00Z", NOW_MS + 86_400_000),
        ("2026-01-02T00:00:00.250Z", NOW_MS + 86_400_250),
        ("2026-01-02T02:00:00+02:00", NOW_MS + 86_400_000),
        ("2026-01-01T19:00:00-05:00", NOW_MS + 86_400_000),
        ("2026-01-02T00:00:00", NOW_MS + 86_400_000),
        (NOW_MS + 5000, NOW_MS + 5000),
        (str(NOW_MS + 5000), NOW_MS + 5000),
    ],
)
def test_trigger_at_accepts_iso_8601_and_epoch_ms(trigger_at: str | int, expected: int) -> None:
    assert first_trigger(_body(triggerAt=trigger_at), Schedule(), NOW_MS) == expected


@pytest.mark.parametrize("trigger_at", ["", "next tuesday", "2026-02-30T00:00:00Z", "12.5"])
def test_unreadable_trigger_at_is_rejected(trigger_at: str) -> None:
    with pytest.raises(ValidationFailedError) as caught:
        first_trigger(_body(triggerAt=trigger_at), Schedule(), NOW_MS)
    assert caught.value.field == "triggerAt"
    assert isinstance(caught.value.__cause__, ValueError)


def test_one_shot_without_trigger_at_fires_now() -> None:
    assert first_trigger(_body(), Schedule(), NOW_MS) == NOW_MS


def test_cron_without_trigger_at_first_fires_at_the_next_cron_time() -> None:
    assert (
        first_trigger(_body(cronExpr="30 * * * *"), Schedule("30 * * * *"), NOW_MS)
        == NOW_MS + 1_800_000
    )


def test_cron_first_fire_is_strictly_after_now() -> None:
    assert (
        first_trigger(_body(cronExpr="0 * * * *"), Schedule("0 * * * *"), NOW_MS)
        == NOW_MS + 3_600_000
    )


def test_six_field_cron_first_fires_two_seconds_later() -> None:
    cron = "*/2 * * * * *"
    assert first_trigger(_body(cronExpr=cron), Schedule(cron), NOW_MS) == NOW_MS + 2000


def test_trigger_at_wins_over_the_cron_time() -> None:
    body = _body(cronExpr="0 * * * *", triggerAt=NOW_MS + 10)
    assert first_trigger(body, Schedule("0 * * * *"), NOW_MS) == NOW_MS + 10


def test_build_job_uses_trigger_at() -> None:
    job = _build(_body(triggerAt="2026-01-01T00:00:01Z"))
    assert job.next_trigger_time == NOW_MS + 1000


def test_request_hash_is_a_sha256_hex_digest() -> None:
    digest = request_hash(_body())
    assert len(digest) == 64
    assert set(digest) <= set(string.hexdigits.lower())


def test_request_hash_ignores_client_request_id() -> None:
    assert request_hash(_body(clientRequestId="a")) == request_hash(_body(clientRequestId="b"))
    assert request_hash(_body(clientRequestId="a")) == request_hash(_body())


def test_request_hash_changes_with_params() -> None:
    assert request_hash(_body(params={"n": 1})) != request_hash(_body(params={"n": 2}))
    assert request_hash(_body(params={"n": 1})) != request_hash(_body())


@pytest.mark.parametrize(
    "change",
    [
        {"jobName": "other"},
        {"jobHandler": "demo.sleep"},
        {"cronExpr": "0 2 * * *"},
        {"triggerAt": NOW_MS},
        {"callbackUrl": "https://example.com/cb"},
    ],
)
def test_request_hash_changes_with_any_other_field(change: dict[str, Any]) -> None:
    assert request_hash(_body(**change)) != request_hash(_body())


def test_request_hash_ignores_params_key_order() -> None:
    first = _body(params={"a": 1, "b": {"x": 1, "y": 2}})
    second = _body(params={"b": {"y": 2, "x": 1}, "a": 1})
    assert request_hash(first) == request_hash(second)


def test_a_job_has_priority_5_unless_the_request_gives_one() -> None:
    assert _build(_body()).priority == 5
    assert _build(_body(priority=0)).priority == 0
    assert _build(_body(priority=9)).priority == 9


@pytest.mark.parametrize("value", [-1, 10, 5.5, True, "5", None, [5]])
def test_a_priority_outside_0_to_9_or_not_a_whole_number_is_refused_by_name(
    value: Any,
) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        _body(priority=value)
    assert [error["loc"] for error in caught.value.errors()] == [("priority",)]


# Digests of ``{"jobName": "report", "jobHandler": "demo.echo"}`` (with clientRequestId
# "r-1") as stored before jobs had a priority: a retry of such a request must match.
STORED_REQUEST_HASH = "8ddc0569920b1002a9283a5ce8df5e6e34e5d2d68d164ba79daa7f081ad904d2"
STORED_BATCH_HASH = "7a410abe11d13cf41f1c233ea99e6f6b72ae318fb212f818d7f7c0158e652956"


def test_the_default_priority_hashes_as_requests_did_before_priorities() -> None:
    plain, explicit = _body(clientRequestId="r-1"), _body(clientRequestId="r-1", priority=5)
    assert request_hash(plain) == request_hash(explicit) == STORED_REQUEST_HASH
    assert batch_hash([plain]) == batch_hash([explicit]) == STORED_BATCH_HASH


def test_another_priority_is_another_request() -> None:
    assert request_hash(_body(priority=7)) != request_hash(_body())
    assert request_hash(_body(priority=7)) != request_hash(_body(priority=6))
    assert batch_hash([_body(priority=7)]) != batch_hash([_body()])
