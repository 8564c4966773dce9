"""The traceparent header through the API: kept on the job and its runs, a trigger's own
winning for its run, an invalid one ignored, shown by the API and the console, and the
submit's span the parent of what the job keeps when spans are sent."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from fastapi.testclient import TestClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy.engine import Engine

from common.tracing.spans import OtelTracing
from common.tracing.traceparent import parent_id, trace_id
from tests.integration.console_helpers import make_operator, sign_in

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
OTHER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
LATER = {"jobHandler": "demo.noop", "triggerAt": "2100-01-01T00:00:00Z"}


def create(client: TestClient, name: str, traceparent: str | None = None) -> int:
    headers = {} if traceparent is None else {"traceparent": traceparent}
    response = client.post("/openapi/jobs", json={"jobName": name, **LATER}, headers=headers)
    assert response.status_code == 202, response.text
    job_id: int = response.json()["jobId"]
    return job_id


def trigger(client: TestClient, job_id: int, traceparent: str | None = None) -> str:
    headers = {} if traceparent is None else {"traceparent": traceparent}
    response = client.post(f"/openapi/jobs/{job_id}/trigger", headers=headers)
    assert response.status_code == 202, response.text
    execution_id: str = response.json()["executionId"]
    return execution_id


def execution_trace(client: TestClient, execution_id: str) -> str | None:
    found: str | None = client.get(f"/openapi/executions/{execution_id}").json()["traceparent"]
    return found


def test_the_job_keeps_it_and_a_triggers_own_wins_for_its_run(client: TestClient) -> None:
    job_id = create(client, "traced", TP)
    assert client.get(f"/openapi/jobs/{job_id}").json()["traceparent"] == TP
    own = trigger(client, job_id, OTHER)
    assert execution_trace(client, own) == OTHER
    plain = execution_trace(client, trigger(client, job_id))
    assert plain is not None and trace_id(plain) == trace_id(TP) and plain != TP
    # A job created without one gives its runs none.
    untraced = create(client, "untraced")
    assert client.get(f"/openapi/jobs/{untraced}").json()["traceparent"] is None
    assert execution_trace(client, trigger(client, untraced)) is None


def test_an_invalid_traceparent_is_ignored_never_refused(client: TestClient) -> None:
    for bad in ["", "nonsense", TP.upper(), "00-" + "0" * 32 + TP[35:], TP + "-x"]:
        job_id = create(client, "bad", bad)
        assert client.get(f"/openapi/jobs/{job_id}").json()["traceparent"] is None, bad
        assert execution_trace(client, trigger(client, job_id, bad)) is None


def test_concurrent_creates_and_a_batch_each_keep_their_own(client: TestClient) -> None:
    traces = [f"00-{n:032x}-{n + 1:016x}-01" for n in range(1, 41)]
    with ThreadPoolExecutor(8) as pool:
        job_ids = list(pool.map(lambda tp: create(client, "many", tp), traces))
    for job_id, tp in zip(job_ids, traces, strict=True):
        assert client.get(f"/openapi/jobs/{job_id}").json()["traceparent"] == tp
    batch = {"jobs": [{"jobName": f"b{n}", **LATER} for n in range(3)]}
    answer = client.post("/openapi/jobs/batch", json=batch, headers={"traceparent": TP})
    assert answer.status_code == 202, answer.text
    for item in answer.json()["jobs"]:
        assert client.get(f"/openapi/jobs/{item['jobId']}").json()["traceparent"] == TP


def test_the_console_shows_the_trace_of_the_job_and_its_runs(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, "traced", TP)
    trigger(client, job_id, OTHER)
    sign_in(client, make_operator(engine))
    page = client.get(f"/console/jobs/{job_id}").text
    assert f'<code class="trace">{TP}</code>' in page
    assert f"traceparent <code>{OTHER}</code>" in page


def test_with_spans_the_job_keeps_the_submits_span_as_its_parent(client: TestClient) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client.app.state.kairos.tracing = OtelTracing(provider)  # type: ignore[attr-defined]
    job_id = create(client, "traced", TP)
    untraced = create(client, "untraced")
    kept = client.get(f"/openapi/jobs/{job_id}").json()["traceparent"]
    (span,) = exporter.get_finished_spans()
    assert span.name == "kairos submit"
    assert span.parent is not None and format(span.parent.span_id, "016x") == parent_id(TP)
    assert trace_id(kept) == trace_id(TP)
    assert parent_id(kept) == format(span.context.span_id, "016x")
    assert client.get(f"/openapi/jobs/{untraced}").json()["traceparent"] is None


def test_with_spans_a_batch_keeps_its_submit_spans_traceparent(client: TestClient) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client.app.state.kairos.tracing = OtelTracing(provider)  # type: ignore[attr-defined]
    batch = {"jobs": [{"jobName": f"b{n}", **LATER} for n in range(3)]}
    answer = client.post("/openapi/jobs/batch", json=batch, headers={"traceparent": TP})
    assert answer.status_code == 202, answer.text
    (span,) = exporter.get_finished_spans()
    assert span.name == "kairos submit"
    assert span.attributes is not None and span.attributes["kairos.jobs"] == 3
    expected = f"00-{trace_id(TP)}-{span.context.span_id:016x}-01"
    for item in answer.json()["jobs"]:
        assert client.get(f"/openapi/jobs/{item['jobId']}").json()["traceparent"] == expected


def test_with_spans_a_trigger_without_a_header_hangs_under_a_trigger_span(
    client: TestClient,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client.app.state.kairos.tracing = OtelTracing(provider)  # type: ignore[attr-defined]
    job_id = create(client, "traced", TP)
    kept = client.get(f"/openapi/jobs/{job_id}").json()["traceparent"]
    runs = [execution_trace(client, trigger(client, job_id)) for _ in range(3)]
    submit, *triggers = exporter.get_finished_spans()
    assert submit.name == "kairos submit" and [s.name for s in triggers] == ["kairos trigger"] * 3
    # Each run's parent is its own trigger span, which hangs under the job's submit span.
    assert [parent_id(r or "") for r in runs] == [f"{s.context.span_id:016x}" for s in triggers]
    assert all(
        s.parent is not None and f"{s.parent.span_id:016x}" == parent_id(kept) for s in triggers
    )
    assert {trace_id(r or "") for r in runs} == {trace_id(TP)}
