"""Each method sends the request the API documents and reads its answer."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import parse_qsl

import pytest

from kairos_client import (
    UNSET,
    Client,
    ExecutionStatus,
    JobChanges,
    JobSpec,
    JobStatus,
    MisfirePolicy,
)
from scripted import KEY, Scripted, execution_json, job_json, ok


def query(scripted: Scripted, n: int = -1) -> list[tuple[str, str]]:
    return parse_qsl(scripted.requests[n].url.query.decode())


def test_create_job_sends_the_spec_by_the_apis_names_with_a_fresh_idempotency_key() -> None:
    api = Scripted([ok({"jobId": 7, "status": "WAITING"}, 202)])
    spec = JobSpec(
        "report",
        "demo.echo",
        params={"day": "2026-11-30"},
        trigger_at=datetime(2026, 11, 30, 14, tzinfo=UTC),
        misfire_policy=MisfirePolicy.SKIP,
        max_retries=2,
    )
    with api.client() as kairos:
        accepted = kairos.create_job(spec)
        kairos.create_job(spec)
    assert accepted.job_id == 7 and accepted.status is JobStatus.WAITING
    assert not accepted.replayed
    request = api.requests[0]
    assert (request.method, request.url.path) == ("POST", "/openapi/jobs")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert api.body(0) == {
        "jobName": "report",
        "jobHandler": "demo.echo",
        "params": {"day": "2026-11-30"},
        "triggerAt": "2026-11-30T14:00:00+00:00",
        "misfirePolicy": "SKIP",
        "maxRetries": 2,
    }
    keys = [r.headers["idempotency-key"] for r in api.requests]
    assert keys[0].startswith('"') and keys[0] != keys[1], "a new key per call"


def test_create_job_keyed_by_its_client_request_id_or_a_given_key() -> None:
    api = Scripted([ok({"jobId": 7, "status": "WAITING"}, 202, **{"Idempotent-Replayed": "true"})])
    with api.client() as kairos:
        replayed = kairos.create_job(JobSpec("a", "demo.echo", client_request_id="Report-1"))
        kairos.create_job(JobSpec("a", "demo.echo"), idempotency_key='say "hi"\\')
    assert replayed.replayed
    assert "idempotency-key" not in api.requests[0].headers, "the body's key is the key"
    assert api.body(0)["clientRequestId"] == "Report-1"
    assert api.requests[1].headers["idempotency-key"] == '"say \\"hi\\"\\\\"'


@pytest.mark.parametrize("key", ["", "x" * 129, "café", "tab\there"])
def test_an_idempotency_key_the_api_would_refuse_is_refused_before_sending(key: str) -> None:
    api = Scripted([ok({})])
    with api.client() as kairos, pytest.raises(ValueError, match="printable ASCII"):
        kairos.trigger(7, idempotency_key=key)
    assert api.requests == []


def test_create_jobs_sends_one_keyed_batch_and_reads_ids_in_order() -> None:
    answer = {"jobs": [{"jobId": 8, "status": "WAITING"}, {"jobId": 9, "status": "WAITING"}]}
    api = Scripted([ok(answer, 202)])
    with api.client() as kairos:
        batch = kairos.create_jobs([JobSpec("a", "demo.echo"), JobSpec("b", "demo.noop")])
    assert [j.job_id for j in batch.jobs] == [8, 9]
    assert api.requests[0].url.path == "/openapi/jobs/batch"
    assert api.body() == {
        "jobs": [
            {"jobName": "a", "jobHandler": "demo.echo"},
            {"jobName": "b", "jobHandler": "demo.noop"},
        ]
    }
    assert api.requests[0].headers["idempotency-key"]


def test_get_job_reads_every_field_typed() -> None:
    last = execution_json()
    api = Scripted(
        [ok(job_json(nextTriggerTimes=["2026-12-01T14:00:00.000Z"], lastExecution=last))]
    )
    with api.client() as kairos:
        job = kairos.get_job(7, preview=1)
    assert query(api) == [("preview", "1")]
    assert job.job_id == 7 and job.status is JobStatus.WAITING
    assert job.next_trigger_time == datetime(2026, 11, 30, 14, tzinfo=UTC)
    assert job.next_trigger_times == [datetime(2026, 12, 1, 14, tzinfo=UTC)]
    assert job.policies is not None and job.policies.misfire_policy is MisfirePolicy.FIRE_ONCE
    assert job.last_execution is not None
    assert job.last_execution.status is ExecutionStatus.SUCCEEDED
    assert job.last_execution.result == {"rows": 3}
    assert job.raw["jobName"] == "report"


def test_list_jobs_follows_cursors_only_as_far_as_the_iteration_goes() -> None:
    pages = [
        ok({"jobs": [job_json(3), job_json(2)], "nextCursor": "c1"}),
        ok({"jobs": [job_json(1)], "nextCursor": None}),
    ]
    api = Scripted(pages)
    with api.client() as kairos:
        listing = kairos.list_jobs(status=JobStatus.WAITING, name_prefix="rep", page_size=2)
        assert next(listing).job_id == 3
        assert len(api.requests) == 1, "the next page is read only when needed"
        assert [j.job_id for j in listing] == [2, 1]
    assert query(api, 0) == [("status", "WAITING"), ("namePrefix", "rep"), ("limit", "2")]
    assert query(api, 1) == [
        ("status", "WAITING"),
        ("namePrefix", "rep"),
        ("cursor", "c1"),
        ("limit", "2"),
    ]


def test_list_executions_filters_by_statuses_and_since_and_pages() -> None:
    api = Scripted(
        [
            ok({"jobId": 7, "executions": [execution_json()], "nextCursor": "n"}),
            ok({"jobId": 7, "executions": [execution_json(status="FAILED")], "nextCursor": None}),
        ]
    )
    since = datetime(2026, 11, 30, 14, tzinfo=UTC)
    with api.client() as kairos:
        found = list(
            kairos.list_executions(7, status=["FAILED", ExecutionStatus.LOST], since=since)
        )
    assert [e.status for e in found] == [ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED]
    assert api.requests[0].url.path == "/openapi/jobs/7/executions"
    assert query(api, 1) == [
        ("status", "FAILED"),
        ("status", "LOST"),
        ("since", str(int(since.timestamp() * 1000))),
        ("cursor", "n"),
        ("limit", "100"),
    ]


def test_get_execution_and_trigger() -> None:
    execution_id = "0b6f7c3e-8f7d-4a35-9a53-5c0d2b1f7e10"
    accepted = {"jobId": 7, "executionId": execution_id, "status": "SCHEDULED"}
    api = Scripted([ok(accepted, 202), ok(execution_json(manual=True))])
    with api.client() as kairos:
        triggered = kairos.trigger(7, idempotency_key="run-1")
        execution = kairos.get_execution(triggered.execution_id)
    assert triggered.status is ExecutionStatus.SCHEDULED
    assert api.requests[0].headers["idempotency-key"] == '"run-1"'
    assert api.requests[1].url.path == f"/openapi/executions/{execution_id}"
    assert execution.manual and execution.execution_id == execution_id


def test_trigger_with_params_sends_them_and_the_execution_shows_them() -> None:
    execution_id = "0b6f7c3e-8f7d-4a35-9a53-5c0d2b1f7e10"
    accepted = {"jobId": 7, "executionId": execution_id, "status": "SCHEDULED"}
    own = {"day": "2026-12-01", "n": [1, 2]}
    api = Scripted([ok(accepted, 202), ok(accepted, 202), ok(execution_json(params=own))])
    with api.client() as kairos:
        kairos.trigger(7, params=own, idempotency_key="run-2")
        kairos.trigger(7)
        execution = kairos.get_execution(execution_id)
    assert api.body(0) == {"params": own}
    assert api.requests[0].headers["idempotency-key"] == '"run-2"'
    assert api.requests[1].content == b"", "without params, no body: the job's params run"
    assert execution.params == own


def test_an_execution_without_its_own_params_reads_none() -> None:
    api = Scripted([ok(execution_json())])
    with api.client() as kairos:
        assert kairos.get_execution("0b6f7c3e-8f7d-4a35-9a53-5c0d2b1f7e10").params is None


def test_jitter_is_sent_on_create_and_update_and_read_with_fire_times() -> None:
    policies = {**job_json()["policies"], "jitterSeconds": 30}
    fires = ["2026-12-01T14:00:17.250Z"]
    shown = job_json(policies=policies, nextTriggerTimes=["2026-12-01T14:00:00.000Z"])
    previewed = {**shown, "nextFireTimes": fires}
    api = Scripted([ok({"jobId": 7, "status": "WAITING"}, 202), ok(shown), ok(previewed)])
    with api.client() as kairos:
        kairos.create_job(JobSpec("a", "demo.echo", cron_expr="0 * * * *", jitter_seconds=30))
        kairos.update(7, JobChanges(jitter_seconds=30))
        job = kairos.get_job(7, preview=1)
    assert api.body(0)["jitterSeconds"] == 30
    assert api.body(1) == {"jitterSeconds": 30}
    assert job.policies is not None and job.policies.jitter_seconds == 30
    assert job.next_fire_times == [datetime(2026, 12, 1, 14, 0, 17, 250_000, tzinfo=UTC)]


@pytest.mark.parametrize("action", ["pause", "resume", "cancel"])
def test_job_actions_post_and_answer_the_job(action: str) -> None:
    api = Scripted([ok(job_json(status="PAUSED"))])
    with api.client() as kairos:
        job = getattr(kairos, action)(7)
    assert (api.requests[0].method, api.requests[0].url.path) == (
        "POST",
        f"/openapi/jobs/7/{action}",
    )
    assert "idempotency-key" not in api.requests[0].headers
    assert job.status is JobStatus.PAUSED


def test_update_sends_only_what_is_set_and_none_as_null() -> None:
    api = Scripted([ok(job_json(cronExpr="30 2 * * *"))])
    changes = JobChanges(cron_expr="30 2 * * *", callback_url=None, max_retries=3)
    with api.client() as kairos:
        job = kairos.update(7, changes)
    assert api.requests[0].method == "PATCH"
    assert api.body() == {"cronExpr": "30 2 * * *", "callbackUrl": None, "maxRetries": 3}
    assert job.cron_expr == "30 2 * * *"
    assert JobChanges(job_name=UNSET).to_json() == {}


def test_delete_sends_delete() -> None:
    api = Scripted([ok(None, 204)])
    with api.client() as kairos:
        kairos.delete(7)
    assert (api.requests[0].method, api.requests[0].url.path) == ("DELETE", "/openapi/jobs/7")


def test_a_job_id_that_is_not_an_int_is_refused_before_sending() -> None:
    api = Scripted([ok({})])
    with api.client() as kairos, pytest.raises(TypeError, match="job id is an int"):
        kairos.get_job("7/../../x")  # type: ignore[arg-type]
    assert api.requests == []


def test_a_newer_servers_unknown_status_is_kept_as_text() -> None:
    api = Scripted([ok(job_json(status="ARCHIVED", extra="new"))])
    with api.client() as kairos:
        job = kairos.get_job(7)
    assert job.status == "ARCHIVED" and not isinstance(job.status, JobStatus)
    assert job.raw["extra"] == "new"


def test_the_client_refuses_a_base_url_or_api_key_it_cannot_use() -> None:
    with pytest.raises(ValueError, match="http"):
        Client("127.0.0.1:8000", KEY)
    with pytest.raises(ValueError, match="api_key"):
        Client("http://127.0.0.1:8000", "")


def test_a_priority_is_sent_on_create_batch_and_update_and_read_back() -> None:
    api = Scripted(
        [
            ok({"jobId": 7, "status": "WAITING"}, 202),
            ok({"jobs": [{"jobId": 8, "status": "WAITING"}]}, 202),
            ok(job_json(priority=2)),
        ]
    )
    with api.client() as kairos:
        kairos.create_job(JobSpec("a", "demo.echo", priority=9))
        kairos.create_jobs([JobSpec("b", "demo.echo", priority=0)])
        job = kairos.update(7, JobChanges(priority=2))
    assert api.body(0)["priority"] == 9
    assert api.body(1)["jobs"][0]["priority"] == 0
    assert api.body(2) == {"priority": 2}
    assert job.priority == 2
    assert "priority" not in JobSpec("a", "demo.echo").to_json(), "the server's default"


def test_a_job_read_from_a_server_without_priorities_has_the_default() -> None:
    answer = job_json()
    del answer["priority"]
    api = Scripted([ok(answer)])
    with api.client() as kairos:
        assert kairos.get_job(7).priority == 5


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_traceparent_goes_as_its_header_on_create_batch_and_trigger() -> None:
    execution_id = "0b6f7c3e-8f7d-4a35-9a53-5c0d2b1f7e10"
    api = Scripted(
        [
            ok({"jobId": 7, "status": "WAITING"}, 202),
            ok({"jobIds": [8], "status": "WAITING"}, 202),
            ok({"jobId": 7, "executionId": execution_id, "status": "SCHEDULED"}, 202),
            ok({"jobId": 7, "status": "WAITING"}, 202),
        ]
    )
    with api.client() as kairos:
        kairos.create_job(JobSpec("a", "demo.echo"), traceparent=TRACEPARENT)
        kairos.create_jobs([JobSpec("b", "demo.echo")], traceparent=TRACEPARENT)
        kairos.trigger(7, traceparent=TRACEPARENT)
        kairos.create_job(JobSpec("c", "demo.echo"))
    sent = [r.headers.get("traceparent") for r in api.requests]
    assert sent == [TRACEPARENT, TRACEPARENT, TRACEPARENT, None]
    # The idempotency key still goes beside it.
    assert all("idempotency-key" in r.headers for r in api.requests)


def test_the_job_and_its_execution_read_their_traceparent() -> None:
    last = execution_json(traceparent=TRACEPARENT)
    api = Scripted([ok(job_json(traceparent=TRACEPARENT, lastExecution=last)), ok(job_json())])
    with api.client() as kairos:
        traced = kairos.get_job(7)
        untraced = kairos.get_job(7)
    assert traced.traceparent == TRACEPARENT
    assert traced.last_execution is not None
    assert traced.last_execution.traceparent == TRACEPARENT
    assert untraced.traceparent is None


BACKFILLED = {
    "jobId": 7,
    "from": "2026-11-01T00:00:00.000Z",
    "to": "2026-11-02T00:00:00.000Z",
    "created": 20,
    "existing": 4,
    "leftToSchedule": 0,
}


def test_backfill_sends_the_range_and_reads_the_counts() -> None:
    api = Scripted([ok(BACKFILLED, 202), ok(execution_json(manual=True, backfill=True))])
    with api.client() as kairos:
        done = kairos.backfill(7, datetime(2026, 11, 1, tzinfo=UTC), "2026-11-02T00:00:00")
        execution = kairos.get_execution("e")
    request = api.requests[0]
    assert (request.method, request.url.path) == ("POST", "/openapi/jobs/7/backfill")
    assert api.body(0) == {"from": "2026-11-01T00:00:00+00:00", "to": "2026-11-02T00:00:00"}
    assert (done.job_id, done.created, done.existing, done.left_to_schedule) == (7, 20, 4, 0)
    assert done.from_time == datetime(2026, 11, 1, tzinfo=UTC)
    assert done.to_time == datetime(2026, 11, 2, tzinfo=UTC)
    assert execution.backfill and execution.manual


def test_an_execution_from_a_server_without_backfill_reads_as_not_backfilled() -> None:
    api = Scripted([ok(execution_json())])
    with api.client() as kairos:
        assert not kairos.get_execution("e").backfill
