"""The worker's execution runner on real Redis: one run per execution id."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
import time
from typing import Any

import pytest
import redis
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from common.clock import ClusterClock
from common.config import StoreSettings
from common.jsontext import MAX_JSON_DEPTH, MAX_STORED_TEXT_BYTES, read_stored_json, utf8_size
from common.keys import RedisKeys
from common.messages import DispatchMessage, ExecutionResult
from common.tracing.spans import NO_TRACING, OtelTracing, Tracing
from services.worker import local_runs
from services.worker.packs import Unreadable
from services.worker.registry import HandlerContext, collect_handlers
from services.worker.runner import ExecutionRunner

CALLS: list[str] = []


def counting(params: dict[str, Any], ctx: HandlerContext) -> None:
    CALLS.append(ctx.execution_id)


GATE = threading.Event()


def gated(params: dict[str, Any], ctx: HandlerContext) -> None:
    CALLS.append(ctx.execution_id)
    GATE.wait(10)


def raising_long(params: dict[str, Any], ctx: HandlerContext) -> None:
    raise RuntimeError("€" * MAX_STORED_TEXT_BYTES)


async def async_double(params: dict[str, Any], ctx: HandlerContext) -> dict[str, int]:
    await asyncio.sleep(0)
    return {"double": params["n"] * 2}


def returns_awaitable(params: dict[str, Any], ctx: HandlerContext) -> Any:
    return async_double(params, ctx)


async def async_raising(params: dict[str, Any], ctx: HandlerContext) -> None:
    await asyncio.sleep(0)
    raise ValueError("no such account")


CANCELLED = threading.Event()


async def async_forever(params: dict[str, Any], ctx: HandlerContext) -> None:
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        CANCELLED.set()
        raise


def deep_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def cyclic() -> dict[str, Any]:
    value: dict[str, Any] = {"name": "loop"}
    value["self"] = value
    return value


RESULTS: dict[str, Any] = {
    "deep": deep_list(150),  # JSON, but deeper than Kairos stores as JSON
    "deeper-than-recursion": deep_list(5_000),
    "surrogate": {"name": "caf\ud800"},
    "nan": {"ratio": float("nan")},
    "cycle": cyclic(),
    "big": {"text": "€" * MAX_STORED_TEXT_BYTES},
    "tuple-keys": {(1, 2): "x"},
}


def returns(params: dict[str, Any], ctx: HandlerContext) -> Any:
    return RESULTS[params["which"]]


def runner(client: redis.Redis, namespace: StoreSettings, worker_id: str) -> ExecutionRunner:
    handlers = dict(collect_handlers(["services.worker.demo"]))
    handlers["test.count"] = counting
    handlers["test.gated"] = gated
    handlers["test.raise_long"] = raising_long
    handlers["test.async"] = async_double
    handlers["test.awaitable"] = returns_awaitable
    handlers["test.async_raise"] = async_raising
    handlers["test.async_forever"] = async_forever
    handlers["test.returns"] = returns
    return ExecutionRunner(
        worker_id, handlers, client, RedisKeys(namespace.namespace), ClusterClock(client), 60
    )


def message(
    handler: str = "test.count",
    params: dict[str, Any] | None = None,
    execution_id: str = "e-1",
    timeout: int | None = None,
) -> DispatchMessage:
    return DispatchMessage(
        execution_id=execution_id,
        job_id=1,
        attempt=1,
        trigger_time=0,
        handler=handler,
        params=params or {},
        dispatched_at=0,
        timeout_seconds=timeout,
    )


def test_a_redelivered_execution_runs_once(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    CALLS.clear()
    first = runner(redis_client, namespace, "w1").run(message())
    copy_elsewhere = runner(redis_client, namespace, "w2").run(message())
    assert first is not None
    assert first.status == "SUCCEEDED"
    assert copy_elsewhere is None
    assert CALLS == ["e-1"]


def test_one_admit_call_takes_the_new_executions_and_names_the_owner_of_the_rest(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    runner(redis_client, namespace, "w1").admit([message(execution_id="e-2")])
    bodies = [message(execution_id=e) for e in ("e-1", "e-2", "e-3")]
    admitted = runner(redis_client, namespace, "w2").admit(bodies)
    assert [(a.message.execution_id, a.owner) for a in admitted] == [
        ("e-1", None),
        ("e-2", "w1"),
        ("e-3", None),
    ]


def test_a_restarted_worker_reports_its_interrupted_run_as_lost(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    CALLS.clear()
    runner(redis_client, namespace, "w1").run(message())
    again = runner(redis_client, namespace, "w1").run(message())
    assert again is not None
    assert again.status == "LOST"
    assert CALLS == ["e-1"]


def test_handler_exception_is_a_failed_result(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    outcome = runner(redis_client, namespace, "w1").run(
        message("demo.fail", {"message": "disk full"})
    )
    assert outcome is not None
    assert outcome.status == "FAILED"
    assert outcome.message == "DemoFailure: disk full"


def test_return_value_is_kept_as_json(redis_client: redis.Redis, namespace: StoreSettings) -> None:
    outcome = runner(redis_client, namespace, "w1").run(message("demo.echo", {"x": [1, 2]}))
    assert outcome is not None
    assert outcome.result == '{"x": [1, 2]}'


def test_released_runs_that_never_started_run_when_they_come_back(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    CALLS.clear()
    w1 = runner(redis_client, namespace, "w1")
    runner(redis_client, namespace, "w2").admit([message(execution_id="e-2")])
    admitted = w1.admit([message(execution_id=e) for e in ("e-1", "e-2")])
    assert w1.release(admitted) == 1  # e-2 is w2's: left alone
    again = w1.run(message(execution_id="e-1"))
    assert again is not None and again.status == "SUCCEEDED"
    assert CALLS == ["e-1"]
    assert runner(redis_client, namespace, "w1").run(message(execution_id="e-2")) is None


def test_a_copy_of_a_run_that_ended_reports_its_stored_outcome_not_lost(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    CALLS.clear()
    w1 = runner(redis_client, namespace, "w1")
    first = w1.run(message(handler="demo.echo", params={"x": 1}))
    assert first is not None
    assert len(w1.report([first])) == 1  # stored, then the publish or its ack is lost
    again = runner(redis_client, namespace, "w1").run(message(handler="demo.echo"))
    assert again == first
    # A copy on another worker reports it too: the first report may have found no row.
    assert runner(redis_client, namespace, "w2").run(message()) == first
    assert CALLS == []  # demo.echo is not counted; the copies ran nothing


def waits_in(thread: threading.Thread, filename: str, function: str) -> bool:
    """Whether ``thread`` is inside ``function`` of the module at ``filename`` now:
    seen blocked there, not merely not finished yet."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == function and code.co_filename == filename:
            return True
        frame = frame.f_back
    return False


def test_a_copy_arriving_while_the_run_goes_on_waits_and_reports_that_run(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    CALLS.clear()
    GATE.clear()
    w1 = runner(redis_client, namespace, "w1")
    body = message(handler="test.gated")
    first: list[ExecutionResult | None] = []
    original = threading.Thread(target=lambda: first.append(w1.run(body)))
    original.start()
    while not CALLS:
        time.sleep(0.01)
    copy: list[ExecutionResult | None] = []
    duplicate = threading.Thread(target=lambda: copy.append(w1.run(body)))
    duplicate.start()
    deadline = time.monotonic() + 30
    while not copy and not waits_in(duplicate, local_runs.__file__, "outcome"):
        assert time.monotonic() < deadline, "the copy neither waited nor reported"
        time.sleep(0.01)
    assert not copy, "the copy must wait for the run, not report it LOST"
    GATE.set()
    original.join(10)
    duplicate.join(10)
    assert copy == first and first[0] is not None and first[0].status == "SUCCEEDED"
    assert CALLS == ["e-1"]


def test_an_execution_the_worker_cannot_read_is_reported_failed_once(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    unit = Unreadable("e-9", 9, 99, "handler: field required", '{"execution_id": "e-9"}')
    w1 = runner(redis_client, namespace, "w1")
    [admitted] = w1.admit([unit])
    outcome = w1.execute(admitted)
    assert outcome is not None
    assert (outcome.execution_id, outcome.job_id, outcome.ref) == ("e-9", 9, 99)
    assert outcome.status == "FAILED"
    assert outcome.message is not None and "cannot read" in outcome.message
    # Taken like any execution: a copy on another worker is not reported again.
    assert (
        runner(redis_client, namespace, "w2").execute(
            runner(redis_client, namespace, "w2").admit([unit])[0]
        )
        is None
    )


def test_a_long_failure_message_is_clipped_by_bytes_to_valid_utf8(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    outcome = runner(redis_client, namespace, "w1").run(message("test.raise_long"))
    assert outcome is not None and outcome.message is not None
    assert outcome.message.startswith("RuntimeError: €€€")
    assert len(outcome.message.encode("utf-8")) <= MAX_STORED_TEXT_BYTES
    assert outcome.message.endswith("€...")


@pytest.mark.parametrize("handler", ["test.async", "test.awaitable"])
@pytest.mark.parametrize("timeout", [None, 30])
def test_a_coroutine_handler_runs_to_completion(
    redis_client: redis.Redis, namespace: StoreSettings, handler: str, timeout: int | None
) -> None:
    outcome = runner(redis_client, namespace, "w1").run(
        message(handler, {"n": 21}, timeout=timeout)
    )
    assert outcome is not None
    assert (outcome.status, outcome.result) == ("SUCCEEDED", '{"double": 42}')


def test_a_coroutine_handler_that_raises_is_failed_with_its_error(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    outcome = runner(redis_client, namespace, "w1").run(message("test.async_raise"))
    assert outcome is not None
    assert (outcome.status, outcome.message) == ("FAILED", "ValueError: no such account")


def test_a_coroutine_past_its_timeout_is_cancelled(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    CANCELLED.clear()
    outcome = runner(redis_client, namespace, "w1").run(message("test.async_forever", timeout=1))
    assert outcome is not None
    assert outcome.status == "TIMED_OUT"
    assert outcome.message is not None and "timed out after 1 s" in outcome.message
    assert CANCELLED.wait(30), "the coroutine was never cancelled"


@pytest.mark.parametrize("timeout", [None, 30])
def test_a_handler_exception_is_logged_with_its_traceback_and_ids(
    redis_client: redis.Redis,
    namespace: StoreSettings,
    caplog: pytest.LogCaptureFixture,
    timeout: int | None,
) -> None:
    caplog.set_level(logging.INFO, logger="services.worker")
    body = message("demo.fail", {"message": "disk full"}, execution_id="e-7", timeout=timeout)
    outcome = runner(redis_client, namespace, "w1").run(body)
    assert outcome is not None and outcome.message == "DemoFailure: disk full"
    [record] = [r for r in caplog.records if r.exc_info is not None]
    assert record.levelno == logging.ERROR
    assert (getattr(record, "job_id", None), getattr(record, "execution_id", None)) == (1, "e-7")
    assert "demo.fail" in record.getMessage()
    assert "DemoFailure: disk full" in caplog.text
    assert 'raise DemoFailure(str(params.get("message"' in caplog.text


@pytest.mark.parametrize("which", sorted(RESULTS))
def test_a_result_no_reader_could_take_as_json_is_stored_as_text_saying_why(
    redis_client: redis.Redis, namespace: StoreSettings, which: str
) -> None:
    w1 = runner(redis_client, namespace, "w1")
    outcome = w1.run(message("test.returns", {"which": which}))
    assert outcome is not None and outcome.result is not None
    assert outcome.status == "SUCCEEDED"
    assert utf8_size(outcome.result) <= MAX_STORED_TEXT_BYTES
    stored = read_stored_json(outcome.result)  # every reader reads it back
    assert outcome.message is not None and "result" in outcome.message
    if which == "surrogate":
        assert stored == {"name": "caf\ufffd"}
    else:
        assert isinstance(stored, str) and stored
    assert len(w1.report([outcome])) == 1  # and it travels


def test_a_json_result_within_the_limits_is_stored_as_json(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    value = {"rows": 42, "name": "€ 😀", "nested": deep_list(MAX_JSON_DEPTH - 2)}
    outcome = runner(redis_client, namespace, "w1").run(message("demo.echo", value))
    assert outcome is not None and outcome.result is not None
    assert (outcome.status, outcome.message) == ("SUCCEEDED", None)
    assert read_stored_json(outcome.result) == value


@pytest.mark.parametrize("worker_id", ["w1", "w2"])
def test_a_copy_whose_stored_outcome_cannot_be_read_is_reported_lost_not_retried_forever(
    redis_client: redis.Redis, namespace: StoreSettings, worker_id: str
) -> None:
    CALLS.clear()
    key = RedisKeys(namespace.namespace).execution_started("e-1")
    redis_client.set(key, 'w1\n{"v": 9, "from": "a newer worker"}')
    outcome = runner(redis_client, namespace, worker_id).run(message())
    assert outcome is not None
    assert outcome.status == "LOST"
    assert outcome.message is not None and "stored outcome cannot be read" in outcome.message
    assert CALLS == []


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def reports_trace(params: dict[str, Any], ctx: HandlerContext) -> dict[str, str | None]:
    return {"trace": ctx.trace}


def trace_runner(
    client: redis.Redis, namespace: StoreSettings, tracing: Tracing = NO_TRACING
) -> ExecutionRunner:
    handlers = {"test.trace": reports_trace}
    keys = RedisKeys(namespace.namespace)
    return ExecutionRunner("w1", handlers, client, keys, ClusterClock(client), 60, tracing=tracing)


def test_the_handler_gets_the_runs_traceparent_as_ctx_trace(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    plain = trace_runner(redis_client, namespace)
    traced = message("test.trace", execution_id="e-t").model_copy(
        update={"traceparent": TRACEPARENT}
    )
    outcome = plain.run(traced)
    assert outcome is not None and json.loads(outcome.result or "") == {"trace": TRACEPARENT}
    untraced = plain.run(message("test.trace", execution_id="e-u"))
    assert untraced is not None and json.loads(untraced.result or "") == {"trace": None}


def test_with_spans_the_handler_gets_its_run_spans_traceparent(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spanned = trace_runner(redis_client, namespace, OtelTracing(provider))
    traced = message("test.trace").model_copy(update={"traceparent": TRACEPARENT})
    outcome = spanned.run(traced)
    assert outcome is not None and outcome.status == "SUCCEEDED"
    given = json.loads(outcome.result or "")["trace"]
    (span,) = exporter.get_finished_spans()
    assert span.name == "kairos run"
    assert given == f"00-{TRACEPARENT[3:35]}-{span.context.span_id:016x}-01"
    assert span.parent is not None and f"{span.parent.span_id:016x}" == TRACEPARENT[36:52]


def test_a_runs_log_is_stored_before_its_result_and_a_failure_adds_its_traceback(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    from services.worker.log_writer import RunLogWriter
    from services.worker.run_logs import LogLine, install_capture

    stored: list[LogLine] = []
    writer = RunLogWriter(stored.extend, 10_000)
    handlers = dict(collect_handlers(["services.worker.demo"]))
    keys, clock = RedisKeys(namespace.namespace), ClusterClock(redis_client)
    runner = ExecutionRunner("w-logs", handlers, redis_client, keys, clock, 60, run_logs=writer)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)  # as the worker's KAIROS_LOG_LEVEL sets it
    capture = install_capture(root)
    writer.start()
    try:
        said = runner.run(message("demo.log", {"lines": ["one", "two"]}, "e-log"))
        assert said is not None and said.status == "SUCCEEDED"
        assert [x.line for x in stored] == ["one", "kairos.demo: two"]  # before the result
        failed = runner.run(message("demo.fail", {"message": "no such account"}, "e-fail"))
        assert failed is not None and failed.status == "FAILED"
        last = stored[-1]
        assert last.execution_id == "e-fail" and last.level == "ERROR"
        assert "Traceback" in last.line and "DemoFailure: no such account" in last.line
        count = len(stored)
        assert runner.run(message("demo.noop", {}, "e-quiet")) is not None
        assert len(stored) == count, "a run that logs nothing stores nothing"
    finally:
        writer.stop()
        root.removeHandler(capture)
        root.setLevel(level)
