"""The console in process: signing in, sessions, CSRF, and every page rendering."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.config import ApiSettings, StoreSettings
from common.db.apps import AppCredentials
from common.db.operators import delete_operator
from common.db.schema import jobs
from common.keys import RedisKeys
from tests.integration.console_helpers import csrf_of, make_operator, sign_in
from tests.integration.helpers import register_worker

PAGES = [
    "/console/",
    "/console/jobs",
    "/console/workers",
    "/console/executions/stuck",
    "/console/callbacks/dead",
]


@pytest.fixture
def console(namespace: StoreSettings, app_credentials: AppCredentials) -> Iterator[TestClient]:
    """The API on the test's namespace, as a browser without a session."""
    from services.api.app import create_app

    with TestClient(create_app(ApiSettings(namespace=namespace.namespace))) as client:
        yield client


def a_job(client: TestClient, api_key: str) -> int:
    body = {"jobName": "nightly", "jobHandler": "demo.noop", "cronExpr": "30 2 * * *"}
    answer = client.post("/openapi/jobs", json=body, headers={"Authorization": f"Bearer {api_key}"})
    assert answer.status_code == 202, answer.text
    return int(answer.json()["jobId"])


def status_of(engine: Engine, job_id: int) -> str:
    with engine.connect() as conn:
        return str(conn.execute(sa.select(jobs.c.status).where(jobs.c.id == job_id)).scalar_one())


@pytest.mark.parametrize("path", [*PAGES, "/console/jobs/1"])
def test_every_page_sends_a_browser_without_a_session_to_sign_in(
    console: TestClient, path: str
) -> None:
    answer = console.get(path, follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"].startswith("/console/login?next=")


def test_a_session_cookie_is_http_only_same_site_strict_and_for_the_console_only(
    console: TestClient, engine: Engine
) -> None:
    token = make_operator(engine)
    sign_in(console, token)
    cookies = [c for c in console.cookies.jar if c.name == "kairos_console"]
    assert len(cookies) == 1 and cookies[0].path == "/console"
    # The cookie jar keeps no SameSite or HttpOnly: read them from a fresh sign-in.
    form = console.get("/console/login").text
    value = form.split('name="sign_in" value="')[1].split('"')[0]
    answer = console.post(
        "/console/login", data={"token": token, "sign_in": value}, follow_redirects=False
    )
    cookie = next(h for h in answer.headers.get_list("set-cookie") if "kairos_console=" in h)
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
    assert answer.headers["content-security-policy"].startswith("default-src 'none'")


def test_an_unknown_token_or_a_sign_in_form_without_its_cookie_is_refused(
    console: TestClient, engine: Engine
) -> None:
    token = make_operator(engine)
    form = console.get("/console/login").text
    value = form.split('name="sign_in" value="')[1].split('"')[0]
    wrong = console.post("/console/login", data={"token": "kop_nope", "sign_in": value})
    assert wrong.status_code == 401 and "not known" in wrong.text
    console.cookies.clear()
    forged = console.post("/console/login", data={"token": token, "sign_in": value})
    assert forged.status_code == 403
    assert console.get("/console/", follow_redirects=False).status_code == 303


def test_every_page_renders_for_a_signed_in_operator(
    console: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    job_id = a_job(console, app_credentials.api_key)
    sign_in(console, make_operator(engine))
    for path in [*PAGES, f"/console/jobs/{job_id}"]:
        answer = console.get(path)
        assert answer.status_code == 200, (path, answer.text)
        assert "alice" in answer.text
    page = console.get(f"/console/jobs/{job_id}").text
    assert "at 02:30, every day (UTC)" in page
    assert "nightly" in console.get(f"/console/jobs?app={app_credentials.app_id}").text
    unknown = console.get("/console/jobs?app=app_nope").text
    assert "No app has the id app_nope" in unknown and "nightly" not in unknown
    assert console.get("/console/jobs/999999").status_code == 404


def test_the_job_page_and_the_jobs_list_show_the_priority(
    console: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    body = {"jobName": "urgent", "jobHandler": "demo.noop", "cronExpr": "0 0 * * *", "priority": 8}
    headers = {"Authorization": f"Bearer {app_credentials.api_key}"}
    answer = console.post("/openapi/jobs", json=body, headers=headers)
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["jobId"]
    sign_in(console, make_operator(engine))
    assert "<dt>Priority</dt><dd>8" in console.get(f"/console/jobs/{job_id}").text
    listing = console.get("/console/jobs").text
    assert "<th>Priority</th>" in listing and '<td data-label="Priority">8</td>' in listing


def test_an_action_without_the_session_csrf_token_changes_nothing(
    console: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    job_id = a_job(console, app_credentials.api_key)
    csrf = sign_in(console, make_operator(engine))
    refused = console.post(f"/console/jobs/{job_id}/pause", data={"csrf": "guess"})
    assert refused.status_code == 403
    elsewhere = console.post(
        f"/console/jobs/{job_id}/pause",
        data={"csrf": csrf},
        headers={"origin": "https://evil.example"},
    )
    assert elsewhere.status_code == 403
    assert status_of(engine, job_id) == "WAITING"
    done = console.post(
        f"/console/jobs/{job_id}/pause", data={"csrf": csrf, "back": "/console/jobs"}
    )
    assert done.status_code == 200 and f"Job {job_id} paused." in done.text
    assert status_of(engine, job_id) == "PAUSED"


def test_a_refused_transition_says_why_and_changes_nothing(
    console: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    job_id = a_job(console, app_credentials.api_key)
    csrf = sign_in(console, make_operator(engine))
    console.post(f"/console/jobs/{job_id}/cancel", data={"csrf": csrf})
    answer = console.post(f"/console/jobs/{job_id}/resume", data={"csrf": csrf})
    assert f"job {job_id} is CANCELLED; only a PAUSED job can be resumed" in answer.text
    assert status_of(engine, job_id) == "CANCELLED"


def test_signing_out_or_revoking_the_operator_ends_the_session(
    console: TestClient, engine: Engine
) -> None:
    csrf = sign_in(console, make_operator(engine, "bob"))
    assert console.post("/console/logout", data={"csrf": csrf}).status_code == 200
    assert console.get("/console/", follow_redirects=False).status_code == 303
    sign_in(console, make_operator(engine, "carol"))
    with engine.begin() as conn:
        assert delete_operator(conn, "carol")
    assert console.get("/console/", follow_redirects=False).status_code == 303


def test_sign_in_goes_back_to_the_page_asked_for_and_never_to_another_site(
    console: TestClient, engine: Engine
) -> None:
    token = make_operator(engine)
    for asked, landed in [
        ("/console/workers", "/console/workers"),
        ("https://evil.example/", "/console/"),
        ("//evil.example", "/console/"),
    ]:
        console.cookies.clear()
        form = console.get("/console/login").text
        value = form.split('name="sign_in" value="')[1].split('"')[0]
        answer = console.post(
            "/console/login",
            data={"token": token, "sign_in": value, "next": asked},
            follow_redirects=False,
        )
        assert answer.headers["location"] == landed
    assert csrf_of(console.get("/console/workers").text)


def test_workers_are_drained_and_undrained_from_the_console_with_its_csrf_token(
    console: TestClient, engine: Engine, redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    keys = RedisKeys(namespace.namespace)
    register_worker(engine, "w1", now_ms=ClusterClock(redis_client).now_ms())
    csrf = sign_in(console, make_operator(engine))
    page = console.get("/console/workers").text
    for action in ("drain", "stop"):
        assert f'action="/console/workers/w1/{action}"' in page
    assert "/console/workers/w1/undrain" not in page
    assert console.post("/console/workers/w1/drain", data={"csrf": "guess"}).status_code == 403
    assert redis_client.get(keys.worker_drained("w1")) is None
    drained = console.post("/console/workers/w1/drain", data={"csrf": csrf})
    assert drained.status_code == 200 and "stays up until undrained" in drained.text
    assert redis_client.get(keys.worker_drained("w1")) == b"alice"
    assert redis_client.get(keys.worker_drain("w1")) is None  # not asked to stop
    page = console.get("/console/workers").text
    assert "/console/workers/w1/undrain" in page and "/console/workers/w1/stop" not in page
    assert console.post("/console/workers/w1/undrain", data={"csrf": "guess"}).status_code == 403
    assert redis_client.get(keys.worker_drained("w1")) == b"alice"
    undrained = console.post("/console/workers/w1/undrain", data={"csrf": csrf})
    assert undrained.status_code == 200 and "takes work again" in undrained.text
    assert redis_client.get(keys.worker_drained("w1")) is None
    again = console.post("/console/workers/w1/undrain", data={"csrf": csrf})
    assert "is not drained: nothing to undrain" in again.text
    stopping = console.post("/console/workers/w1/stop", data={"csrf": csrf})
    assert "drains at its next heartbeat" in stopping.text
    assert redis_client.get(keys.worker_drain("w1")) == b"alice"


def test_a_jobs_page_shows_each_callbacks_attempts(
    console: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    from tests.integration.test_callback_reads import add_delivery, attempt

    job_id = a_job(console, app_credentials.api_key)
    delivery_id = add_delivery(engine, job_id)
    attempt(engine, delivery_id, 1, status_code=503, error="HTTP 503 busy")
    attempt(engine, delivery_id, 2, status_code=None, error="no complete answer within 15 s")
    sign_in(console, make_operator(engine))
    page = console.get(f"/console/jobs/{job_id}").text
    assert "2 attempts" in page
    assert "#1" in page and "HTTP 503" in page and "HTTP 503 busy" in page
    assert "#2" in page and "no answer, no complete answer within 15 s" in page


def test_the_overview_shows_the_apps_sharing_the_slots(
    console: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    from common.db.executions import NewExecution, insert_executions

    job_id = a_job(console, app_credentials.api_key)
    sign_in(console, make_operator(engine))
    assert "No app has runs waiting or going" in console.get("/console/").text
    with engine.begin() as conn:
        insert_executions(conn, [NewExecution(f"w{n}", job_id, 1, n, n) for n in range(3)], 0)
    page = console.get("/console/").text
    assert app_credentials.app_id in page and "Apps sharing the slots" in page


def _dead_mysql(console: TestClient) -> None:
    """Point the API at a MySQL port nothing listens on."""
    state = console.app.state.kairos  # type: ignore[attr-defined]
    state.engine = sa.create_engine("mysql+pymysql://root@127.0.0.1:1/kairos_gone")


def test_a_store_outage_page_names_the_store_but_not_its_error(console: TestClient) -> None:
    _dead_mysql(console)
    console.cookies.set("kairos_console", "not-a-session", path="/console")
    answer = console.get("/console/jobs", follow_redirects=False)
    assert answer.status_code == 503
    assert "MySQL" in answer.text
    for leak in ("127.0.0.1", "OperationalError", "Can&#39;t connect", "kairos_gone", "(2003"):
        assert leak not in answer.text
    assert answer.headers["Request-Id"] in answer.text


def test_a_job_is_backfilled_from_its_page_and_its_runs_are_marked(
    console: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    job_id = a_job(console, app_credentials.api_key)
    csrf = sign_in(console, make_operator(engine))
    page = console.get(f"/console/jobs/{job_id}").text
    assert f'action="/console/jobs/{job_id}/backfill"' in page
    form = {"csrf": csrf, "from": "2026-11-01T00:00:00", "to": "2026-11-04T00:00:00"}
    refused = console.post(f"/console/jobs/{job_id}/backfill", data={**form, "csrf": "guess"})
    assert refused.status_code == 403
    done = console.post(f"/console/jobs/{job_id}/backfill", data=form)
    assert done.status_code == 200
    assert f"Job {job_id} backfilled from 2026-11-01T00:00:00.000Z" in done.text
    assert "3 runs created, 0 times had run already." in done.text
    assert done.text.count('class="badge kind-backfill"') == 3
    again = console.post(f"/console/jobs/{job_id}/backfill", data=form)
    assert "0 runs created, 3 times had run already." in again.text
    empty = console.post(f"/console/jobs/{job_id}/backfill", data={"csrf": csrf, "from": "x"})
    assert "Give both ends of the range" in empty.text
    console.post(f"/console/jobs/{job_id}/pause", data={"csrf": csrf})
    paused = console.post(f"/console/jobs/{job_id}/backfill", data=form)
    assert f"job {job_id} is PAUSED; only a WAITING or RUNNING job can be backfilled" in (
        paused.text
    )
    assert 'kind-backfill">backfill' in paused.text
    assert f'action="/console/jobs/{job_id}/backfill"' not in paused.text
