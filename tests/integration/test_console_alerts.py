"""The console's alerts page: admins of every app read, add and remove rules (each
change audited under their name); everyone else gets 403 and changes nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from standardwebhooks import Webhook

from common.alerts.rules import read_rules
from common.config import ApiSettings, StoreSettings
from common.db.apps import AppCredentials, MySqlAppStore
from common.operator_roles import Role
from tests.integration.alert_helpers import new_rule
from tests.integration.console_helpers import make_operator, sign_in


@pytest.fixture
def browser(namespace: StoreSettings, app_credentials: AppCredentials) -> Iterator[TestClient]:
    from services.api.app import create_app

    with TestClient(create_app(ApiSettings(namespace=namespace.namespace))) as client:
        yield client


def rules(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return [r.rule_id for r in read_rules(conn)]


def audited(engine: Engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT actor, action FROM audit_events WHERE object_type = 'alert_rule' ORDER BY id"
        ).all()
    return [(str(a), str(b)) for a, b in rows]


def test_an_admin_adds_sees_and_removes_rules_and_each_change_is_audited(
    engine: Engine, browser: TestClient, app_credentials: AppCredentials
) -> None:
    csrf = sign_in(browser, make_operator(engine, "ada", Role.ADMIN))
    existing, _ = new_rule(engine, "https://hooks.example/old", "WORKER_GONE")
    page = browser.get("/console/alerts")
    assert page.status_code == 200
    assert existing.rule_id in page.text and 'href="/console/alerts"' in page.text
    answer = browser.post(
        "/console/alerts",
        data={
            "csrf": csrf,
            "webhook": "https://hooks.example/new",
            "on_FAILED": "1",
            "on_TIMED_OUT": "1",
            "app": app_credentials.app_id,
            "streak": "2",
            "every": "60",
        },
    )
    assert answer.status_code == 200, answer.text
    secret = re.search(r'id="alert-secret">([^<]+)<', answer.text)
    assert secret is not None
    Webhook(secret.group(1))
    added = next(r for r in rules(engine) if r != existing.rule_id)
    assert added in answer.text and "FAILED, TIMED_OUT" in answer.text
    assert secret.group(1) not in browser.get("/console/alerts").text  # shown once
    removed = browser.post(f"/console/alerts/{existing.rule_id}/remove", data={"csrf": csrf})
    assert removed.status_code == 200
    assert rules(engine) == [added]
    assert audited(engine)[1:] == [("ada", "alert.add"), ("ada", "alert.remove")]


def test_a_rule_that_cannot_work_is_refused_with_a_notice(
    engine: Engine, browser: TestClient
) -> None:
    csrf = sign_in(browser, make_operator(engine, "ada", Role.ADMIN))
    answer = browser.post(
        "/console/alerts", data={"csrf": csrf, "webhook": "https://h.example", "streak": "1"}
    )
    assert "at least one kind" in answer.text
    private = {"csrf": csrf, "webhook": "http://192.168.1.9/hook", "on_FAILED": "1"}
    assert "192.168.1.9" in browser.post("/console/alerts", data=private).text
    assert rules(engine) == []


@pytest.mark.parametrize(
    ("role", "scoped"),
    [(Role.VIEWER, False), (Role.OPERATOR, False), (Role.ADMIN, True)],
)
def test_anyone_but_an_admin_of_every_app_is_refused_and_changes_nothing(
    engine: Engine,
    browser: TestClient,
    app_credentials: AppCredentials,
    role: Role,
    scoped: bool,
) -> None:
    with engine.connect() as conn:
        found = MySqlAppStore(conn).app_record(app_credentials.app_id)
    assert found is not None
    csrf = sign_in(browser, make_operator(engine, "someone", role, [found.id] if scoped else None))
    existing, _ = new_rule(engine, "https://hooks.example/old", "FAILED")
    assert browser.get("/console/alerts").status_code == 403
    assert 'href="/console/alerts"' not in browser.get("/console/").text
    added = browser.post(
        "/console/alerts", data={"csrf": csrf, "webhook": "https://x.example", "on_FAILED": "1"}
    )
    assert added.status_code == 403
    removed = browser.post(f"/console/alerts/{existing.rule_id}/remove", data={"csrf": csrf})
    assert removed.status_code == 403
    assert rules(engine) == [existing.rule_id]
