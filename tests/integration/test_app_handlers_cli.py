"""`kairos app handlers` and `kairos app list` run in-process on the test's namespace:
set, show and lift an app's handler patterns, and say which live jobs fall outside."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.db.apps import AppCredentials, MySqlAppTransactions
from common.db.jobs import NewJob, insert_job
from common.handler_patterns import EVERY_HANDLER, NO_HANDLER, HandlerPatterns
from services.cli import main
from tests.integration.helpers import make_app


@pytest.fixture(autouse=True)
def on_namespace(namespace: StoreSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI reads its settings from KAIROS_* variables: point them at the test's stores."""
    monkeypatch.setenv("KAIROS_NAMESPACE", namespace.namespace)
    monkeypatch.setenv("KAIROS_AUTH_CACHE_SECONDS", "12")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def add_jobs(engine: Engine, app_id: str, *handlers: str) -> None:
    with engine.begin() as conn:
        app_pk = conn.execute(
            sa.text("SELECT id FROM apps WHERE app_id = :a"), {"a": app_id}
        ).scalar_one()
        for handler in handlers:
            insert_job(conn, NewJob(app_pk, "j", handler, {}, None, 0, None, None, None), 0)


def test_an_operator_sets_shows_and_lifts_an_apps_handler_patterns(
    engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    app = make_app(engine, "billing", NO_HANDLER)
    code, out, _ = run(capsys, "app", "handlers", app.app_id)
    assert code == 0 and json.loads(out) == {"appId": app.app_id, "handlerPatterns": []}

    code, out, err = run(
        capsys, "app", "handlers", app.app_id, "--allow", "report.*", "--allow", "billing.export"
    )
    assert code == 0
    assert json.loads(out) == {
        "appId": app.app_id,
        "handlerPatterns": ["report.*", "billing.export"],
    }
    assert "KAIROS_AUTH_CACHE_SECONDS, 12 s here" in err
    with MySqlAppTransactions(engine).reading() as apps:
        assert apps.handler_patterns(app.app_id) == HandlerPatterns(("report.*", "billing.export"))
    code, out, _ = run(capsys, "app", "handlers", app.app_id)
    assert json.loads(out)["handlerPatterns"] == ["report.*", "billing.export"]

    code, out, err = run(capsys, "app", "handlers", app.app_id, "--all")
    assert code == 0 and json.loads(out)["handlerPatterns"] == ["*"]
    with MySqlAppTransactions(engine).reading() as apps:
        assert apps.handler_patterns(app.app_id) == EVERY_HANDLER
    code, out, err = run(capsys, "app", "handlers", app.app_id, "--none")
    assert code == 0 and json.loads(out)["handlerPatterns"] == []
    assert "no handler" in err
    with MySqlAppTransactions(engine).reading() as apps:
        assert apps.handler_patterns(app.app_id) == NO_HANDLER


def test_an_app_is_created_with_the_handlers_it_is_granted_and_none_without(
    engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "app", "create", "billing", "--handlers", "report.*,demo.*")
    granted = json.loads(out)
    assert code == 0 and granted["handlerPatterns"] == ["report.*", "demo.*"]
    code, out, err = run(capsys, "app", "create", "bare")
    bare = json.loads(out)
    assert code == 0 and bare["handlerPatterns"] == []
    assert f"kairos app handlers {bare['appId']} --allow" in err
    with MySqlAppTransactions(engine).reading() as apps:
        assert apps.handler_patterns(granted["appId"]) == HandlerPatterns(("report.*", "demo.*"))
        assert apps.handler_patterns(bare["appId"]) == NO_HANDLER
    code, out, err = run(capsys, "app", "create", "bad", "--handlers", "report.[a]")
    assert code == 2 and out == "" and "--handlers" in err


def test_the_app_list_shows_each_apps_patterns(
    engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    restricted, free = make_app(engine, "billing"), make_app(engine, "crm sync")
    bare = make_app(engine, "bare", NO_HANDLER)
    run(capsys, "app", "handlers", restricted.app_id, "--allow", "report.*", "--allow", "b?")
    code, out, _ = run(capsys, "app", "list")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == ["APP_ID", "CREATED", "STATE", "HANDLERS", "NAME"]
    by_app = {row.split()[0]: row.split(maxsplit=4) for row in rows}
    assert by_app[restricted.app_id][2:] == ["enabled", "report.*,b?", "billing"]
    assert by_app[free.app_id][2:] == ["enabled", "*", "crm sync"]
    assert by_app[bare.app_id][2:] == ["enabled", "(none)", "bare"]


def test_live_jobs_outside_the_new_patterns_are_named_on_stderr(
    engine: Engine, capsys: pytest.CaptureFixture[str], app_credentials: AppCredentials
) -> None:
    app_id = app_credentials.app_id
    add_jobs(engine, app_id, "billing.export", "billing.export", "report.daily", "crm.sync")
    code, out, err = run(capsys, "app", "handlers", app_id, "--allow", "report.*")
    assert code == 0 and json.loads(out)["handlerPatterns"] == ["report.*"]
    assert "3 live jobs of this app name handlers outside these patterns" in err
    assert "billing.export (2), crm.sync (1)" in err
    assert "keep their schedule" in err
    _, _, err = run(capsys, "app", "handlers", app_id, "--allow", "*")
    assert "live jobs" not in err


def test_an_unknown_app_is_named_and_nothing_changes(
    engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    for flags in ([], ["--all"], ["--none"], ["--allow", "report.*"]):
        code, out, err = run(capsys, "app", "handlers", "app_nope", *flags)
        assert code == 2 and out == ""
        assert "no app 'app_nope'; `kairos app list` shows the apps" in err
