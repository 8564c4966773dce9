"""Failed authentication is throttled per client address in Redis, unknown keys are
remembered briefly, and every failure is logged with the address it came from."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from common.config import ApiSettings, StoreSettings
from common.db.apps import AppCredentials
from tests.integration.console_helpers import make_operator, sign_in

ATTACKER = "203.0.113.7"
NEIGHBOUR = "198.51.100.20"
LIMIT = 5
FROM = "x-test-client-address"


class FromAddress:
    """The API, seeing each request as coming from the address its ``FROM`` header names
    (one client, so one event loop for the API's async Redis clients)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name.decode() == FROM:
                    scope = {**scope, "client": (value.decode(), 40000)}
        await self.app(scope, receive, send)


@pytest.fixture
def api(namespace: StoreSettings) -> Iterator[FastAPI]:
    from services.api.app import create_app

    settings = ApiSettings(
        namespace=namespace.namespace,
        auth_failure_limit=LIMIT,
        auth_failure_window_seconds=120,
        auth_miss_cache_seconds=60,
    )
    yield create_app(settings)


@pytest.fixture
def http(api: FastAPI) -> Iterator[TestClient]:
    with TestClient(FromAddress(api)) as client:
        yield client


def _get_jobs(http: TestClient, address: str, key: str) -> Any:
    headers = {"Authorization": f"Bearer {key}", FROM: address}
    return http.get("/openapi/jobs", headers=headers)


def test_a_flood_of_bad_keys_is_throttled_and_another_app_goes_on(
    http: TestClient, app_credentials: AppCredentials
) -> None:
    statuses = [_get_jobs(http, ATTACKER, f"bad-key-{n}").status_code for n in range(LIMIT + 3)]
    assert statuses == [401] * LIMIT + [429] * 3
    refused = _get_jobs(http, ATTACKER, "bad-key-next")
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["type"] == "urn:kairos:problem:auth-throttled"
    assert 1 <= int(refused.headers["Retry-After"]) <= 120
    good = _get_jobs(http, NEIGHBOUR, app_credentials.api_key)
    assert good.status_code == 200


def test_a_known_key_is_answered_from_a_throttled_address_once_cached(
    http: TestClient, app_credentials: AppCredentials
) -> None:
    assert _get_jobs(http, ATTACKER, app_credentials.api_key).status_code == 200
    for n in range(LIMIT):
        _get_jobs(http, ATTACKER, f"bad-key-{n}")
    assert _get_jobs(http, ATTACKER, "bad-key-x").status_code == 429
    assert _get_jobs(http, ATTACKER, app_credentials.api_key).status_code == 200


def test_one_bad_key_sent_again_and_again_costs_one_query(
    api: FastAPI, http: TestClient, app_credentials: AppCredentials
) -> None:
    statements: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "api_keys" in statement:
            statements.append(statement)

    engine = api.state.kairos.engine
    sa.event.listen(engine, "before_cursor_execute", note)
    try:
        for _ in range(LIMIT - 1):
            assert _get_jobs(http, ATTACKER, "the-same-bad-key").status_code == 401
    finally:
        sa.event.remove(engine, "before_cursor_execute", note)
    assert len(statements) == 1


def test_each_failure_is_logged_with_the_client_address(
    http: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="services.api.auth_failures"):
        for n in range(2):
            _get_jobs(http, ATTACKER, f"bad-key-{n}")
    failures = [r for r in caplog.records if "authentication failed" in r.getMessage()]
    assert len(failures) == 2
    assert all(getattr(r, "client_address", None) == ATTACKER for r in failures)
    assert all(ATTACKER in r.getMessage() for r in failures)


def _console_sign_in(http: TestClient, token: str) -> Any:
    form = http.get("/console/login")
    found = form.text.split('name="sign_in" value="', 1)[1].split('"', 1)[0]
    return http.post(
        "/console/login",
        data={"token": token, "sign_in": found, "next": "/console/"},
        follow_redirects=False,
    )


def test_console_sign_in_failures_are_throttled_too(api: FastAPI, http: TestClient) -> None:
    token = make_operator(api.state.kairos.engine)
    http.headers[FROM] = ATTACKER
    statuses = [_console_sign_in(http, f"wrong-{n}").status_code for n in range(LIMIT + 1)]
    assert statuses == [401] * LIMIT + [429]
    refused = _console_sign_in(http, token)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert "too many failed sign-ins" in refused.text
    http.headers[FROM] = NEIGHBOUR
    sign_in(http, token)


def test_api_and_console_failures_share_one_count(http: TestClient) -> None:
    for n in range(LIMIT):
        _get_jobs(http, ATTACKER, f"bad-{n}")
    http.headers[FROM] = ATTACKER
    assert _console_sign_in(http, "wrong").status_code == 429


def test_a_throttled_address_is_refused_before_body_limits_and_routing(
    http: TestClient, app_credentials: AppCredentials
) -> None:
    for n in range(LIMIT):
        _get_jobs(http, ATTACKER, f"bad-key-{n}")
    assert _get_jobs(http, ATTACKER, "bad-key-x").status_code == 429
    headers = {"Authorization": "Bearer bad", FROM: ATTACKER}
    huge = http.post("/openapi/jobs", content=b"{" + b" " * 2_000_000 + b"}", headers=headers)
    assert huge.status_code == 429 and huge.headers["Request-Id"]
    assert huge.json()["type"] == "urn:kairos:problem:auth-throttled"
    nowhere = http.get("/openapi/no-such-route", headers=headers)
    assert nowhere.status_code == 429
    assert http.get("/healthz", headers={FROM: ATTACKER}).status_code == 200


def test_a_known_key_goes_on_from_a_throttled_address_after_its_cache_entry_lapses(
    api: FastAPI, http: TestClient, app_credentials: AppCredentials
) -> None:
    state = api.state.kairos
    assert _get_jobs(http, ATTACKER, app_credentials.api_key).status_code == 200
    for n in range(LIMIT):
        _get_jobs(http, ATTACKER, f"bad-key-{n}")
    assert _get_jobs(http, ATTACKER, "bad-key-x").status_code == 429
    later = state.monotonic() + state.settings.auth_cache_seconds + 1
    state.monotonic = lambda: later
    assert state.cached_app(app_credentials.api_key) is None, "the entry lapsed"
    assert _get_jobs(http, ATTACKER, app_credentials.api_key).status_code == 200


def test_console_cookies_naming_no_session_count_as_failures(http: TestClient) -> None:
    http.headers[FROM] = ATTACKER
    statuses = []
    for n in range(LIMIT + 1):
        http.cookies.set("kairos_console", f"guess-{n}", path="/console")
        statuses.append(http.get("/console/", follow_redirects=False).status_code)
    assert statuses == [303] * LIMIT + [429]


def test_a_throttled_address_is_refused_in_front_of_fastapis_own_stack(
    api: FastAPI, http: TestClient, app_credentials: AppCredentials
) -> None:
    for n in range(LIMIT):
        _get_jobs(http, ATTACKER, f"bad-key-{n}")
    assert _get_jobs(http, ATTACKER, "bad-key-x").status_code == 429
    served = api.middleware_stack

    async def entered(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("a refusal went through FastAPI's middleware stack")

    api.middleware_stack = entered
    try:
        refused = _get_jobs(http, ATTACKER, "bad-key-y")
    finally:
        api.middleware_stack = served
    assert refused.status_code == 429 and refused.headers["Request-Id"]
    assert refused.json()["instance"].endswith(refused.headers["Request-Id"])
    assert _get_jobs(http, NEIGHBOUR, app_credentials.api_key).status_code == 200
