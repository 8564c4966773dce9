"""The console's apps pages: every app with what it is granted, and a page per app,
behind sign-in and linked from the navigation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.callback_urls import parse_networks
from common.config import ApiSettings, StoreSettings
from common.db.apps import AppCredentials, MySqlAppTransactions
from common.db.records import AppLimits
from common.handler_patterns import NO_HANDLER
from tests.integration.console_helpers import make_operator, sign_in
from tests.integration.helpers import make_app


@pytest.fixture
def console(namespace: StoreSettings, app_credentials: AppCredentials) -> Iterator[TestClient]:
    """The API on the test's namespace, its default callback networks 10.0.0.0/8."""
    from services.api.app import create_app

    settings = ApiSettings(namespace=namespace.namespace, callback_allowed_networks="10.0.0.0/8")
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.mark.parametrize("path", ["/console/apps", "/console/apps/app_x"])
def test_the_apps_pages_need_a_session(console: TestClient, path: str) -> None:
    answer = console.get(path, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"].startswith("/console/login")


def test_the_apps_page_shows_each_apps_grants_and_links_its_page(
    console: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    bare = make_app(engine, "bare", NO_HANDLER)
    with MySqlAppTransactions(engine).transaction() as apps:
        apps.set_callback_networks(app_credentials.app_id, parse_networks("127.0.0.0/8"))
        apps.set_limits(app_credentials.app_id, AppLimits(3, 40, 500, 60, 1_000_000, 7))
        apps.set_disabled(bare.app_id, 1)
    sign_in(console, make_operator(engine))
    listed = console.get("/console/apps")
    assert listed.status_code == 200
    html = listed.text
    assert 'href="/console/apps"' in html and 'aria-current="page">Apps' in html
    assert f'href="/console/apps/{app_credentials.app_id}"' in html
    assert "<code>127.0.0.0/8</code>" in html and "10.0.0.0/8" in html  # own, default
    assert "none granted" in html and "disabled" in html
    own = console.get(f"/console/apps/{app_credentials.app_id}")
    assert own.status_code == 200
    assert "<code>*</code>" in own.text and "Jobs stored</dt><dd>0 of 500" in own.text
    assert "Max running</dt><dd>40" in own.text and "60 s" in own.text
    assert "Run log per hour</dt><dd>1000000 bytes" in own.text
    assert 'data-label="Run log bytes/h">1000000<' in html
    assert 'Max retries per job</dt><dd id="max-retries">7<' in own.text
    assert 'data-label="Max retries">7<' in html and 'data-label="Max retries">100<' in html
    assert console.get("/console/apps/app_nope").status_code == 404


def test_an_apps_page_shows_its_runs_waiting_going_and_their_start_lag(
    console: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    import sqlalchemy as sa

    from common.db.executions import NewExecution, insert_executions, mark_queued, primary_keys
    from common.db.jobs import NewJob, insert_job
    from common.db.schema import executions

    now = 10**13  # far ahead of the cluster clock: due, and inside the lag window
    with engine.begin() as conn:
        job = insert_job(conn, NewJob(1, "j", "demo.noop", {}, None, 0, None, None, None), 0)
        insert_executions(conn, [NewExecution(f"e{n}", job, 1, n, n) for n in range(4)], 0)
        mark_queued(conn, dict.fromkeys(primary_keys(conn, ["e0"]), "w1"), 10)
        conn.execute(
            executions.update()
            .where(executions.c.execution_id == "e0")
            .values(trigger_time=now - 2_000, started_at=sa.literal(now - 1_500))
        )
    sign_in(console, make_operator(engine))
    html = console.get(f"/console/apps/{app_credentials.app_id}").text
    assert '<dd id="waiting">3</dd>' in html and '<dd id="going">1</dd>' in html
    assert "p50 0.500 s" in html and "(1 first attempts)" in html
