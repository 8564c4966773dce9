"""Console sessions end when idle, every console cookie is Secure when the session's is,
and every HTML answer (console and /docs) carries a CSP with script-src and
frame-ancestors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.config import ApiSettings, StoreSettings
from common.db.schema import operator_sessions
from tests.integration.console_helpers import make_operator, sign_in

MINUTE_MS = 60_000


@pytest.fixture
def console(namespace: StoreSettings) -> Iterator[TestClient]:
    from services.api.app import create_app

    settings = ApiSettings(namespace=namespace.namespace, console_idle_minutes=30)
    with TestClient(create_app(settings)) as client:
        yield client


def _now_ms(console: TestClient) -> int:
    clock: ClusterClock = console.app.state.kairos.clock  # type: ignore[attr-defined]
    return clock.now_ms()


def _last_seen(engine: Engine) -> int | None:
    with engine.connect() as conn:
        value = conn.execute(sa.select(operator_sessions.c.last_seen_at)).scalar_one()
    return None if value is None else int(value)


def _seen_at(engine: Engine, at_ms: int) -> None:
    with engine.begin() as conn:
        conn.execute(operator_sessions.update().values(last_seen_at=at_ms, created_at=at_ms))


def test_a_session_idle_past_the_setting_ends(console: TestClient, engine: Engine) -> None:
    sign_in(console, make_operator(engine))
    _seen_at(engine, _now_ms(console) - 29 * MINUTE_MS)
    assert console.get("/console/", follow_redirects=False).status_code == 200
    _seen_at(engine, _now_ms(console) - 31 * MINUTE_MS)
    answer = console.get("/console/", follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"].startswith("/console/login")


def test_a_request_notes_the_session_seen_at_most_once_a_minute(
    console: TestClient, engine: Engine
) -> None:
    sign_in(console, make_operator(engine))
    now = _now_ms(console)
    assert abs((_last_seen(engine) or 0) - now) < MINUTE_MS, "a sign-in counts as seen"
    recent = now - 30_000
    _seen_at(engine, recent)
    console.get("/console/")
    assert _last_seen(engine) == recent, "no write within a minute of the last"
    _seen_at(engine, now - 2 * MINUTE_MS)
    console.get("/console/")
    assert (_last_seen(engine) or 0) >= now


def _cookie_headers(answer: object) -> list[str]:
    return list(answer.headers.get_list("set-cookie"))  # type: ignore[attr-defined]


def test_the_notice_cookie_is_secure_when_the_session_cookie_is(
    namespace: StoreSettings, engine: Engine
) -> None:
    from services.api.app import create_app

    settings = ApiSettings(namespace=namespace.namespace, console_secure_cookies=True)
    with TestClient(create_app(settings), base_url="https://testserver") as console:
        csrf = sign_in(console, make_operator(engine))
        answer = console.post("/console/logout", data={"csrf": csrf}, follow_redirects=False)
    cookies = _cookie_headers(answer)
    notice = [c for c in cookies if c.startswith("kairos_console_notice=")]
    assert notice, cookies
    assert all("Secure" in c for c in cookies), cookies


@pytest.mark.parametrize("path", ["/console/login", "/docs", "/redoc"])
def test_every_html_answer_has_a_csp_with_script_src_and_frame_ancestors(
    console: TestClient, path: str
) -> None:
    answer = console.get(path)
    assert answer.headers["content-type"].startswith("text/html")
    policy = answer.headers["content-security-policy"]
    directives = {part.split()[0]: part.split()[1:] for part in policy.split(";") if part.strip()}
    assert directives["script-src"][0] == "'self'", policy
    assert all(s == "'self'" or s.startswith("'sha256-") for s in directives["script-src"])
    assert directives["frame-ancestors"] == ["'none'"], policy
    assert "default-src" in directives and "base-uri" in directives, policy
    assert answer.headers["x-frame-options"] == "DENY"
