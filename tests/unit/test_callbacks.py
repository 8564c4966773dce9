"""The callback payload a receiver gets, and the message that hands it to the notifier."""

from __future__ import annotations

import json
from dataclasses import replace

from common.broker import OutgoingMessage
from common.db.deliveries import JobLabel, NewDelivery
from common.db.executions import NewExecution
from common.db.jobs import TriggerSettings
from common.memory.rows import MemoryJob
from common.memory.store import MemoryStore
from common.messages import (
    CALLBACK_PACK_MAX,
    PACK_PREFIX,
    CallbackMessage,
    CallbackPack,
    ExecutionResult,
)
from common.states import ExecutionStatus
from common.topology import CALLBACK_PACKS_QUEUE, CALLBACKS_EXCHANGE, CALLBACKS_QUEUE
from services.dispatcher.outcomes.callbacks import (
    MAX_RESULT_CHARS,
    RunEnd,
    callback_message,
    callback_messages,
    callback_payload,
    create_deliveries,
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
    assert callback_payload(RunEnd.of_result(_result(), 2, NEW_YEAR_2026_MS), LABEL) == (
        '{"type":"execution.finished","timestamp":"2026-01-01T00:00:01.005Z","data":{'
        '"jobId":42,"jobName":"nightly-report","clientRequestId":"report-2026-01-01",'
        '"executionId":"ex-1","attempt":2,"status":"SUCCEEDED","message":null,"result":null,'
        '"triggerTime":"2026-01-01T00:00:00.000Z","startedAt":"2026-01-01T00:00:00.250Z",'
        '"endedAt":"2026-01-01T00:00:01.005Z"}}'
    )


def test_payload_carries_the_failure_message() -> None:
    payload = callback_payload(
        RunEnd.of_result(_result("FAILED", "ValueError: bad day"), 3, NEW_YEAR_2026_MS), LABEL
    )
    data = json.loads(payload)["data"]
    assert data["status"] == "FAILED"
    assert data["message"] == "ValueError: bad day"
    assert data["attempt"] == 3


def test_payload_has_exactly_the_documented_keys() -> None:
    decoded = json.loads(
        callback_payload(RunEnd.of_result(_result("LOST"), 1, NEW_YEAR_2026_MS), LABEL)
    )
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
    assert json.loads(callback_payload(RunEnd.of_result(small, 1, 0), LABEL))["data"]["result"] == {
        "rows": 3
    }
    big = _result().model_copy(update={"result": '"' + "x" * MAX_RESULT_CHARS + '"'})
    data = json.loads(callback_payload(RunEnd.of_result(big, 1, 0), LABEL))["data"]
    assert data["result"] is None and data["resultOmitted"] is True


def test_a_trigger_a_claim_ended_reads_as_a_failed_run_that_started_and_ended_then() -> None:
    ended = NewExecution(
        "ex-9",
        42,
        1,
        NEW_YEAR_2026_MS,
        NEW_YEAR_2026_MS,
        status=ExecutionStatus.FAILED,
        message="cannot compute this job's schedule (ValueError: bad cron); job ended",
    )
    end = RunEnd.of_claim(ended, NEW_YEAR_2026_MS + 7)
    assert callback_payload(end, LABEL) == (
        '{"type":"execution.finished","timestamp":"2026-01-01T00:00:00.007Z","data":{'
        '"jobId":42,"jobName":"nightly-report","clientRequestId":"report-2026-01-01",'
        '"executionId":"ex-9","attempt":1,"status":"FAILED","message":"cannot compute '
        'this job\'s schedule (ValueError: bad cron); job ended","result":null,'
        '"triggerTime":"2026-01-01T00:00:00.000Z","startedAt":"2026-01-01T00:00:00.007Z",'
        '"endedAt":"2026-01-01T00:00:00.007Z"}}'
    )


def test_deliveries_are_created_for_the_ended_runs_of_jobs_with_a_callback_url() -> None:
    store = MemoryStore()
    hooked = store.add_job(MemoryJob(app_pk=3, job_name="report", callback_url="https://h/k"))
    silent = store.add_job(MemoryJob(app_pk=3))
    settings = store.trigger_settings([hooked, silent])
    ends = [
        (RunEnd.of_result(_result().model_copy(update={"job_id": job}), 1, 0), settings[job])
        for job in (hooked, silent)
    ]
    [made] = create_deliveries(store, ends, 5_000)
    assert (made.job_id, made.app_pk, made.url) == (hooked, 3, "https://h/k")
    assert made.delivery_id.startswith("msg_")
    assert json.loads(made.payload)["data"]["jobName"] == "report"
    [stored] = store.deliveries
    assert (stored.delivery, stored.created_at) == (made, 5_000)


def _ends_of(store: MemoryStore, *runs: tuple[int, str]) -> list[tuple[RunEnd, TriggerSettings]]:
    """The ends of runs (job, execution id) of the store's jobs, as recording makes them."""
    settings = store.trigger_settings([job for job, _ in runs])
    return [
        (
            RunEnd.of_result(
                _result().model_copy(update={"job_id": job, "execution_id": execution}), 1, 0
            ),
            settings[job],
        )
        for job, execution in runs
    ]


def test_a_callback_is_alone_only_with_no_other_of_its_job_on_its_way_or_recorded_with_it() -> None:
    store = MemoryStore()
    quiet, busy, twice = (
        store.add_job(MemoryJob(app_pk=3, callback_url="https://h/k")) for _ in range(3)
    )
    [earlier] = create_deliveries(store, _ends_of(store, (busy, "e-0")), 4_000)
    made = create_deliveries(
        store, _ends_of(store, (quiet, "e-1"), (busy, "e-2"), (twice, "e-3"), (twice, "e-4")), 5_000
    )
    assert earlier.alone, "nothing of its job was on its way"
    assert [(d.job_id, d.alone) for d in made] == [
        (quiet, True),
        (busy, False),
        (twice, False),
        (twice, False),
    ]


def test_callback_message_carries_the_delivery_to_the_callbacks_queue() -> None:
    delivery = NewDelivery(
        delivery_id="msg_abc",
        execution_id="ex-1",
        job_id=42,
        app_pk=7,
        url="https://example.com/cb",
        payload='{"jobId":42}',
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        alone=True,
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
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        alone=True,
    )


def _delivery(n: int, app_pk: int | None = 7, url: str = "https://a.example/cb") -> NewDelivery:
    return NewDelivery(
        delivery_id=f"msg_{n}",
        execution_id=f"ex-{n}",
        job_id=n,
        app_pk=app_pk,
        url=url,
        payload=json.dumps({"jobId": n}),
        alone=True,
    )


def _carried(messages: list[OutgoingMessage]) -> list[tuple[str, list[str]]]:
    """Each message's queue and the deliveries it carries, in order."""
    found: list[tuple[str, list[str]]] = []
    for m in messages:
        if m.body.startswith(PACK_PREFIX):
            ids = [c.delivery_id for c in CallbackPack.model_validate_json(m.body).callbacks]
        else:
            ids = [CallbackMessage.model_validate_json(m.body).delivery_id]
        found.append((m.routing_key, ids))
    return found


def test_callbacks_of_one_app_to_one_url_travel_in_packs_of_at_most_the_bound() -> None:
    rows = [_delivery(n) for n in range(CALLBACK_PACK_MAX + 3)]
    carried = _carried(callback_messages(rows))
    assert carried == [
        (CALLBACK_PACKS_QUEUE, [f"msg_{n}" for n in range(CALLBACK_PACK_MAX)]),
        (
            CALLBACK_PACKS_QUEUE,
            [f"msg_{n}" for n in range(CALLBACK_PACK_MAX, CALLBACK_PACK_MAX + 3)],
        ),
    ]
    pack = CallbackPack.model_validate_json(callback_messages(rows)[0].body)
    assert pack.callbacks[0] == CallbackMessage.model_validate_json(callback_message(rows[0]).body)


def test_a_pack_holds_one_app_and_one_url_and_a_lone_callback_or_an_alert_goes_alone() -> None:
    alert = replace(_delivery(9, app_pk=None), alert_rule_pk=3)
    rows = [
        _delivery(1),
        _delivery(2, app_pk=8),
        _delivery(3),
        _delivery(4, url="https://b.example/cb"),
        alert,
        _delivery(5, app_pk=8),
    ]
    assert sorted(_carried(callback_messages(rows))) == sorted(
        [
            (CALLBACK_PACKS_QUEUE, ["msg_1", "msg_3"]),
            (CALLBACK_PACKS_QUEUE, ["msg_2", "msg_5"]),
            (CALLBACKS_QUEUE, ["msg_4"]),
            (CALLBACKS_QUEUE, ["msg_9"]),
        ]
    )
