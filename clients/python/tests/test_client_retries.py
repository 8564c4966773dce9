"""What is sent again, how often, and after how long."""

from __future__ import annotations

import httpx
import pytest

from kairos_client import (
    ConflictError,
    ConnectionFailedError,
    JobSpec,
    NotFoundError,
    RateLimitError,
    RetryPolicy,
    ServiceUnavailableError,
)
from scripted import NO_WAIT, Scripted, job_json, ok, problem

ACCEPTED = ok({"jobId": 7, "status": "WAITING"}, 202)
TRIGGERED = ok({"jobId": 7, "executionId": "e-1", "status": "SCHEDULED"}, 202)


def test_a_connection_refused_is_retried_for_any_call() -> None:
    api = Scripted([httpx.ConnectError("refused"), ok(job_json(status="PAUSED"))])
    with api.client() as kairos:
        assert kairos.pause(7).status == "PAUSED"
    assert len(api.requests) == 2


def test_a_lost_answer_is_retried_with_the_same_idempotency_key() -> None:
    api = Scripted([httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("dropped"), TRIGGERED])
    with api.client() as kairos:
        assert kairos.trigger(7).execution_id == "e-1"
    keys = {r.headers["idempotency-key"] for r in api.requests}
    assert len(api.requests) == 3 and len(keys) == 1, "one key for every send of one call"


def test_a_create_whose_answer_was_lost_is_sent_again_under_its_key() -> None:
    api = Scripted([httpx.ReadTimeout("slow"), ACCEPTED])
    with api.client() as kairos:
        assert kairos.create_job(JobSpec("a", "demo.echo")).job_id == 7
    assert api.requests[0].headers["idempotency-key"] == api.requests[1].headers["idempotency-key"]


@pytest.mark.parametrize("action", ["pause", "resume", "cancel"])
def test_an_unkeyed_action_whose_answer_was_lost_is_not_sent_again(action: str) -> None:
    api = Scripted([httpx.ReadTimeout("slow"), ok(job_json())])
    with api.client() as kairos, pytest.raises(ConnectionFailedError) as caught:
        getattr(kairos, action)(7)
    assert len(api.requests) == 1
    assert isinstance(caught.value.__cause__, httpx.ReadTimeout)


def test_503_waits_out_retry_after_then_succeeds() -> None:
    busy = problem(
        503,
        "store-unavailable",
        "MySQL did not answer",
    )
    busy.headers["retry-after"] = "2"
    api = Scripted([busy, busy, ok(job_json())])
    with api.client() as kairos:
        kairos.get_job(7)
    assert len(api.requests) == 3
    assert all(2 <= s <= 2.2 for s in api.slept), api.slept


def test_429_is_retried_even_for_an_unkeyed_action() -> None:
    limited = problem(429, "rate-limited")
    limited.headers["retry-after"] = "1"
    api = Scripted([limited, ok(job_json())])
    with api.client() as kairos:
        kairos.cancel(7)
    assert len(api.requests) == 2 and 1 <= api.slept[0] <= 1.1


def test_retries_stop_after_max_retries_with_the_last_problem() -> None:
    api = Scripted([problem(503, "store-unavailable", "Redis did not answer")])
    with api.client(RetryPolicy(max_retries=2, backoff_seconds=0)) as kairos:
        with pytest.raises(ServiceUnavailableError) as caught:
            kairos.get_job(7)
    assert len(api.requests) == 3
    assert caught.value.problem.detail == "Redis did not answer"


def test_a_retry_after_past_the_cap_is_not_waited_for() -> None:
    limited = problem(429, "rate-limited")
    limited.headers["retry-after"] = "3600"
    api = Scripted([limited, ok(job_json())])
    with api.client() as kairos, pytest.raises(RateLimitError) as caught:
        kairos.get_job(7)
    assert len(api.requests) == 1 and api.slept == []
    assert caught.value.retry_after == 3600


def test_backoff_without_retry_after_doubles_with_jitter_up_to_the_cap() -> None:
    policy = RetryPolicy(max_retries=6, backoff_seconds=0.5, backoff_max_seconds=4)
    api = Scripted([httpx.ConnectError("refused")])
    with api.client(policy) as kairos, pytest.raises(ConnectionFailedError):
        kairos.get_job(7)
    ceilings = [0.5, 1, 2, 4, 4, 4]
    assert len(api.slept) == 6
    assert all(c / 2 <= s <= c for s, c in zip(api.slept, ceilings, strict=True)), api.slept


def test_a_409_that_says_try_again_is_retried_and_another_409_is_not() -> None:
    api = Scripted(
        [problem(409, "idempotency-key-in-use"), problem(409, "trigger-busy"), TRIGGERED]
    )
    with api.client() as kairos:
        assert kairos.trigger(7).execution_id == "e-1"
    refused = Scripted([problem(409, "invalid-transition", jobId=7, jobStatus="CANCELLED")])
    with refused.client() as kairos, pytest.raises(ConflictError) as caught:
        kairos.resume(7)
    assert len(refused.requests) == 1
    assert caught.value.problem.job_status == "CANCELLED"


def test_a_proxys_502_is_retried_only_where_a_repeat_is_harmless() -> None:
    gateway = httpx.Response(502, text="<html>bad gateway</html>")
    api = Scripted([gateway, ok(job_json())])
    with api.client() as kairos:
        kairos.get_job(7)
    assert len(api.requests) == 2
    action = Scripted([gateway, ok(job_json())])
    with action.client() as kairos, pytest.raises(Exception) as caught:
        kairos.pause(7)
    assert caught.value.args[0].startswith("502") and len(action.requests) == 1


def test_a_delete_repeated_after_a_lost_answer_that_finds_the_job_gone_is_done() -> None:
    api = Scripted([httpx.ReadTimeout("slow"), problem(404, "job-not-found", jobId=7)])
    with api.client() as kairos:
        kairos.delete(7)
    assert len(api.requests) == 2
    first = Scripted([problem(404, "job-not-found", jobId=7)])
    with first.client() as kairos, pytest.raises(NotFoundError):
        kairos.delete(7)


def test_max_retries_zero_sends_once() -> None:
    api = Scripted([httpx.ConnectError("refused"), ok(job_json())])
    with api.client(RetryPolicy(max_retries=0)) as kairos, pytest.raises(ConnectionFailedError):
        kairos.get_job(7)
    assert len(api.requests) == 1


def test_retry_after_as_an_http_date_is_read() -> None:
    limited = problem(429, "rate-limited")
    limited.headers["retry-after"] = "Wed, 21 Oct 2015 07:28:00 GMT"  # long past: no wait
    api = Scripted([limited, ok(job_json())])
    with api.client(NO_WAIT) as kairos:
        kairos.get_job(7)
    assert api.slept[0] <= 0.1


def test_a_batch_whose_answer_was_lost_is_sent_again_under_its_key() -> None:
    api = Scripted([httpx.WriteTimeout("slow"), ok({"jobs": [{"jobId": 7, "status": "WAITING"}]})])
    with api.client() as kairos:
        assert kairos.create_jobs([JobSpec("a", "demo.echo")]).jobs[0].job_id == 7
    keys = [r.headers["idempotency-key"] for r in api.requests]
    assert len(keys) == 2 and keys[0] == keys[1]
