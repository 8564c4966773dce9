"""One app per name: `kairos app create` refuses a name in use, `kairos up --demo` reuses
its demo app."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.db.apps import MySqlAppTransactions
from common.errors import AppNameTakenError
from common.handler_patterns import HandlerPatterns
from common.namespace import app_api_key, create_unique_app
from services.cli import main

DEMO = HandlerPatterns(("demo.*",))


def test_a_second_app_of_one_name_is_refused_and_nothing_is_written(
    namespace: StoreSettings, engine: Engine
) -> None:
    first = create_unique_app(namespace, "billing", DEMO, actor="tester")
    with pytest.raises(AppNameTakenError, match=rf"'billing' exists already \({first.app_id}\)"):
        create_unique_app(namespace, "billing", DEMO, actor="tester")
    with MySqlAppTransactions(engine).reading() as apps:
        assert [a.app_id for a in apps.all_apps()] == [first.app_id]


def test_the_cli_says_the_name_is_taken_and_exits_2(
    namespace: StoreSettings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAIROS_NAMESPACE", namespace.namespace)
    assert main(["app", "create", "billing"]) == 0
    capsys.readouterr()
    assert main(["app", "create", "billing"]) == 2
    assert "an app named 'billing' exists already" in capsys.readouterr().err


def test_the_demo_app_is_reused_with_a_new_key_and_its_old_key_works_on(
    namespace: StoreSettings, engine: Engine
) -> None:
    first, reused = app_api_key(namespace, "demo", DEMO)
    assert not reused
    second, reused = app_api_key(namespace, "demo", DEMO)
    assert reused and second != first
    with MySqlAppTransactions(engine).reading() as apps:
        assert [a.name for a in apps.all_apps()] == ["demo"]
        one, other = (
            apps.find_app_by_key(first),
            apps.find_app_by_key(second),
        )
    assert one is not None and other is not None and one.app_id == other.app_id


def test_apps_made_twice_before_names_were_unique_are_kept_and_the_oldest_reused(
    namespace: StoreSettings, engine: Engine
) -> None:
    with MySqlAppTransactions(engine).transaction() as apps:
        oldest = apps.create_app("demo", 1, DEMO)
        apps.create_app("demo", 2, DEMO)
    key, reused = app_api_key(namespace, "demo", DEMO)
    with MySqlAppTransactions(engine).reading() as apps:
        found = apps.find_app_by_key(key)
        assert len(apps.all_apps()) == 2
    assert reused and found is not None and found.app_id == oldest.app_id
