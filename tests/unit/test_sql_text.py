"""What the dispatcher writes by hand instead of through a model or the driver."""

from __future__ import annotations

import json
import uuid

import pytest

from common.db import driver
from common.db.due_jobs import DueJob
from common.execution_ids import TRIGGER_IDS as _TRIGGER_IDS
from common.messages import DispatchMessage
from common.schedule import Schedule, TriggerPolicy
from services.dispatcher.routing.dispatch import Assignment, dispatch_body
from services.dispatcher.trigger.claim import trigger_execution_id


def assignment(**changes: object) -> Assignment:
    fields: dict[str, object] = {
        "execution_key": 7,
        "execution_id": "e-1",
        "job_id": 3,
        "attempt": 2,
        "trigger_time": 1_700_000_000_000,
        "handler": "report.generate",
        "params_json": json.dumps({"day": "2026-11-30", "n": [1, 2], "q": 'a"b\\c', "ü": None}),
        "worker_id": "w1",
        "timeout_seconds": 30,
    }
    fields.update(changes)
    return Assignment(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"timeout_seconds": None},
        {"handler": 'odd "name" ü'},
        {"params_json": "{}"},
        {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
        {"app_pk": 42},
    ],
)
def test_the_hand_written_dispatch_body_is_what_the_model_writes(
    changes: dict[str, object],
) -> None:
    a = assignment(**changes)
    model = DispatchMessage(
        execution_id=a.execution_id,
        job_id=a.job_id,
        attempt=a.attempt,
        trigger_time=a.trigger_time,
        handler=a.handler,
        params=json.loads(a.params_json),
        dispatched_at=1_700_000_000_123,
        timeout_seconds=a.timeout_seconds,
        ref=a.execution_key,
        traceparent=a.traceparent,
        app=a.app_pk,
    )
    body = dispatch_body(a, 1_700_000_000_123)
    assert DispatchMessage.model_validate_json(body) == model
    # A run without a traceparent carries no field for it: most runs pay nothing.
    expected = json.loads(model.model_dump_json())
    for optional in ("traceparent", "app"):
        if expected[optional] is None:
            del expected[optional]
    assert json.loads(body) == expected


def test_a_trigger_execution_id_is_the_uuid5_of_its_trigger() -> None:
    job = DueJob(
        42,
        0,
        "demo.noop",
        1_700_000_000_000,
        TriggerPolicy(Schedule(None, "UTC", None)),
        1_690_000_000_000,
        "{}",
        None,
    )
    expected = uuid.uuid5(_TRIGGER_IDS, "42/1690000000000/1700000000000/1")
    assert trigger_execution_id(job) == str(expected)
    assert uuid.UUID(trigger_execution_id(job)).version == 5


def test_integers_written_into_sql_text_refuse_anything_else() -> None:
    assert driver.ints([3, 1, True]) == "3, 1, 1"  # a bool is an int
    assert driver.int_or_null(None) == "NULL"
    for bad in ("1) OR (1=1", "12", 3.9):
        with pytest.raises(TypeError):
            driver.ints([bad])  # type: ignore[list-item]
