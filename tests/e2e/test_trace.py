"""One trace from submit to callback: a traceparent given at create (or trigger) reaches
the handler (``ctx.trace``) and the callback's ``traceparent`` header, through the real
stack, for many jobs of two apps submitted at once."""

from __future__ import annotations

import json
import secrets
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from sqlalchemy.engine import Engine

from tests.books import Expectation, assert_books
from tests.e2e.harness import Api, CallbackReceiver, Processes, connect_api, free_port, wait_until
from tests.e2e.otlp_collector import CollectedSpan, OtlpCollector

REPO = Path(__file__).resolve().parents[2]
HANDLERS = "services.worker.demo,tests.e2e.trace_handler"
TRACED_PER_APP = 40
UNTRACED_PER_APP = 10


def new_traceparent() -> str:
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


def trace_id(traceparent: str) -> str:
    return traceparent.split("-")[1]


def second_app(processes: Processes, first: Api) -> Api:
    created = json.loads(processes.run("app", "create", "e2e-second", "--handlers", "*"))
    return Api(first.base, created["apiKey"], created["signingSecret"])


def submit(api: Api, url: str, name: str, traceparent: str | None) -> int:
    body = {"jobName": name, "jobHandler": "test.trace", "callbackUrl": url}
    headers = {} if traceparent is None else {"traceparent": traceparent}
    response = api.post_job(body, **headers)
    assert response.status_code == 202, response.text
    job_id: int = response.json()["jobId"]
    return job_id


def header(headers: dict[str, str], name: str) -> str | None:
    return next((v for k, v in headers.items() if k.lower() == name), None)


def test_a_traceparent_reaches_the_handler_and_the_callback_for_many_jobs_of_two_apps(
    processes: Processes, engine: Engine, receiver: CallbackReceiver
) -> None:
    port = free_port()
    processes.start(
        "up",
        *("up", "--port", str(port), "--workers", "2"),
        KAIROS_HANDLERS=HANDLERS,
        PYTHONPATH=str(REPO),
    )
    first = connect_api(processes, port, probe_handler="test.trace")
    apps = [first, second_app(processes, first)]
    # Each job's own trace (None: submitted without one; the last of each app's is invalid).
    plan: list[tuple[Api, str | None]] = []
    for api in apps:
        plan += [(api, new_traceparent()) for _ in range(TRACED_PER_APP)]
        plan += [(api, None) for _ in range(UNTRACED_PER_APP - 1)]
        plan.append((api, "00-" + "0" * 32 + "-00f067aa0ba902b7-01"))
    with ThreadPoolExecutor(16) as pool:
        job_ids = list(pool.map(lambda p: submit(p[0], receiver.url, "traced", p[1]), plan))
    sent = {
        job_id: tp if tp and "0" * 32 not in tp else None
        for job_id, (_, tp) in zip(job_ids, plan, strict=True)
    }

    books = assert_books(
        engine,
        Expectation(job_ids, execution_statuses={"SUCCEEDED"}, callback_attempts=1),
        timeout=120,
    )
    assert books.deliveries == len(job_ids)
    wait_until(lambda: len(receiver.received) >= len(job_ids), 30, what="every callback")
    assert len(receiver.received) == len(job_ids)
    for post in receiver.received:
        data = json.loads(post.body)["data"]
        given = sent[data["jobId"]]
        got = header(post.headers, "traceparent")
        # The handler saw the job's traceparent; the callback sends it on.
        assert data["result"] == {"trace": given}
        assert got == given, f"job {data['jobId']}"
    # The API shows it on the job and its execution.
    some = next(job_id for job_id, tp in sent.items() if tp is not None)
    owner = plan[job_ids.index(some)][0]
    assert owner.job(some)["traceparent"] == sent[some]
    assert owner.executions(some)[0]["traceparent"] == sent[some]
    invalid = job_ids[TRACED_PER_APP + UNTRACED_PER_APP - 1]
    assert first.job(invalid)["traceparent"] is None


def test_a_triggers_own_traceparent_wins_for_its_run(
    processes: Processes, engine: Engine, receiver: CallbackReceiver
) -> None:
    port = free_port()
    processes.start(
        "up",
        *("up", "--port", str(port), "--workers", "1"),
        KAIROS_HANDLERS=HANDLERS,
        PYTHONPATH=str(REPO),
    )
    api = connect_api(processes, port, probe_handler="test.trace")
    job_trace, trigger_trace = new_traceparent(), new_traceparent()
    body = {
        "jobName": "nightly",
        "jobHandler": "test.trace",
        "cronExpr": "0 3 * * *",
        "callbackUrl": receiver.url,
    }
    job_id = api.post_job(body, traceparent=job_trace).json()["jobId"]
    own = httpx.post(
        f"{api.base}/openapi/jobs/{job_id}/trigger",
        headers={"Authorization": f"Bearer {api.api_key}", "traceparent": trigger_trace},
        timeout=10,
    )
    assert own.status_code == 202, own.text
    plain = api.act(job_id, "trigger")
    assert plain.status_code == 202, plain.text
    wait_until(lambda: len(receiver.received) >= 2, 60, what="both manual runs' callbacks")
    by_execution = {
        json.loads(p.body)["data"]["executionId"]: header(p.headers, "traceparent")
        for p in receiver.received
    }
    assert by_execution[own.json()["executionId"]] == trigger_trace
    # A run without a header of its own: the job's trace, under a parent of its own.
    fresh = by_execution[plain.json()["executionId"]]
    assert fresh is not None and trace_id(fresh) == trace_id(job_trace) and fresh != job_trace
    books = assert_books(
        engine,
        Expectation([job_id], job_statuses={"WAITING"}, in_flight_ms=60_000),
        timeout=30,
    )
    assert books.deliveries == 2


SPANNED_PER_APP = 12


def four_spans(collector: OtlpCollector, trace: str, job_id: int) -> list[CollectedSpan]:
    """The spans of one job's trace, once all four stages exported theirs."""

    def found() -> list[CollectedSpan] | None:
        spans = collector.of_trace(trace)
        return spans if len(spans) >= 4 else None

    spans: list[CollectedSpan] = wait_until(found, 30, what=f"the four spans of job {job_id}")
    return spans


def test_with_an_otlp_endpoint_submit_dispatch_run_and_callback_are_one_trace(
    processes: Processes, engine: Engine, receiver: CallbackReceiver
) -> None:
    collector = OtlpCollector()
    try:
        port = free_port()
        processes.start(
            "up",
            *("up", "--port", str(port), "--workers", "2"),
            KAIROS_HANDLERS=HANDLERS,
            KAIROS_OTEL_ENDPOINT=collector.base,
            PYTHONPATH=str(REPO),
        )
        first = connect_api(processes, port, probe_handler="test.trace")
        apps = [first, second_app(processes, first)]
        plan: list[tuple[Api, str | None]] = [
            (api, new_traceparent()) for api in apps for _ in range(SPANNED_PER_APP)
        ]
        plan += [(api, None) for api in apps for _ in range(3)]
        with ThreadPoolExecutor(8) as pool:
            job_ids = list(pool.map(lambda p: submit(p[0], receiver.url, "spanned", p[1]), plan))
        assert_books(engine, Expectation(job_ids, execution_statuses={"SUCCEEDED"}), timeout=120)
        wait_until(lambda: len(receiver.received) >= len(job_ids), 30, what="every callback")
        posts = {json.loads(p.body)["data"]["jobId"]: p for p in receiver.received}
        traced = [(job_id, tp) for job_id, (_, tp) in zip(job_ids, plan, strict=True) if tp]
        for job_id, sent in traced:
            spans = four_spans(collector, trace_id(sent), job_id)
            by_name = {s.name: s for s in spans}
            assert len(spans) == 4 and set(by_name) == {
                "kairos submit",
                "kairos dispatch",
                "kairos run",
                "kairos callback",
            }
            submit_span, run = by_name["kairos submit"], by_name["kairos run"]
            assert submit_span.service == "kairos-api"
            assert submit_span.parent_id == sent.split("-")[2]
            assert by_name["kairos dispatch"].parent_id == submit_span.span_id
            assert run.parent_id == by_name["kairos dispatch"].span_id
            assert run.service == "kairos-worker"
            # The job keeps the submit's span; its callback hangs off it too.
            assert by_name["kairos callback"].parent_id == submit_span.span_id
            post = posts[job_id]
            data = json.loads(post.body)["data"]
            assert data["result"] == {"trace": f"00-{trace_id(sent)}-{run.span_id}-01"}
            callback_span = by_name["kairos callback"].span_id
            assert header(post.headers, "traceparent") == f"00-{trace_id(sent)}-{callback_span}-01"
        untraced = [posts[j] for j, (_, tp) in zip(job_ids, plan, strict=True) if tp is None]
        assert all(header(p.headers, "traceparent") is None for p in untraced)
        assert len(collector.spans) == 4 * len(traced), "no span for an untraced job"
    finally:
        collector.close()
