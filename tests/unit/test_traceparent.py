"""The W3C traceparent: which headers are kept, which are ignored, and what runs carry."""

from __future__ import annotations

import pytest

from common.db.due_jobs import DueJob
from common.errors import CallbackRequestError
from common.schedule import Schedule, TriggerPolicy, plan_trigger
from common.tracing.traceparent import fresh_parent, parent_id, parse_traceparent, trace_id
from services.dispatcher.trigger.claim import trigger_execution
from services.notifier.http_wire import request_bytes

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_valid_traceparent_is_kept_as_sent() -> None:
    assert parse_traceparent(VALID) == VALID
    assert parse_traceparent(f"  {VALID} ") == VALID
    assert parse_traceparent(VALID[:-2] + "00") == VALID[:-2] + "00"


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "garbage",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # another version
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero parent id
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # short trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",  # short parent id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",  # short flags
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        VALID + "\r\nx-injected: 1",
    ],
)
def test_an_invalid_traceparent_is_ignored(value: str | None) -> None:
    assert parse_traceparent(value) is None


def test_a_fresh_parent_keeps_the_trace_and_flags() -> None:
    fresh = fresh_parent(VALID)
    assert parse_traceparent(fresh) == fresh
    assert trace_id(fresh) == trace_id(VALID) and fresh[-2:] == VALID[-2:]
    assert parent_id(fresh) != parent_id(VALID)
    assert len({parent_id(fresh_parent(VALID)) for _ in range(100)}) == 100


def test_the_callback_wire_still_refuses_a_header_that_breaks_a_line() -> None:
    # A stored traceparent passed parse_traceparent, so it cannot; the wire refuses anyway.
    with pytest.raises(CallbackRequestError):
        request_bytes("/hook", "h", {"traceparent": VALID + "\r\nx-injected: 1"}, b"{}")
    sent = request_bytes("/hook", "h", {"traceparent": VALID}, b"{}")
    assert f"traceparent: {VALID}\r\n".encode() in sent


def due(schedule: Schedule, traceparent: str | None) -> DueJob:
    policy = TriggerPolicy(schedule)
    return DueJob(42, 0, "demo.noop", 60_000, policy, 0, "{}", None, traceparent=traceparent)


@pytest.mark.parametrize(
    "schedule",
    [Schedule("* * * * *", "UTC", None), Schedule(None, "UTC", 60)],
    ids=["cron", "fixed-rate"],
)
def test_each_claimed_run_of_a_recurring_job_branches_off_its_trace(schedule: Schedule) -> None:
    job = due(schedule, VALID)
    runs = [trigger_execution(job, plan_trigger(job.policy, 60_000, 60_000)) for _ in range(3)]
    traces = [r.traceparent for r in runs]
    assert all(t is not None and trace_id(t) == trace_id(VALID) for t in traces)
    assert len(set(traces)) == 3 and VALID not in traces


def test_a_claimed_one_shot_run_continues_its_submit_and_an_untraced_job_has_none() -> None:
    once = due(Schedule(None, "UTC", None), VALID)
    assert trigger_execution(once, plan_trigger(once.policy, 60_000, 60_000)).traceparent == VALID
    untraced = due(Schedule("* * * * *", "UTC", None), None)
    plan = plan_trigger(untraced.policy, 60_000, 60_000)
    assert trigger_execution(untraced, plan).traceparent is None
