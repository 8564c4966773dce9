"""Spans of traced jobs: each stage's span is a child of the traceparent it was given and
hands on its own, so submit -> dispatch -> run -> callback is one trace (in-memory
exporter of the OpenTelemetry SDK, the ``otel`` extra)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from common.db.due_jobs import DueJob
from common.messages import DispatchMessage
from common.schedule import Schedule, TriggerPolicy, plan_trigger
from common.tracing.spans import (
    NO_TRACING,
    TRIGGER_SPAN,
    OtelTracing,
    branch,
    otlp_endpoint,
    start_tracing,
)
from common.tracing.traceparent import parent_id, parse_traceparent, trace_id
from services.dispatcher.routing.dispatch import Assignment, pack_dispatches
from services.dispatcher.trigger.claim import trigger_execution

SUBMITTED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def exported() -> Iterator[tuple[OtelTracing, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = OtelTracing(provider)
    yield tracing, exporter
    tracing.shutdown()


def assignment(execution_id: str, traceparent: str | None) -> Assignment:
    return Assignment(1, execution_id, 1, 1, 0, "demo.noop", "{}", "w1", None, traceparent)


def test_the_stages_make_one_trace(exported: tuple[OtelTracing, InMemorySpanExporter]) -> None:
    tracing, exporter = exported
    handed = SUBMITTED
    for stage in ("kairos submit", "kairos dispatch", "kairos run", "kairos callback"):
        with tracing.span(stage, handed, {"kairos.stage": stage}) as child:
            assert child is not None and parse_traceparent(child) == child
            assert trace_id(child) == trace_id(SUBMITTED) and child != handed
            handed = child
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == [
        "kairos submit",
        "kairos dispatch",
        "kairos run",
        "kairos callback",
    ]
    assert {format(s.context.trace_id, "032x") for s in spans} == {trace_id(SUBMITTED)}
    assert spans[0].parent is not None
    assert format(spans[0].parent.span_id, "016x") == parent_id(SUBMITTED)
    for parent, child_span in itertools.pairwise(spans):
        assert child_span.parent is not None
        assert child_span.parent.span_id == parent.context.span_id


def test_an_untraced_job_gets_no_span(exported: tuple[OtelTracing, InMemorySpanExporter]) -> None:
    tracing, exporter = exported
    with tracing.span("kairos run", None, {}) as handed:
        assert handed is None
    assert exporter.get_finished_spans() == ()


def test_a_branch_hangs_under_a_trigger_span_the_collector_gets(
    exported: tuple[OtelTracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = exported
    runs = [branch(tracing, SUBMITTED, {"kairos.job_id": 7}) for _ in range(3)]
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == [TRIGGER_SPAN] * 3
    # Each run's parent id is its own trigger span's, which hangs under the job's submit.
    assert [parent_id(r) for r in runs] == [format(s.context.span_id, "016x") for s in spans]
    assert {trace_id(r) for r in runs} == {trace_id(SUBMITTED)}
    assert all(
        s.parent is not None and s.parent.span_id == int(parent_id(SUBMITTED), 16) for s in spans
    )


def test_without_tracing_a_branch_is_a_fresh_parent_of_the_same_trace() -> None:
    runs = {branch(NO_TRACING, SUBMITTED, {}) for _ in range(10)}
    assert len(runs) == 10 and SUBMITTED not in runs
    assert {trace_id(r) for r in runs} == {trace_id(SUBMITTED)}


def test_a_claimed_cron_run_gets_a_trigger_span_and_a_one_shot_run_none(
    exported: tuple[OtelTracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = exported

    def claimed(schedule: Schedule) -> str | None:
        job = DueJob(
            42,
            0,
            "demo.noop",
            60_000,
            TriggerPolicy(schedule),
            0,
            "{}",
            None,
            traceparent=SUBMITTED,
        )
        return trigger_execution(job, plan_trigger(job.policy, 60_000, 60_000), tracing).traceparent

    assert claimed(Schedule(None, "UTC", None)) == SUBMITTED
    assert exporter.get_finished_spans() == ()
    run = claimed(Schedule("* * * * *", "UTC", None))
    (span,) = exporter.get_finished_spans()
    assert run is not None and parent_id(run) == format(span.context.span_id, "016x")
    assert dict(span.attributes or {}) == {"kairos.job_id": 42, "kairos.trigger_time": 60_000}


def test_without_tracing_the_traceparent_is_handed_on_as_it_came() -> None:
    with NO_TRACING.span("kairos run", SUBMITTED, {}) as handed:
        assert handed == SUBMITTED


def test_a_dispatch_message_carries_its_dispatch_span(
    exported: tuple[OtelTracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = exported
    packs = pack_dispatches(
        [assignment("e1", SUBMITTED), assignment("e2", None)], 5, tracing=tracing
    )
    units = json.loads(packs.messages[0].body)["executions"]
    sent = [DispatchMessage.model_validate(u) for u in units]
    (span,) = exporter.get_finished_spans()
    assert span.name == "kairos dispatch"
    assert sent[0].traceparent is not None
    assert parent_id(sent[0].traceparent) == format(span.context.span_id, "016x")
    assert trace_id(sent[0].traceparent) == trace_id(SUBMITTED)
    assert sent[1].traceparent is None and "traceparent" not in units[1]


def test_the_endpoint_is_kairos_own_else_the_standard_one() -> None:
    assert otlp_endpoint(None, {}) is None
    assert otlp_endpoint("http://c:4318", {}) == "http://c:4318/v1/traces"
    assert otlp_endpoint("http://c:4318/v1/traces", {}) == "http://c:4318/v1/traces"
    standard = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://o:4318/"}
    assert otlp_endpoint(None, standard) == "http://o:4318/v1/traces"
    assert otlp_endpoint("http://c:4318", standard) == "http://c:4318/v1/traces"


def test_no_endpoint_means_no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert start_tracing("api", None) is NO_TRACING
