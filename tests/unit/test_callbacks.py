"""The callback payload a receiver gets, and the message that hands it to the notifier."""

from __future__ import annotations

import json

from common.db.deliveries import NewDelivery
from common.messages import CallbackMessage, ExecutionResult
from common.topology import CALLBACKS_EXCHANGE, CALLBACKS_QUEUE
from services.dispatcher.outcomes.callbacks import callback_message, callback_payload

NEW_YEAR_2026_MS = 1_767_225_600_000


def _result(status: str = "SUCCEEDED", message: str | None = None) -> ExecutionResult:
    return ExecutionResult.model_validate(
        {
            "execution_id": "ex-1",
            "job_id": 42,
            "worker_id": "w-1",
            "status": status,
            "message": message,
            "started_at": NEW_YEAR_2026_MS + 250,
            "ended_at": NEW_YEAR_2026_MS + 1005,
        }
    )


def test_payload_is_compact_json_with_the_documented_keys_in_order() -> None:
    assert callback_payload(_result(), attempt=2, trigger_time=NEW_YEAR_2026_MS) == (
        '{"jobId":42,"executionId":"ex-1","status":"SUCCEEDED","message":null,"attempt":2,'
        '"triggerTime":"2026-01-01T00:00:00.000Z","startedAt":"2026-01-01T00:00:00.250Z",'
        '"endedAt":"2026-01-01T00:00:01.005Z"}'
    )


def test_payload_carries_the_failure_message() -> None:
    payload = callback_payload(_result("FAILED", "ValueError: bad day"), 3, NEW_YEAR_2026_MS)
    decoded = json.loads(payload)
    assert decoded["status"] == "FAILED"
    assert decoded["message"] == "ValueError: bad day"
    assert decoded["attempt"] == 3


def test_payload_has_exactly_eight_keys() -> None:
    decoded = json.loads(callback_payload(_result("LOST"), 1, NEW_YEAR_2026_MS))
    assert set(decoded) == {
        "jobId",
        "executionId",
        "status",
        "message",
        "attempt",
        "triggerTime",
        "startedAt",
        "endedAt",
    }


def test_callback_message_carries_the_delivery_to_the_callbacks_queue() -> None:
    delivery = NewDelivery(
        delivery_id="msg_abc",
        execution_id="ex-1",
        job_id=42,
        app_pk=7,
        url="https://example.com/cb",
        payload='{"jobId":42}',
    )
    message = callback_message(delivery)
    assert (message.exchange, message.routing_key) == (CALLBACKS_EXCHANGE, CALLBACKS_QUEUE)
    assert message.message_id == "msg_abc"
    assert CallbackMessage.model_validate_json(message.body) == CallbackMessage(
        delivery_id="msg_abc", app_id=7, url="https://example.com/cb", payload='{"jobId":42}'
    )
