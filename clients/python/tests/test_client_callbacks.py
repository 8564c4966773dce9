"""``callbacks``: a job's deliveries as issue 15 describes them, and the callback event."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from kairos_client import (
    CallbackEvent,
    CallbackState,
    ConflictError,
    NotFoundError,
    ResponseFormatError,
)
from scripted import Scripted, ok, problem

DEAD = {
    "deliveryId": "d-1",
    "executionId": "e-1",
    "state": "DEAD",
    "attempts": [
        {"at": "2026-11-30T14:00:00.000Z", "statusCode": 500, "error": None, "durationMs": 12},
        {"at": "2026-11-30T14:00:05.000Z", "statusCode": None, "error": "timed out"},
    ],
    "nextAttemptAt": None,
}
RETRYING = {
    "deliveryId": 2,
    "executionId": "e-2",
    "state": "RETRYING",
    "attempts": [{"at": "2026-11-30T15:00:00.000Z", "statusCode": 503, "durationMs": 8.5}],
    "nextAttemptAt": "2026-11-30T15:05:00.000Z",
}


def test_callbacks_reads_every_delivery_with_its_attempts() -> None:
    api = Scripted([ok({"jobId": 7, "deliveries": [DEAD, RETRYING]})])
    with api.client() as kairos:
        dead, retrying = kairos.callbacks(7)
    assert (api.requests[0].method, api.requests[0].url.path) == (
        "GET",
        "/openapi/jobs/7/callbacks",
    )
    assert dead.state is CallbackState.DEAD and dead.next_attempt_at is None
    assert [a.status_code for a in dead.attempts] == [500, None]
    assert dead.attempts[1].error == "timed out"
    assert dead.attempts[0].at == datetime(2026, 11, 30, 14, tzinfo=UTC)
    assert dead.attempts[0].duration_ms == 12
    assert retrying.delivery_id == "2", "an id sent as a number is read as text"
    assert retrying.next_attempt_at == datetime(2026, 11, 30, 15, 5, tzinfo=UTC)


def test_callbacks_follows_a_cursor_and_takes_a_bare_list() -> None:
    api = Scripted([ok({"callbacks": [DEAD], "nextCursor": "c"}), ok({"callbacks": [RETRYING]})])
    with api.client() as kairos:
        assert [d.delivery_id for d in kairos.callbacks(7)] == ["d-1", "2"]
    assert api.requests[1].url.params["cursor"] == "c"
    bare = Scripted([ok([DEAD])])
    with bare.client() as kairos:
        assert kairos.callbacks(7)[0].execution_id == "e-1"


def test_callbacks_from_the_async_client() -> None:
    api = Scripted([ok({"deliveries": [RETRYING]})])

    async def use() -> list[str]:
        async with api.async_client() as kairos:
            return [d.state for d in await kairos.callbacks(7)]

    assert asyncio.run(use()) == ["RETRYING"]


def test_a_server_without_the_route_answers_a_not_found_problem() -> None:
    api = Scripted([problem(404, "not-found", "no such path")])
    with api.client() as kairos, pytest.raises(NotFoundError) as caught:
        kairos.callbacks(7)
    assert caught.value.type == "urn:kairos:problem:not-found"


def test_a_delivery_without_its_state_is_a_response_format_error() -> None:
    api = Scripted([ok({"deliveries": [{"deliveryId": "d", "executionId": "e"}]})])
    with api.client() as kairos, pytest.raises(ResponseFormatError, match=r"deliveries\[0\]"):
        kairos.callbacks(7)


def test_a_body_that_is_no_callback_is_a_response_format_error() -> None:
    with pytest.raises(ResponseFormatError, match="jobId"):
        CallbackEvent.from_json({"type": "execution.finished", "data": {"executionId": "e"}})
    with pytest.raises(ResponseFormatError):
        CallbackEvent.from_json([1, 2])


def test_replay_callback_posts_to_the_delivery_and_a_409_is_a_conflict() -> None:
    api = Scripted(
        [
            ok({"deliveryId": "msg_1", "state": "PENDING"}, status=202),
            problem(409, "callback-in-flight", deliveryId="msg_1", deliveryState="RETRYING"),
        ]
    )
    with api.client() as kairos:
        kairos.replay_callback("msg_1")
        with pytest.raises(ConflictError) as raised:
            kairos.replay_callback("msg_1")
    assert (api.requests[0].method, api.requests[0].url.path) == (
        "POST",
        "/openapi/callbacks/msg_1/replay",
    )
    assert raised.value.type == "urn:kairos:problem:callback-in-flight"
    assert len(api.requests) == 2, "a replay is not sent again by itself"


def test_a_dead_delivery_says_why() -> None:
    api = Scripted([ok({"jobId": 7, "deliveries": [{**DEAD, "deadReason": "gone"}]})])
    with api.client() as kairos:
        (dead,) = kairos.callbacks(7)
    assert dead.dead_reason == "gone"
