"""Limits at the API's door, on real MySQL and Redis: request bodies over the limit are
413 before they are read or authenticated; each app has a token bucket in Redis."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.config import ApiSettings, StoreSettings
from common.db.apps import AppCredentials
from common.keys import RedisKeys
from tests.integration.helpers import make_app

LIMIT = 64 * 1024
CHUNK = 16 * 1024


def api_client(settings: ApiSettings, credentials: AppCredentials) -> TestClient:
    from services.api.app import create_app

    client = TestClient(create_app(settings))
    client.headers["Authorization"] = f"Bearer {credentials.api_key}"
    return client


@pytest.fixture
def small_body_client(
    namespace: StoreSettings, app_credentials: AppCredentials
) -> Iterator[TestClient]:
    settings = ApiSettings(namespace=namespace.namespace, max_body_bytes=LIMIT)
    with api_client(settings, app_credentials) as client:
        yield client


def chunks(total: int) -> Iterator[bytes]:
    """A request body sent in chunks, without a length (the test client buffers it whole:
    tests/e2e/test_api_memory.py shows on a real server that the API does not)."""
    for _ in range(total // CHUNK):
        yield b" " * CHUNK


def assert_too_large(response: Any) -> None:
    assert response.status_code == 413, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.headers["connection"] == "close"
    assert "KAIROS_MAX_BODY_BYTES" in response.json()["detail"]


def test_the_default_body_limit_is_one_mebibyte() -> None:
    assert ApiSettings().max_body_bytes == 1024 * 1024


@pytest.mark.parametrize("authorization", [None, "Bearer not-a-key"])
def test_a_declared_length_over_the_limit_is_413_before_auth(
    small_body_client: TestClient, authorization: str | None
) -> None:
    headers = {"content-type": "application/json"}
    if authorization is None:
        small_body_client.headers.pop("Authorization")
    else:
        headers["Authorization"] = authorization
    response = small_body_client.post("/openapi/jobs", content=b" " * (LIMIT + 1), headers=headers)
    assert_too_large(response)


def test_a_chunked_body_is_refused_once_it_grows_past_the_limit(
    small_body_client: TestClient,
) -> None:
    small_body_client.headers.pop("Authorization")
    response = small_body_client.post(
        "/openapi/jobs", content=chunks(4 * LIMIT), headers={"content-type": "application/json"}
    )
    assert_too_large(response)


def test_a_chunked_body_within_the_limit_is_read_as_usual(
    small_body_client: TestClient, engine: Engine
) -> None:
    raw = b'{"jobName": "chunked", "jobHandler": "demo.echo", "params": {"pad": "'
    raw += b"x" * (LIMIT - len(raw) - 10) + b'"}}'

    def pieces() -> Iterator[bytes]:
        for start in range(0, len(raw), CHUNK):
            yield raw[start : start + CHUNK]

    response = small_body_client.post(
        "/openapi/jobs", content=pieces(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 202, response.text


def test_a_body_at_the_limit_is_read(small_body_client: TestClient) -> None:
    head = b'{"jobName": "big", "jobHandler": "demo.echo", "params": {"pad": "'
    raw = head + b"x" * (LIMIT - len(head) - 3) + b'"}}'
    assert len(raw) == LIMIT
    response = small_body_client.post(
        "/openapi/jobs", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 202, response.text


# rate limit


# One token every 100 s: no test depends on how fast its requests go.
RATE = 0.01


def limited_settings(namespace: StoreSettings, **overrides: Any) -> ApiSettings:
    values: dict[str, Any] = {"rate_limit_per_second": RATE, "rate_limit_burst": 3, **overrides}
    return ApiSettings(namespace=namespace.namespace, **values)


def test_a_generous_rate_limit_is_on_by_default(client: TestClient) -> None:
    settings = ApiSettings()
    assert settings.rate_limit_per_second == 500 and settings.rate_limit_burst == 2000
    limiter = client.app.state.kairos.rate_limiter  # type: ignore[attr-defined]
    assert limiter is not None and limiter.burst == 2000
    assert all(client.get("/openapi/jobs/1").status_code == 404 for _ in range(30))


def test_a_batch_counts_one_request_per_job(
    namespace: StoreSettings, app_credentials: AppCredentials
) -> None:
    job = {"jobName": "r", "jobHandler": "demo.echo", "triggerAt": 4_102_444_800_000}
    with api_client(limited_settings(namespace, rate_limit_burst=4), app_credentials) as client:
        assert client.post("/openapi/jobs/batch", json={"jobs": [job] * 3}).status_code == 202
        assert client.get("/openapi/jobs/999999").status_code == 404  # the fourth token
        refused = client.post("/openapi/jobs/batch", json={"jobs": [job] * 2})
        assert refused.status_code == 429 and "one per job" in refused.json()["detail"]


def test_a_batch_larger_than_the_bucket_passes_a_full_one_and_leaves_it_in_debt(
    namespace: StoreSettings, app_credentials: AppCredentials
) -> None:
    job = {"jobName": "r", "jobHandler": "demo.echo", "triggerAt": 4_102_444_800_000}
    with api_client(limited_settings(namespace), app_credentials) as client:
        assert client.post("/openapi/jobs/batch", json={"jobs": [job] * 5}).status_code == 202
        refused = client.get("/openapi/jobs/999999")
    # 3 tokens paid 5 jobs: 2 owed, so the next request waits for 3 tokens (300 s).
    assert refused.status_code == 429
    assert 290 <= int(refused.headers["retry-after"]) <= 300


def test_manual_triggers_count_against_the_rate(
    namespace: StoreSettings, app_credentials: AppCredentials
) -> None:
    job = {"jobName": "r", "jobHandler": "demo.echo", "triggerAt": 4_102_444_800_000}
    with api_client(limited_settings(namespace), app_credentials) as client:
        job_id = client.post("/openapi/jobs", json=job).json()["jobId"]
        trigger = f"/openapi/jobs/{job_id}/trigger"
        assert client.post(trigger).status_code == 202
        assert client.post(trigger).status_code in (202, 409)
        assert client.post(trigger).status_code == 429


def test_an_app_over_its_rate_gets_429_with_retry_after(
    namespace: StoreSettings, app_credentials: AppCredentials, engine: Engine
) -> None:
    other = make_app(engine, "other")
    with api_client(limited_settings(namespace), app_credentials) as client:
        codes = [client.get("/openapi/jobs/1").status_code for _ in range(3)]
        refused = client.get("/openapi/jobs/1")
        other_app = client.get(
            "/openapi/jobs/1", headers={"Authorization": f"Bearer {other.api_key}"}
        )
    assert codes == [404, 404, 404]
    assert refused.status_code == 429
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert 90 <= int(refused.headers["retry-after"]) <= 100  # about 1 / RATE seconds
    assert refused.json()["status"] == 429
    assert app_credentials.app_id in refused.json()["detail"]
    assert other_app.status_code == 404


def test_a_create_counts_against_the_rate_too(
    namespace: StoreSettings, app_credentials: AppCredentials
) -> None:
    settings = limited_settings(namespace, rate_limit_burst=1)
    job = {"jobName": "r", "jobHandler": "demo.echo", "triggerAt": 4_102_444_800_000}
    with api_client(settings, app_credentials) as client:
        assert client.post("/openapi/jobs", json=job).status_code == 202
        assert client.post("/openapi/jobs", json=job).status_code == 429


def test_tokens_come_back_with_time(
    namespace: StoreSettings, app_credentials: AppCredentials, redis_client: redis.Redis
) -> None:
    key = RedisKeys(namespace.namespace).rate_limit(app_credentials.app_id)
    with api_client(limited_settings(namespace), app_credentials) as client:
        for _ in range(3):
            client.get("/openapi/jobs/1")
        assert client.get("/openapi/jobs/1").status_code == 429
        # Move the bucket's last count 200 s back: two tokens have come back since.
        at = int(redis_client.hget(key, "at") or 0)
        redis_client.hset(key, "at", str(at - 200_000))
        assert [client.get("/openapi/jobs/1").status_code for _ in range(3)] == [404, 404, 429]
    # An idle bucket is full again after burst / rate seconds; then it may go.
    assert 0 < redis_client.pttl(key) <= math.ceil(3 / RATE) * 1000 + 1000


def test_without_redis_the_rate_limit_lets_requests_through(
    namespace: StoreSettings, app_credentials: AppCredentials
) -> None:
    settings = limited_settings(namespace, redis_url="redis://127.0.0.1:1/0", rate_limit_burst=1)
    with api_client(settings, app_credentials) as client:
        codes = [client.get("/openapi/jobs/1").status_code for _ in range(5)]
    assert codes == [404] * 5
