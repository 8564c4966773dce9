"""Limits at the API's door, on real MySQL and Redis: request bodies over the limit are
413 before they are read or authenticated."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.config import ApiSettings, StoreSettings
from common.db.apps import AppCredentials

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
