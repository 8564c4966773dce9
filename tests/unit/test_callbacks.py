"""The callback payload a receiver gets, and the message that hands it to the notifier."""

from __future__ import annotations

import json

from common.db.deliveries import JobLabel, NewDelivery
from common.messages import CallbackMessage, ExecutionResult
from common.topology import CALLBACKS_EXCHANGE, CALLBACKS_QUEUE
from services.dispatcher.outcomes.callbacks import (
    MAX_RESULT_CHARS,
    callback_message,
    callback_payload,
)

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


LABEL = JobLabel("nightly-report", "report-2026-01-01")


def test_payload_is_a_standard_webhooks_envelope_in_compact_json() -> None:
    assert callback_payload(_result(), 2, NEW_YEAR_2026_MS, LABEL) == (
        '{"type":"execution.finished","timestamp":"2026-01-01T00:00:01.005Z","data":{'
        '"jobId":42,"jobName":"nightly-report","clientRequestId":"report-2026-01-01",'
        '"executionId":"ex-1","attempt":2,"status":"SUCCEEDED","message":null,"result":null,'
        '"triggerTime":"2026-01-01T00:00:00.000Z","startedAt":"2026-01-01T00:00:00.250Z",'
        '"endedAt":"2026-01-01T00:00:01.005Z"}}'
    )


def test_payload_carries_the_failure_message() -> None:
    payload = callback_payload(_result("FAILED", "ValueError: bad day"), 3, NEW_YEAR_2026_MS, LABEL)
    data = json.loads(payload)["data"]
    assert data["status"] == "FAILED"
    assert data["message"] == "ValueError: bad day"
    assert data["attempt"] == 3


def test_payload_has_exactly_the_documented_keys() -> None:
    decoded = json.loads(callback_payload(_result("LOST"), 1, NEW_YEAR_2026_MS, LABEL))
    assert set(decoded) == {"type", "timestamp", "data"}
    assert set(decoded["data"]) == {
        "jobId",
        "jobName",
        "clientRequestId",
        "executionId",
        "attempt",
        "status",
        "message",
        "result",
        "triggerTime",
        "startedAt",
        "endedAt",
    }


def test_a_result_is_carried_as_json_and_left_out_past_its_bound() -> None:
    small = _result().model_copy(update={"result": '{"rows":3}'})
    assert json.loads(callback_payload(small, 1, 0, LABEL))["data"]["result"] == {"rows": 3}
    big = _result().model_copy(update={"result": '"' + "x" * MAX_RESULT_CHARS + '"'})
    data = json.loads(callback_payload(big, 1, 0, LABEL))["data"]
    assert data["result"] is None and data["resultOmitted"] is True


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
        delivery_id="msg_abc",
        app_pk=7,
        url="https://example.com/cb",
        payload='{"jobId":42}',
        job_id=42,
    )
